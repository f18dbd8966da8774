"""The Ray Tune internals sptune relies on, checked on the installed versions, and the searcher's own use of
Optuna's public ask/tell and storage API.

`ResumableLimiter` reads and updates Ray's ConcurrencyLimiter counters, routing.GroupScheduler asks ASHA which
trials it knows, resources reads the GCS's cluster config, and preemption rewrites a trial's failure count.
None of these is a public contract: an upgrade of Ray that renames one must fail here, not in the middle of
a study.
"""

import inspect
import re
from types import SimpleNamespace

import optuna
import pytest
from optuna.trial import TrialState
from ray.tune.search import ConcurrencyLimiter, Searcher

from sptune.search import searcher as search, spaces

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


def test_asha_trial_table_that_group_scheduler_reads():
    """routing.GroupScheduler asks ASHA whether it knows a trial (a trial restored into a newer snapshot may not
    have been added): ASHA keeps them in `_trial_info`, keyed by trial id."""
    scheduler = search.make_scheduler({"grace_period": 0.25, "reduction_factor": 2})
    trial = SimpleNamespace(trial_id="t1", config={}, evaluated_params={})
    assert isinstance(scheduler._trial_info, dict) and "t1" not in scheduler._trial_info
    scheduler.set_search_properties(search.METRIC, search.MODE)
    scheduler.on_trial_add(None, trial)
    assert "t1" in scheduler._trial_info


def test_cluster_config_reader_that_resources_calls():
    """resources.autoscaler_node_types reads the GCS's cluster config through ray._private.state first."""
    import ray._private.state

    assert callable(ray._private.state.state.get_cluster_config)
    assert list(inspect.signature(ray._private.state.state.get_cluster_config).parameters) == []


def test_trial_failure_count_that_node_loss_retries_rewrite():
    """preemption.NodeLossRetries sets a trial's failure count to its crashes (node losses uncounted)."""
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    metadata = _TrainingRunMetadata()
    metadata.num_failures = 3
    metadata.invalidate_cache()
    assert metadata.num_failures == 3


def test_the_searcher_reaches_no_private_optuna_or_ray_name():
    source = inspect.getsource(search)
    assert not re.findall(r"(?<!self)\._[a-z]", source)  # Optuna and Ray: public API only (self: its own helpers)
    assert search.UniqueOptunaSearch.__mro__[1] is Searcher  # not Ray's OptunaSearch, which holds private Optuna state


def test_a_resumed_errored_trial_gets_a_new_optuna_trial_and_its_result_is_told(searcher):
    searcher.suggest("t1")
    searcher.on_trial_complete("t1", None, error=True)
    searcher.on_trial_result("t1", {search.METRIC: 0.7, "step": 2})  # Tune runs it again (resume_errored)
    searcher.on_trial_complete("t1", {search.METRIC: 0.8, "status": "completed"})
    states = [t.state for t in searcher.study.get_trials(deepcopy=False)]
    assert states.count(TrialState.FAIL) == 1 and states.count(TrialState.COMPLETE) == 1


def test_brute_force_exhaustion_is_signalled_as_ray_finished(searcher):
    """BruteForceSampler ends a finished grid through Study.stop, which `tell` raises outside optimize;
    UniqueOptunaSearch turns that RuntimeError (matched by its message) into Searcher.FINISHED."""
    got = [searcher.suggest(f"t{i}") for i in range(3)]
    assert all(isinstance(p, dict) for p in got[:2]) and got[2] == Searcher.FINISHED
