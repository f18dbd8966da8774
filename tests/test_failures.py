"""GPUs a trial cannot use, GPU studies on GPU-less clusters, final vs retried failures, ASHA's clock."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from ray_fixtures import CONFIG, TINY, ray_instance  # noqa: F401 (fixture)
from test_tune import new_study

from sptune import files
from sptune.cli.main import main
from sptune.config import load as load_config
from sptune.errors import UserError
from sptune.experiment.engine import domain, driver
from sptune.records import studies, results, study_state
from sptune.search import searcher as search, spaces
from sptune.trials import resources, trainable


# ----------------------------------------------------------------------------- devices
@pytest.mark.parametrize("requested, gpus, cuda, device, words", [
    ("auto", ["0"], True, "cuda", None),
    ("auto", ["0"], False, "auto", "holds GPU 0 but torch 2.13.0 sees no CUDA device"),
    ("cuda", ["0"], False, "cuda", "sees no CUDA device"),
    ("cpu", ["0"], False, "cpu", None),  # asked for explicitly: trains on CPU although it holds a GPU
    ("auto", [], True, "cpu", None),  # holds no GPU: never takes one another trial reserved
    ("cuda", [], True, "cuda", "holds no GPU"),
])
def test_a_trial_trains_on_the_gpus_it_holds(requested, gpus, cuda, device, words):
    got, reason = resources.choose_device(requested, gpus, cuda, "2.13.0")
    assert got == device
    assert (reason is None) == (words is None)
    if words:
        assert words in reason and "\n" not in reason and "run.device" in reason


def test_a_gpu_trial_on_a_cuda_less_torch_fails_at_once_with_the_reason(tmp_path, monkeypatch):
    import ray
    import torch

    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [0])  # what Ray gives a trial that holds a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a CPU build of torch
    cfg = load_config(CONFIG, TINY, stage="scratch")
    run_dir = tmp_path / "run"
    result = trainable.run_guarded(cfg, "scratch", None, None, run_dir)
    assert result["status"] == "failed" and "sees no CUDA device" in result["reason"]
    assert files.read_json(run_dir / "result.json")["reason"] == result["reason"]
    assert not (run_dir / "last.pt").exists()  # nothing trained on CPU behind the user's back


def test_a_gpu_study_on_a_gpu_less_cluster_stops_up_front(tmp_path, ray_instance, capsys):
    code = main(["study", str(CONFIG), "--smoke", "--quiet", "--gpus-per-worker", "1", "--dir", str(tmp_path / "s")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("sptune: error: ") and err.count("\n") == 1
    assert "needs 1 GPU(s)" in err and "has no autoscaler" in err and "--gpus-per-worker 0" in err
    assert not (tmp_path / "s" / "pretrain").exists()  # no trial started


def test_single_gpu_trials_take_the_direct_path():
    assert trainable.choose_path(1, 1) == "direct" and trainable.choose_path(1, 0.5) == "direct"
    assert trainable.choose_path(1, 2) == "train" and trainable.choose_path(2, 1) == "train"
    assert trainable.trial_resources("direct", 4, 1) == {"CPU": 4, "GPU": 1}
    assert trainable.trial_resources("direct", 2, 0) == {"CPU": 2}
    assert trainable.trial_resources("train", 4, 1) == trainable.DRIVER_RESOURCES


# ----------------------------------------------------------------------------- failures
def failing_trainable(trial):
    """Out of memory at the first eval past step 4, in every attempt; RuntimeError ("crash") at the
    first eval past step 20 in the first attempt only (a later attempt, the retry, runs through)."""
    import torch

    from sptune.run import train
    from sptune.trials import trainable as tr

    original = train.run_stage

    def failing_run_stage(cfg, stage, init_from=None, on_eval=None, run_dir=None, **kwargs):
        def on_eval_then_fail(record, run_dir):
            on_eval(record, run_dir)
            attempts = len(files.read_json(run_dir / "trial.json")["attempts"])
            if cfg.optim.lr > 1e-2 and record["step"] >= 4:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
            if record["step"] >= 20 and attempts == 1:
                raise RuntimeError("injected crash")
        return original(cfg, stage, init_from, on_eval_then_fail, run_dir, **kwargs)

    train.run_stage = failing_run_stage
    try:
        tr.stage_trainable(trial)
    finally:
        train.run_stage = original


def hparams_status(run_dir):
    """A trial's HParams session status as TensorBoard reads it (its own event-processing API)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    events = EventAccumulator(str(Path(run_dir) / "tb"))
    events.Reload()
    tags = events.PluginTagToContent("hparams")
    assert "_hparams_/session_start_info" in tags  # listed since it started
    if "_hparams_/session_end_info" not in tags:
        return "running"
    info = plugin_data_pb2.HParamsPluginData.FromString(tags["_hparams_/session_end_info"]).session_end_info
    names = {api_pb2.Status.Value("STATUS_SUCCESS"): "success", api_pb2.Status.Value("STATUS_FAILURE"): "failure"}
    return names[info.status]


