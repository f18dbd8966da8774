"""The Ray layer: search-space files, the searcher, both trial paths, failures, results, TensorBoard."""

import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml
from open_watch import OpenWatch, other_opens, own_opens
from ray_fixtures import CONFIG, REPO, TINY, bare_study, ray_instance, sptune_env  # noqa: F401 (fixture)

from sptune import atomic, files
from sptune.cli.main import main
from sptune.errors import UserError
from sptune.experiment.engine import driver, session
from sptune.records import studies, results, study_state
from sptune.registry import MODELS, TASKS
from sptune.search import searcher as search, spaces
from sptune.trials import trainable

EMBEDDED_DEMOS = {"listops-mini", "shapes-tiny", "pathfinder-tiny", "ucr-osuleaf"}  # CPU-sized grids, hand-written
PAPER_FILES = ["listops/transformer", "listops/s4", "text/transformer", "text/s4", "image/transformer", "image/s4",
               "pathfinder/transformer", "pathx/s4"]


def write_space(tmp_path, stages=None, **top):
    """A search-space file: by default one lr value per stage (one trial each), and the declared grids only:
    these tests count trials (grids that extend themselves: test_bracketing)."""
    one = {"params": {"optim.lr": [1.0e-3], "optim.batch_size": [8]}}
    data = {"task": "listops-mini", "model": "transformer", "num_samples": 2, "max_concurrent": 2,
            "extend_grids": False,
            "stages": {"pretrain": one, "finetune": one, "scratch": one, **(stages or {})}, **top}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def new_study(tmp_path, stages=None, overrides=(), options=None, **top):
    return studies.create(str(CONFIG), TINY + list(overrides), tmp_path / "study",
                           str(write_space(tmp_path, stages, **top)), options or studies.Options())


def trial_dirs(study_dir, stage):
    return sorted(p for p in (Path(study_dir) / stage).iterdir() if (p / "trial.json").is_file())


# ----------------------------------------------------------------------------- search-space files
def test_every_search_space_file_is_valid():
    files = sorted((REPO / "search_spaces").glob("*/*.yaml"))
    names = {f"{p.parent.name}/{p.stem}" for p in files}
    assert names >= set(PAPER_FILES) | {"listops-mini/transformer", "listops-mini/s4"}
    for path in files:
        space = spaces.load(path)
        assert (space.task, space.model) == (path.parent.name, path.stem)
        assert space.task in TASKS and space.model in MODELS
        assert set(space.stages) == {"pretrain", "finetune", "scratch"}
        assert "sptune study" in "".join(path.read_text().splitlines()[:8]), f"{path}: no launch command in header"
        for stage in space.stages.values():
            assert stage.categorical
            first = search.make_searcher(stage).suggest("first")  # Optuna accepts the grid and the points
            assert first == (stage.points[0] if stage.points else first) and set(first) == set(stage.params)
            if space.task not in EMBEDDED_DEMOS:  # the paper's grid (Appendix C.1), paper values added
                assert {1e-3, 5e-4, 1e-4} <= set(stage.params["optim.lr"])
                assert {8, 32, 128} <= set(stage.params["optim.batch_size"])


@pytest.mark.parametrize("name, stage, point", [
    ("listops/transformer", "pretrain", {"optim.lr": 1e-3, "optim.batch_size": 128}),  # Table 4
    ("listops/transformer", "finetune", {"optim.lr": 1e-4, "optim.batch_size": 64}),
    ("text/s4", "pretrain", {"optim.lr": 5e-4, "optim.batch_size": 8}),  # Table 5
    ("pathx/s4", "finetune", {"optim.lr": 1e-3, "optim.batch_size": 64}),
])
def test_paper_best_values_come_first(name, stage, point):
    assert spaces.load(REPO / "search_spaces" / f"{name}.yaml").stages[stage].points[0] == point


