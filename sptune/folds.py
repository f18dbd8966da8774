"""Cross-validated selection: a small validation split decides little (on OSULeaf, 41 validation series
make one series worth 2.4 points, and the lr chosen for one arm moved 10x from seed to seed), so a search may
score each setting by its mean over k validation folds instead.

    task.val_folds = k (>= 2)   train and val are pooled and dealt into k stratified folds (FOLD_SEED, not the
                                run seed: every seed and every setting sees the same folds)
    task.val_fold = i           fold i validates, the other k - 1 train; test is untouched and read as ever

A study run with `--val-folds k` adds `task.val_fold` as a grid axis of finetuning and scratch, so every
setting trains once per fold (k times the trials), and selection (sptune.protocol.select) takes the setting
with the best mean validation metric over its folds. Its fold-0 trial (the lowest fold that completed) stands
for it: its checkpoint, its test metric. Pretraining keeps the task's split (its masked-token metric counts
thousands of targets), so a finetuning fold may validate on series whose inputs pretraining saw, without
labels; the folds only rank settings within a stage, never SPT against scratch.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import torch

from sptune.errors import UserError

FOLD_KEY = "task.val_fold"  # the grid axis of a cross-validated stage: a label, never an ordered value
FOLDED_STAGES = ("finetune", "scratch")  # the stages whose selection compares labelled series
FOLD_SEED = 20231005


def cross_validation(splits: dict[str, Any], folds: int, fold: int) -> dict[str, Any]:
    """`splits` (sptune.tasks.base.Split each; this module sits below tasks) with fold `fold` of `folds` (train
    + val pooled) as val and the rest as train; as they are for folds 0."""
    if folds < 2:
        return splits
    train, val = splits["train"], splits["val"]
    if train.inputs.shape[1:] != val.inputs.shape[1:]:
        raise UserError(f"task.val_folds={folds}: the task's train and val inputs differ in shape "
                        f"({tuple(train.inputs.shape[1:])} vs {tuple(val.inputs.shape[1:])}), so they cannot be "
                        f"pooled into folds; use task.val_folds=0")
    pool = dataclasses.replace(train, inputs=torch.cat([train.inputs, val.inputs]),
                               targets=torch.cat([train.targets, val.targets]),
                               lengths=torch.cat([train.lengths, val.lengths]))
    assigned = assignment(pool.targets, folds)
    return {**splits, "train": pool.subset(torch.nonzero(assigned != fold).flatten()),
            "val": pool.subset(torch.nonzero(assigned == fold).flatten())}


def assignment(targets: torch.Tensor, folds: int) -> torch.Tensor:
    """(N,) the fold of each example: stratified by target (examples sorted by target, in a fixed random order
    within a target, dealt round-robin), so each fold has every class (or target range) in proportion."""
    n = targets.shape[0]
    order = torch.randperm(n, generator=torch.Generator().manual_seed(FOLD_SEED))
    ranked = order[torch.argsort(targets[order], stable=True)]
    out = torch.empty(n, dtype=torch.long)
    out[ranked] = torch.arange(n) % folds
    return out


def sizes(split_sizes: Mapping[str, int], folds: int, fold: int) -> dict[str, int]:
    """The split sizes a run of fold `fold` of `folds` sees (`sptune plan` counts with them)."""
    if folds < 2:
        return dict(split_sizes)
    pooled = split_sizes["train"] + split_sizes["val"]
    val = pooled // folds + (1 if fold < pooled % folds else 0)
    return {**split_sizes, "train": pooled - val, "val": val}


def setting(candidate: Mapping[str, Any]) -> tuple:
    """What a cross-validated candidate (a results row) was searched at, its fold left out: its group."""
    return tuple(sorted((k, repr(v)) for k, v in candidate.items() if "." in k and k != FOLD_KEY))