@pytest.mark.slow  # three Tune runs: ~100 s on 2 cores
def test_oom_is_final_and_a_crash_is_failed_then_retried_from_its_checkpoint(tmp_path, ray_instance):
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this file
    stages = {"scratch": {"params": {"optim.lr": [1e-3, 2e-2], "optim.batch_size": [8]}}}
    state = new_study(tmp_path, stages, overrides=["optim.max_steps=40", "optim.eval_every=4"],
                      options=studies.Options(max_failures=1))
    study_dir = Path(state.dir)
    driver.run_stage_search(study_dir, state, "scratch", failing_trainable, verbose=0)
    rows = {r["optim.lr"]: r for r in results.collect(study_dir)}

    # Out of memory: failed at once with the reason, not retried (max_failures=1 would have allowed one).
    oom = rows[2e-2]
    assert oom["status"] == "failed" and oom["attempts"] == 1 and "CUDA out of memory" in oom["reason"]
    assert hparams_status(oom["run_dir"]) == "failure"

    # The crash was retried once (max_failures=1) and ran through on its second attempt.
    ok = rows[1e-3]
    assert ok["status"] == "completed" and ok["attempts"] == 2

    # Now a crash that outlives its retries: failed with Tune's error in the table, the CSV and TensorBoard.
    (tmp_path / "again").mkdir()
    state = new_study(tmp_path / "again", {"scratch": {"params": {"optim.lr": [1e-3], "optim.batch_size": [8]}}},
                      overrides=["optim.max_steps=40", "optim.eval_every=4"], options=studies.Options(max_failures=0))
    study_dir = Path(state.dir)
    driver.run_stage_search(study_dir, state, "scratch", failing_trainable, verbose=0)
    state.stage_status = {"pretrain": "skipped: test", "finetune": "skipped: test", "scratch": "done"}
    study_state.save(study_dir, state)
    (row,) = results.collect(study_dir)
    assert row["status"] == "failed" and "RuntimeError: injected crash" in row["reason"] and row["steps"] >= 20
    assert "more than --max-failures 0" in row["reason"]  # spent: the retries --max-failures allows
    assert "failed: scratch" in results.summary(study_dir) and "injected crash" in results.summary(study_dir)
    results.write_csv([row], study_dir / "results.csv")
    assert ',failed,"sptune.trials.retries.RetriesSpent: crashed 1 times, more than --max-failures 0; ' \
           'the last: RuntimeError: injected crash",' in (study_dir / "results.csv").read_text()
    assert hparams_status(row["run_dir"]) == "failure"

    # A plain resume leaves a finished stage alone; --retry-failed reruns the crash from its checkpoint.
    assert studies.crashed_trials(study_dir, "scratch") == [Path(row["run_dir"])]
    (row,) = driver.run_study(study_dir, verbose=0, trainable=failing_trainable, retry_failed=True)
    starts = [int(s) for s in row["start_steps"].split(";")]
    assert row["status"] == "completed" and row["steps"] == 40 and row["attempts"] == 2
    assert starts[0] == 0 and starts[1] >= 20
    history = files.read_json(Path(row["run_dir"]) / "result.json")["history"]
    assert [h["step"] for h in history] == list(range(4, 41, 4))  # every eval once
    assert hparams_status(row["run_dir"]) == "success" and studies.crashed_trials(study_dir, "scratch") == []


