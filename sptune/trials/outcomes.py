"""How each trial of a stage ended, recorded on the driver by a Tune callback: a crash after its last
retry (error.json + TensorBoard status `failed`, see sptune.trials.failures) or a trial ASHA stopped
(status `stopped`; its test metric comes later, from sptune.trials.stopped). Completed and
deterministically failed trials record themselves in result.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sptune import atomic, files
from sptune.trials import failures, trainable


def make_outcomes_callback():
    """A Tune callback (driver side) that records how each trial ended, whatever its cell and stage: a crash
    after its last retry -> error.json + HParams status `failed`; stopped by ASHA -> HParams `stopped`.
    Completed and deterministically failed trials record themselves (result.json)."""
    from ray.tune import Callback

    class TrialOutcomes(Callback):
        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            run_dir = trainable.trial_run_dir(trial.config, trial.trial_id)
            if not (run_dir / files.TRIAL).is_file():
                return  # never started: no run directory, no row
            # The driver-side error.txt is written before this call; the copy in storage may lag.
            local = Path(trial.error_file) if trial.error_file else None
            error = failures.one_line(local.read_text() if local and local.is_file() else trial.get_error())
            atomic.write_json(run_dir / files.TRIAL_ERROR, {"error": error, "error_file": trial.error_file,
                                           "failures": trial.run_metadata.num_failures})
            metrics, step = failures.stopped_metrics(run_dir)
            trainable.write_outcome(run_dir, dict(metrics, status="failed"), step)

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            run_dir = trainable.trial_run_dir(trial.config, trial.trial_id)
            if (run_dir / files.TRIAL).is_file() and files.finished_result(run_dir) is None:
                metrics, step = failures.stopped_metrics(run_dir)
                trainable.write_outcome(run_dir, dict(metrics, status="stopped"), step)

    return TrialOutcomes()
