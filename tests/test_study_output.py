"""What a study shows and keeps: a few terminal lines and a full log, each stage's Optuna study in the
journal (in step with Tune across restores), experiment trackers (MLflow file store, W&B offline),
Optuna's plots and the Python API."""

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from ray_fixtures import CONFIG, REPO, TINY, ray_instance, sptune_env  # noqa: F401 (fixture)

import sptune
from sptune import files, output
from sptune.cli.main import main
from sptune.config import STAGES
from sptune.experiment.engine import driver
from sptune.records import studies, results, study_state
from sptune.search import journal, searcher as search, spaces
from sptune.trackers import loggers
from sptune.trials import trainable

ONE = {"params": {"optim.lr": [1e-3], "optim.batch_size": [8]}}
TWO = {"params": {"optim.lr": [1e-3, 3e-3], "optim.batch_size": [8]}}


def space_file(tmp_path, **stages):
    """The declared grids only: these tests count trials and lines (grids that extend: test_bracketing)."""
    data = {"task": "listops-mini", "model": "transformer", "num_samples": 2, "max_concurrent": 2,
            "extend_grids": False,
            "stages": {"pretrain": ONE, "finetune": ONE, "scratch": ONE, **stages}}
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def optuna_trials(study_dir, stage):
    study = optuna.load_study(study_name=journal.optuna_study_name(study_dir, stage),
                              storage=journal.journal_storage(Path(study_dir) / files.OPTUNA_JOURNAL))
    return study.trials


def states(trials):
    return sorted(t.state.name for t in trials)


# ----------------------------------------------------------------------------- the searcher and its journal
GRID = {"stages": {"pretrain": {"params": {"optim.lr": [1e-3, 5e-4, 1e-4], "optim.batch_size": [8]},
                                "points": [{"optim.lr": 1e-4, "optim.batch_size": 8}]}}}


def test_restored_searcher_continues_the_same_optuna_study(tmp_path):
    stage = spaces.parse(GRID).stages["pretrain"]
    journal_path, name = tmp_path / files.OPTUNA_JOURNAL, "s/pretrain"
    first = search.make_searcher(stage, journal=journal_path, study_name=name)
    assert first.suggest("a") == {"optim.lr": 1e-4, "optim.batch_size": 8}  # the paper point first
    first.suggest("b")
    first.on_trial_result("a", {"step": 4, "best_val": 0.1})
    first.save(str(tmp_path / "snapshot.pkl"))  # Tune's last snapshot: a and b running
    first.on_trial_complete("a", {"step": 8, "best_val": 0.2, "status": "completed"})
    orphan = first.suggest("c")  # asked after the snapshot, then the driver dies

    restored = search.make_searcher(stage)  # as Tune builds it from tuner.pkl, then restores its state
    restored.restore(str(tmp_path / "snapshot.pkl"))
    restored.on_trial_result("a", {"step": 8, "best_val": 0.2, "status": "completed"})  # a reports again
    restored.on_trial_complete("a", {"step": 8, "best_val": 0.2, "status": "completed"})
    restored.on_trial_complete("b", error=True)  # b errors; resume_errored runs it again, it completes
    restored.on_trial_result("b", {"step": 4, "best_val": 0.3})
    restored.on_trial_complete("b", {"step": 8, "best_val": 0.3, "status": "completed"})
    again = restored.suggest("d")
    assert again == orphan  # the orphan's grid point is not lost
    restored.on_trial_complete("d", {"step": 8, "best_val": 0.05, "status": "completed"})

    trials = optuna.load_study(study_name=name, storage=journal.journal_storage(journal_path)).trials
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert sorted(t.value for t in complete) == [0.05, 0.2, 0.3]  # one per finished Tune trial, a not twice
    assert sorted(t.params["optim.lr"] for t in complete) == [1e-4, 5e-4, 1e-3]
    assert states(trials) == ["COMPLETE"] * 3 + ["FAIL"] * 2  # b's errored attempt, the orphan
    a_trial = next(t for t in complete if t.value == 0.2)
    assert a_trial.intermediate_values == {4: 0.1}  # reported at our step, the repeated eval not twice