# ----------------------------------------------------------------------------- ASHA
def epochs_stage(eval_every):
    # 5% of listops-mini = 200 training sequences, 2 epochs: batch 8 -> 50 steps, batch 32 -> 14 steps.
    return load_config(CONFIG, TINY + ["optim.epochs=2", "task.train_fraction=0.05", f"optim.eval_every={eval_every}"],
                       stage="scratch").to_dict()


def test_a_finished_cell_runs_again_only_to_retry_its_crashed_trials(tmp_path):
    state = studies.resolve(str(CONFIG), list(TINY), check_rungs=False)
    assert domain.continued(tmp_path, state) and domain.continued(tmp_path, state, retry_failed=True)
    state.stage_status = {"pretrain": study_state.DONE, "finetune": study_state.DONE, "scratch": "skipped: no grid"}
    assert not domain.continued(tmp_path, state, retry_failed=True)  # finished, nothing crashed
    crashed = tmp_path / "finetune" / "finetune-t1"
    crashed.mkdir(parents=True)
    (crashed / files.TRIAL_ERROR).write_text("{}")
    assert not domain.continued(tmp_path, state) and domain.continued(tmp_path, state, retry_failed=True)


def test_asha_rungs_and_stopping_order_with_epochs_and_two_batch_sizes():
    asha = {"grace_period": 0.125, "reduction_factor": 2}
    budgets = studies.step_budgets(epochs_stage(2), {"optim.batch_size": [8, 32], "optim.lr": [1e-3]})
    assert budgets == {8: 50, 32: 14}  # the resolved budget: epochs x steps per epoch
    spaces.check_rungs(asha, budgets, 2, "stage scratch")  # an eval in every rung for both batch sizes
    with pytest.raises(UserError, match=r"rung at 0.125 .* optim.batch_size=32 \(14 steps, an eval every 4\)"):
        spaces.check_rungs(asha, budgets, 4, "stage scratch")  # batch 32 evals at 4/14 > 0.25: no eval in [1/8, 1/4)

    # Four trials run side by side; each reports after every eval (every 2 steps) the budget fraction
    # done and its validation metric. Batch size 32 reaches a fraction of its budget in fewer steps.
    scheduler = search.make_scheduler(asha)
    metric = {"A": 0.9, "B": 0.3, "C": 0.8, "D": 0.2}
    batch = {"A": 8, "B": 8, "C": 32, "D": 32}
    trials = {name: SimpleNamespace(trial_id=name) for name in metric}
    for trial in trials.values():
        scheduler.on_trial_add(None, trial)
    reports = sorted((step / budgets[batch[name]], name) for name in metric
                     for step in range(2, budgets[batch[name]] + 1, 2))
    stopped = []
    for budget, name in reports:
        if name in [s[0] for s in stopped]:
            continue
        action = scheduler.on_trial_result(None, trials[name], {"budget": budget, "best_val": metric[name]})
        if action == "STOP":
            stopped.append((name, round(budget, 3)))
    # The worse trial of each batch size is stopped at the first rung, each after 1/8 of its own
    # budget (batch 32: step 2 of 14; batch 8: step 8 of 50), not after equal optimizer steps; C at the
    # second. A, the best, runs its whole budget.
    assert stopped == [("D", 0.143), ("B", 0.16), ("C", 0.286)]
