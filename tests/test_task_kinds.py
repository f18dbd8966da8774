"""Pretrain -> finetune on every kind of task input/output, with small synthetic tasks:
continuous channels (mask-indicator column dropped at finetune), regression (R²), paired retrieval."""

from pathlib import Path

import pytest
import torch

from sptune import config, registry
from sptune.run import checkpoints, train
from sptune.tasks.base import Split, Task

TINY = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16", "model.d_state=8",
        "optim.batch_size=8", "optim.max_steps=6", "optim.eval_every=3", "run.progress=false"]


def _continuous(task, data_dir, seed):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 32, 2, generator=g)
    y = x[:, :, 0].mean(1) if task.is_regression else (x[:, :, 0].mean(1) > 0).long()
    split = Split(x, y, torch.full((48,), 32))
    return {"train": split, "val": split.subset(torch.arange(16)), "test": split.subset(torch.arange(16, 32))}


def _paired(task, data_dir, seed):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(3, 20, (40, 2, 24), generator=g)
    lengths = torch.randint(8, 25, (40, 2), generator=g)
    split = Split(x, (x[:, 0, 0] == x[:, 1, 0]).long(), lengths)
    return {"train": split, "val": split.subset(torch.arange(16)), "test": split.subset(torch.arange(16, 32))}


TASKS = {
    "toy-signal": Task(name="toy-signal", seq_len=32, input_kind="continuous", num_classes=2, metric="accuracy",
                       mask_ratio=0.25, pretrain_loss="l1", loader=_continuous, channels=2),
    "toy-regression": Task(name="toy-regression", seq_len=32, input_kind="continuous", num_classes=0, metric="r2",
                           mask_ratio=0.25, pretrain_loss="l1", loader=_continuous, channels=2),
    "toy-retrieval": Task(name="toy-retrieval", seq_len=24, input_kind="tokens", num_classes=2, metric="accuracy",
                          mask_ratio=0.15, pretrain_loss="ce", loader=_paired, vocab_size=20, paired=True),
}


@pytest.fixture(autouse=True)
def toy_tasks(monkeypatch):
    monkeypatch.setattr(registry, "TASKS", {**registry.TASKS, **TASKS})


@pytest.mark.parametrize("task", sorted(TASKS))
@pytest.mark.parametrize("model", ["transformer", "s4d-lin", "dlr"])
def test_pretrain_then_finetune(tmp_path, task, model):
    cfg = config.load(None, TINY + [f"task.name={task}", f"model.name={model}", f"run.out_dir={tmp_path}"])
    pre = train.pretrain(cfg)
    assert pre["status"] == "completed"
    assert pre["metric"] == ("masked_r2" if TASKS[task].input_kind == "continuous" else "masked_accuracy")
    fine = train.finetune(cfg, pre["run_dir"])
    assert fine["status"] == "completed" and fine["metric"] == TASKS[task].metric
    assert fine["test_metric"] == fine["test_metric"]  # not NaN


def test_mask_indicator_column_is_dropped_at_finetune(tmp_path, monkeypatch):
    cfg = config.load(None, TINY + ["task.name=toy-signal", f"run.out_dir={tmp_path}"])
    pre = train.pretrain(cfg)
    weight = checkpoints.load(Path(pre["run_dir"]) / "best.pt")["model"][
        "backbone.encoder.embed.weight"]
    assert weight.shape == (16, 3)  # 2 channels + the mask indicator
    seen = {}
    original = train.load_pretrained_backbone

    def spy(model, pre_dir):
        original(model, pre_dir)
        seen["weight"] = model.backbone.encoder.embed.weight.detach().clone()

    monkeypatch.setattr(train, "load_pretrained_backbone", spy)
    train.finetune(cfg, pre["run_dir"])
    assert torch.equal(seen["weight"], weight[:, :2])