def test_trial_states_in_optuna(tmp_path):
    stage = spaces.parse(GRID).stages["pretrain"]
    searcher = search.make_searcher(stage, journal=tmp_path / files.OPTUNA_JOURNAL, study_name="s/pretrain")
    for trial_id in "abc":
        searcher.suggest(trial_id)
    searcher.on_trial_result("b", {"step": 4, "best_val": 0.4})
    searcher.on_trial_complete("a", {"step": 8, "best_val": float("nan"), "status": "failed"})  # diverged
    searcher.on_trial_complete("b", {"step": 4, "best_val": 0.4})  # ASHA stopped it: no final status
    searcher.on_trial_complete("c", {"step": 8, "best_val": 0.5, "status": "completed"})
    trials = optuna.load_study(study_name="s/pretrain", storage=journal.journal_storage(tmp_path / files.OPTUNA_JOURNAL)).trials
    assert [(t.state.name, t.value) for t in trials] == [("FAIL", None), ("PRUNED", 0.4), ("COMPLETE", 0.5)]


# ----------------------------------------------------------------------------- terminal and log
def test_captured_output_goes_to_the_log_and_our_lines_to_both(tmp_path, capsys):
    log = tmp_path / files.STUDY_LOG
    with output.captured(log) as console:
        print("a Ray table")
        sys.stderr.write("a worker's warning\n")
        console.line("pretrain 1/2 done")
    shown = capsys.readouterr()
    assert shown.out == "pretrain 1/2 done\n" and shown.err == ""
    text = log.read_text()
    assert "a Ray table" in text and "a worker's warning" in text and "pretrain 1/2 done" in text
    with output.captured(log, echo=True):
        print("echoed")
    assert capsys.readouterr().out == "echoed\n" and "echoed" in log.read_text()  # appended, not replaced


