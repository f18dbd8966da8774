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

import contextlib
import functools
import inspect
import logging
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

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

# SDPA's kernels as provenance names them ("sdpa flash"), by torch's SDPBackend (what _fused_sdp_choice returns).
SDPA_KERNELS = {SDPBackend.MATH: "math", SDPBackend.FLASH_ATTENTION: "flash",
                SDPBackend.EFFICIENT_ATTENTION: "efficient", SDPBackend.CUDNN_ATTENTION: "cudnn",
                SDPBackend.OVERRIDEABLE: "overrideable"}
# On Hopper (sm90) SDPA tries cuDNN's attention first: torch's own order puts it last (flash, efficient, math,
# cudnn), yet there it is 1.7-2.3x faster than the flash kernel (FlashAttention-2) for training shapes at the same
# accuracy, and slower on Ampere, Ada and Blackwell (huggingface/transformers#48163's benchmark of six GPUs). A
# preference, not a restriction: what cuDNN cannot serve falls through to the next kernel. set_priority needs
# torch >= 2.6; before it SDPA keeps its own order.
CUDNN_FIRST = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
SET_PRIORITY = "set_priority" in inspect.signature(sdpa_kernel).parameters


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
    bf16 = is_cuda(q) and torch.cuda.is_available() and _bf16_supported()
    return torch.bfloat16 if bf16 else torch.float16


@torch.compiler.assume_constant_result  # a fact of the node: a compiled forward bakes it in, no graph break
@functools.lru_cache(maxsize=None)
def _bf16_supported() -> bool:
    return torch.cuda.is_bf16_supported()


@torch.compiler.assume_constant_result
@functools.lru_cache(maxsize=None)
def _capability_major(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


def cudnn_first(device: torch.device) -> bool:
    """Whether SDPA on `device` tries cuDNN's attention first (CUDNN_FIRST): a Hopper GPU, torch >= 2.6."""
    if device.type != "cuda" or not SET_PRIORITY or not torch.cuda.is_available():
        return False
    return _capability_major(device.index if device.index is not None else torch.cuda.current_device()) == 9


def sdpa_order(device: torch.device):
    """The context SDPA runs in on `device`: cuDNN first on Hopper, torch's own order elsewhere."""
    return sdpa_kernel(CUDNN_FIRST, set_priority=True) if cudnn_first(device) else contextlib.nullcontext()


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
    mask = causal_mask(q, k, causal)
    with sdpa_order(q.device):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                              is_causal=causal and mask is None)


