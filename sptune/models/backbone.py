"""The shared backbone: encoder -> residual blocks around a sequence layer -> heads.

Only the sequence layer differs between Transformer, S4 and DLR (passed in as `make_mixer`), so a
comparison between architectures is a comparison of that layer alone (paper §3.2–3.3).

    tokens (B, L) or values (B, L, C[+1]) --encoder--> (B, L, D) --blocks--> (B, L, D) --head--> ...

Heads: PretrainHead (per-position vocab logits or values), PooledHead (classification or
regression after mean / max / last pooling, Appendix C.1.1) and RetrievalHead (two documents,
[a, b, a - b, a * b] -> MLP, as in LRA).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn


class Encoder(nn.Module):
    """Token embedding, or a linear map of continuous channels (plus the mask-indicator channel in
    masked pretraining of continuous inputs: masked values are 0, so the model needs to be told)."""

    def __init__(self, d_model: int, vocab_size: int = 0, channels: int = 0, mask_channel: bool = False):
        super().__init__()
        self.tokens = vocab_size > 0
        if self.tokens:
            self.embed = nn.Embedding(vocab_size, d_model)
        else:
            self.embed = nn.Linear(channels + int(mask_channel), d_model)
        self.mask_channel = mask_channel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.embed(x)  # (B, L) ids or (B, L, C) values -> (B, L, D)


def drop_mask_channel(state: dict[str, torch.Tensor], prefix: str = "backbone.encoder.embed.") -> dict:
    """Finetuning starts without the mask indicator: remove its input column of the encoder weight."""
    key = prefix + "weight"
    state = dict(state)
    state[key] = state[key][:, :-1].contiguous()  # (D, C + 1) -> (D, C)
    return state


class Norm(nn.Module):
    """LayerNorm over features, or BatchNorm over (batch, time) per feature."""

    def __init__(self, d_model: int, kind: str):
        super().__init__()
        self.kind = kind
        self.norm = nn.LayerNorm(d_model) if kind == "layer" else nn.BatchNorm1d(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "layer":
            return self.norm(x)
        return self.norm(x.transpose(1, 2)).transpose(1, 2)  # BatchNorm1d wants (B, D, L)


class Block(nn.Module):
    """x + mixer(norm(x)), then x + ff(norm(x)) (pre-norm); post-norm applies the norm after the sum."""

    def __init__(self, mixer: nn.Module, d_model: int, d_ff: int, dropout: float, norm: str, prenorm: bool):
        super().__init__()
        self.prenorm = prenorm
        self.mixer = mixer
        self.norm1 = Norm(d_model, norm)
        self.drop = nn.Dropout(dropout)
        self.ff = None
        if d_ff > 0:
            self.norm2 = Norm(d_model, norm)
            self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model))

    def _sub(self, x: torch.Tensor, norm: nn.Module, layer: nn.Module) -> torch.Tensor:
        if self.prenorm:
            return x + self.drop(layer(norm(x)))
        return norm(x + self.drop(layer(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._sub(x, self.norm1, self.mixer)  # (B, L, D)
        if self.ff is not None:
            x = self._sub(x, self.norm2, self.ff)  # (B, L, D)
        return x


class Backbone(nn.Module):
    def __init__(self, encoder: Encoder, make_mixer: Callable[[], nn.Module], n_layers: int, d_model: int,
                 d_ff: int, dropout: float, norm: str, prenorm: bool, positions: nn.Module | None = None):
        super().__init__()
        self.encoder = encoder
        self.positions = positions if positions is not None else nn.Identity()
        self.blocks = nn.ModuleList(
            Block(make_mixer(), d_model, d_ff, dropout, norm, prenorm) for _ in range(n_layers)
        )
        # Pre-norm leaves the residual stream un-normalized: normalize once before the heads.
        self.final_norm = Norm(d_model, norm) if prenorm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.positions(self.encoder(x))  # (B, L, D)
        for block in self.blocks:
            h = block(h)  # (B, L, D)
        return self.final_norm(h)


def pool(h: torch.Tensor, lengths: torch.Tensor, how: str) -> torch.Tensor:
    """Pool (B, L, D) over the valid positions of each sequence -> (B, D)."""
    L = h.shape[1]
    valid = torch.arange(L, device=h.device)[None, :] < lengths[:, None]  # (B, L)
    if how == "mean":
        return (h * valid[..., None]).sum(1) / lengths.clamp(min=1)[:, None].to(h.dtype)
    if how == "max":
        return h.masked_fill(~valid[..., None], float("-inf")).amax(1)
    last = (lengths - 1).clamp(min=0)  # (B,)
    return h[torch.arange(h.shape[0], device=h.device), last]  # (B, D)


class PretrainHead(nn.Module):
    """Per-position prediction: vocab logits (CE) or channel values (L1)."""

    def __init__(self, d_model: int, out_dim: int):
        super().__init__()
        self.proj = nn.Linear(d_model, out_dim)

    def forward(self, h: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.proj(h)  # (B, L, D) -> (B, L, V or C)


class PooledHead(nn.Module):
    """Classification (num_outputs classes) or regression (1 output) from the pooled sequence."""

    def __init__(self, d_model: int, num_outputs: int, pooling: str):
        super().__init__()
        self.pooling = pooling
        self.proj = nn.Linear(d_model, num_outputs)

    def forward(self, h: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return self.proj(pool(h, lengths, self.pooling))  # (B, K)


class RetrievalHead(nn.Module):
    """Two documents encoded separately, pooled to a and b, then [a, b, a - b, a * b] -> MLP (LRA)."""

    def __init__(self, d_model: int, num_outputs: int, pooling: str):
        super().__init__()
        self.pooling = pooling
        self.mlp = nn.Sequential(nn.Linear(4 * d_model, d_model), nn.GELU(), nn.Linear(d_model, num_outputs))

    def forward(self, h: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        pooled = pool(h, lengths.reshape(-1), self.pooling)  # (2B, D)
        a, b = pooled.reshape(-1, 2, pooled.shape[-1]).unbind(1)  # (B, D) each
        return self.mlp(torch.cat([a, b, a - b, a * b], dim=-1))  # (B, K)


class SequenceModel(nn.Module):
    """backbone + head. Paired inputs (B, 2, L) run through the backbone as 2B sequences."""

    def __init__(self, backbone: Backbone, head: nn.Module):
        super().__init__()
        self.backbone = backbone
        self.head = head

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        if isinstance(self.head, RetrievalHead):
            x = x.reshape(-1, x.shape[-1])  # (B, 2, L) -> (2B, L)
        h = self.backbone(x)  # (B, L, D)
        return self.head(h, lengths)

