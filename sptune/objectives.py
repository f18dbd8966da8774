"""Self-pretraining objectives (paper §2): masked and causal denoising, their losses and metrics.

Masked: every valid position is masked i.i.d. with the task's ratio; tokens become <mask>, continuous
values become 0 and an indicator channel marks them; the loss (CE or L1) counts masked positions only.
Causal: position t predicts the input at t + 1 with a causal model (no masking).

Finetuning metrics (accuracy, R²) live here too, as streaming accumulators over an eval pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from sptune.tasks.base import MASK_ID

# (rows, L) -> (rows, L) uniforms in [0, 1) on the CPU (sptune.data.step_draw / example_draw)
MaskDraw = Callable[[int, int], torch.Tensor]


@dataclass
class Denoising:
    inputs: torch.Tensor  # what the model sees: (B, L) ids or (B, L, C[+1]) values
    targets: torch.Tensor  # what it must predict at each position: (B, L) ids or (B, L, C) values
    loss_mask: torch.Tensor  # (B, L) bool: positions that count in the loss and the metric


def valid_positions(lengths: torch.Tensor, L: int) -> torch.Tensor:
    return torch.arange(L, device=lengths.device)[None, :] < lengths[:, None]  # (B, L)


def masked_denoising(x: torch.Tensor, lengths: torch.Tensor, ratio: float, draw: MaskDraw) -> Denoising:
    B, L = x.shape[:2]
    uniform = draw(B, L).to(x.device)  # (B, L)
    mask = (uniform < ratio) & valid_positions(lengths, L)  # (B, L)
    if x.dtype == torch.long:
        inputs = x.masked_fill(mask, MASK_ID)  # (B, L)
    else:
        kept = x.masked_fill(mask[..., None], 0.0)  # (B, L, C)
        inputs = torch.cat([kept, mask[..., None].to(x.dtype)], dim=-1)  # (B, L, C + 1)
    return Denoising(inputs, x, mask)


def causal_denoising(x: torch.Tensor, lengths: torch.Tensor) -> Denoising:
    B, L = x.shape[:2]
    targets = torch.roll(x, shifts=-1, dims=1)  # position t predicts x[t + 1]
    loss_mask = valid_positions(lengths - 1, L)  # (B, L): the last valid position has no successor
    return Denoising(x, targets, loss_mask)


def denoising_loss(pred: torch.Tensor, d: Denoising, loss: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean CE (pred (B, L, V)) or L1 (pred (B, L, C)) over the loss positions only, and how many terms
    that mean averages (masked tokens; x C channels for L1), so an eval pass can sum means x terms."""
    sel = d.loss_mask
    if not sel.any():
        return pred.sum() * 0.0, sel.sum()  # keeps the graph; a batch with nothing masked teaches nothing
    if loss == "ce":
        return F.cross_entropy(pred[sel], d.targets[sel]), sel.sum()
    target = d.targets[sel].to(pred.dtype)  # (M, C)
    return F.l1_loss(pred[sel], target), sel.sum() * target.shape[-1]


class Metric:
    """Streaming accuracy or R² (1 - SS_res / SS_tot) over an evaluation pass. With `keep_hits` an accuracy
    also keeps each target's correctness in the order seen: the test pass's per-example outcomes, which an
    interval that resamples the test set needs (sptune.stats.paired_with_test_sampling)."""

    def __init__(self, kind: str, keep_hits: bool = False):
        self.kind = kind
        self.n = 0.0
        self.correct = 0.0
        self.sum_y = 0.0
        self.sum_y2 = 0.0
        self.sse = 0.0
        self.hits: list[torch.Tensor] | None = [] if keep_hits and kind == "accuracy" else None

    def update(self, pred: torch.Tensor, target: torch.Tensor) -> None:
        if self.kind == "accuracy":
            right = pred.argmax(-1) == target  # (N,)
            self.correct += right.sum().item()
            self.n += target.shape[0]
            if self.hits is not None:
                self.hits.append(right.cpu())
            return
        pred, target = pred.double().reshape(-1), target.double().reshape(-1)
        self.sse += ((pred - target) ** 2).sum().item()
        self.sum_y += target.sum().item()
        self.sum_y2 += (target**2).sum().item()
        self.n += target.numel()

    def hit_string(self) -> str | None:
        """The kept correctness as '0'/'1', one character per target (a 25k-example test set: 25 KB of JSON);
        None when none was kept (an R², or keep_hits off)."""
        if self.hits is None:
            return None
        right = torch.cat(self.hits) if self.hits else torch.zeros(0, dtype=torch.bool)  # (N,)
        return (right.to(torch.uint8) + ord("0")).numpy().tobytes().decode("ascii")

    def value(self) -> float:
        if self.n == 0:
            return float("nan")
        if self.kind == "accuracy":
            return self.correct / self.n
        ss_tot = self.sum_y2 - self.sum_y**2 / self.n
        return 1.0 - self.sse / ss_tot if ss_tot > 0 else float("nan")
