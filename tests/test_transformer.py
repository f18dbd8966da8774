"""Attention layer: SDPA and block-local attention against naive references, causality,
linear memory of block attention, rotary relative positions and positional encodings."""

import logging
import math

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

from sptune.errors import UserError
from sptune.models import transformer
from sptune.models.transformer import (
    PositionalEncoding,
    RotaryEmbedding,
    SelfAttention,
    block_attention,
    sinusoidal_table,
)

D, H = 16, 2


def naive_attention(q, k, v, mask):
    """softmax(Q K^T / sqrt(d) + mask) V with an explicit (L, L) boolean mask (True = attend)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, L, L)
    scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v  # (B, H, L, hd)


def neighbour_mask(L, w, causal):
    """(L, L) mask of §2 block attention: query block i sees key blocks i-1, i, i+1 (i-1, i if causal)."""
    qb = torch.arange(L)[:, None] // w
    kb = torch.arange(L)[None, :] // w
    if causal:
        return (qb - kb >= 0) & (qb - kb <= 1) & (torch.arange(L)[None, :] <= torch.arange(L)[:, None])
    return (qb - kb).abs() <= 1


def naive_self_attention(layer, x, mask):
    """The layer's own projections and rotary, with naive masked attention in between."""
    B, L, _ = x.shape
    q, k, v = layer.qkv(x).view(B, L, 3, layer.n_heads, layer.head_dim).permute(2, 0, 3, 1, 4)
    if layer.rotary is not None:
        q, k = layer.rotary(q, k)
    y = naive_attention(q, k, v, mask)
    return layer.proj(y.transpose(1, 2).reshape(B, L, -1))


def full_mask(L, causal):
    return torch.ones(L, L, dtype=torch.bool).tril() if causal else torch.ones(L, L, dtype=torch.bool)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rotary", [False, True])
def test_full_attention_matches_naive(causal, rotary):
    torch.manual_seed(0)
    layer = SelfAttention(D, H, causal=causal, rotary=rotary, backend="sdpa")
    x = torch.randn(3, 23, D)
    torch.testing.assert_close(layer(x), naive_self_attention(layer, x, full_mask(23, causal)))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rotary", [False, True])
def test_block_attention_matches_neighbour_mask(causal, rotary):
    torch.manual_seed(0)
    L, w = 37, 8  # 37 is not a multiple of 8: the tail block is padded
    layer = SelfAttention(D, H, causal=causal, rotary=rotary, attention="block", block_size=w)
    x = torch.randn(2, L, D)
    torch.testing.assert_close(layer(x), naive_self_attention(layer, x, neighbour_mask(L, w, causal)))


@pytest.mark.parametrize("causal", [False, True])
def test_block_attention_is_local(causal):
    # the neighbour mask really restricts attention: it differs from full attention when L > 2w
    torch.manual_seed(0)
    layer = SelfAttention(D, H, causal=causal, attention="block", block_size=4)
    x = torch.randn(1, 20, D)
    full = naive_self_attention(layer, x, full_mask(20, causal))
    assert not torch.allclose(layer(x), full, atol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L", [16, 11])
def test_block_equals_full_when_one_block(causal, L):
    torch.manual_seed(0)
    full = SelfAttention(D, H, causal=causal, rotary=True)
    block = SelfAttention(D, H, causal=causal, rotary=True, attention="block", block_size=16)
    block.load_state_dict(full.state_dict())
    x = torch.randn(2, L, D)
    torch.testing.assert_close(block(x), full(x))


@pytest.mark.parametrize("causal", [False, True])
def test_block_attention_function_one_block_is_full(causal):
    # the blocked code path itself (not the L <= w shortcut of SelfAttention) with a single block
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, H, 13, 8)
    expected = naive_attention(q, k, v, full_mask(13, causal))
    torch.testing.assert_close(block_attention(q, k, v, 13, causal), expected)
    torch.testing.assert_close(block_attention(q, k, v, 20, causal), expected)


