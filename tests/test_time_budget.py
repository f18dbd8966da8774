"""--time-budget: a study that reaches it stops cleanly at a Tune step boundary, its unfinished stage stays
unfinished, what finished is kept, and a resume finishes the study with every eval exactly once.

The budget's clock is the test's: it runs in real time and jumps past the deadline once pretraining has
written its first eval. A wall-clock budget of 15 s once ended the run before that eval (on CI, under two
pytest workers), and then nothing was left to continue.
"""

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from ray.tune import ExperimentAnalysis
from ray_fixtures import CONFIG, TINY, ray_instance  # noqa: F401 (fixture)

from sptune import files
from sptune.experiment.engine import driver, stopping
from sptune.records import studies, results

pytestmark = pytest.mark.slow

ONE = {"params": {"optim.lr": [1.0e-3], "optim.batch_size": [8]}}
# Pretraining long enough (20-40 s on one core) that the run stops inside it, after its first eval.
LONG_PRETRAINING = ["pretrain.optim.max_steps=1500", "pretrain.optim.eval_every=100"]
BUDGET_S = 600.0


def budget_clock(study_dir):
    """time.monotonic, plus the whole budget once a pretraining progress.json exists."""
    def monotonic() -> float:
        written = any((study_dir / "pretrain").glob("*/progress.json"))
        return time.monotonic() + (BUDGET_S if written else 0.0)
    return SimpleNamespace(monotonic=monotonic)


def tune_snapshot_is_final(storage):
    """Tune's saved state shows each trial's last result as Tune's own per-trial log has it (the snapshot
    was written when the loop ended, not the last periodic one, up to TUNE_GLOBAL_CHECKPOINT_S before)."""
    run = next(path.parent for path in storage.glob("*/experiment_state-*.json"))
    trials = ExperimentAnalysis(str(run)).trials
    for trial in trials:
        logged = (Path(trial.local_path) / "result.json").read_text().splitlines()
        if (trial.last_result or {}).get("step") != (json.loads(logged[-1])["step"] if logged else None):
            return False
    return bool(trials)


def test_a_study_stopped_by_its_time_budget_resumes_to_the_end(tmp_path, ray_instance, monkeypatch):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"task": "listops-mini", "model": "transformer", "num_samples": 1,
                                     "max_concurrent": 1, "stages": {s: ONE for s in studies.STAGES}}))
    state = studies.create(str(CONFIG), TINY + LONG_PRETRAINING, tmp_path / "study", str(space))
    study_dir = tmp_path / "study"

    with monkeypatch.context() as patch:
        patch.setattr(stopping, "time", budget_clock(study_dir))
        patch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "3600")  # no periodic snapshot after the first
        rows = driver.run_study(study_dir, verbose=0, time_budget_s=BUDGET_S)
    stages = files.read_json(study_dir / files.STUDY)["stage_status"]
    assert "pretrain" not in stages  # stopped inside it: not marked done, so a resume continues it
    assert [r["status"] for r in rows if r["stage"] == "pretrain"] != ["completed"]
    progress = files.read_json(next((study_dir / "pretrain").glob("*/progress.json")))
    assert 0 < progress["step"] < 1500
    assert tune_snapshot_is_final(study_dir / "tune")

    rows = driver.run_study(study_dir, verbose=0)  # the resume, without a budget
    assert [r["stage"] for r in rows] == ["pretrain", "finetune", "scratch"]
    assert all(r["status"] == "completed" for r in rows)
    pretraining = next(r for r in rows if r["stage"] == "pretrain")
    history = files.read_json(f"{pretraining['run_dir']}/{files.RESULT}")["history"]
    assert [h["step"] for h in history] == list(range(100, 1501, 100))  # continued, every eval once
    assert len(files.read_json(f"{pretraining['run_dir']}/{files.TRIAL}")["attempts"]) == 2
    assert state.dir == str(study_dir.resolve()) and results.best_row(rows, "finetune")[0] is not None
