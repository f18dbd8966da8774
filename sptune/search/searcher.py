"""Tune's searcher and scheduler for a search space (sptune.search.spaces): Optuna behind a concurrency
limit, and ASHA.

Sampler choice (optuna#2021: TPE on a small categorical grid proposes the same point again and
again): a fully categorical grid is searched by Optuna's BruteForceSampler, which never repeats a
point (enqueued points included) and caps the trial count at the grid size; spaces with a
continuous range use TPE. Either way `UniqueOptunaSearch` refuses a point that already ran.

Each stage's Optuna study lives in the study directory's journal file (`optuna.journal`, Optuna's
JournalStorage: append-only, safe for concurrent writers), named `<study dir name>/<stage>`, so
`optuna-dashboard <study>/optuna.journal` shows the searches while they run and after. Resume keeps
the same Optuna study: see UniqueOptunaSearch.
"""

from __future__ import annotations

import math
import pickle
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search import ConcurrencyLimiter, Searcher

from sptune.errors import UserError
from sptune.search.journal import journal_storage
from sptune.search.spaces import FULL_BUDGET, StageSpace

METRIC = "best_val"  # every trial reports its running best validation metric under this name
MODE = "max"  # validation metrics here are accuracy / R2: higher is better
# ASHA's clock: the fraction of its own resolved budget (optim.epochs or optim.max_steps) a trial has
# trained. Optimizer steps would compare a batch-8 trial with a batch-128 one after 16x less data;
# this is our own counter (from the step), not Tune's iterations, which restart when a trial is restored.
TIME_ATTR = "budget"


# ----------------------------------------------------------------------------- Ray Tune / Optuna objects
def make_searcher(stage: StageSpace, sampler: str = "auto", seed: int = 0, journal: str | Path | None = None,
                  study_name: str | None = None) -> "UniqueOptunaSearch":
    """The stage's searcher; with `journal` its Optuna study `study_name` is kept in that journal file
    (started afresh: a stage is only built anew when Tune has nothing to restore)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial is Tune's job
    distributions = {
        key: CategoricalDistribution(values) if isinstance(values, list)
        else FloatDistribution(*next(iter(values.values())), log="loguniform" in values)
        for key, values in stage.params.items()}
    if sampler == "auto":
        sampler = "brute" if stage.categorical else "tpe"
    if sampler == "brute":
        if not stage.categorical:
            raise UserError("sampler=brute needs a fully categorical grid (lists only, no ranges)")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna_sampler = optuna.samplers.BruteForceSampler(seed=seed)
    else:
        optuna_sampler = optuna.samplers.TPESampler(seed=seed)
    if journal is not None:
        storage = journal_storage(journal)
        if study_name in {s.study_name for s in storage.get_all_studies()}:
            # A stage that Tune could not restore (stopped before its first snapshot) starts over;
            # the Optuna trials of that attempt were never known to Tune, so they go too.
            optuna.delete_study(study_name=study_name, storage=storage)
    return UniqueOptunaSearch(distributions, [dict(p) for p in stage.points], optuna_sampler,
                              journal=journal, study_name=study_name)


def limit(searcher: "UniqueOptunaSearch", max_concurrent: int) -> "ResumableLimiter":
    """The searcher behind the stage's concurrency limit (in place of TuneConfig.max_concurrent_trials)."""
    return ResumableLimiter(searcher, max_concurrent=max_concurrent)


