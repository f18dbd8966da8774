"""The training step waits for the device nowhere: the micro-batch loop creates no tensor from host data, reads
no tensor value on the host and indexes by no mask; targets keep fp32 under bf16 autocast."""

from types import SimpleNamespace

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from sptune import config, registry
from sptune.build import build_pretrain_model, build_task_model
from sptune.run import objectives, runs, train
from sptune.run.data import batch, step_draw

TINY = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16", "model.d_state=8",
        "optim.batch_size=8", "run.progress=false"]
# What makes the host wait for the device, or the device for a host copy: reading a value, data-dependent shapes
# (boolean masks, nonzero), and tensors built from host data (torch.tensor(n, device=cuda)).
SYNCS = {torch.Tensor.item, torch.Tensor.__bool__, torch.Tensor.__int__, torch.Tensor.__float__,
         torch.Tensor.__index__, torch.Tensor.tolist, torch.Tensor.nonzero, torch.nonzero, torch.tensor,
         torch.Tensor.cpu, torch.Tensor.numpy, torch.masked_select, torch.Tensor.masked_select}


class HostSyncs(TorchFunctionMode):
    """Records every torch call above that runs while it is active (forward and loss; backward is autograd's)."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        masked = func is torch.Tensor.__getitem__ and any(
            isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in tree_leaves(args[1:]))  # the index
        if func in SYNCS or masked:
            self.seen.append(getattr(func, "__name__", str(func)) + (" with a boolean mask" if masked else ""))
        return func(*args, **(kwargs or {}))


def step_problem(stage, overrides):
    cfg = config.load(None, TINY + overrides)
    task = registry.get_task(cfg.task.name)
    cfg = runs.resolve(cfg, task, stage)
    x, y, lengths = batch(task.load(seed=0)["train"], torch.arange(8))
    if stage == "pretrain":
        model = build_pretrain_model(cfg.model, cfg.objective, task, mask_channel=False)
    else:
        model = build_task_model(cfg.model, task)
    return cfg, task, model, train.make_problem(cfg, task, stage, x, y, lengths, step_draw(0, 0))


@pytest.mark.parametrize("stage, overrides", [
    ("pretrain", ["model.name=transformer"]), ("pretrain", ["model.name=s4", "optim.accumulate=2"]),
    ("pretrain", ["model.name=transformer", "objective.kind=causal", "optim.accumulate=4"]),
    ("scratch", ["model.name=transformer", "optim.accumulate=2"])])
def test_the_micro_batch_loop_never_syncs(stage, overrides, monkeypatch):
    # The loss an accelerator computes (on the CPU, objectives.indexed_loss keeps the kept records' arithmetic).
    monkeypatch.setattr(train, "denoising_loss", objectives.sync_free_loss)
    cfg, task, model, problem = step_problem(stage, overrides)
    recorder = HostSyncs()
    with recorder:
        loss = train.accumulate_gradients(model, None, cfg, task, stage, problem, torch.device("cpu"))
    assert recorder.seen == []
    assert loss.shape == () and torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("n, parts", [(8, 1), (8, 3), (7, 4), (3, 5), (16, 4)])
def test_micro_batches_are_tensor_splits_slices(n, parts):
    want = [(int(c[0]), int(c[-1]) + 1) for c in torch.arange(n).tensor_split(parts) if len(c)]
    assert train.micro_batches(n, parts) == want


def test_regression_targets_keep_fp32_under_bf16():
    """A bf16 prediction equal to the targets rounded to bf16: the loss is the rounding error, not 0."""
    y = 1.0 + torch.arange(1, 9, dtype=torch.float32) * 1e-3  # (B,) not bf16 numbers
    problem = train.Problem(torch.zeros(8, 4), torch.full((8,), 4), y, None, 1)

    def model(inputs, lengths):
        return y.to(torch.bfloat16)[:, None]  # (B, 1)

    task = SimpleNamespace(is_regression=True)
    loss, terms = train.compute_loss(model, config.load(None, []), task, "scratch", problem)
    assert terms == 8 and loss.dtype == torch.float32
    torch.testing.assert_close(loss, ((y.to(torch.bfloat16).float() - y) ** 2).mean())
    assert loss.item() > 0
