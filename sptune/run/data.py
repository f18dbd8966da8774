"""Batches from in-memory splits, deterministic by (seed, step) so a resumed run sees the same data.

No DataLoader state to save: the batch of step s is a pure function of (seed, s), so resuming at
step s continues the exact sequence of the uninterrupted run. The masking draws of masked SPT are
pure functions too: of (seed, step) for a training batch, of (seed, example index) for validation and
test examples, so an example's eval mask does not depend on the batch it lands in.
"""

from __future__ import annotations

import math
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterator, TypeVar

import torch

from sptune.run.objectives import MaskDraw
from sptune.tasks.base import Split

# The permutation behind training-data fractions is fixed (not the run seed): subsets are nested
# prefixes of one order, so every fraction contains the smaller ones (Appendix C.1.4).
FRACTION_SEED = 20231004
T = TypeVar("T")  # a prefetched batch: anything with .pin_memory() (sptune.run.train.Problem)


def fraction_size(n: int, fraction: float) -> int:
    """Examples in `fraction` of a training split of n examples."""
    return n if fraction >= 1.0 else max(1, int(round(n * fraction)))


def train_fraction(split: Split, fraction: float) -> Split:
    if fraction >= 1.0:
        return split
    order = torch.randperm(len(split), generator=torch.Generator().manual_seed(FRACTION_SEED))
    return split.subset(order[:fraction_size(len(split), fraction)])


def steps_per_epoch(n: int, batch_size: int) -> int:
    return math.ceil(n / batch_size)


def stage_steps(max_steps: int, epochs: int, batch_size: int, n_train: int) -> int:
    """The optimizer steps a stage trains for: optim.epochs passes over its n_train examples when epochs
    are set (the paper's LRA budgets, Appendix C.1), else optim.max_steps. The one place this is decided:
    the trainer, the study's ASHA rungs and `sptune plan` all call it."""
    return epochs * steps_per_epoch(n_train, batch_size) if epochs > 0 else max_steps


def train_batch_index(n: int, batch_size: int, seed: int, step: int) -> torch.Tensor:
    """Example indices of optimizer step `step`: epoch e uses a permutation seeded by (seed, e)."""
    per_epoch = steps_per_epoch(n, batch_size)
    epoch, pos = divmod(step, per_epoch)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed * 1_000_003 + epoch))
    return order[pos * batch_size : (pos + 1) * batch_size]


def train_batch_size(n: int, batch_size: int, step: int) -> int:
    """len(train_batch_index(n, batch_size, seed, step)) without drawing it: the epoch's last batch is short."""
    pos = step % steps_per_epoch(n, batch_size)
    return min(batch_size, n - pos * batch_size)


def examples_seen(n: int, batch_size: int, steps: int) -> int:
    """Training examples in the first `steps` steps: the sum of train_batch_size, in closed form (whole
    epochs see all n examples; within an epoch every batch but the last is full)."""
    epochs, rest = divmod(steps, steps_per_epoch(n, batch_size))
    return epochs * n + rest * batch_size


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


class Prefetcher:
    """The batches of steps start, start + 1, ... prepared `depth` steps ahead in one background thread,
    so gathering, masking and (on CUDA) pinning a batch overlap the previous step's compute.

    `make(step)` must be a pure function of the step (the batch of step s is; see the module docstring):
    the thread then changes when a batch is built, never what it holds, and runs stay deterministic.
    Pinned (page-locked) host memory lets the caller's `.to(device, non_blocking=True)` copy run
    asynchronously; it only helps CUDA, so `pin` is for CUDA devices.
    """

    def __init__(self, make: Callable[[int], T], start: int, stop: int, pin: bool = False, depth: int = 2):
        self._make, self._stop, self._pin, self._depth = make, stop, pin, depth
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sptune-prefetch")
        self._pending: dict[int, Future] = {}
        self._next = start  # the next step to submit

    def _build(self, step: int) -> T:
        item = self._make(step)
        return item.pin_memory() if self._pin else item

    def get(self, step: int) -> T:
        """The batch of `step` (built now if it was not submitted ahead, e.g. after a jump)."""
        self._next = max(self._next, step)
        while self._next < min(step + 1 + self._depth, self._stop):
            self._pending[self._next] = self._pool.submit(self._build, self._next)
            self._next += 1
        future = self._pending.pop(step, None)
        return future.result() if future is not None else self._build(step)

    def close(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "Prefetcher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