class ResumableLimiter(ConcurrencyLimiter):
    """Ray's ConcurrencyLimiter forgets a trial once it errors; when Tune runs it again (resume_errored)
    the limiter dropped its completion (the searcher, so Optuna, never saw the result) and did not count
    it against the limit. Here its first result brings it back among the live trials."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        if trial_id not in self.live_trials:
            self.live_trials.add(trial_id)
            self.num_unfinished_live_trials += 1
        super().on_trial_result(trial_id, result)


def make_scheduler(asha: dict[str, Any] | None):
    if not asha:
        return None  # FIFO: every trial runs to its last step
    # stop_last_trials=False: a trial that reaches its full budget ends by itself, after its test
    # evaluation (ASHA would stop it at its last eval report, before the trainer writes its result).
    return ASHAScheduler(time_attr=TIME_ATTR, metric=METRIC, mode=MODE, max_t=FULL_BUDGET,
                         grace_period=asha["grace_period"], reduction_factor=asha["reduction_factor"],
                         stop_last_trials=False)


class UniqueOptunaSearch(Searcher):
    """A Tune searcher on Optuna's public ask/tell and storage API that never hands out a point it has
    already handed out, and whose Optuna study holds exactly what Tune ran, across restores.

    A repeat (TPE on categorical values) is told back to Optuna as pruned and another point asked
    for; after MAX_REPEATS repeats in a row the searcher reports FINISHED instead of running a
    duplicate. What it knows (Tune trial id -> Optuna trial number, the points handed out, the
    sampler) is saved with Tune's snapshots; the Optuna study itself lives in its storage.

    Optuna states: COMPLETE = the trial ran to its end (its best validation metric is the value),
    FAIL = it diverged or crashed, PRUNED = ASHA stopped it (the last reported value stays).
    Intermediate values are reported at our own step (Tune's iteration restarts on restore).

    With a journal, a restored searcher reopens the same journal file: Tune.restore brings back the
    searcher of its last snapshot, and the journal may have moved on since. Three cases follow: a
    trial told after the snapshot is not told again; an Optuna trial asked after the snapshot (unknown
    to the restored Tune) is failed and its point queued again, so no grid point is lost; an errored
    trial that Tune runs again (resume_errored) gets a new Optuna trial with its params, so its result
    is not dropped (Optuna cannot reopen a finished trial).
    """

    MAX_REPEATS = 100

    def __init__(self, space: dict[str, Any], points: list[dict[str, Any]], sampler: optuna.samplers.BaseSampler,
                 journal: str | Path | None = None, study_name: str | None = None) -> None:
        super().__init__(metric=METRIC, mode=MODE)
        self.space, self.sampler = space, sampler
        self.journal = None if journal is None else str(journal)
        self.study_name = study_name or "optuna"
        self.numbers: dict[str, int] = {}  # Tune trial id -> its Optuna trial number
        self.seen: set[tuple] = set()  # the points handed out
        # In memory, the storage travels with the searcher's state; a journal is reopened by path.
        self.memory = optuna.storages.InMemoryStorage() if journal is None else None
        study = optuna.create_study(storage=self.storage, sampler=sampler, pruner=optuna.pruners.NopPruner(),
                                    study_name=self.study_name, direction="maximize" if MODE == "max" else "minimize",
                                    load_if_exists=True)
        for point in points:
            study.enqueue_trial(point)

    @property
    def storage(self) -> optuna.storages.BaseStorage:
        if self.memory is not None:
            return self.memory
        if self.__dict__.get("opened") is None:
            self.opened = journal_storage(self.journal)
        return self.opened

    @property
    def study(self) -> optuna.Study:
        return optuna.load_study(study_name=self.study_name, storage=self.storage, sampler=self.sampler)

    def suggest(self, trial_id: str) -> dict[str, Any] | str:
        study = self.study
        for _ in range(self.MAX_REPEATS):
            trial = study.ask(fixed_distributions=self.space)
            key = tuple(sorted((k, repr(v)) for k, v in trial.params.items()))
            if key not in self.seen:
                self.seen.add(key)
                self.numbers[trial_id] = trial.number
                return dict(trial.params)
            if not self._tell(study, trial.number, None, TrialState.PRUNED):
                return Searcher.FINISHED  # BruteForceSampler: every grid point is taken
        return Searcher.FINISHED

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        number = self._live(trial_id, reopen=True)
        # Optuna's intermediate values are keyed by our own optimizer step (an int, monotonic across restores).
        step, value = result.get("step"), result.get(self.metric)
        if number is None or step is None or not _finite(value):
            return
        storage_id = self._storage_id(number)
        if step not in self.storage.get_trial(storage_id).intermediate_values:  # a resumed trial repeats its last eval
            self.storage.set_trial_intermediate_value(storage_id, step, float(value))

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        number = self._live(trial_id, reopen=not error)
        if number is None:
            return  # told before the driver stopped: the trial ended after Tune's last snapshot
        result = result or {}
        value = result.get(self.metric)
        if error or result.get("status") == "failed" or not _finite(value):
            state, value = TrialState.FAIL, None
        elif "status" not in result:  # only final results carry a status: stopped early (ASHA)
            state, value = TrialState.PRUNED, None
        else:
            state = TrialState.COMPLETE
        self._tell(self.study, number, value, state)

    # -- saved with Tune's experiment snapshots
    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as file:
            pickle.dump(self.__getstate__(), file)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as file:
            self.__setstate__(pickle.load(file))
        self.reopen_journal()

    def __getstate__(self) -> dict[str, Any]:
        return {key: value for key, value in self.__dict__.items() if key != "opened"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, opened=None)

    def reopen_journal(self) -> None:
        """After a restore: the journal may hold trials asked after the restored snapshot."""
        known, study = set(self.numbers.values()), self.study
        for frozen in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if frozen.number not in known:
                # Asked after Tune's last snapshot: the restored Tune never runs it. Set directly in the
                # storage: a sampler's after_trial must not count it as a visited grid point.
                self.storage.set_trial_state_values(self._storage_id(frozen.number), TrialState.FAIL)
                study.enqueue_trial(frozen.params)

    # -- helpers
    def _storage_id(self, number: int) -> int:
        study_id = self.storage.get_study_id_from_name(self.study_name)
        return self.storage.get_trial_id_from_study_id_trial_number(study_id, number)

    def _live(self, trial_id: str, reopen: bool) -> int | None:
        """The Optuna trial number of a Tune trial if it can still be reported to / told, else None."""
        number = self.numbers.get(trial_id)
        if number is None:
            return None
        frozen = self.storage.get_trial(self._storage_id(number))
        if frozen.state == TrialState.RUNNING:
            return number
        if frozen.state == TrialState.FAIL and reopen:  # an errored trial that Tune runs again
            new_id = self.storage.create_new_trial(
                self.storage.get_study_id_from_name(self.study_name),
                template_trial=optuna.trial.create_trial(state=TrialState.RUNNING, params=frozen.params,
                                                         distributions=frozen.distributions))
            self.numbers[trial_id] = self.storage.get_trial_number_from_id(new_id)
            return self.numbers[trial_id]
        return None

    @staticmethod
    def _tell(study: optuna.Study, number: int, value: float | None, state: TrialState) -> bool:
        """Tell Optuna; False when BruteForceSampler found its grid exhausted. It then calls
        Study.stop, which raises outside study.optimize; Optuna has stored the state by then."""
        try:
            study.tell(number, value, state=state)
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise
            return False
        return True


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
