"""A stage on the terminal: one progress bar (trials done / total, best validation so far, ETA) and one
line per finished trial, drawn by a Tune callback on the study's console (sptune.output).

Without a console (tests, a plain `studies.run`) the callback stays silent. Tune pickles its
callbacks with the experiment (tuner.pkl) and brings them back on restore, so the callback keeps
only its settings and makes the bar when the (restored) stage starts.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ray.tune import Callback

from sptune import output
from sptune.experiment.engine import mirroring
from sptune.trials.trainable import searched


# A trial's progress is the fraction of its own budget it trained (the `budget` each eval reports: epochs or
# steps, whatever the batch size), counted in these units on the bar.
UNITS = 1000


class StageProgress(Callback):
    def __init__(self, stage: str, trials: int):
        self.stage, self.trials = stage, trials
        self._reset()

    def __getstate__(self) -> dict[str, Any]:
        return {"stage": self.stage, "trials": self.trials}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _reset(self) -> None:
        self._console: output.Console | None = None
        self._bar = None
        self._start: float | None = None
        self._units: dict[str, int] = {}  # trial id -> UNITS x the fraction of its budget done (all once it ended)
        self._ended: set[str] = set()
        self._initial = 0
        self._best = -math.inf

    # -- Tune hooks
    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if self._start is not None:
            return
        self._start = time.monotonic()
        console = output.current()
        self._console = console if console is not None and console.show_trials else None
        for trial in trials:  # a restored stage: what its trials had done before
            if trial.status in ("TERMINATED", "ERROR"):
                self._ended.add(trial.trial_id)
            self._record(trial, trial.last_result or {})
        self._initial = sum(self._units.values())
        if self._console is not None:
            self._bar = self._console.bar(self.trials * UNITS, self._desc(), self._initial)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        self._record(trial, result)
        self._redraw()

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        result = trial.last_result or {}
        self._finish(trial, result.get("status", "stopped early"), result)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._finish(trial, f"error (traceback: {trial.error_file})", trial.last_result or {})

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self._console is not None:
            self._console.line(f"{self.stage}: {len(self._ended)}/{self.trials} trials in "
                               f"{output.duration(time.monotonic() - (self._start or time.monotonic()))}"
                               + (f", best val {self._best:.4f}" if math.isfinite(self._best) else ""))

    # -- state and drawing
    def _record(self, trial: Any, result: dict) -> None:
        done = UNITS if trial.trial_id in self._ended else round(UNITS * float(result.get("budget") or 0.0))
        self._units[trial.trial_id] = min(done, UNITS)
        best = result.get("best_val")
        if isinstance(best, (int, float)) and math.isfinite(best):
            self._best = max(self._best, best)

    def _finish(self, trial: Any, status: str, result: dict) -> None:
        if trial.trial_id in self._ended:
            return
        self._ended.add(trial.trial_id)
        self._record(trial, result)
        self._redraw()
        if self._console is None:
            return
        params = " ".join(f"{k.rsplit('.', 1)[-1]}={v:g}" if isinstance(v, float) else f"{k.rsplit('.', 1)[-1]}={v}"
                          for k, v in sorted(searched(trial.config).items()))
        best = result.get("best_val")
        text = (f"{self.stage:8s} {len(self._ended)}/{self.trials}  {params}  {status}"
                + (f", best val {best:.4f} at step {result.get('best_step')}"
                   if isinstance(best, (int, float)) and math.isfinite(best) else "")
                + (f", {result['wall_seconds']:.0f} s" if result.get("wall_seconds") is not None else ""))
        if self._bar is None and len(self._ended) < self.trials:  # no bar to show it: the ETA goes on the line
            text += f"  (ETA {self._eta()})"
        self._console.line(text)

    def _eta(self) -> str:
        done = sum(self._units.values())
        return output.eta(time.monotonic() - (self._start or time.monotonic()), done - self._initial,
                          self.trials * UNITS - done)

    def _desc(self) -> str:
        storage = mirroring.status()
        return (f"{self.stage:8s} {len(self._ended)}/{self.trials} trials"
                + (f", best val {self._best:.4f}" if math.isfinite(self._best) else "")
                + (f"; {storage}" if storage else ""))

    def _redraw(self) -> None:
        if self._bar is None:
            return
        self._bar.set_description_str(self._desc(), refresh=False)
        self._bar.update(sum(self._units.values()) - self._bar.n)