@pytest.mark.parametrize("change, words", [
    ({"stages": {"pretrain": {"params": {"optim.lrr": [1e-3]}}}}, ["optim.lrr", "unknown config field"]),
    ({"stages": {"pretrain": {"params": {"lr": [1e-3]}}}}, ["section.field"]),
    ({"stages": {"pretrain": {"params": {"optim.lr": [1e-3]}, "points": [{"optim.lr": 5e-4}]}}}, ["outside its grid"]),
    ({"stages": {"pretrain": {"params": {"optim.batch_size": [0]}}}}, ["optim.batch_size", "> 0"]),
    ({"stages": {"warmup": {"params": {"optim.lr": [1e-3]}}}}, ["'stages' must map"]),
    ({"sampler": "random"}, ["sampler", "brute, tpe"]),
    ({"asha": {"grace_period": 0}}, ["grace_period"]),
    ({"workers": 2}, ["unknown keys"]),
])
def test_bad_search_spaces_are_user_errors(change, words):
    data = {"stages": {"scratch": {"params": {"optim.lr": [1e-3]}}}}
    data.update(change)
    with pytest.raises(UserError) as err:
        spaces.parse(data, "bad.yaml")
    for word in words:
        assert word in str(err.value)


# ----------------------------------------------------------------------------- the searcher
GRID = {"params": {"optim.lr": [1e-3, 5e-4, 1e-4], "optim.batch_size": [8, 32, 128]},
        "points": [{"optim.lr": 1e-4, "optim.batch_size": 128}]}


def suggestions(searcher, n):
    return [searcher.suggest(f"trial{i}") for i in range(n)]


@pytest.mark.parametrize("sampler", ["brute", "tpe"])
def test_searcher_starts_with_paper_points_and_never_repeats(sampler):
    from ray.tune.search import Searcher

    stage = spaces.parse({"stages": {"pretrain": GRID}}).stages["pretrain"]
    assert spaces.trial_count(stage, 100) == 9
    got = suggestions(search.make_searcher(stage, sampler, seed=0), 10)
    assert got[0] == GRID["points"][0]
    assert sorted(map(str, got[:9])) == sorted(map(str, spaces.grid_points(stage)))  # the whole grid, once each
    assert got[9] == Searcher.FINISHED  # exhausted: no tenth trial rather than a repeat


def test_searcher_is_seeded():
    stage = spaces.parse({"stages": {"pretrain": GRID}}).stages["pretrain"]
    first = suggestions(search.make_searcher(stage, "brute", seed=3), 9)
    assert first == suggestions(search.make_searcher(stage, "brute", seed=3), 9)


def test_asha_counts_the_budget_fraction():
    scheduler = search.make_scheduler({"grace_period": 0.125, "reduction_factor": 2})
    assert scheduler._time_attr == "budget" and scheduler._max_t < 1
    assert spaces.rungs({"grace_period": 0.125, "reduction_factor": 2}) == [0.125, 0.25, 0.5]  # none at 1
    assert search.make_scheduler(None) is None


