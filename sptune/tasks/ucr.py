"""UCR time-series classification: OSULeaf and ACSF1, read from the files the `sktime` wheel ships.

    ucr-osuleaf   leaf outlines as 1-D series (427 steps), 6 classes, 200 TRAIN / 242 TEST series
    ucr-acsf1     appliance power consumption (1460 steps), 10 classes, 100 TRAIN / 100 TEST series

No download: `sktime` (a dependency of sptune) installs
sktime/datasets/data/<name>/<name>_{TRAIN,TEST}.ts; they are found with importlib's package spec (without importing sktime) and parsed here (sptune.tasks.ts_format), never with sktime's
own loaders, which import its heavy dependencies.

Splits: test = the archive's TEST file (what the archive's published accuracies are measured on);
validation = a stratified, seeded share of TRAIN (`val_fraction` of each class, keyed by the task's
split seed 0, or by the run seed under task.resample_splits=true), train = the rest. Every series is z-normalised on its own (mean 0,
std 1), as the UCR archive defines its series. Inputs are continuous (N, L, 1), so masked SPT uses the
L1 loss on masked values (paper §3.7: continuous inputs), at the 25% ratio of the other signal tasks
(Appendix C.3).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

from sptune.errors import UserError
from sptune.tasks import cache, ts_format
from sptune.tasks.base import Split, Task

INSTALL_FIX = 'install it with `pip install "sktime>=1.2,<1.3"` (sptune depends on it for the UCR files)'
PARTS = ("TRAIN", "TEST")


def archive_file(dataset: str, part: str) -> Path:
    """sktime/datasets/data/<dataset>/<dataset>_<part>.ts of the installed sktime (no sktime import)."""
    spec = importlib.util.find_spec("sktime")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"UCR {dataset}: the UCR files come with the `sktime` package, which is not installed; "
                        f"{INSTALL_FIX}")
    root = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / dataset
    path = root / f"{dataset}_{part}.ts"
    if not path.is_file():
        raise UserError(f"UCR {dataset}: {path} is missing from the installed sktime; {INSTALL_FIX}")
    return path


def z_normalise(x: np.ndarray) -> np.ndarray:
    """Each series (and channel) to mean 0, std 1 over time; a constant series becomes all zeros."""
    mean = x.mean(axis=1, keepdims=True)
    std = x.std(axis=1, keepdims=True)
    return ((x - mean) / np.where(std > 0, std, 1.0)).astype(np.float32)


def stratified_holdout(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held-out) sorted indices: round(fraction x n_c) rows of every class c held out, chosen by
    a permutation seeded with `seed` (the same rows on every call)."""
    rng = np.random.default_rng(seed)
    held = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        held.append(rng.permutation(members)[:int(round(len(members) * fraction))])
    out = np.sort(np.concatenate(held))
    return np.setdiff1d(np.arange(len(labels)), out), out


def read_parts(dataset: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{"TRAIN", "TEST"}: z-normalised series (N, L, 1) float32 and class ids (labels sorted, from TRAIN)."""
    raw = {part: ts_format.read_ts(archive_file(dataset, part), INSTALL_FIX) for part in PARTS}
    classes = sorted(set(raw["TRAIN"][1]), key=_label_order)
    index = {label: i for i, label in enumerate(classes)}
    unknown = set(raw["TEST"][1]) - set(index)
    if unknown:
        raise UserError(f"UCR {dataset}: TEST labels {sorted(unknown)} never occur in TRAIN; {INSTALL_FIX}")
    return {part: (z_normalise(x), np.array([index[label] for label in labels], dtype=np.int64))
            for part, (x, labels) in raw.items()}


def load_ucr(task: Task, data_dir: Path, seed: int) -> dict[str, Split]:
    """train / val (stratified from TRAIN with extras["split_seed"]: the task's 0, or the run seed under
    task.resample_splits, which Task.load sets) / test (TEST, whatever the seed)."""
    extras = task.extras
    sources = [archive_file(extras["dataset"], part) for part in PARTS]

    def build(writer: cache.ArrayWriter) -> None:
        parts = read_parts(extras["dataset"])
        x, y = parts["TRAIN"]
        keep, held = stratified_holdout(y, extras["val_fraction"], extras["split_seed"])
        for split, (xs, ys) in {"train": (x[keep], y[keep]), "val": (x[held], y[held]), "test": parts["TEST"]}.items():
            writer.save(f"{split}_inputs", xs)
            writer.save(f"{split}_targets", ys)
            writer.save(f"{split}_lengths", np.full(len(ys), xs.shape[1], dtype=np.int64))

    settings = {"val_fraction": extras["val_fraction"], "split_seed": extras["split_seed"], "normalise": "z"}
    arrays = cache.cached_arrays(task.name, sources, settings, build)
    return {split: cache.to_split(arrays, split) for split in ("train", "val", "test")}


def _label_order(label: str) -> tuple[int, float | str]:
    """Numeric labels in numeric order (1, 2, ..., 10), others alphabetically after them."""
    try:
        return 0, float(label)
    except ValueError:
        return 1, label


def _task(name: str, dataset: str, seq_len: int, num_classes: int, description: str) -> Task:
    return Task(
        name=name, seq_len=seq_len, input_kind="continuous", num_classes=num_classes, metric="accuracy",
        mask_ratio=0.25, pretrain_loss="l1", loader=load_ucr, channels=1, resamplable=True,
        description=description + " From the sktime wheel's UCR files; val = stratified 20% of TRAIN, test = TEST.",
        extras={"dataset": dataset, "val_fraction": 0.2, "split_seed": 0},
    )


OSULEAF = _task("ucr-osuleaf", "OSULeaf", 427, 6, "UCR OSULeaf: 6 leaf species from 427-step outlines.")
ACSF1 = _task("ucr-acsf1", "ACSF1", 1460, 10, "UCR ACSF1: 10 appliance types from 1460-step power readings.")
TASKS: list[Task] = [OSULEAF, ACSF1]
