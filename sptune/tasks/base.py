"""What a task declares, and the tensors every task loader returns.

A task is data plus the paper's per-task settings (§2, Appendix C): sequence length, input kind,
output (classes or regression), metric, masking ratio and pretraining loss. Loaders return plain
tensors so models never import tasks.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from sptune.errors import UserError

# Token ids shared by every token task: 0 pads, 1 is the <mask> of masked denoising (§2).
PAD_ID = 0
MASK_ID = 1
UNK_ID = 2
SPECIAL_TOKENS = ("<pad>", "<mask>", "<unk>")


@dataclass
class Split:
    """One split of a task, all in memory (or memory-mapped).

    inputs:  tokens (N, L) integer ids (any integer dtype: batches are cast to int64), padded with
             PAD_ID; continuous (N, L, C) float32; paired documents (retrieval) (N, 2, L) ids.
    targets: (N,) int64 class ids, or (N,) float32 regression targets.
    lengths: (N,) int64 valid length of each sequence ((N, 2) for paired inputs).
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    lengths: torch.Tensor

    def __len__(self) -> int:
        return self.targets.shape[0]

    def subset(self, index: torch.Tensor) -> "Split":
        return Split(self.inputs[index], self.targets[index], self.lengths[index])


# load(task, data_dir, seed) -> splits; `seed` is the run's. A task whose val split is drawn from train by
# sptune draws it with task.extras["split_seed"], which Task.load sets to the run seed under task.resample_splits.
Loader = Callable[["Task", Path, int], dict[str, Split]]
# verify(task, data_dir) -> list of problems, each naming the missing/malformed path and the fix ([] = ok)
Verifier = Callable[["Task", Path], list[str]]
# prepare(task, source, data_dir) -> None: unpack / convert `source` (a path or archive) into data_dir
Preparer = Callable[["Task", Path, Path], None]


@dataclass(frozen=True)
class Task:
    """A registered task. `load(data_dir, seed)` returns {"train", "val", "test"} splits."""

    name: str
    seq_len: int
    input_kind: str  # "tokens" | "continuous"
    num_classes: int  # 0 = regression
    metric: str  # "accuracy" | "r2"
    mask_ratio: float  # default masking ratio of masked SPT (paper §2, Appendix C.3)
    pretrain_loss: str  # "ce" for tokens, "l1" for pixels and signals
    loader: Loader
    vocab_size: int = 0  # tokens: vocabulary incl. SPECIAL_TOKENS
    channels: int = 0  # continuous: input channels
    paired: bool = False  # two documents per example (Retrieval)
    data_subdir: str = ""  # where the data lives below the data root; "" = generated into the cache
    data_hint: str = ""  # how to get the data, shown when it is missing
    description: str = ""
    extras: dict = field(default_factory=dict)  # task-specific loader settings
    verifier: Verifier | None = None
    preparer: Preparer | None = None
    # val is drawn from train here (keyed by extras["split_seed"]), so task.resample_splits can redraw it per run
    resamplable: bool = False

    @property
    def is_regression(self) -> bool:
        return self.num_classes == 0

    @property
    def embedded(self) -> bool:
        """Generated locally (no download ever)."""
        return self.data_subdir == ""

    def data_dir(self, root: str | os.PathLike | None = None) -> Path:
        base = Path(root) if root else data_root()
        return base / self.data_subdir if self.data_subdir else cache_root() / self.name

    def load(self, root: str | os.PathLike | None = None, seed: int = 0, resample: bool = False) -> dict[str, Split]:
        """The splits; `resample` (task.resample_splits): train / val drawn from `seed`, the run's (test fixed)."""
        if not resample:
            return self.loader(self, self.data_dir(root), seed)
        check_resample(self)
        drawn = dataclasses.replace(self, extras={**self.extras, "split_seed": seed})
        return drawn.loader(drawn, drawn.data_dir(root), seed)

    def declared_sizes(self) -> dict[str, int] | None:
        """Split sizes a generated task fixes in its settings (extras num_train / num_val / num_test)."""
        keys = {"train": "num_train", "val": "num_val", "test": "num_test"}
        return {s: int(self.extras[k]) for s, k in keys.items()} if all(k in self.extras for k in keys.values()) \
            else None

    def split_sizes(self, root: str | os.PathLike | None = None, seed: int = 0) -> dict[str, int]:
        """{"train", "val", "test"} example counts: declared, else read from the data (a UserError names
        missing data and how to get it)."""
        return self.declared_sizes() or {split: len(data) for split, data in self.load(root, seed).items()}


def check_resample(task: Task) -> None:
    """A one-line UserError unless `task` can draw its train / val split from the run seed."""
    if not task.resamplable:
        where = f" ({task.data_subdir})" if task.name == "files" else ""
        given = " (its files give a val split)" if task.name == "files" else ""
        raise UserError(f"task.resample_splits=true: task '{task.name}'{where} has its train / val / test splits "
                        f"fixed by its source{given}, so a seed cannot redraw them; drop task.resample_splits (it "
                        f"applies to tasks whose val split sptune draws from train: ucr-*, files without a val split)")


def data_root() -> Path:
    """Where real datasets live: $SPTUNE_DATA, default ~/sptune_data."""
    return Path(os.environ.get("SPTUNE_DATA", Path.home() / "sptune_data")).expanduser()


def cache_root() -> Path:
    """Where generated data and tokenized arrays are cached: $SPTUNE_CACHE, default ~/.cache/sptune."""
    return Path(os.environ.get("SPTUNE_CACHE", Path.home() / ".cache" / "sptune")).expanduser()
