"""Every paper architecture trains: pretrain -> finetune -> scratch on a fixture of its task's shape.

The real datasets are absent here (LRA release, Hugging Face, BIDMC), so each task's loader is replaced
by a tiny fixture with the task's own declared shape (sequence length, input kind, vocabulary or
channels, classes or regression, paired documents). The configs' architectures run as written (block
attention, rotary, S4 DPLR / diagonal, DLR, max pooling, dt ranges), shrunk by the study's smoke
overrides, so a config that cannot build or train its model fails here rather than on a cluster.
"""

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from sptune import config, registry
from sptune.records.studies import SMOKE_OVERRIDES
from sptune.run import train
from sptune.tasks.base import SPECIAL_TOKENS, Split, Task

REPO = Path(__file__).resolve().parents[1]
PAPER_CONFIGS = sorted(p for p in (REPO / "configs").glob("*.yaml") if p.name != "listops_mini_transformer.yaml"
                       and "tiny" not in p.name)
# Two examples per split and two steps per stage: enough to build, train, checkpoint, select and test. In fp32:
# the configs' bf16 autocast is a GPU setting, and on CPU it made a PathX Transformer step 2x slower (18.6 s vs
# 9.5 s per forward + backward at L=16384, one thread); test_train.py trains every model under bf16 autocast.
TINY_RUN = [*SMOKE_OVERRIDES, "optim.max_steps=2", "optim.eval_every=2", "optim.batch_size=2", "optim.epochs=0",
            "task.max_val_examples=2", "task.max_test_examples=2", "run.progress=false", "run.precision=fp32"]


def what_trains(path: Path) -> str:
    """What a config makes the trainer build and run (its model, objective and task shape), as a key.

    Configs that differ only in the task's name or in learning rates (BIDMC's HR / RR / SpO2 share the
    signal shape and each architecture) build the same model on the same inputs: one of them trains here.
    test_config.py loads every config.
    """
    cfg = config.load(path, TINY_RUN).to_dict()
    task = registry.TASKS[cfg["task"]["name"]]
    shape = (task.seq_len, task.input_kind, task.vocab_size, task.channels, task.num_classes, task.paired,
             task.mask_ratio, task.pretrain_loss)
    return repr((cfg["model"], cfg["objective"], shape))


def one_per_architecture(paths: list[Path]) -> list[Path]:
    kept = {}
    for path in paths:
        kept.setdefault(what_trains(path), path)
    return list(kept.values())


def fixture_loader(task: Task):
    """A loader returning 2 train / 2 val / 2 test examples of `task`'s shape (seeded, no files)."""

    def load(task_, data_dir, seed):
        g = torch.Generator().manual_seed(0)
        docs = 2 if task.paired else 1

        def split() -> Split:
            shape = (2, docs, task.seq_len) if task.paired else (2, task.seq_len)
            if task.input_kind == "tokens":
                inputs = torch.randint(len(SPECIAL_TOKENS), task.vocab_size, shape, generator=g)
            else:
                inputs = torch.randn(*shape, task.channels, generator=g)
            targets = (torch.randn(2, generator=g) if task.is_regression
                       else torch.randint(0, task.num_classes, (2,), generator=g))
            lengths = torch.full((2, docs) if task.paired else (2,), task.seq_len, dtype=torch.int64)
            return Split(inputs, targets, lengths)

        return {"train": split(), "val": split(), "test": split()}

    return load


@pytest.mark.slow
@pytest.mark.parametrize("path", one_per_architecture(PAPER_CONFIGS), ids=lambda p: p.stem)
def test_paper_config_trains_every_stage_on_a_fixture(path, tmp_path, monkeypatch):
    cfg = config.load(path, TINY_RUN + [f"run.out_dir={tmp_path}"], stage="scratch")
    task = registry.TASKS[cfg.task.name]
    monkeypatch.setitem(registry.TASKS, task.name, replace(task, loader=fixture_loader(task)))
    overrides = TINY_RUN + [f"run.out_dir={tmp_path}"]
    pre = train.pretrain(config.load(path, overrides, stage="pretrain"))
    fine = train.finetune(config.load(path, overrides, stage="finetune"), pre["run_dir"])
    scratch = train.scratch(config.load(path, overrides, stage="scratch"))
    for result in (pre, fine, scratch):
        assert result["status"] == "completed", (result["stage"], result.get("reason"))
        assert result["steps"] == 2 and result["test_metric"] is not None and result["train_flops"] > 0
    assert fine["init_from"] == pre["run_dir"]