# ----------------------------------------------------------------------------- studies (shared Ray)
def test_study_direct_path_end_to_end(tmp_path, ray_instance):
    state = new_study(tmp_path, stages={"pretrain": {"params": {"optim.lr": [1e-3, 3e-3], "optim.batch_size": [8]}}})
    assert state.options.path == "direct"
    with OpenWatch([state.dir]) as watch, own_opens() as own:
        rows = driver.run_study(state.dir, verbose=0, state=state)
    # The config's route: the driver of a study just created runs the state create made and never reads
    # study.json (it writes it as the stages end, each write a new file), and no trial's process opens it:
    # each trial got its spec from the engine.
    assert own.counts(writes=False) == {} and other_opens(watch, own) == {}
    assert [r["stage"] for r in rows] == ["pretrain", "pretrain", "finetune", "scratch"]
    assert all(r["status"] == "completed" and r["path"] == "direct" and r["attempts"] == 1 for r in rows)
    assert len({r["optim.lr"] for r in rows if r["stage"] == "pretrain"}) == 2  # no point twice

    # Finetuning started from the best pretraining trial's best checkpoint, and says so.
    best, _ = results.best_row(rows, "pretrain")
    finetune = next(r for r in rows if r["stage"] == "finetune")
    assert finetune["init_trial"] == best["trial_id"] and finetune["init_step"] == best["best_step"]
    assert finetune["init_checkpoint"] == str(Path(best["run_dir"]) / "best.pt")
    assert files.read_json(Path(finetune["run_dir"]) / "result.json")["init_from"] == best["run_dir"]

    # The results table: CSV with every trial, and the summary with the selection rule.
    study_dir = Path(state.dir)
    csv_rows = (study_dir / "results.csv").read_text().splitlines()
    assert len(csv_rows) == 5 and "optim.lr" in csv_rows[0] and "device_seconds" in csv_rows[0]
    text = results.summary(study_dir)
    assert results.RULE in text and f"tensorboard --logdir {study_dir}" in text and "SPT (pretrain -> finetune)" in text
    # Where the trials ran: each row's device, and one line per device in the table.
    device = files.read_json(Path(rows[0]["run_dir"]) / "result.json")["provenance"]["device_name"]
    assert {r["device"] for r in rows} == {device} and "device" in csv_rows[0].split(",")
    assert f"ran on {device}: 4 trial(s), precision fp32, kernels attention sdpa; torch {torch.__version__}" in text

    # TensorBoard: the same tags in every stage (the stage is in the run's name), one HParams session per trial.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer

    for row in rows:
        events = EventAccumulator(str(Path(row["run_dir"]) / "tb"))
        events.Reload()
        tags = events.Tags()["scalars"]
        assert {"val/metric", "val/loss", "train/loss", "test/metric", "hparams/best_val"} <= set(tags)
        assert events.Scalars("hparams/best_val")[-1].value == pytest.approx(row["best_val"])  # the final one
        assert Path(row["run_dir"]).name.startswith(row["stage"])
    multiplexer = EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(study_dir))
    multiplexer.Reload()
    hparam_runs = multiplexer.PluginRunToTagToContent("hparams")
    assert len(hparam_runs) == 4 and all("_hparams_/session_start_info" in tags for tags in hparam_runs.values())
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    for tags in hparam_runs.values():  # each trial names its model, task, seed and cell as HParams columns
        start = HParamsPluginData.FromString(tags["_hparams_/session_start_info"]).session_start_info.hparams
        assert start["model"].string_value == "transformer" and start["task"].string_value == "listops-mini"
        assert start["cell"].string_value == Path(study_dir).name and "seed" in start


def pretrain_waiting_for_scratch(trial):
    """Pretraining that starts only once a scratch trial has: it can finish only if the stages run together."""
    spec = trial.spec
    deadline = time.monotonic() + 120
    while spec.stage == "pretrain" and not list(Path(spec.study_dir).glob("scratch/*/trial.json")):
        if time.monotonic() > deadline:
            raise RuntimeError("no scratch trial started while pretraining waited")
        time.sleep(0.2)
    trainable.stage_trainable(trial)


def started(row):
    return files.read_json(Path(row["run_dir"]) / "trial.json")["attempts"][0]["started"]


def ended(row):
    return (Path(row["run_dir"]) / "result.json").stat().st_mtime


def test_scratch_runs_beside_the_pretrain_finetune_chain(tmp_path, ray_instance):
    # One trial at a time per stage: two stages fit the test's 2 CPUs, in the engine's one Tune run.
    state = new_study(tmp_path, options=studies.Options(max_failures=0, max_concurrent=1))
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this file
    rows = driver.run_study(state.dir, verbose=0, trainable=pretrain_waiting_for_scratch)
    assert [r["stage"] for r in rows] == ["pretrain", "finetune", "scratch"]  # each stage ran its own trials
    assert all(r["status"] == "completed" for r in rows)
    assert files.read_json(Path(state.dir) / "study.json")["stage_status"] == dict.fromkeys(studies.STAGES, "done")
    pretrain, finetune, scratch = rows
    assert finetune["init_trial"] == pretrain["trial_id"] and started(finetune) > ended(pretrain)
    assert started(scratch) < ended(pretrain)


