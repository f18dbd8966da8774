"""The trainer: loss regression, exact resume, finetune from the pretrained backbone, failures."""

import math
from pathlib import Path

import pytest
import torch

from sptune import checkpoints, config, files, train
from sptune.errors import UserError

TINY = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=32", "optim.batch_size=8",
        "optim.max_steps=12", "optim.eval_every=4", "optim.warmup_steps=2", "task.max_val_examples=32",
        "run.progress=false"]


def tiny(tmp_path, *extra):
    return config.load(None, TINY + [f"run.out_dir={tmp_path}", *extra])


def test_pretraining_loss_decreases_and_result_is_complete(tmp_path):
    result = train.pretrain(tiny(tmp_path, "optim.max_steps=40", "optim.eval_every=20", "optim.lr=3e-3"))
    assert result["status"] == "completed"
    first, last = result["history"][0]["train_loss"], result["history"][-1]["train_loss"]
    # Untrained logits over 18 tokens start near ln(18); 40 steps learn at least the token statistics.
    assert last < first and first < math.log(18) + 0.5
    assert result["history"][-1]["val_loss"] < math.log(18) - 0.15
    assert 0.0 <= result["test_metric"] <= 1.0 and result["best_step"] in (20, 40)
    run_dir = Path(result["run_dir"])
    assert run_dir.parent == tmp_path and run_dir.name.startswith("pretrain-listops-mini-transformer-s0-")
    assert (run_dir / "config.yaml").is_file() and (run_dir / "fingerprint.json").is_file()
    assert files.read_json(run_dir / "result.json")["steps"] == 40


def test_same_seed_same_numbers_on_cpu(tmp_path):
    a = train.pretrain(tiny(tmp_path / "a"))
    b = train.pretrain(tiny(tmp_path / "b"))
    assert [h["train_loss"] for h in a["history"]] == [h["train_loss"] for h in b["history"]]
    c = train.pretrain(tiny(tmp_path / "c", "run.seed=1"))
    assert [h["train_loss"] for h in a["history"]] != [h["train_loss"] for h in c["history"]]


class Interrupt(Exception):
    pass


@pytest.mark.parametrize("stage", ["pretrain", "scratch"])
def test_resume_from_last_reproduces_uninterrupted_run(tmp_path, stage):
    full = train.run_stage(tiny(tmp_path / "full", "model.dropout=0.1"), stage)

    def crash_at_8(record, run_dir):
        if record["step"] == 8:
            raise Interrupt

    cfg = tiny(tmp_path / "resumed", "model.dropout=0.1")
    with pytest.raises(Interrupt):
        train.run_stage(cfg, stage, on_eval=crash_at_8)
    resumed = train.run_stage(cfg, stage)
    assert [h["step"] for h in resumed["history"]] == [4, 8, 12]
    for a, b in zip(full["history"], resumed["history"]):
        assert a["train_loss"] == pytest.approx(b["train_loss"], rel=1e-6)
        assert a["val_metric"] == pytest.approx(b["val_metric"], rel=1e-6)
    assert full["test_metric"] == pytest.approx(resumed["test_metric"], rel=1e-6)


def test_finetune_starts_from_pretrained_backbone(tmp_path, monkeypatch):
    pre = train.pretrain(tiny(tmp_path))
    best = checkpoints.load(Path(pre["run_dir"]) / "best.pt")["model"]
    loaded = {}
    original = train.load_pretrained_backbone

    def spy(model, pre_dir):
        original(model, pre_dir)
        loaded.update({k: v.clone() for k, v in model.state_dict().items()})

    monkeypatch.setattr(train, "load_pretrained_backbone", spy)
    result = train.finetune(tiny(tmp_path), pre["run_dir"])
    assert result["status"] == "completed" and result["init_from"] == pre["run_dir"]
    backbone = [k for k in best if k.startswith("backbone.")]
    assert backbone and all(torch.equal(loaded[k], best[k]) for k in backbone)
    assert not any(k.startswith("head.") and k in loaded and loaded[k].shape == best[k].shape
                   and torch.equal(loaded[k], best[k]) for k in best)


def test_finetune_from_a_non_run_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not a finished pretraining run"):
        train.finetune(tiny(tmp_path), tmp_path / "nothing")


def test_non_finite_loss_fails_cleanly(tmp_path):
    result = train.scratch(tiny(tmp_path, "optim.lr=1e30", "optim.warmup_steps=0", "optim.grad_clip=0"))
    assert result["status"] == "failed" and "non-finite loss" in result["reason"]
    saved = files.read_json(Path(result["run_dir"]) / "result.json")
    assert saved["status"] == "failed"


def test_causal_objective_makes_the_model_causal(tmp_path):
    result = train.pretrain(tiny(tmp_path, "objective.kind=causal"))
    assert result["metric"] == "next_accuracy" and result["status"] == "completed"
    saved = config.load(Path(result["run_dir"]) / "config.yaml")
    assert saved.model.causal and saved.objective.mask_ratio == 0.1 and saved.objective.loss == "ce"


def test_train_fraction_subsets_are_nested():
    from sptune.data import train_fraction
    from sptune.tasks.base import Split

    split = Split(torch.arange(1000)[:, None], torch.arange(1000), torch.ones(1000, dtype=torch.long))
    sets = [set(train_fraction(split, f).targets.tolist()) for f in (0.005, 0.01, 0.05, 0.1, 0.5, 1.0)]
    assert [len(s) for s in sets] == [5, 10, 50, 100, 500, 1000]
    assert all(a <= b for a, b in zip(sets, sets[1:]))


def test_ssm_parameters_get_their_own_optimizer_group():
    from sptune.build import build_task_model
    from sptune.registry import get_task

    cfg = config.load(None, ["model.name=s4", "model.d_model=8", "model.d_state=8", "model.ssm_lr=2e-4",
                             "optim.weight_decay=0.1"])
    opt = train.make_optimizer(build_task_model(cfg, get_task("listops-mini")), cfg)
    ssm_groups = [g for g in opt.param_groups if g["lr"] == 2e-4]
    assert ssm_groups and all(g["weight_decay"] == 0.0 for g in ssm_groups)
    assert any(g["weight_decay"] == 0.1 for g in opt.param_groups)


@pytest.mark.parametrize("model", ["transformer", "s4", "dlr"])
def test_bf16_autocast_trains(tmp_path, model):
    result = train.pretrain(tiny(tmp_path, f"model.name={model}", "model.d_state=8", "run.precision=bf16",
                                 "optim.max_steps=4", "optim.eval_every=2"))
    assert result["status"] == "completed" and math.isfinite(result["history"][-1]["train_loss"])