def causal_mask(q: torch.Tensor, k: torch.Tensor, causal: bool) -> torch.Tensor | None:
    """The (Lq, Lk) bottom-right causal mask SDPA needs when Lq != Lk (is_causal would align top-left; at most
    (w, 2w) for a block); None where is_causal does (or nothing is masked)."""
    Lq, Lk = q.shape[-2], k.shape[-2]
    if not causal or Lq == Lk:
        return None
    return torch.ones(Lq, Lk, dtype=torch.bool, device=q.device).tril(diagonal=Lk - Lq)


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
        _log_once(*self._announcement())
        if dropout > 0:  # torch's fused CPU kernel has no dropout
            _log_once(logging.INFO, "attention dropout > 0: training on the CPU takes SDPA's math path, (B, H, L, L) "
                                    "scores")

    def _announcement(self) -> tuple[int, str]:
        """The attention backend policy, logged once when a layer is built: forward logs nothing (a logging call
        there would split a compiled graph). What a run actually used is in its provenance (attention_kernel)."""
        if self.backend == "sdpa":
            return logging.INFO, "attention backend: sdpa (requested)"
        if flash_attn_func is None:
            if self.backend == "flash":  # asked for explicitly: say loudly that it is not used
                return logging.WARNING, ("attention backend: sdpa, not the requested flash-attn (flash-attn not "
                                         "installed)")
            return logging.INFO, "attention backend: sdpa (flash-attn not installed)"
        if self.backend == "flash":
            return logging.INFO, ("attention backend: flash-attn for CUDA inputs (fp32 cast to half precision for the "
                                  "call), else sdpa")
        return logging.INFO, ("attention backend: flash-attn for half-precision CUDA inputs, except on Hopper (cuDNN "
                              "via sdpa there), else sdpa")

    def backend_used(self, cuda: bool, dtype: torch.dtype) -> str:
        """'attention flash-attn' or 'attention sdpa': the choice forward makes for q on CUDA or not, of dtype
        (sptune.run.provenance records it)."""
        return "attention flash-attn" if self._flash_why(cuda, dtype, self._hopper(cuda)) is None else "attention sdpa"

    def attention_kernel(self, device: torch.device, dtype: torch.dtype, training: bool) -> str:
        """The kernel forward runs for inputs of `dtype` on `device`: 'flash-attn', or 'sdpa ' + SDPA's choice
        (cudnn, flash, efficient, math), asked of torch's own selection for this layer's head size, mask and
        dropout on tiny tensors (sptune.run.provenance records it)."""
        if self._flash_why(device.type == "cuda", dtype, self._hopper(device.type == "cuda")) is None:
            return "flash-attn"
        return "sdpa " + sdpa_choice(self, device, dtype, training)

    @staticmethod
    def _hopper(cuda: bool) -> bool:
        """Whether this node's current CUDA device prefers cuDNN's attention (the run's GPUs are of one kind)."""
        return cuda and torch.cuda.is_available() and cudnn_first(torch.device("cuda", torch.cuda.current_device()))

    def _flash_why(self, cuda: bool, dtype: torch.dtype, hopper: bool = False) -> str | None:
        """None when flash-attn runs: it needs the package and a CUDA tensor. "auto" uses it for half-precision
        inputs (autocast) except on Hopper, where SDPA's cuDNN kernel is faster (CUDNN_FIRST); "flash" also for
        fp32 ones, which attend() casts to half precision around the call. Otherwise why SDPA runs instead."""
        if self.backend == "sdpa":
            return "requested"
        if flash_attn_func is None:
            return "flash-attn not installed"
        if not cuda:
            return "input is not on CUDA"
        if self.backend == "flash":
            return None
        if dtype not in HALF:
            return f"input is {dtype}; backend='flash' casts it to half precision"
        return "cuDNN attention is faster on Hopper" if hopper else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, L, D = x.shape
        q, k, v = self.qkv(x).view(B, L, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # 3 x (B, H, L, hd)
        if self.rotary is not None:
            q, k = self.rotary(q, k)  # absolute positions 0..L-1, before any blocking
        dropout_p = self.dropout if self.training else 0.0
        # q, not x: under autocast the projections already run in half precision. Decided from q's dtype and
        # device only (no tensor values): a compiled forward guards on them, without a graph break.
        flash = self._flash_why(is_cuda(q), q.dtype, cudnn_first(q.device)) is None
        if self.attention == "block":
            y = block_attention(q, k, v, self.block_size, self.causal, dropout_p, flash)  # (B, H, L, hd)
        else:
            y = attend(q, k, v, self.causal, dropout_p, flash)  # (B, H, L, hd)
        y = y.transpose(1, 2).reshape(B, L, D)  # (B, L, D)
        return self.proj(y)


def sdpa_choice(layer: SelfAttention, device: torch.device, dtype: torch.dtype, training: bool) -> str:
    """SDPA's kernel for `layer`'s attention calls on `device` ('cudnn', 'flash', 'efficient', 'math'): torch's
    own selection (torch._fused_sdp_choice, what SDPA dispatches on) under the order attend() sets, for the
    layer's heads, head size, causal mask and, in training, dropout. A block layer asks for a middle block
    (its keys span two blocks: an explicit mask when causal). 'unknown' where torch cannot say."""
    Lq = 8
    Lk = 2 * Lq if layer.attention == "block" else Lq
    q = torch.zeros(1, layer.n_heads, Lq, layer.head_dim, device=device, dtype=dtype, requires_grad=training)
    k = torch.zeros(1, layer.n_heads, Lk, layer.head_dim, device=device, dtype=dtype, requires_grad=training)
    mask = causal_mask(q, k, layer.causal)
    try:
        with sdpa_order(device):
            choice = torch._fused_sdp_choice(q, k, k, attn_mask=mask, dropout_p=layer.dropout if training else 0.0,
                                             is_causal=layer.causal and mask is None)
    except (RuntimeError, AttributeError, TypeError):  # a torch without it, or a device it cannot answer for
        return "unknown"
    return SDPA_KERNELS.get(SDPBackend(choice), "unknown")
