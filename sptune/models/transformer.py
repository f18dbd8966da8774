"""Transformer sequence mixing: positional encodings and multi-head self-attention.

The paper's Transformers use "full attention as default with the hardware-optimized FLASH
implementation (Dao et al., 2022)", and "for tasks with sequence length at least 16K we split
the input to the attention layer into non-overlapping blocks of size 4096 and allow each block
to attend to itself and its neighbour(s)" (§2; 4000 for Speech Commands, §4). SelfAttention
does both; positions come from a learned or sinusoidal table added to the input, or from rotary
embeddings applied to queries and keys (Su et al., 2021, RoFormer).

SelfAttention is only the sequence-mixing layer: the backbone owns norms and residuals.
"""

from __future__ import annotations

import logging
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from sptune.errors import UserError

try:
    from flash_attn import flash_attn_func
except ImportError:  # optional: SDPA computes the same attention, only slower on long inputs
    flash_attn_func = None

logger = logging.getLogger(__name__)  # "sptune.models.transformer"

POSITIONAL_KINDS = ("learned", "sinusoidal", "rotary", "none")
ATTENTION_KINDS = ("full", "block")
BACKENDS = ("auto", "flash", "sdpa")

_logged: set[str] = set()  # messages already logged: every layer of every model shares them


def _log_once(level: int, message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        logger.log(level, message)


# -----------------------------------------------------------------------------
# positions


def sinusoidal_table(max_len: int, d_model: int) -> torch.Tensor:
    """(max_len, d_model) sine/cosine positions of Vaswani et al. (2017): sin on even, cos on odd dims."""
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    angles = pos * inv_freq  # (L, ceil(D/2))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])  # odd D: one fewer cosine than sine
    return table


class PositionalEncoding(nn.Module):
    """Absolute positions added to the input embeddings; identity for "rotary" (applied inside
    attention) and "none"."""

    def __init__(self, kind: str, max_len: int, d_model: int):
        super().__init__()
        if kind not in POSITIONAL_KINDS:
            raise UserError(f"unknown positional encoding {kind!r}; choose one of {', '.join(POSITIONAL_KINDS)}")
        self.kind = kind
        self.max_len = max_len
        if kind == "learned":
            self.pos = nn.Parameter(torch.randn(max_len, d_model) * 0.02)  # (max_len, D), GPT-2 style init
        elif kind == "sinusoidal":
            # recomputed on construction, so not saved in checkpoints
            self.register_buffer("pos", sinusoidal_table(max_len, d_model), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind in ("rotary", "none"):
            return x
        L = x.shape[1]
        if L > self.max_len:
            raise UserError(f"sequence length {L} exceeds the positional table ({self.max_len}); raise max_len")
        return x + self.pos[:L].to(x.dtype)  # (B, L, D) + (L, D)


class RotaryEmbedding(nn.Module):
    """RoFormer (Su et al., 2021): rotate each pair of query/key dims by an angle proportional to the
    position, so q_m . k_n depends on m - n only. Pairs are (i, i + head_dim/2), the rotate-half
    layout of GPT-NeoX, a permutation of the paper's adjacent pairs with the same scores."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise UserError(f"rotary positions need an even head dimension, got {head_dim}; change d_model or n_heads")
        inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # (hd/2,)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        L = q.shape[-2]
        pos = torch.arange(L, device=q.device, dtype=torch.float32)
        angles = pos[:, None] * self.inv_freq  # (L, hd/2)
        cos, sin = angles.cos(), angles.sin()
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.float().chunk(2, dim=-1)  # (B, H, L, hd/2) each; fp32 so long positions keep precision
        out = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)  # (B, H, L, hd)
        return out.to(x.dtype)


# -----------------------------------------------------------------------------
# attention


HALF = (torch.float16, torch.bfloat16)


def flash_dtype(q: torch.Tensor) -> torch.dtype:
    """The half precision flash-attn runs in: q's own, else bf16 (fp32's exponent range) where the GPU has
    it, else fp16."""
    if q.dtype in HALF:
        return q.dtype
    bf16 = is_cuda(q) and torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    return torch.bfloat16 if bf16 else torch.float16


def is_cuda(t: torch.Tensor) -> bool:
    """Whether t lives on a CUDA device (one place, so tests can stand in for a GPU)."""
    return t.is_cuda


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, dropout_p: float, flash: bool
) -> torch.Tensor:
    """softmax(q k^T / sqrt(hd)) v through flash-attn or SDPA.

    q: (B, H, Lq, hd), k, v: (B, H, Lk, hd) with Lq <= Lk -> (B, H, Lq, hd). `causal` aligns the
    last query with the last key (bottom-right), so a query block can see earlier key blocks.
    flash-attn runs in half precision: fp32 inputs are cast for the call and the output cast back.
    """
    dtype = q.dtype
    if flash:  # flash-attn >= 2.1 aligns causal masks bottom-right
        half = flash_dtype(q)  # flash-attn computes in fp16 / bf16 only: cast around the call
        q, k, v = (t.transpose(1, 2).to(half) for t in (q, k, v))  # (B, L, H, hd), flash-attn's layout
        y = flash_attn_func(q, k, v, dropout_p=dropout_p, causal=causal)  # (B, Lq, H, hd)
        return y.transpose(1, 2).to(dtype)  # (B, H, Lq, hd) in the caller's dtype
    Lq, Lk = q.shape[-2], k.shape[-2]
    if causal and Lq != Lk:
        # is_causal would align top-left; an explicit (Lq, Lk) mask is at most (w, 2w) for a block
        mask = torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).tril(diagonal=Lk - Lq)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=causal)


def block_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    block_size: int,
    causal: bool,
    dropout_p: float = 0.0,
    flash: bool = False,
) -> torch.Tensor:
    """Block-local attention of §2: the input is split into non-overlapping blocks of `block_size`
    and each block attends to itself and its neighbour(s): blocks i-1, i, i+1, or i-1, i when
    causal. The keys of a block are one contiguous slice, so each block is one attention call on
    at most (w, 3w) scores: memory grows linearly in L and no L x L tensor is ever built. A short
    last block needs no padding, and a single block (L <= w) is full attention.

    q, k, v: (B, H, L, hd) -> (B, H, L, hd)
    """
    L = q.shape[-2]
    w = block_size
    out = []
    for start in range(0, L, w):
        stop = min(start + w, L)
        k_start = max(0, start - w)  # left neighbour
        k_stop = stop if causal else min(L, stop + w)  # right neighbour only when bidirectional
        ks, vs = k[:, :, k_start:k_stop], v[:, :, k_start:k_stop]  # (B, H, <=3w, hd)
        out.append(attend(q[:, :, start:stop], ks, vs, causal, dropout_p, flash))  # (B, H, <=w, hd)
    return torch.cat(out, dim=2)  # (B, H, L, hd)


class SelfAttention(nn.Module):
    """Multi-head self-attention: full (flash-attn when possible, else SDPA) or block-local."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        causal: bool = False,
        rotary: bool = False,
        attention: str = "full",
        block_size: int = 4096,
        dropout: float = 0.0,
        backend: str = "auto",
    ):
        super().__init__()
        if d_model % n_heads:
            raise UserError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        if attention not in ATTENTION_KINDS:
            raise UserError(f"unknown attention {attention!r}; choose one of {', '.join(ATTENTION_KINDS)}")
        if backend not in BACKENDS:
            raise UserError(f"unknown attention backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        if block_size < 1:
            raise UserError(f"block_size must be positive, got {block_size}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.causal = causal
        self.attention = attention
        self.block_size = block_size
        self.dropout = dropout  # on the attention weights; the backbone drops the residual branch
        self.backend = backend
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.rotary = RotaryEmbedding(self.head_dim) if rotary else None

    def backend_used(self, cuda: bool, dtype: torch.dtype) -> str:
        """'attention flash-attn' or 'attention sdpa': the choice forward makes for q on CUDA or not, of dtype
        (sptune.provenance records it)."""
        return "attention flash-attn" if self._flash_why(cuda, dtype) is None else "attention sdpa"

    def _flash_why(self, cuda: bool, dtype: torch.dtype) -> str | None:
        """None when flash-attn runs: it needs the package and a CUDA tensor. "auto" uses it for half-precision
        inputs (autocast); "flash" also for fp32 ones, which attend() casts to half precision around the call.
        Otherwise why SDPA runs instead."""
        if self.backend == "sdpa":
            return "requested"
        if flash_attn_func is None:
            return "flash-attn not installed"
        if not cuda:
            return "input is not on CUDA"
        if dtype not in HALF and self.backend != "flash":
            return f"input is {dtype}; backend='flash' casts it to half precision"
        return None

    def _use_flash(self, q: torch.Tensor) -> bool:
        """Whether forward calls flash-attn for q, logged once per decision."""
        why = self._flash_why(is_cuda(q), q.dtype)
        if why is None:
            cast = "" if q.dtype in HALF else f" ({q.dtype} inputs cast to {flash_dtype(q)} for the call)"
            _log_once(logging.INFO, f"attention backend: flash-attn{cast}")
        elif self.backend == "sdpa":
            _log_once(logging.INFO, "attention backend: sdpa (requested)")
        elif self.backend == "flash":  # asked for explicitly: say loudly that it is not used
            _log_once(logging.WARNING, f"attention backend: sdpa, not the requested flash-attn ({why})")
        else:
            _log_once(logging.INFO, f"attention backend: sdpa ({why}; flash-attn needs CUDA)")
        return why is None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # 3 x (B, H, L, hd)
        if self.rotary is not None:
            q, k = self.rotary(q, k)  # absolute positions 0..L-1, before any blocking
        dropout_p = self.dropout if self.training else 0.0
        flash = self._use_flash(q)  # q, not x: under autocast the projections already run in half precision
        if dropout_p > 0 and not flash and not is_cuda(q):
            # torch's fused CPU kernel has no dropout: SDPA falls back to its math path
            _log_once(logging.INFO, "attention dropout > 0 in training: SDPA's CPU math path, (B, H, L, L) scores")
        if self.attention == "block":
            y = block_attention(q, k, v, self.block_size, self.causal, dropout_p, flash)  # (B, H, L, hd)
        else:
            y = attend(q, k, v, self.causal, dropout_p, flash)  # (B, H, L, hd)
        y = y.transpose(1, 2).reshape(B, L, D)  # (B, L, D)
        return self.proj(y)
