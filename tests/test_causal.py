"""Causal models never see the future: d output[t] / d input[t'] == 0 for every t' > t, in training mode too."""

import pytest
import torch

from sptune import config
from sptune.build import build_backbone
from sptune.errors import UserError
from sptune.registry import MODELS, get_task
from sptune.run import runs
from sptune.tasks.base import Task


def continuous_task(L):
    return Task(name="toy", seq_len=L, input_kind="continuous", num_classes=2, metric="accuracy", mask_ratio=0.25,
                pretrain_loss="l1", loader=lambda *a: {}, channels=3)


def future_leak(backbone, L, times=(0, 5)):
    """max over t of |d out[t] / d x[> t]| relative to |d out[t] / d x[<= t]| (batch of 2: BatchNorm trains)."""
    x = torch.randn(2, L, 3, requires_grad=True)
    torch.manual_seed(1)  # one dropout mask for the whole pass
    out = backbone(x)  # (2, L, D)
    probe = torch.randn(out.shape[-1])  # a plain sum of a LayerNorm output is constant: project instead
    leak = 0.0
    for t in (*times, L - 2):
        (grad,) = torch.autograd.grad(out[0, t] @ probe, x, retain_graph=True)
        past = grad[0, : t + 1].abs().max()
        assert past > 0
        leak = max(leak, (grad[0, t + 1:].abs().max() / past).item())
    return leak


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_causal_backbone_has_no_future_leak(model, mode):
    L = 24
    cfg = config.load(None, [f"model.name={model}", "model.causal=true", "model.norm=layer", "model.d_model=16",
                             "model.n_heads=2", "model.d_state=8", "model.n_layers=2", "model.pos_encoding=rotary",
                             "model.dropout=0.1"])
    torch.manual_seed(0)
    backbone = build_backbone(cfg.model, continuous_task(L), mask_channel=False).train(mode == "train")
    # FFT convolution (S4, DLR) leaves float round-off (~1e-9) at future lags: a leak would be O(past).
    assert future_leak(backbone, L) <= 1e-5, f"{model} ({mode} mode): an output depends on the future"


def test_batch_norm_leaks_the_future_in_training_mode():
    """Why a causal model may not use BatchNorm: its batch statistics span every position."""
    cfg = config.Config()
    cfg.model.causal, cfg.model.norm, cfg.model.d_model, cfg.model.d_state = True, "batch", 16, 8
    cfg.model.name = "s4"
    torch.manual_seed(0)
    backbone = build_backbone(cfg.model, continuous_task(24), mask_channel=False)
    assert future_leak(backbone.eval(), 24) <= 1e-5  # running statistics: per position, causal
    assert future_leak(backbone.train(), 24) > 1e-3  # batch statistics: the future leaks in


def test_causal_model_with_batch_norm_is_refused(tmp_path):
    with pytest.raises(UserError, match="model.norm=batch mixes positions across the sequence, so a causal model "
                                        "would see the future; use model.norm=layer"):
        config.load(None, ["model.causal=true", "model.norm=batch"])
    # Causal SPT makes the pretrained model causal: refused at load for the pretraining stage ...
    with pytest.raises(UserError, match="objective.kind=causal pretraining with model.norm=batch"):
        config.load(None, ["objective.kind=causal", "model.norm=batch"], stage="pretrain")
    # ... and where runs.resolve sets model.causal, for a config that did not say its stage.
    cfg = config.load(None, ["objective.kind=causal", "model.norm=batch", f"run.out_dir={tmp_path}"])
    with pytest.raises(UserError, match="use model.norm=layer"):
        runs.resolve(cfg, get_task("listops-mini"), "pretrain")
    # Scratch training of the same config is bidirectional: BatchNorm is fine there.
    assert not runs.resolve(cfg, get_task("listops-mini"), "scratch").model.causal


@pytest.mark.parametrize("model", ["transformer", "s4", "dlr"])
def test_bidirectional_backbone_sees_the_future(model):
    cfg = config.load(None, [f"model.name={model}", "model.d_model=16", "model.n_heads=2", "model.d_state=8"])
    backbone = build_backbone(cfg.model, continuous_task(16), mask_channel=False).eval()
    x = torch.randn(1, 16, 3, requires_grad=True)
    out = backbone(x)
    (grad,) = torch.autograd.grad(out[0, 0] @ torch.randn(out.shape[-1]), x)
    assert grad[0, 1:].abs().max() > 0
