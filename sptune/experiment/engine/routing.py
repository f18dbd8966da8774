"""Per-(cell, stage) parts inside the engine's one Tune run: each group of trials keeps its own scheduler
state and its own callbacks, routed by the trial's lineage (sptune.trials.trainable.LINEAGE_KEY), the way
driver.CellsSearcher routes its searchers.

    GroupScheduler   ASHA per (cell, stage): one rung ladder per group, since trials of different cells and
                     stages have different tasks, metrics and budgets and must never be compared
    GroupCallbacks   Tune callbacks made per group (trial outcomes, trackers, a stage's progress bar), each
                     seeing only its own group's trials
"""

from __future__ import annotations

from typing import Any, Callable

from ray.tune import Callback
from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from sptune.trials.trainable import LINEAGE_KEY

Group = tuple[str, str]  # (the cell's study directory, the stage)


def group_of(trial: Any) -> Group:
    """The trial's (cell, stage). The engine writes study_dir as str(Path), so none is built here: Tune asks
    for every trial's group at every step, and a Path each time cost the driver 4 of its 10 CPU-seconds in
    benchmarks/experiment_utilization.py (docs/experiments.md)."""
    lineage = trial.config[LINEAGE_KEY]
    return lineage["study_dir"], lineage["stage"]


def by_group(trials: list) -> dict[Group, list]:
    """The trials of each group, in one pass (a pass per group made each step cost groups x trials)."""
    grouped: dict[Group, list] = {}
    for trial in trials:
        grouped.setdefault(group_of(trial), []).append(trial)
    return grouped


class GroupScheduler(FIFOScheduler):
    """Starts the pending trial of the lowest `rank` (the engine's proposal order; FIFO among equals, or
    without a rank); each group's results go to the scheduler `make(group)` returns (ASHA, or None: the
    group's trials run to their last step). Pickled with Tune's experiment state."""

    def __init__(self, make: Callable[[Group], TrialScheduler | None],
                 rank: Callable[[Any], int] | None = None) -> None:
        super().__init__()
        self.make = make
        self.rank = rank
        self.schedulers: dict[Group, TrialScheduler | None] = {}

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        """Tune asks for resources for every pending trial in the order the searcher proposed them; this
        choice decides which pending trial takes a finished trial's actor (reuse_actors). FIFO alone let a
        cell's finetuning, proposed when its pretraining ended, wait behind every other cell's pretraining
        and scratch trials, proposed from the start."""
        rank = getattr(self, "rank", None)  # None in a scheduler pickled before it had one
        pending = [trial for trial in tune_controller.get_trials() if trial.status == Trial.PENDING]
        if rank is None or not pending:
            return super().choose_trial_to_run(tune_controller)
        return min(pending, key=rank)  # the first of equal ranks: FIFO among them

    def _of(self, trial: Any) -> TrialScheduler | None:
        group = group_of(trial)
        if group not in self.schedulers:
            self.schedulers[group] = self.make(group)
        return self.schedulers[group]

    def _ensure_added(self, scheduler: Any, controller: Any, trial: Any) -> None:
        """ASHA learns a trial in on_trial_add; a trial restored into a newer snapshot may not have been added."""
        info = getattr(scheduler, "_trial_info", None)
        if info is not None and trial.trial_id not in info:
            scheduler.on_trial_add(controller, trial)

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        scheduler = self._of(trial)
        if scheduler is not None:
            scheduler.on_trial_add(tune_controller, trial)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        scheduler = self._of(trial)
        if scheduler is None:
            return TrialScheduler.CONTINUE
        self._ensure_added(scheduler, tune_controller, trial)
        return scheduler.on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        scheduler = self._of(trial)
        if scheduler is not None:
            self._ensure_added(scheduler, tune_controller, trial)
            scheduler.on_trial_complete(tune_controller, trial, result)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        self._drop(tune_controller, trial)

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        self._drop(tune_controller, trial)

    def _drop(self, tune_controller: Any, trial: Any) -> None:
        scheduler = self._of(trial)
        info = getattr(scheduler, "_trial_info", None)
        if scheduler is not None and (info is None or trial.trial_id in info):
            scheduler.on_trial_remove(tune_controller, trial)

    def debug_string(self) -> str:
        on = sum(s is not None for s in self.schedulers.values())
        return f"sptune: ASHA in {on} of {len(self.schedulers)} (cell, stage) groups, FIFO in the others"


class GroupCallbacks(Callback):
    """Callbacks made per group by `make(group)`, each called with its own group's trials only."""

    def __init__(self, make: Callable[[Group], list[Callback]], groups: list[Group] = ()) -> None:
        self.make = make
        self.callbacks: dict[Group, list[Callback]] = {}
        self.setup_args: dict[str, Any] | None = None
        for group in groups:  # known up front (a stage's progress bar opens with the run)
            self._for(group)

    def setup(self, **info: Any) -> None:
        self.setup_args = info
        for callbacks in self.callbacks.values():
            for callback in callbacks:
                callback.setup(**info)

    def _for(self, group: Group) -> list[Callback]:
        if group not in self.callbacks:
            self.callbacks[group] = self.make(group)
            for callback in self.callbacks[group] if self.setup_args is not None else ():
                callback.setup(**self.setup_args)  # made after Tune's setup call: trackers need theirs
        return self.callbacks[group]

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        grouped = by_group(trials)
        for group, callbacks in list(self.callbacks.items()):
            for callback in callbacks:
                callback.on_step_begin(iteration, grouped.get(group, []), **info)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        grouped = by_group(trials)
        for group, callbacks in list(self.callbacks.items()):
            for callback in callbacks:
                callback.on_experiment_end(grouped.get(group, []), **info)

    def _route(self, hook: str, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        group = group_of(trial)
        mine = [t for t in trials if group_of(t) == group]
        for callback in self._for(group):
            getattr(callback, hook)(iteration, mine, trial, **info)

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._route("on_trial_start", iteration, trials, trial, **info)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        self._route("on_trial_result", iteration, trials, trial, result=result, **info)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._route("on_trial_complete", iteration, trials, trial, **info)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._route("on_trial_error", iteration, trials, trial, **info)

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._route("on_trial_recover", iteration, trials, trial, **info)

    def on_trial_save(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._route("on_trial_save", iteration, trials, trial, **info)

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
        self._route("on_checkpoint", iteration, trials, trial, checkpoint=checkpoint, **info)
