"""A gated long convolution: a sequence layer from outside sptune, installed as a plug-in.

Fu et al. (2023), "Simple Hardware-Efficient Long Convolutions
for Sequence Modeling" (arXiv:2302.06646). Each channel has its own convolution kernel, one free weight per
position up to `max_len`, regularized by the paper's Squash operator, the soft threshold

    squash(k) = sign(k) * relu(|k| - lambda)        (applied to the kernel in every forward)

Block (as the S4 block it replaces, so the comparison is of the kernel alone):

    u (B, L, D) -> y = k * u + D u -> GELU -> dropout -> Linear(D, 2D) -> GLU -> (B, L, D)

(dropout where S4 has it; sptune's residual block adds its own dropout after the layer.)
k * u is a linear (not circular) FFT convolution of length 2L; the kernel is truncated to L. Causal: one
kernel over the past (tap 0 is the present). Not causal: a second kernel k_rev over the strictly-future
positions, k_rev[j] multiplying u[t + 1 + j], so the present is counted once. The plug-in contract of sptune
is only `long_conv(d_model, causal, **options) -> nn.Module` mapping (B, L, D) -> (B, L, D); nothing here
imports sptune.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["LongConv", "long_conv", "squash"]


def squash(k: torch.Tensor, lam: float) -> torch.Tensor:
    """The paper's Squash: sign(k) * relu(|k| - lam). Weights with |k| <= lam are 0 and get no gradient."""
    return torch.sign(k) * F.relu(k.abs() - lam)


def _init_kernel(d_model: int, max_len: int, std: float, lam: float) -> torch.Tensor:
    """(D, max_len) raw weights whose squashed kernel is decaying noise: std * z * exp(-l / tau_d).

    The time constants tau_d are log-spaced over channels from 1 to max_len (some channels local, some
    global), so long-range weights start small. The raw weights are moved out by lam (the inverse of
    squash), so every weight starts outside the dead zone and can learn; training may still zero it.
    """
    tau = torch.logspace(0.0, math.log10(max_len), d_model)  # (D,)
    envelope = torch.exp(-torch.arange(max_len)[None, :] / tau[:, None])  # (D, max_len)
    k = std * torch.randn(d_model, max_len) * envelope  # (D, max_len)
    return k + lam * torch.sign(k)  # (D, max_len)


class LongConv(nn.Module):
    """Gated long convolution over (B, L, D) for any L <= max_len (see the module docstring)."""

    def __init__(self, d_model: int, causal: bool, max_len: int = 512, squash: float = 0.003,
                 kernel_lr: float | None = 1e-3, kernel_init_std: float = 0.02, dropout: float = 0.0):
        super().__init__()
        if max_len < 1 or squash < 0 or kernel_init_std < 0 or not 0 <= dropout < 1:
            raise ValueError(f"LongConv: need max_len >= 1, squash >= 0, kernel_init_std >= 0 and 0 <= dropout "
                             f"< 1 (got {max_len}, {squash}, {kernel_init_std}, {dropout})")
        self.d_model, self.causal, self.max_len, self.lam = d_model, causal, max_len, squash
        self.kernel = nn.Parameter(_init_kernel(d_model, max_len, kernel_init_std, squash))  # (D, max_len)
        self.kernel_rev = None if causal else nn.Parameter(
            _init_kernel(d_model, max_len, kernel_init_std, squash))  # (D, max_len)
        for k in (self.kernel, self.kernel_rev):
            if k is not None:  # sptune's optimizer gives tagged parameters their own group (as S4's SSM params)
                k._optim = {"weight_decay": 0.0} if kernel_lr is None else {"lr": kernel_lr, "weight_decay": 0.0}
        self.D = nn.Parameter(torch.randn(d_model))  # (D,) skip term D u
        self.activation = nn.GELU()
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.output_linear = nn.Linear(d_model, 2 * d_model)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, causal={self.causal}, max_len={self.max_len}, squash={self.lam}"

    def conv_kernel(self, L: int) -> torch.Tensor:
        """The squashed kernel as one circular kernel of length 2L: [k (L), flip(k_rev) (L) or zeros (L)].

        In a circular convolution of length 2L, entry 2L - 1 - j of flip(k_rev) (= L + (L - 1 - j))
        multiplies u[t + 1 + j]: k_rev sees only the strictly-future positions.
        """
        if L > self.max_len:
            raise ValueError(f"LongConv: sequence length {L} exceeds max_len={self.max_len}; raise the layer "
                             f"option max_len (in sptune: model.options.max_len={L} or more)")
        k = squash(self.kernel[:, :L], self.lam)  # (D, L)
        if self.kernel_rev is None:
            return F.pad(k, (0, L))  # (D, 2L)
        k_rev = squash(self.kernel_rev[:, :L], self.lam)  # (D, L)
        return torch.cat([k, k_rev.flip(-1)], dim=-1)  # (D, 2L)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, L, D) -> (B, L, D)."""
        L = x.size(1)
        u = x.transpose(1, 2)  # (B, D, L)
        work = torch.promote_types(x.dtype, torch.float32)  # no half-precision FFTs on CPU; fp32 under autocast
        k_f = torch.fft.rfft(self.conv_kernel(L).to(work), n=2 * L)  # (D, L + 1)
        u_f = torch.fft.rfft(u.to(work), n=2 * L)  # (B, D, L + 1)
        y = torch.fft.irfft(u_f * k_f, n=2 * L)[..., :L]  # (B, D, L), linear convolution, no wrap-around
        y = y + self.D.to(work)[:, None] * u.to(work)  # (B, D, L)
        y = self.dropout(self.activation(y.transpose(1, 2).to(x.dtype)))  # (B, L, D)
        return F.glu(self.output_linear(y), dim=-1)  # (B, L, 2D) -> (B, L, D)


def long_conv(d_model: int, causal: bool, *, max_len: int = 512, squash: float = 0.003,
              kernel_lr: float | None = 1e-3, kernel_init_std: float = 0.02, dropout: float = 0.0) -> LongConv:
    """sptune's layer factory: `long_conv(d_model, causal, **model.options)`. Options: max_len (longest
    sequence), squash (lambda of the soft threshold), kernel_lr (the kernels' learning rate, no weight decay;
    None: the global lr), kernel_init_std (scale of the initial kernel), dropout."""
    return LongConv(d_model, causal, max_len=max_len, squash=squash, kernel_lr=kernel_lr,
                    kernel_init_std=kernel_init_std, dropout=dropout)
