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

# (rows, L) -> (rows, L) uniforms in [0, 1) on the CPU (sptune.run.data.step_draw / example_draw)
MaskDraw = Callable[[int, int], torch.Tensor]
IGNORE = -100  # the CE target of a position outside the loss (cross_entropy's ignore_index)


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
    that mean averages (masked tokens; x C channels for L1), so an eval pass can sum means x terms.

    On an accelerator, sync_free_loss: nothing waits for the device. On the CPU there is no device to wait for,
    and indexed_loss sums the selected positions in the order every kept CPU record was computed with, so
    those records reproduce trial for trial (the two agree to float rounding: tests/test_objectives_masked_loss)."""
    return indexed_loss(pred, d, loss) if pred.device.type == "cpu" else sync_free_loss(pred, d, loss)


def indexed_loss(pred: torch.Tensor, d: Denoising, loss: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss over the positions picked by boolean indexing (a host sync on an accelerator)."""
    sel = d.loss_mask
    if not sel.any():
        return pred.sum() * 0.0, sel.sum()  # keeps the graph; a batch with nothing masked teaches nothing
    if loss == "ce":
        return F.cross_entropy(pred[sel], d.targets[sel]), sel.sum()
    work = torch.promote_types(pred.dtype, torch.float32)
    target = d.targets[sel].to(work)  # (M, C): fp32 targets are not rounded to a bf16 prediction's precision
    return F.l1_loss(pred[sel].to(work), target), sel.sum() * target.shape[-1]


def sync_free_loss(pred: torch.Tensor, d: Denoising, loss: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss over every position with the others selected away (ignore_index / where), divided by the count
    clamped to 1: no shape depends on the mask, so nothing waits for the device (no .any(), no boolean
    indexing) and a batch with nothing masked gives a zero loss that keeps the graph (it teaches nothing).
    The sum runs in fp32 at least: fp32 L1 targets are not rounded to a bf16 prediction's precision."""
    mask = d.loss_mask  # (B, L) bool
    count = mask.sum()  # () on the device
    if loss == "ce":
        targets = d.targets.masked_fill(~mask, IGNORE)  # (B, L): unselected positions add nothing
        total = F.cross_entropy(pred.flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="sum")
        return total / count.clamp(min=1), count
    work = torch.promote_types(pred.dtype, torch.float32)
    error = (pred.to(work) - d.targets.to(work)).abs()  # (B, L, C)
    terms = count * d.targets.shape[-1]
    total = torch.where(mask[..., None], error, 0.0).sum()  # where, not a product: a NaN elsewhere stays out
    return total / terms.clamp(min=1), terms


class Metric:
    """Streaming accuracy or R² (1 - SS_res / SS_tot) over an evaluation pass. With `keep_hits` an accuracy
    also keeps each target's correctness in the order seen: the test pass's per-example outcomes, which an
    interval that resamples the test set needs (sptune.report.stats.paired_with_test_sampling)."""

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
