"""The private Ray Tune and Optuna internals that sptune.tune.engine.search relies on, checked on the installed versions.

`ResumableLimiter` reads and updates Ray's ConcurrencyLimiter counters, and `UniqueOptunaSearch` reaches into
Ray's OptunaSearch (its Optuna study, trials and storage) and Optuna's storage API. None of these is a public
contract: an upgrade of Ray or Optuna that renames one must fail here, not in the middle of a study.
"""

import inspect

import optuna
import pytest
from optuna.trial import TrialState
from ray.tune.search import ConcurrencyLimiter, Searcher

from sptune.tune.engine import search
from sptune.tune import spaces

GRID = {"stages": {"pretrain": {"params": {"optim.lr": [1e-3, 1e-4], "optim.batch_size": [8]}}}}


@pytest.fixture
def searcher(tmp_path):
    stage = spaces.parse(GRID).stages["pretrain"]
    return search.make_searcher(stage, journal=tmp_path / "optuna.journal", study_name="s/pretrain")


def test_optuna_is_bounded_to_the_major_version_these_internals_were_checked_on():
    assert int(optuna.__version__.split(".")[0]) == 5


def test_concurrency_limiter_counters_that_resumable_limiter_updates(searcher):
    limiter = search.limit(searcher, max_concurrent=1)
    assert isinstance(limiter, ConcurrencyLimiter)
    assert isinstance(limiter.live_trials, set) and isinstance(limiter.num_unfinished_live_trials, int)
    limiter.set_search_properties(search.METRIC, search.MODE, {})
    assert isinstance(limiter.suggest("a"), dict)
    assert limiter.live_trials == {"a"} and limiter.num_unfinished_live_trials == 1
    assert limiter.suggest("b") is None  # at its limit
    limiter.on_trial_complete("a", {search.METRIC: 0.5, "status": "completed"}, error=True)
    assert "a" not in limiter.live_trials  # Ray forgets an errored trial: what ResumableLimiter repairs
    limiter.on_trial_result("a", {search.METRIC: 0.5, "step": 1})
    assert "a" in limiter.live_trials and limiter.num_unfinished_live_trials == 1


def test_optuna_search_internals_that_unique_optuna_search_reads(searcher):
    params = searcher.suggest("t1")
    assert isinstance(params, dict)
    assert isinstance(searcher._ot_trials, dict) and isinstance(searcher._ot_trials["t1"], optuna.Trial)
    assert isinstance(searcher._ot_study, optuna.Study) and searcher._storage is not None
    trial = searcher._ot_trials["t1"]
    assert isinstance(trial._trial_id, int)
    storage, study_id = searcher._ot_study._storage, searcher._ot_study._study_id
    assert storage.get_trial(trial._trial_id).state == TrialState.RUNNING
    for method, args in [("create_new_trial", ["study_id", "template_trial"]),
                         ("set_trial_state_values", ["trial_id", "state", "values"]),
                         ("get_trial", ["trial_id"])]:
        assert list(inspect.signature(getattr(storage, method)).parameters)[:len(args)] == args
    assert isinstance(study_id, int)
    assert callable(searcher._ot_study.enqueue_trial)
    assert "restore" in vars(Searcher) or hasattr(Searcher, "restore")


def test_a_resumed_errored_trial_gets_a_new_optuna_trial_and_its_result_is_told(searcher):
    searcher.suggest("t1")
    searcher.on_trial_complete("t1", None, error=True)
    searcher.on_trial_result("t1", {search.METRIC: 0.7, "step": 2})  # Tune runs it again (resume_errored)
    searcher.on_trial_complete("t1", {search.METRIC: 0.8, "status": "completed"})
    states = [t.state for t in searcher._ot_study.get_trials(deepcopy=False)]
    assert states.count(TrialState.FAIL) == 1 and states.count(TrialState.COMPLETE) == 1


def test_brute_force_exhaustion_is_signalled_as_ray_finished(searcher):
    """BruteForceSampler ends a finished grid through Study.stop, which `tell` raises outside optimize;
    UniqueOptunaSearch turns that RuntimeError (matched by its message) into Searcher.FINISHED."""
    got = [searcher.suggest(f"t{i}") for i in range(3)]
    assert all(isinstance(p, dict) for p in got[:2]) and got[2] == Searcher.FINISHED
