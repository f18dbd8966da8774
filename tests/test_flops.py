"""FLOPs that compare architectures: counted matmuls, attention and FFTs, plus analytic SSM kernel terms."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from sptune import config, flops
from sptune.build import build_pretrain_model
from sptune.models.s4 import S4Layer
from sptune.registry import get_task
from sptune.run import runs, train
from sptune.tasks.base import Task


def token_task(L):
    return Task(name="toy", seq_len=L, input_kind="tokens", num_classes=2, metric="accuracy", mask_ratio=0.15,
                pretrain_loss="ce", loader=lambda *a: {}, vocab_size=18)


def pretrain_model(name, L, *extra):
    cfg = config.load(None, [f"model.name={name}", "model.d_model=16", "model.n_layers=2", "model.n_heads=2",
                             "model.d_ff=32", "model.d_state=8", "objective.loss=ce", *extra])
    torch.manual_seed(0)
    return build_pretrain_model(cfg.model, cfg.objective, token_task(L), mask_channel=False)


def per_example(model, L):
    return flops.measure(model, torch.randint(3, 18, (1, L)), torch.full((1,), L), L)


class Dense(nn.Module):
    """Embedding -> Linear -> GELU -> Linear: every parameter but the (small) embedding is a matmul weight."""

    def __init__(self, d=128, d_ff=512):
        super().__init__()
        self.embed = nn.Embedding(18, d)
        self.ff = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))

    def forward(self, x, lengths):
        return self.ff(self.embed(x))  # (B, L, D)


def test_dense_model_matches_6_n_tokens():
    L = 64
    model = Dense()
    cost = flops.measure(model, torch.randint(0, 18, (1, L)), torch.full((1,), L), L)
    n_params = sum(p.numel() for p in model.parameters())
    assert cost.train_example == pytest.approx(6 * n_params * L, rel=0.03)  # biases, embedding: ~2%
    assert cost.forward_example == pytest.approx(2 * n_params * L, rel=0.03)
    assert cost.train_call == 0 and cost.forward_call == 0  # nothing independent of the batch


def test_attention_forward_is_4_b_l2_d():
    B, H, L, hd = 2, 2, 64, 8
    q, k, v = (torch.randn(B, H, L, hd) for _ in range(3))  # CPU: SDPA runs its flash kernel, registered here
    assert flops.count(lambda: F.scaled_dot_product_attention(q, k, v)) == 4 * B * L**2 * (H * hd)
    # In a model (measured on meta, SDPA's math path): forward = the linear layers + 4 L^2 D per layer.
    L, D, layers = 128, 16, 2
    model = pretrain_model("transformer", L)
    dense = sum(2 * m.in_features * m.out_features * L for m in model.modules() if isinstance(m, nn.Linear))
    assert per_example(model, L).forward_example - dense == layers * 4 * L**2 * D


def test_fft_uses_the_5_n_log2_n_convention():
    x = torch.randn(3, 5, 64)
    assert flops.count(lambda: torch.fft.rfft(x, n=128)) == 2.5 * 128 * 7 * 15  # real data: half of 5 n log2 n
    z = torch.randn(4, 32, dtype=torch.cfloat)
    assert flops.count(lambda: torch.fft.fft(z)) == 5 * 32 * 5 * 4


def test_attention_is_quadratic_and_ssm_convolution_is_l_log_l_at_fixed_tokens():
    """Per token, a Transformer's cost grows ~linearly with L (attention, 4 L^2 d per sequence); an SSM's
    grows only by the log L of its FFTs. Per example: x16 vs x4 for 4x longer sequences."""
    ratios = {name: per_example(pretrain_model(name, 1024), 1024).train_example
              / per_example(pretrain_model(name, 256), 256).train_example for name in ("transformer", "s4", "dlr")}
    assert ratios["transformer"] > 12  # attention dominates at d_model 16
    fft_ratio = 4 * math.log2(2 * 1024) / math.log2(2 * 256)  # FFTs of length 2L: 4.89
    for name in ("s4", "dlr"):
        assert 4.05 < ratios[name] < fft_ratio  # linear layers x4, FFTs x4.89


def test_ssm_kernel_generation_is_priced_per_call():
    L = 256
    s4, transformer = per_example(pretrain_model("s4", L), L), per_example(pretrain_model("transformer", L), L)
    assert transformer.train_call == 0
    kernels = flops.kernel_flops(pretrain_model("s4", L), L)
    layer = S4Layer(16, d_state=8, bidirectional=True)
    assert kernels == 2 * layer.kernel_flops(L) > 0
    # Forward + backward of the kernels (3x) plus the kernels' own FFTs, which the counter counts.
    assert s4.train_call > 3 * kernels and s4.forward_call > kernels
    # The DPLR kernel is Cauchy sums at L//2 + 1 nodes (C~ is trained: no dense dA^L), so just under 2x at 2L.
    assert layer.kernel_flops(2 * L) < 2 * layer.kernel_flops(L)


def test_measuring_leaves_rng_and_model_untouched():
    model = pretrain_model("s4", 64, "model.norm=batch", "model.dropout=0.1").train()
    before = {k: v.clone() for k, v in model.state_dict().items()}  # incl. BatchNorm running statistics
    x = torch.randint(3, 18, (1, 64))
    rng = torch.get_rng_state()
    flops.measure(model, x, torch.full((1,), 64), 64)  # dropout on meta tensors would draw: it must not show
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters()) and model.training


def test_run_reports_counted_flops_and_eval_cost(tmp_path):
    cfg = config.load(None, ["model.name=s4", "model.d_model=16", "model.n_layers=1", "model.d_state=8",
                             "model.d_ff=0", "optim.batch_size=8", "optim.max_steps=4", "optim.eval_every=2",
                             "task.max_val_examples=16", "task.max_test_examples=16", "run.progress=false",
                             f"run.out_dir={tmp_path}"])
    result = train.pretrain(cfg)
    task = get_task("listops-mini")
    resolved = runs.resolve(cfg, task, "pretrain")
    model = build_pretrain_model(resolved.model, resolved.objective, task, mask_channel=False)
    cost = per_example(model, 256)
    # 4 steps of 8 examples; 3 eval passes (2 val, 1 test) of 16 examples in batches of 8.
    assert result["examples_seen"] == 32
    assert result["train_flops"] == pytest.approx(cost.train(32, 4))
    assert result["eval_flops"] == pytest.approx(cost.forward(48, 6))
    assert result["device_seconds"] == pytest.approx(result["train_seconds"] + result["eval_seconds"])
    assert result["eval_seconds"] > 0 and "flops_estimate" not in result
