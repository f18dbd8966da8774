"""Batches from in-memory splits, deterministic by (seed, step) so a resumed run sees the same data.

No DataLoader state to save: the batch of step s is a pure function of (seed, s), so resuming at
step s continues the exact sequence of the uninterrupted run. The masking draws of masked SPT are
pure functions too: of (seed, step) for a training batch, of (seed, example index) for validation and
test examples, so an example's eval mask does not depend on the batch it lands in.
"""

from __future__ import annotations

import math
from typing import Iterator

import torch

from sptune.objectives import MaskDraw
from sptune.tasks.base import Split

# The permutation behind training-data fractions is fixed (not the run seed): subsets are nested
# prefixes of one order, so every fraction contains the smaller ones (Appendix C.1.4).
FRACTION_SEED = 20231004


def train_fraction(split: Split, fraction: float) -> Split:
    if fraction >= 1.0:
        return split
    n = max(1, int(round(len(split) * fraction)))
    order = torch.randperm(len(split), generator=torch.Generator().manual_seed(FRACTION_SEED))
    return split.subset(order[:n])


def steps_per_epoch(n: int, batch_size: int) -> int:
    return math.ceil(n / batch_size)


def train_batch_index(n: int, batch_size: int, seed: int, step: int) -> torch.Tensor:
    """Example indices of optimizer step `step`: epoch e uses a permutation seeded by (seed, e)."""
    per_epoch = steps_per_epoch(n, batch_size)
    epoch, pos = divmod(step, per_epoch)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    return order[pos * batch_size : (pos + 1) * batch_size]


def step_draw(seed: int, step: int) -> MaskDraw:
    """The masking draw of optimizer step `step`: one RNG per (seed, step)."""
    generator = torch.Generator().manual_seed(seed * 1_000_033 + step + 7)
    return lambda rows, L: torch.rand(rows, L, generator=generator)


def example_draw(seed: int, index: torch.Tensor) -> MaskDraw:
    """The masking draw of eval examples `index` (B,): one RNG per (seed, example), seeded by a counter.

    The mask of an example is then the same whatever batch size splits the split, so validation
    metrics of trials that differ only in optim.batch_size are measured on the same masked tokens.
    Paired examples (retrieval) are drawn as 2 rows each. One generator per row, not a vectorized
    integer hash: on CPU the hash's ~20 int64 passes over (B, L) measured 25x slower than B draws.
    """

    def draw(rows: int, L: int) -> torch.Tensor:
        per_example = rows // len(index)  # 1, or 2 documents per example
        row_ids = (index.long()[:, None] * per_example + torch.arange(per_example)).reshape(-1).tolist()
        return torch.stack([torch.rand(L, generator=torch.Generator().manual_seed(seed * 1_000_003 + r))
                            for r in row_ids])  # (rows, L)

    return draw


def batch(split: Split, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(inputs, targets, lengths) of the examples in `index`.

    Sequences stay padded to the task's full length (as LRA and S4 do): bidirectional layers see the
    padding, so cutting it per batch would make an example's output depend on its batch-mates.
    """
    inputs = split.inputs[index]
    if not inputs.is_floating_point():
        inputs = inputs.long()  # token ids may be stored compactly (uint8 / int16): embeddings want int64
    return inputs, split.targets[index], split.lengths[index]


def eval_batches(split: Split, batch_size: int, limit: int = 0
                 ) -> Iterator[tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
    """(example indices, batch) over the first `limit` examples (0 = all), in order."""
    n = len(split) if limit <= 0 else min(limit, len(split))
    for start in range(0, n, batch_size):
        index = torch.arange(start, min(start + batch_size, n))
        yield index, batch(split, index)
