"""Tune's searcher and scheduler for a search space (sptune.tune.spaces): Optuna behind a concurrency
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
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState
from ray.tune.schedulers import ASHAScheduler
from ray.tune.search import ConcurrencyLimiter, Searcher
from ray.tune.search.optuna import OptunaSearch

from sptune.errors import UserError
from sptune.tune.records.journal import journal_storage
from sptune.tune.spaces import FULL_BUDGET, StageSpace

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
    storage = None
    if journal is not None:
        storage = journal_storage(journal)
        if study_name in {s.study_name for s in storage.get_all_studies()}:
            # A stage that Tune could not restore (stopped before its first snapshot) starts over;
            # the Optuna trials of that attempt were never known to Tune, so they go too.
            optuna.delete_study(study_name=study_name, storage=storage)
    return UniqueOptunaSearch(space=distributions, metric=METRIC, mode=MODE,
                              points_to_evaluate=[dict(p) for p in stage.points] or None,
                              sampler=optuna_sampler, storage=storage, study_name=study_name)


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


class UniqueOptunaSearch(OptunaSearch):
    """OptunaSearch that never hands out a point it has already handed out, and whose Optuna study
    holds exactly what Tune ran, across restores.

    A repeat (TPE on categorical values) is told back to Optuna as pruned and another point asked
    for; after MAX_REPEATS repeats in a row the searcher reports FINISHED instead of running a
    duplicate. `_seen` is saved with the searcher's state, so a restored study remembers it.

    Optuna states: COMPLETE = the trial ran to its end (its best validation metric is the value),
    FAIL = it diverged or crashed, PRUNED = ASHA stopped it (the last reported value stays).
    Intermediate values are reported at our own step (Tune's iteration restarts on restore).

    With a journal, the pickled searcher reopens the same journal file: Tune.restore brings back
    the searcher of its last snapshot, and the journal may have moved on since. Three cases follow:
    a trial told after the snapshot is not told again; an Optuna trial asked after the snapshot
    (unknown to the restored Tune) is failed and its point queued again, so no grid point is lost;
    an errored trial that Tune runs again (resume_errored) gets a new Optuna trial with its params,
    so its result is not dropped (Optuna cannot reopen a finished trial).
    """

    MAX_REPEATS = 100

    def suggest(self, trial_id: str):
        seen = self.__dict__.setdefault("_seen", set())
        for _ in range(self.MAX_REPEATS):
            params = super().suggest(trial_id)
            if not isinstance(params, dict):
                return params
            key = tuple(sorted((k, repr(v)) for k, v in params.items()))
            if key not in seen:
                seen.add(key)
                return params
            if not self._tell(self._ot_trials.pop(trial_id), None, TrialState.PRUNED):
                return Searcher.FINISHED  # BruteForceSampler: every grid point is taken
        return Searcher.FINISHED

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        trial = self._live(trial_id, reopen=True)
        # Optuna's intermediate values are keyed by our own optimizer step (an int, monotonic across restores).
        step, value = result.get("step"), result.get(self.metric)
        if trial is None or step is None or not _finite(value):
            return
        if step not in self._frozen(trial).intermediate_values:  # a resumed trial repeats its last eval
            trial.report(value, step)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        trial = self._live(trial_id, reopen=not error)
        if trial is None:
            return  # told before the driver stopped: the trial ended after Tune's last snapshot
        result = result or {}
        value = result.get(self.metric)
        if error or result.get("status") == "failed" or not _finite(value):
            state, value = TrialState.FAIL, None
        elif "status" not in result:  # only final results carry a status: stopped early (ASHA)
            state, value = TrialState.PRUNED, None
        else:
            state = TrialState.COMPLETE
        self._tell(trial, value, state)

    def restore(self, checkpoint_path: str) -> None:
        super().restore(checkpoint_path)
        self.reopen_journal()

    def reopen_journal(self) -> None:
        """After a restore: the journal may hold trials asked after the restored snapshot."""
        if self._storage is None:
            return
        known = {trial._trial_id for trial in self._ot_trials.values()}
        for frozen in self._ot_study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if frozen._trial_id not in known:
                # Asked after Tune's last snapshot: the restored Tune never runs it. Set directly in the
                # storage: a sampler's after_trial must not count it as a visited grid point.
                self._storage.set_trial_state_values(frozen._trial_id, TrialState.FAIL)
                self._ot_study.enqueue_trial(frozen.params)

    # -- helpers
    def _frozen(self, trial: optuna.Trial) -> optuna.trial.FrozenTrial:
        return self._ot_study._storage.get_trial(trial._trial_id)

    def _live(self, trial_id: str, reopen: bool) -> optuna.Trial | None:
        """The Optuna trial of a Tune trial if it can still be reported to / told, else None."""
        trial = self._ot_trials.get(trial_id)
        if trial is None:
            return None
        frozen = self._frozen(trial)
        if frozen.state == TrialState.RUNNING:
            return trial
        if frozen.state == TrialState.FAIL and reopen:  # an errored trial that Tune runs again
            storage = self._ot_study._storage
            new_id = storage.create_new_trial(self._ot_study._study_id, template_trial=optuna.trial.create_trial(
                state=TrialState.RUNNING, params=frozen.params, distributions=frozen.distributions))
            self._ot_trials[trial_id] = optuna.Trial(self._ot_study, new_id)
            return self._ot_trials[trial_id]
        return None

    def _tell(self, trial: optuna.Trial, value: float | None, state: TrialState) -> bool:
        """Tell Optuna; False when BruteForceSampler found its grid exhausted. It then calls
        Study.stop, which raises outside study.optimize; Optuna has stored the state by then."""
        try:
            self._ot_study.tell(trial, value, state=state)
        except RuntimeError as exc:
            if "Study.stop" not in str(exc):
                raise
            return False
        return True


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