def test_diverged_trial_is_failed_and_the_search_continues(tmp_path, ray_instance):
    stages = {"scratch": {"params": {"optim.lr": [1e-3, 1e30], "optim.batch_size": [8]}}}
    state = new_study(tmp_path, stages, overrides=["optim.grad_clip=0"])
    driver.run_stage_search(Path(state.dir), state, "scratch", trainable.stage_trainable, verbose=0)
    rows = {r["optim.lr"]: r for r in results.collect(state.dir)}
    assert rows[1e-3]["status"] == "completed"
    assert rows[1e30]["status"] == "failed" and "non-finite loss" in rows[1e30]["reason"]
    assert rows[1e30]["attempts"] == 1  # a diverged trial is a result, not a crash to retry
    assert "failed: scratch" in results.summary(state.dir)


def kill_when(run_dir_glob, min_step, pid_of, found):
    """Background: once a trial's progress passes min_step, SIGKILL the process pid_of(run_dir) names."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not found:
        for run_dir in run_dir_glob():
            progress = run_dir / "progress.json"
            if progress.is_file() and files.read_json(progress)["step"] >= min_step:
                found.append(files.read_json(progress)["step"])
                os.kill(pid_of(run_dir), signal.SIGKILL)
                return
        time.sleep(0.05)


def flaky_trainable(trial):
    """Raises once, at the first eval past step 20, in the first attempt of each trial."""
    from sptune.run import train
    from sptune.trials import trainable as tr

    original = train.run_stage

    def crashing_run_stage(cfg, stage, init_from=None, on_eval=None, run_dir=None, **kwargs):
        def on_eval_then_crash(record, run_dir):
            on_eval(record, run_dir)
            if record["step"] >= 20 and len(files.read_json(run_dir / "trial.json")["attempts"]) == 1:
                raise RuntimeError("injected crash")
        return original(cfg, stage, init_from, on_eval_then_crash, run_dir, **kwargs)

    train.run_stage = crashing_run_stage
    try:
        tr.stage_trainable(trial)
    finally:
        train.run_stage = original


@pytest.mark.slow  # ~24 s each on 2 cores
@pytest.mark.parametrize("crash", ["exception", "killed"])
def test_crashed_trial_is_retried_from_its_last_checkpoint(tmp_path, ray_instance, crash):
    import ray

    state = new_study(tmp_path, overrides=["optim.max_steps=160", "optim.eval_every=10"])
    study_dir = Path(state.dir)
    found: list[int] = []
    fn = trainable.stage_trainable
    if crash == "exception":
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this file
        fn = flaky_trainable
    else:
        pid = lambda run_dir: files.read_json(run_dir / "trial.json")["attempts"][-1]["pid"]  # noqa: E731
        threading.Thread(target=kill_when, args=(lambda: trial_dirs(study_dir, "scratch") if
                                                 (study_dir / "scratch").is_dir() else [], 20, pid, found),
                         daemon=True).start()
    driver.run_stage_search(study_dir, state, "scratch", fn, verbose=0)
    (row,) = results.collect(study_dir)
    starts = [int(s) for s in row["start_steps"].split(";")]
    assert row["status"] == "completed" and row["steps"] == 160 and row["attempts"] == 2
    assert starts[0] == 0 and starts[1] >= 20  # the retry continued, it did not start over
    if found:
        assert starts[1] >= found[0]
    history = files.read_json(Path(row["run_dir"]) / "result.json")["history"]
    assert [h["step"] for h in history] == list(range(10, 161, 10))  # every eval once: no step redone


@pytest.mark.slow  # ~42 s on 2 cores: a Ray Train worker group of two
def test_torch_trainer_path_with_two_ddp_workers(tmp_path, ray_instance):
    options = studies.Options(workers=2, max_concurrent=1)
    state = new_study(tmp_path, options=options)
    assert state.options.path == "train"  # chosen automatically for more than one worker
    study_dir = Path(state.dir)
    driver.run_stage_search(study_dir, state, "scratch", trainable.stage_trainable, verbose=0)
    (row,) = results.collect(study_dir)
    assert row["status"] == "completed" and row["path"] == "train" and row["steps"] == 8 and row["devices"] == 2
    worker = files.read_json(Path(row["run_dir"]) / files.WORKER)
    assert worker["world_size"] == 2 and worker["pid"] != row["pid"]  # trained by Train workers, not the trial
    assert any((study_dir / "train" / f"scratch-{row['trial_id']}").glob("checkpoint_*"))  # Train's checkpoints
    assert files.read_json(Path(row["run_dir"]) / "progress.json")["step"] == 8


@pytest.mark.slow
def test_torch_trainer_restarts_a_killed_worker_from_its_checkpoint(tmp_path, ray_instance):
    state = new_study(tmp_path, overrides=["optim.max_steps=160", "optim.eval_every=10"],
                      options=studies.Options(train_path="train", max_concurrent=1))
    study_dir, found = Path(state.dir), []
    pid = lambda run_dir: files.read_json(run_dir / files.WORKER)["pid"]  # noqa: E731
    threading.Thread(target=kill_when, args=(lambda: trial_dirs(study_dir, "scratch") if
                                             (study_dir / "scratch").is_dir() else [], 20, pid, found),
                     daemon=True).start()
    driver.run_stage_search(study_dir, state, "scratch", trainable.stage_trainable, verbose=0)
    (row,) = results.collect(study_dir)
    assert found and row["status"] == "completed" and row["steps"] == 160
    assert row["attempts"] == 1  # Ray Train replaced its worker; the Tune trial itself never failed
    worker = files.read_json(Path(row["run_dir"]) / files.WORKER)
    assert worker["start_step"] >= found[0] >= 20
    history = files.read_json(Path(row["run_dir"]) / "result.json")["history"]
    assert [h["step"] for h in history] == list(range(10, 161, 10))


def test_asha_stops_only_on_our_steps_and_lets_finishers_finish(tmp_path, ray_instance, monkeypatch):
    from sptune.trials import stopped as stopped_trials

    def not_in_the_driver(*args, **kwargs):
        raise AssertionError("a stopped trial was tested in the driver's process")

    monkeypatch.setattr(stopped_trials, "stopped_result", not_in_the_driver)  # a Ray worker imports its own
    stages = {"scratch": {"params": {"optim.lr": [3e-3, 1e-3, 3e-4, 1e-5], "optim.batch_size": [8]}}}
    state = new_study(tmp_path, stages, overrides=["optim.max_steps=48", "optim.eval_every=8"], num_samples=4,
                      asha={"grace_period": 0.16, "reduction_factor": 2})  # rungs 0.16, 0.32, 0.64: evals 8, 16, 32 of 48
    driver.run_stage_search(Path(state.dir), state, "scratch", trainable.stage_trainable, verbose=0)
    state.stage_status["scratch"] = "done"
    study_state.save(state.dir, state)
    rows = results.collect(state.dir)
    assert len(rows) == 4
    for row in rows:  # a trial that reached its last step has its result; only earlier ones were stopped
        assert (row["status"], row["steps"] == 48) in {("completed", True), ("stopped", False)}
    stopped = [row for row in rows if row["status"] == "stopped"]
    assert stopped  # lr 1e-5 barely moves: below the others at a rung
    for row in stopped:  # tested at its own best checkpoint when the stage ended (sptune.trials.stopped)
        assert math.isfinite(row["test_metric"]) and row["best_step"] <= row["steps"] < 48
        assert files.read_json(Path(row["run_dir"]) / files.RESULT)["status"] == "stopped"


def test_choice_of_path():
    assert trainable.choose_path(1, 0) == "direct"
    assert trainable.choose_path(2, 0) == "train" and trainable.choose_path(1, 2) == "train"
    assert trainable.choose_path(1, 0, "train") == "train"


# ----------------------------------------------------------------------------- results without Ray
def fake_trial(study_dir, stage, trial_id, lr, result=None, progress=None, init=None):
    run_dir = study_dir / stage / f"{stage}-{trial_id}-lr={lr:g}"
    run_dir.mkdir(parents=True)
    atomic.write_json(run_dir / "trial.json", {"trial_id": trial_id, "stage": stage, "params": {"optim.lr": lr}, "path": "direct",
                                   "devices": 1, "init": init, "wall_seconds": 10.0,
                                   "attempts": [{"start_step": 0, "node_id": "n", "hostname": "h", "pid": 1}]})
    if result:
        atomic.write_json(run_dir / "result.json", {"status": "completed", "metric": "accuracy", "steps": 8, "best_step": 4,
                                       "final_val": 0.1, "test_metric": 0.2, "train_seconds": 7.0,
                                       "eval_seconds": 1.0, "train_flops": 3.0, "eval_flops": 1.0, **result})
    if progress:
        atomic.write_json(run_dir / "progress.json", progress)
    return run_dir


def test_results_come_from_the_run_directories(tmp_path):
    study = tmp_path / "study"
    bare_study(study, stage_status={"pretrain": "done"})
    fake_trial(study, "pretrain", "a", 1e-3, {"best_val": 0.5})
    fake_trial(study, "pretrain", "b", 5e-4, {"best_val": 0.7})
    fake_trial(study, "pretrain", "c", 1e-4, {"status": "failed", "reason": "non-finite loss", "best_val": None})
    fake_trial(study, "pretrain", "d", 1e-2, progress={"step": 4, "best_val": 0.9, "best_step": 4, "val_metric": 0.9})
    fake_trial(study, "finetune", "e", 1e-3, progress={"step": 4, "best_val": 0.3, "best_step": 4, "val_metric": 0.3})
    rows = {r["trial_id"]: r for r in results.collect(study)}
    assert rows["b"]["selected"] and not rows["a"]["selected"]  # best validation among completed trials
    assert rows["c"]["status"] == "failed" and not rows["d"]["selected"]  # a stopped trial is never selected
    assert rows["d"]["status"] == "stopped" and rows["e"]["status"] == "unfinished"
    assert rows["a"]["device_seconds"] == 8.0  # training + evaluation
    results.write_csv(list(rows.values()), study / "results.csv")
    assert len((study / "results.csv").read_text().splitlines()) == 6
    for row in rows.values():  # every key is a declared column of TrialRow, or a searched param
        assert all(key in results.COLUMNS or key.startswith("optim.") for key in row), row.keys()
    text = results.summary(study)
    assert "failed: pretrain c: non-finite loss" in text and results.RULE in text


def test_study_state_round_trips_through_study_json(tmp_path):
    state = studies.create(str(CONFIG), TINY, tmp_path / "study")
    loaded = study_state.load(tmp_path / "study")
    assert loaded == state and isinstance(loaded.options, studies.Resolved) and loaded.selected is None
    study_state.set_selected(tmp_path / "study", state, study_state.Selection(
        trial="t1", run_dir="r", step=8, checkpoint="r/best.pt", best_val=0.5))
    study_state.set_stage_status(tmp_path / "study", state, "pretrain", "done")
    loaded = study_state.load(tmp_path / "study")
    assert loaded == state and loaded.stage_done("pretrain") and not loaded.stage_done("scratch")
    assert loaded.selected.lineage() == {"init_trial": "t1", "init_step": 8, "init_checkpoint": "r/best.pt",
                                         "init_run_dir": "r"}
    assert study_state.read(tmp_path / "nothing") is None
    with pytest.raises(UserError, match="not a study directory"):
        study_state.load(tmp_path / "nothing")


def test_tied_pretraining_trials_are_selected_by_val_loss(tmp_path):
    """ListOps masked accuracy ties across trials (the frequency of `]`): the lower validation loss wins,
    and study.json and the summary say so."""
    study = tmp_path / "study"
    bare_study(study, stage_status={"pretrain": "done"})
    tied = {"metric": "masked_accuracy", "best_val": 148 / 1000, "val_targets": 1000}
    fake_trial(study, "pretrain", "a", 1e-3, dict(tied, best_val_loss=2.58))
    fake_trial(study, "pretrain", "b", 5e-4, dict(tied, best_val=148 / 1000 * (1 + 1e-15), best_val_loss=2.57))
    fake_trial(study, "pretrain", "c", 1e-4, dict(tied, best_val=147 / 1000, best_val_loss=2.50))
    selected = studies.select_pretraining(study, study_state.load(study))
    assert selected.trial == "b" and selected.best_val_loss == 2.57
    assert selected.selected_by == "val metric, tie broken by val loss"
    assert study_state.load(study).selected == selected  # kept in study.json: a resume reuses it
    rows = {r["trial_id"]: r for r in results.collect(study)}
    assert rows["b"]["selected"] and rows["b"]["selected_by"] == selected.selected_by
    text = results.summary(study)
    assert "2.5700" in text and "selected by val metric, tie broken by val loss" in text
    # One more correct token is a better metric, whatever the loss.
    fake_trial(study, "pretrain", "d", 1e-2, dict(tied, best_val=149 / 1000, best_val_loss=2.9))
    best, how = results.best_row(results.collect(study), "pretrain")
    assert best["trial_id"] == "d" and how == "val metric"


# ----------------------------------------------------------------------------- CLI
@pytest.mark.parametrize("args, words", [
    (["study", "missing.yaml"], ["missing.yaml does not exist"]),
    (["study", "CONFIG", "--search-space", "search_spaces/text/s4.yaml"], ["is for task 'text'"]),
    (["study", "CONFIG", "--search-space", "nowhere.yaml"], ["nowhere.yaml does not exist"]),
    (["study", "CONFIG", "model.name=dlr"], ["no search space for task 'listops-mini' / model 'dlr'"]),
    (["study", "CONFIG", "--num-samples", "0"], ["--num-samples"]),
    (["resume", "TMP"], ["not a study directory"]),
    (["results", "TMP"], ["not a study directory"]),
])
def test_user_errors_are_one_line(args, words, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    args = [str(CONFIG) if a == "CONFIG" else str(tmp_path) if a == "TMP" else a for a in args]
    assert main(args + (["--dir", str(tmp_path / "s")] if args[0] == "study" else [])) == 2
    err = capsys.readouterr().err
    assert err.startswith("sptune: error: ") and err.count("\n") == 1
    for word in words:
        assert word in err


def test_an_existing_study_is_not_overwritten(tmp_path, capsys):
    new_study(tmp_path)
    assert main(["study", str(CONFIG), "--dir", str(tmp_path / "study"), "--smoke"]) == 2
    assert "sptune resume" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_smoke_study_then_results(tmp_path):
    study_dir = tmp_path / "smoke"
    try:
        proc = subprocess.run([sys.executable, "-m", "sptune.cli", "study", str(CONFIG), "--smoke",
                               "--dir", str(study_dir)], capture_output=True, text=True, env=sptune_env(),
                              timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        for words in ("trials run directly in Ray Tune", results.RULE, "SPT (pretrain -> finetune) vs scratch",
                      f"tensorboard --logdir {study_dir}", f"optuna-dashboard {study_dir / 'optuna.journal'}"):
            assert words in proc.stdout
        # A few lines on the terminal (a line per trial, no Ray tables); everything else in the log.
        shown, log = proc.stdout.splitlines(), study_dir / "study.log"
        assert len(shown) <= 40 and proc.stderr == "" and shown[-1] == f"log: {log}", proc.stdout
        assert sum(" completed, best val " in line for line in shown) == 3 * studies.SMOKE_SAMPLES
        logged = log.read_text()
        assert "Trial status" in logged and "Trial status" not in proc.stdout
        assert logged.count(" step 8/8 ") == 3 * studies.SMOKE_SAMPLES  # every trial's last eval line
        assert len((study_dir / "results.csv").read_text().splitlines()) == 1 + 3 * studies.SMOKE_SAMPLES
        again = subprocess.run([sys.executable, "-m", "sptune.cli", "results", str(study_dir)], capture_output=True,
                               text=True, env=sptune_env(), timeout=60)
        assert again.returncode == 0 and results.RULE in again.stdout
    finally:
        session.stop_processes(session.leftover_processes(study_dir))
