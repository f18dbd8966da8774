"""A trial that only reports: the benchmarks' stand-in for training, to time the driver and the scheduler
rather than the model. It keeps a real trial's bookkeeping (sptune.trials.trainable.attempt writes trial.json
with each attempt's start; a result.json with the keys sptune.run.train writes and selection reads), spends
`seconds` sleeping as its work (a slot held, no core used: 8 slots fit on a 2-core machine), and reports
its final metrics to Tune. Its validation metric is a fixed function of its params (same run, same numbers).

Injected like the tests' trainables: run_experiment(..., trainable=partial(reporting_stage, seconds=2)).
"""

from __future__ import annotations

import time
import zlib
from pathlib import Path

from sptune import atomic, files
from sptune.trials import trainable


def reporting_stage(trial: trainable.Trial, seconds: float = 0.0) -> None:
    from ray import tune as ray_tune

    params, run_dir = trial.params, trial.run_dir
    result = files.finished_result(run_dir)
    if result is None:
        with trainable.attempt(trial):
            time.sleep(seconds)
        value = zlib.crc32(repr(sorted(params.items())).encode()) % 1000 / 1000
        result = {"status": "completed", "metric": "accuracy", "best_val": value, "best_val_loss": 1 - value,
                  "best_step": 1, "final_val": value, "test_metric": value, "steps": 1,
                  "train_seconds": seconds, "eval_seconds": 0.0}
        atomic.write_json(run_dir / files.RESULT, result)
    ray_tune.report(trainable.final_metrics(result, seconds))


def busy_spans(run_dirs: list[Path]) -> list[tuple[float, float]]:
    """(start, end) of each trial's work as its trial.json records it (one attempt: started, ended)."""
    spans = []
    for run_dir in run_dirs:
        attempt = files.read_json(run_dir / files.TRIAL)["attempts"][0]
        spans.append((attempt["started"], attempt["ended"]))
    return spans