def test_cell_lines_give_wall_time_and_eta_only_when_cells_run_one_after_another(tmp_path, capsys):
    from sptune.experiment.backends import CellProgress
    from sptune.experiment.plan import Cell

    cells = [Cell(key=key, labels={}, space={}, overrides=()) for key in ("a", "b")]
    with output.captured(tmp_path / files.STUDY_LOG) as console:
        live, shared = CellProgress(console, 2), CellProgress(console, 2, live=False)
        live.start(0)
        shared.start(0)
        live(cells[0], "done", 12.4)
        shared(cells[0], "done", 30.0)
        shared(cells[1], "failed", 0.0)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[1/2] a: done in 12 s  (ETA ")
    assert lines[1:] == ["[1/2] a: done, 30 device-s", "[2/2] b: failed, 0 device-s"]


def test_captured_output_catches_file_descriptor_writes(tmp_path):
    """In a real process (not under pytest's capture) fds 1 and 2 go to the log: C++ and child output too."""
    code = ("import os, subprocess, sys\nfrom sptune import output\n"
            f"with output.captured({str(tmp_path / 'study.log')!r}) as console:\n"
            "    os.write(1, b'from C\\n'); os.write(2, b'from C stderr\\n'); print('python', flush=True)\n"
            "    subprocess.run(['echo', 'a child'])\n"
            "    console.line('ours')\n"
            "print('after')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=sptune_env(), cwd=REPO,
                          timeout=60)
    assert (proc.stdout, proc.stderr) == ("ours\nafter\n", "")
    log = (tmp_path / "study.log").read_text()
    for line in ("from C", "from C stderr", "python", "a child", "ours"):
        assert line in log


# ----------------------------------------------------------------------------- studies (shared Ray)
def test_python_api_study_with_mlflow(tmp_path, ray_instance, capsys, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    study_dir = sptune.run_study(CONFIG, TINY, tmp_path / "study", search_space=space_file(tmp_path, pretrain=TWO),
                                 logger="mlflow")
    shown = capsys.readouterr().out.splitlines()
    log = study_dir / files.STUDY_LOG
    assert len(shown) <= 30, shown
    assert shown[2].startswith(f"log: {log}") and shown[-1] == f"log: {log}"  # named at the start and the end
    assert sum(line.startswith(("pretrain ", "finetune ", "scratch ")) and "completed, best val" in line
               for line in shown) == 4  # one line per finished trial
    for words in (f"tensorboard --logdir {study_dir}", str(study_dir / files.RESULTS_CSV),
                  f"optuna-dashboard {study_dir / files.OPTUNA_JOURNAL}"):
        assert any(words in line for line in shown), words
    assert not any("Trial status" in line for line in shown) and "Trial status" in log.read_text()  # Tune's tables

    # Optuna: one COMPLETE trial per finished Tune trial in each stage's study; Optuna's plots.
    rows = results.collect(study_dir)
    for stage in STAGES:
        finished = [r for r in rows if r["stage"] == stage and r["status"] == "completed"]
        trials = optuna_trials(study_dir, stage)
        assert states(trials) == ["COMPLETE"] * len(finished)
        assert sorted(t.params["optim.lr"] for t in trials) == sorted(r["optim.lr"] for r in finished)
        assert all(t.intermediate_values.keys() == {4, 8} for t in trials)
    plots = {p.name for p in (study_dir / "plots").glob("*.png")}
    assert {"pretrain-history.png", "pretrain-slice.png", "scratch-history.png"} <= plots

    # MLflow (file store): a run per trial with its config, lineage and every eval.
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"file:{study_dir / 'mlruns'}")
    experiment = client.get_experiment_by_name(study_dir.name)
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 4 and all(run.info.status == "FINISHED" for run in runs)
    selected = study_state.load(study_dir).selected
    for run in runs:
        assert len(client.get_metric_history(run.info.run_id, "val_metric")) == 2
        assert {"optim.lr", "study/stage"} <= set(run.data.params) and "best_val" in run.data.metrics
    (finetune,) = [r for r in runs if r.data.params["study/stage"] == "finetune"]
    assert finetune.data.params["study/init_trial"] == selected.trial

    # The Python API's tables: every trial, selection flags, and a run's history.
    frame = sptune.load_results(study_dir)
    assert len(frame) == 4 and frame.groupby("stage").best_in_stage.sum().to_dict() == \
        {"pretrain": 1, "finetune": 1, "scratch": 1}
    chosen = frame[frame.selected_pretraining]
    assert list(chosen.trial_id) == [selected.trial] and chosen.best_in_stage.all()
    history = sptune.load_history(frame.run_dir[0])
    assert list(history.step) == [4, 8] and {"val_metric", "train_loss"} <= set(history.columns)

    # The notebook example of docs/studies.md rebuilds the study's table.
    code = (REPO / "docs" / "studies.md").read_text().split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict = {}
    exec(code.replace("runs/study-listops_mini_transformer", str(study_dir)), scope)  # noqa: S102
    table, best = scope["table"], {stage: results.best_row(rows, stage)[0] for stage in STAGES}
    assert list(table.index) == list(STAGES) and list(table.trials) == [2, 1, 1]
    for stage, row in best.items():
        assert table.loc[stage, "trial_id"] == row["trial_id"] and table.loc[stage, "best_val"] == row["best_val"]
    assert scope["spt_gain"] == pytest.approx(best["finetune"]["test_metric"] - best["scratch"]["test_metric"])
    assert list(scope["history"].step) == [4, 8]

    # `sptune report <study dir>`: the table and the plots again, nothing trained.
    (study_dir / "plots" / "pretrain-history.png").unlink()
    assert main(["report", str(study_dir)]) == 0
    assert results.RULE in capsys.readouterr().out and (study_dir / "plots" / "pretrain-history.png").is_file()
    assert (study_dir / "plots" / "learning-curves.png").read_bytes()[:4] == b"\x89PNG"


def wandb_run(path) -> tuple[dict, list[dict]]:
    """An offline W&B run file's config updates (merged) and history rows. W&B keeps a key in `key` or,
    split at dots, in `nested_key`."""
    def items(entries):
        return {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in entries}

    records = list(wandb_records(path))
    config = {k: v for r in records if r.HasField("config") for k, v in items(r.config.update).items()}
    return config, [items(r.history.item) for r in records if r.HasField("history")]


def wandb_records(path):
    """The protobuf records of an offline W&B run file (a LevelDB-style log: 7-byte file header, 32 KiB
    blocks of chunks, each with a 7-byte header crc32/length/type; wandb ships no reader for it)."""
    import struct

    from wandb.proto import wandb_internal_pb2

    raw, pos, data = Path(path).read_bytes(), 7, b""
    assert raw[:4] == b":W&B"
    while pos + 7 <= len(raw):
        if 32768 - pos % 32768 < 7:  # no room for a chunk header: the block's rest is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", raw[pos:pos + 7])
        data, pos = data + raw[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a full record, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            yield record
            data = b""


def test_wandb_offline_runs(tmp_path, ray_instance, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    state = studies.create(str(CONFIG), TINY, tmp_path / "study", str(space_file(tmp_path)),
                            studies.Options(logger="wandb"))
    study_dir = Path(state.dir)
    driver.run_stage_search(study_dir, state, "scratch", trainable.stage_trainable, verbose=0)
    (run_file,) = (study_dir / "wandb").glob("offline-run-*/run-*.wandb")
    config, history = wandb_run(run_file)
    assert config["optim.lr"] == 1e-3 and config["study"] == {"name": "study", "stage": "scratch", "cell": "study",
                                                          "study_dir": str(study_dir)}
    (row,) = results.collect(study_dir)
    assert [h["step"] for h in history if "val_metric" in h] == [4, 8]  # every eval
    assert history[-1]["best_val"] == pytest.approx(row["best_val"])
    assert history[-1]["test_metric"] == pytest.approx(row["test_metric"])  # the final result too


# The W&B logging actor's loop in a process killed with its children the moment the loop returns, as Ray's
# callback kills the actor (ray.kill) and Ray kills a dead worker's children. It prints how many children
# were still alive: a W&B service (wandb-core) among them may not have written the run yet. In a quiet
# process it usually has, so the count is what fails without the fix (sptune.trackers.wandb_logging).
KILLED_AFTER_RUN = """
import os, queue, signal, sys
from ray.air.integrations.wandb import _QueueItem
from sptune.trackers.wandb_logging import FlushingWandbLoggingActor

items = queue.Queue()
items.put((_QueueItem.RESULT, {"training_iteration": 1, "val_metric": 0.5}))
items.put((_QueueItem.END, None))
actor = FlushingWandbLoggingActor(sys.argv[1], items, [], [], project="p", mode="offline", dir=sys.argv[1])
actor.run()
children = [p for p in os.listdir("/proc") if p.isdigit() and os.path.exists(f"/proc/{p}/stat")
            and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1] == str(os.getpid())]
print("children", len(children), flush=True)
os.killpg(0, signal.SIGKILL)
"""


def test_a_wandb_run_is_written_before_its_logging_actor_is_killed(tmp_path):
    env = sptune_env(WANDB_MODE="offline", WANDB_SILENT="true")
    proc = subprocess.run([sys.executable, "-c", KILLED_AFTER_RUN, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=120, start_new_session=True)
    assert proc.returncode == -9 and proc.stdout.strip() == "children 0", proc.stdout + proc.stderr[-2000:]
    (run_file,) = tmp_path.glob("wandb/offline-run-*/run-*.wandb")
    config, history = wandb_run(run_file)
    assert config["trial_log_path"] == str(tmp_path) and history[-1]["val_metric"] == 0.5


def fail_once_trainable(trial):
    """The lr=3e-3 trial raises in its first run only: Tune marks it errored (max_failures=0)."""
    params, spec = trial.params, trial.spec
    marker = Path(spec.study_dir) / "failed-once"
    if params["optim.lr"] == 3e-3 and not marker.exists():
        marker.touch()
        raise RuntimeError("injected failure")
    trainable.stage_trainable(trial)


@pytest.mark.slow  # ~25 s on 2 cores
def test_errored_trial_resumed_is_one_complete_optuna_trial(tmp_path, ray_instance):
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import this file
    state = studies.create(str(CONFIG), TINY, tmp_path / "study", str(space_file(tmp_path, scratch=TWO)),
                            studies.Options(max_failures=0))
    study_dir = Path(state.dir)
    driver.run_stage_search(study_dir, state, "scratch", fail_once_trainable, verbose=0)
    assert states(optuna_trials(study_dir, "scratch")) == ["COMPLETE", "FAIL"]
    driver.run_stage_search(study_dir, state, "scratch", fail_once_trainable, verbose=0)  # Tuner.restore, resume_errored
    rows = results.collect(study_dir)
    assert [r["status"] for r in rows] == ["completed", "completed"]
    trials = optuna_trials(study_dir, "scratch")
    assert states(trials) == ["COMPLETE", "COMPLETE", "FAIL"]  # the errored attempt stays, as it happened
    assert sorted(t.params["optim.lr"] for t in trials if t.state == TrialState.COMPLETE) == [1e-3, 3e-3]


# ----------------------------------------------------------------------------- CLI
def test_missing_tracker_package_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    real = loggers.importlib.util.find_spec
    monkeypatch.setattr(loggers.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name))
    assert main(["study", str(CONFIG), "--logger", "wandb", "--dir", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err
    assert err == "sptune: error: --logger wandb needs the wandb package: pip install 'sptune[wandb]'\n"
    assert not (tmp_path / "s").exists()
