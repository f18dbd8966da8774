"""The protocol as single runs (train.run_protocol): `sptune compare` and the experiments' plain backend."""

import pytest

from sptune import atomic, files
from sptune.run import train


@pytest.fixture(autouse=True)
def checked(monkeypatch):
    """The stages' order is under test, not their configs (stand-ins): the configs run_protocol checks."""
    seen = []
    monkeypatch.setattr(train, "check_names", lambda cfg: seen.append(cfg))
    return seen


def test_each_stage_config_is_checked_before_it_runs(monkeypatch, checked):
    calls = []
    monkeypatch.setattr(train, "run_stage", fake_stage(calls, {}))
    train.run_protocol(lambda stage: f"cfg-{stage}")
    assert checked == ["cfg-pretrain", "cfg-finetune", "cfg-scratch"]


def fake_stage(calls, statuses):
    def run_stage(cfg, stage, init_from=None, run_dir=None, restart=False):
        calls.append((stage, init_from, run_dir))
        return {"stage": stage, "status": statuses.get(stage, "completed"), "run_dir": f"/runs/{stage}"}
    return run_stage


def test_finetuning_starts_from_the_pretraining_run_and_scratch_runs_too(monkeypatch):
    calls = []
    monkeypatch.setattr(train, "run_stage", fake_stage(calls, {}))
    results = train.run_protocol(lambda stage: f"cfg-{stage}")
    assert [c[0] for c in calls] == ["pretrain", "finetune", "scratch"]
    assert str(calls[1][1]) == "/runs/pretrain" and set(results) == {"pretrain", "finetune", "scratch"}


def test_no_finetuning_when_pretraining_failed(monkeypatch):
    calls = []
    monkeypatch.setattr(train, "run_stage", fake_stage(calls, {"pretrain": "failed"}))
    results = train.run_protocol(lambda stage: None)
    assert [c[0] for c in calls] == ["pretrain", "scratch"] and "finetune" not in results


def test_a_finished_stage_is_not_run_again_and_its_directory_is_finetuned_from(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(train, "run_stage", fake_stage(calls, {}))
    (tmp_path / "pretrain").mkdir()
    atomic.write_json(tmp_path / "pretrain" / files.RESULT, {"stage": "pretrain", "status": "completed",
                                                             "run_dir": "/elsewhere"})
    results = train.run_protocol(lambda stage: None, ("pretrain", "finetune"), lambda stage: tmp_path / stage)
    assert calls == [("finetune", tmp_path / "pretrain", tmp_path / "finetune")]
    assert results["pretrain"]["run_dir"] == "/elsewhere"