@pytest.mark.parametrize("attention", ["full", "block"])
def test_causal_gradient_is_exactly_zero_for_future_inputs(attention):
    torch.manual_seed(0)
    L = 19
    layer = SelfAttention(D, H, causal=True, rotary=True, attention=attention, block_size=4)
    x = torch.randn(1, L, D)
    jac = torch.autograd.functional.jacobian(lambda inp: layer(inp), x)  # (1, L, D, 1, L, D)
    dep = jac[0, :, :, 0].abs().sum(dim=(1, 3))  # (L_out, L_in)
    future = torch.ones(L, L, dtype=torch.bool).triu(diagonal=1)
    assert (dep[future] == 0).all()
    assert (dep.diagonal() > 0).all()
    if attention == "block":
        # and nothing older than the left neighbour block
        assert (dep[~neighbour_mask(L, 4, causal=True)] == 0).all()


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any aten op produces (under the math SDPA backend the score
    matrix is an ordinary tensor, so an L x L intermediate would show up here)."""

    def __init__(self):
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.numel = max(self.numel, t.numel())
        return out


def largest_tensor(layer, L):
    x = torch.randn(1, L, D)
    mode = LargestTensor()
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), mode:
        layer(x)
    return mode.numel


@pytest.mark.parametrize("causal", [False, True])
def test_block_attention_memory_is_linear_in_length(causal):
    w = 128
    block = SelfAttention(D, H, causal=causal, attention="block", block_size=w)
    full = SelfAttention(D, H, causal=causal)
    b1, b2 = largest_tensor(block, 2048), largest_tensor(block, 4096)
    f1, f2 = largest_tensor(full, 2048), largest_tensor(full, 4096)
    assert f2 / f1 == pytest.approx(4.0)  # the probe does see quadratic scores...
    assert b2 / b1 <= 2.0  # ...and nothing in block attention grows faster than L
    assert b2 <= H * 4096 * 3 * w  # at most (H, nblocks, w, 3w) scores, far below an L x L matrix
    assert b2 < 4096 * 4096


def test_rotary_scores_depend_only_on_relative_position():
    torch.manual_seed(0)
    L, hd = 32, 8
    rot = RotaryEmbedding(hd)
    q = torch.randn(hd).expand(1, 1, L, hd)  # the same query and key vector at every position
    k = torch.randn(hd).expand(1, 1, L, hd)
    rq, rk = rot(q, k)
    scores = (rq @ rk.transpose(-2, -1))[0, 0]  # (L, L), scores[m, n] = <R_m q, R_n k>
    # Toeplitz: shifting both positions keeps the score
    torch.testing.assert_close(scores[1:, 1:], scores[:-1, :-1])
    # rotations preserve norms, and positions do matter
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))
    assert scores[0].std() > 1e-3
    # position 0 is not rotated
    torch.testing.assert_close(rq[0, 0, 0], q[0, 0, 0])


def test_positional_encoding_kinds():
    torch.manual_seed(0)
    x = torch.randn(2, 10, 6)
    for kind in ("rotary", "none"):
        assert PositionalEncoding(kind, 10, 6)(x) is x
    learned = PositionalEncoding("learned", 16, 6)
    assert learned.pos.requires_grad and learned.pos.shape == (16, 6)
    torch.testing.assert_close(learned(x), x + learned.pos[:10])
    sin = PositionalEncoding("sinusoidal", 16, 6)
    assert not any(True for _ in sin.parameters()) and "pos" not in sin.state_dict()
    torch.testing.assert_close(sin(x), x + sinusoidal_table(16, 6)[:10])
    table = sinusoidal_table(16, 5)  # odd width: sin on even dims, cos on odd ones
    pos, i = 3, 1
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 5)))
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / 5)))


def test_user_errors():
    with pytest.raises(UserError, match="max_len"):
        PositionalEncoding("learned", 8, 6)(torch.randn(1, 9, 6))
    with pytest.raises(UserError, match="unknown positional"):
        PositionalEncoding("alibi", 8, 6)
    with pytest.raises(UserError, match="divisible"):
        SelfAttention(10, 3)
    with pytest.raises(UserError, match="even head"):
        SelfAttention(6, 2, rotary=True)
    with pytest.raises(UserError, match="unknown attention"):
        SelfAttention(D, H, attention="sparse")
    with pytest.raises(UserError, match="backend"):
        SelfAttention(D, H, backend="xformers")


def test_flash_request_falls_back_to_sdpa_and_logs_once(caplog, monkeypatch):
    monkeypatch.setattr(transformer, "_logged", set())  # forget what earlier tests logged
    monkeypatch.setattr(transformer, "flash_attn_func", None)  # not installed, on a GPU node too
    layer = SelfAttention(D, H, backend="flash")
    x = torch.randn(1, 5, D)
    with caplog.at_level(logging.INFO, logger="sptune.models.transformer"):
        layer(x)
        layer(x)
        SelfAttention(D, H, backend="flash")(x)  # another layer: still logged once
    # logged when the layers are built (forward logs nothing): flash-attn is not there, the layer uses SDPA
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "not the requested flash-attn" in warnings[0].getMessage()
    torch.testing.assert_close(layer(x), naive_self_attention(layer, x, full_mask(5, False)))


def test_dropout_only_in_training():
    torch.manual_seed(0)
    layer = SelfAttention(D, H, dropout=0.5, attention="block", block_size=4)
    x = torch.randn(1, 12, D)
    layer.eval()
    torch.testing.assert_close(layer(x), layer(x))
    layer.train()
    assert not torch.allclose(layer(x), layer(x))


def fake_flash_attn(calls):
    """Stands in for flash_attn_func on CPU: checks its contract (half precision, (B, L, H, hd) layout,
    bottom-right causal) and computes the same attention in fp32."""

    def flash(q, k, v, dropout_p, causal):
        assert q.dtype in (torch.float16, torch.bfloat16) and k.dtype == v.dtype == q.dtype
        calls.append(q.dtype)
        q, k, v = (t.float().transpose(1, 2) for t in (q, k, v))  # (B, H, L, hd)
        Lq, Lk = q.shape[-2], k.shape[-2]
        mask = torch.ones(Lq, Lk, dtype=torch.bool)
        if causal:
            mask = mask.tril(diagonal=Lk - Lq)
        return naive_attention(q, k, v, mask).transpose(1, 2).to(calls[-1])  # (B, L, H, hd)

    return flash


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("attention", ["full", "block"])
def test_flash_request_casts_fp32_to_half_around_the_call(monkeypatch, causal, attention):
    calls = []
    monkeypatch.setattr(transformer, "flash_attn_func", fake_flash_attn(calls))
    monkeypatch.setattr(transformer, "is_cuda", lambda t: True)  # no GPU here: pretend q is on one
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # fp16, as on a GPU without bf16, on any node
    torch.manual_seed(0)
    layer = SelfAttention(D, H, causal=causal, attention=attention, block_size=4, backend="flash")
    x = torch.randn(2, 10, D)
    y = layer(x)
    assert y.dtype == torch.float32 and calls and set(calls) == {torch.float16}
    mask = neighbour_mask(10, 4, causal) if attention == "block" else full_mask(10, causal)
    torch.testing.assert_close(y, naive_self_attention(layer, x, mask), atol=5e-3, rtol=5e-3)  # fp16 rounding


def test_auto_backend_uses_flash_for_half_inputs_only(monkeypatch):
    calls = []
    monkeypatch.setattr(transformer, "flash_attn_func", fake_flash_attn(calls))
    monkeypatch.setattr(transformer, "is_cuda", lambda t: True)
    layer = SelfAttention(D, H)
    x = torch.randn(1, 6, D)
    layer(x)
    assert calls == []  # fp32 under "auto": SDPA, the numerics the user asked for
    y = layer.to(torch.bfloat16)(x.to(torch.bfloat16))
    assert calls == [torch.bfloat16] and y.dtype == torch.bfloat16


class AttentionOps(TorchDispatchMode):
    """Records the attention / softmax ops that run."""

    def __init__(self):
        super().__init__()
        self.ops = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if "attention" in name or "softmax" in name:
            self.ops.add(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("attention", ["full", "block"])
def test_cpu_fp32_training_takes_the_fused_sdpa_kernel(causal, attention):
    """No dropout: forward and backward run torch's fused CPU flash kernel, never an explicit softmax over
    (B, H, L, L) scores (a mask, is_causal or layout change must not push SDPA to its math path)."""
    layer = SelfAttention(D, H, causal=causal, attention=attention, block_size=8).train()
    x = torch.randn(2, 32, D, requires_grad=True)
    recorder = AttentionOps()
    with recorder:
        layer(x).sum().backward()
    assert recorder.ops == {"aten._scaled_dot_product_flash_attention_for_cpu",
                            "aten._scaled_dot_product_flash_attention_for_cpu_backward"}
