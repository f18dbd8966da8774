"""Learning curves of a study's selected trials: vs step and vs cumulative training FLOPs."""

import json

import pytest

from sptune.records import results, studies, study_state
from sptune.report import curves
from sptune.search.options import Options


def fake_trial(study_dir, stage, trial_id, best_val, train_flops, steps=20, init=None):
    """A finished trial's run directory as a study leaves it (trial.json + result.json)."""
    run_dir = study_dir / stage / f"{stage}-{trial_id}"
    run_dir.mkdir(parents=True)
    trial = {"stage": stage, "trial_id": trial_id, "path": "direct", "devices": 1, "params": {"optim.lr": 1e-3},
             "attempts": [{"start_step": 0, "node_id": "n", "hostname": "h", "pid": 1}], "init": init}
    history = [{"step": s, "train_loss": 1.0 / s, "val_loss": 1.0, "val_metric": best_val * s / steps}
               for s in (5, 10, 15, 20)]
    result = {"status": "completed", "metric": "accuracy", "best_val": best_val, "best_val_loss": 1.0,
              "val_targets": 100, "best_step": steps, "final_val": best_val, "test_metric": best_val,
              "steps": steps, "train_seconds": 1.0, "eval_seconds": 0.1, "train_flops": train_flops,
              "eval_flops": 1.0, "n_params": 10, "history": history}
    (run_dir / "trial.json").write_text(json.dumps(trial))
    (run_dir / "result.json").write_text(json.dumps(result))


def finished_study_state(study_dir):
    """study.json with every stage done: only a finished stage has a selected trial (results.collect)."""
    state = studies.create(None, ["task.name=listops-mini", "model.name=transformer"], study_dir, options=Options())
    state.stage_status = {stage: study_state.DONE for stage in studies.STAGES}
    study_state.save(study_dir, state)


@pytest.fixture
def study(tmp_path):
    finished_study_state(tmp_path)
    fake_trial(tmp_path, "pretrain", "p1", 0.3, 4e9)
    fake_trial(tmp_path, "pretrain", "p2", 0.2, 9e9)
    fake_trial(tmp_path, "finetune", "f1", 0.8, 2e9, init={"trial": "p1", "step": 20, "checkpoint": "best.pt"})
    fake_trial(tmp_path, "scratch", "s1", 0.6, 2e9)
    fake_trial(tmp_path, "scratch", "s2", 0.5, 2e9)
    return tmp_path


def test_flops_axis_starts_spt_at_its_pretraining_runs_flops(study):
    points = curves.curve_points(results.collect(study))
    assert points["scratch"]["flops"] == pytest.approx([5e8, 1e9, 1.5e9, 2e9])  # 2e9 FLOPs / 20 steps
    # finetuning started from p1 (4e9 training FLOPs), not from the larger p2
    assert points["finetune"]["flops"] == pytest.approx([4.5e9, 5e9, 5.5e9, 6e9])
    assert points["finetune"]["step"] == [5, 10, 15, 20] and points["scratch"]["val"][-1] == pytest.approx(0.6)


def test_png_is_written_from_the_studys_rows(study):
    path = curves.write(study, results.collect(study))
    assert path == study / "plots" / curves.CURVES_PNG and path.read_bytes()[:4] == b"\x89PNG"
    assert path.stat().st_size > 10_000


def test_no_selected_trial_no_png(tmp_path):
    assert curves.write(tmp_path, []) is None
