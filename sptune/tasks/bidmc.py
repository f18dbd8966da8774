"""BIDMC32 RR / HR / SpO2: regress a vital sign from 32 s of EKG + PPG (2 channels x 4000 samples).

Data layout: the one the S4 repository (state-spaces/s4, src/dataloaders/prepare/bidmc) writes and
reads, so an existing S4 `data/bidmc` folder can be used as is:

    <data root>/bidmc/{RR,HR,SpO2}/reshuffle/{trainx,trainy,validx,validy,testx,testy}.npy
    x: (N, 4000, 2) EKG and PPG, y: (N,) the target

`sptune data prepare bidmc-rr --from <dir or archive>` builds it from the Monash TSER release files
BIDMC32RR_TRAIN.ts / BIDMC32RR_TEST.ts (zenodo records 4001463 / 4001456 / 4001464) with S4's
"reshuffle" split: train and test pooled, 70 / 15 / 15 % by the same permutations as S4's
scikit-learn calls (random_state 0, then 1), reproduced here without scikit-learn.

Targets are rescaled to [-1, 1] with the train split's min and max (Appendix C.3: fine-tuning a
pretrained model on raw labels such as HR ~ 80 fails). Each returned Split carries the constants
as `split.target_range = (lo, hi)`; (y + 1) * (hi - lo) / 2 + lo maps predictions back. R² needs
neither: it is invariant under one affine map applied to both predictions and targets, so R² on the
rescaled targets equals R² on the original scale.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sptune import atomic
from sptune.errors import UserError
from sptune.tasks import cache, ts_format
from sptune.tasks.base import Split, Task

SEQ_LEN = 4000
CHANNELS = 2
SPLIT_FILES = {"train": ("trainx.npy", "trainy.npy"), "val": ("validx.npy", "validy.npy"),
               "test": ("testx.npy", "testy.npy")}


def normalize(y: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return (2.0 * (y - lo) / (hi - lo) - 1.0).astype(np.float32)


def _fix(task: Task) -> str:
    t = task.extras["target"]
    return (f"run `sptune data prepare {task.name} --from <dir or archive with BIDMC32{t}_TRAIN.ts and "
            f"BIDMC32{t}_TEST.ts>`")


def _load_npy(task: Task, path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r")
    except (OSError, ValueError) as err:
        raise UserError(f"{task.name}: truncated or corrupt file {path} ({err}); {_fix(task)}") from None


def _read_split(task: Task, data_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    x_path, y_path = (data_dir / name for name in SPLIT_FILES[split])
    x, y = _load_npy(task, x_path), _load_npy(task, y_path)
    problem = _shape_problem(x, y)
    if problem:
        raise UserError(f"{task.name}: {x_path}: {problem}; {_fix(task)}")
    return x, y.reshape(-1)


def _shape_problem(x: np.ndarray, y: np.ndarray) -> str:
    if x.ndim != 3 or x.shape[1:] != (SEQ_LEN, CHANNELS):
        return f"x has shape {x.shape}, expected (N, {SEQ_LEN}, {CHANNELS})"
    if y.size != x.shape[0]:
        return f"y has {y.size} targets for {x.shape[0]} series"
    return ""


def load_bidmc(task: Task, data_dir: Path, seed: int) -> dict[str, Split]:
    problems = cache.missing_files(data_dir, [*SPLIT_FILES["train"], *SPLIT_FILES["test"]], _fix(task))
    if problems:
        raise UserError(f"{task.name}: {problems[0]}")
    has_val = all((data_dir / name).is_file() for name in SPLIT_FILES["val"])
    sources = [data_dir / name for files in SPLIT_FILES.values() for name in files if (data_dir / name).is_file()]
    extras = task.extras

    def build(writer: cache.ArrayWriter) -> None:
        parts = {split: _read_split(task, data_dir, split) for split in SPLIT_FILES if split != "val" or has_val}
        if not has_val:  # S4's layout always has a val split; other copies may not
            x, y = parts["train"]
            keep, held = cache.holdout(len(y), extras["val_fraction"], extras["split_seed"])
            parts["train"], parts["val"] = (x[keep], y[keep]), (x[held], y[held])
        lo, hi = float(parts["train"][1].min()), float(parts["train"][1].max())
        if not hi > lo:
            raise UserError(f"{task.name}: all train targets equal {lo}; the data in {data_dir} is broken, {_fix(task)}")
        writer.save("target_range", np.array([lo, hi]))
        for split, (x, y) in parts.items():
            if not (np.isfinite(x).all() and np.isfinite(y).all()):
                raise UserError(f"{task.name}: {split} split in {data_dir} has missing (NaN) values; {_fix(task)}")
            writer.save(f"{split}_inputs", np.asarray(x, dtype=np.float32))
            writer.save(f"{split}_targets", normalize(np.asarray(y, dtype=np.float64), lo, hi))
            writer.save(f"{split}_lengths", np.full(len(y), SEQ_LEN, dtype=np.int64))

    settings = {"val_fraction": extras["val_fraction"], "split_seed": extras["split_seed"]}
    arrays = cache.cached_arrays(task.name, sources, settings, build)
    target_range = (float(arrays["target_range"][0]), float(arrays["target_range"][1]))
    splits = {split: cache.to_split(arrays, split) for split in SPLIT_FILES}
    for split in splits.values():
        split.target_range = target_range
    return splits


def verify_bidmc(task: Task, data_dir: Path) -> list[str]:
    """Every .npy is present and readable to its end, with x (N, 4000, 2) and N targets.

    The val pair may be absent (the loader then holds out part of train), but not half of it.
    """
    required = [*SPLIT_FILES["train"], *SPLIT_FILES["test"]]
    if any((data_dir / name).exists() for name in SPLIT_FILES["val"]):
        required += SPLIT_FILES["val"]
    problems = cache.missing_files(data_dir, required, _fix(task))
    for x_name, y_name in SPLIT_FILES.values():
        x_path, y_path = data_dir / x_name, data_dir / y_name
        if not (x_path.is_file() and y_path.is_file()):
            continue
        loaded = []
        for path in (x_path, y_path):
            try:
                loaded.append(np.load(path, mmap_mode="r"))  # checks the header against the file size
            except (OSError, ValueError) as err:
                problems.append(f"truncated or corrupt file {path} ({err}); {_fix(task)}")
        if len(loaded) != 2:
            continue
        x, y = loaded
        problem = _shape_problem(x, y)
        if problem:
            problems.append(f"malformed {x_path}: {problem}; {_fix(task)}")
    return problems


# --- prepare from the Monash .ts files --------------------------------------------------------


def read_ts(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A Monash/UEA regression .ts file (no timestamps): x (N, length, dims) float32, y (N,)."""
    fix = "use the Monash TSER release file"
    x, labels = ts_format.read_ts(path, fix)
    try:
        return x, np.array(labels, dtype=np.float64)
    except ValueError as err:
        raise UserError(f"{path}: a target is not a number ({err}); {fix}") from None


def _sklearn_split(n: int, test_size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The (train, test) indices sklearn.model_selection.train_test_split(test_size, random_state=seed)
    picks: ceil(test_size * n) test rows from the front of RandomState(seed).permutation(n)."""
    n_test = math.ceil(test_size * n)
    order = np.random.RandomState(seed).permutation(n)
    return order[n_test:], order[:n_test]


def reshuffle_split(x_train, y_train, x_test, y_test, seed: int = 0) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """S4's `process_data.split_data(shuffle=True)`: pool, 70 % train, then halve the rest."""
    x, y = np.concatenate([x_train, x_test]), np.concatenate([y_train, y_test])
    train, rest = _sklearn_split(len(y), 0.3, seed)
    val, test = _sklearn_split(len(rest), 0.5, seed + 1)
    return {"train": (x[train], y[train]), "val": (x[rest][val], y[rest][val]),
            "test": (x[rest][test], y[rest][test])}


def prepare_bidmc(task: Task, source: Path, data_dir: Path) -> None:
    target = task.extras["target"]
    names = {f"BIDMC32{target}_TRAIN.ts", f"BIDMC32{target}_TEST.ts"}
    with cache.unpacked(source, data_dir.parent, wanted=lambda m: Path(m).name in names) as root:
        found = {name: cache.find_file(root, name) for name in sorted(names)}
        absent = [name for name, path in found.items() if path is None]
        if absent:
            raise UserError(f"--from {source}: no {', '.join(absent)} inside; download them from "
                            f"https://zenodo.org/record/{task.extras['zenodo']}")
        x_train, y_train = read_ts(found[f"BIDMC32{target}_TRAIN.ts"])
        x_test, y_test = read_ts(found[f"BIDMC32{target}_TEST.ts"])
    splits = reshuffle_split(x_train, y_train, x_test, y_test)
    with atomic.replacing_dir(data_dir) as tmp:
        for split, (x_name, y_name) in SPLIT_FILES.items():
            x, y = splits[split]
            np.save(tmp / x_name, x)
            np.save(tmp / y_name, y)


def _task(target: str, zenodo: str) -> Task:
    name = f"bidmc-{target.lower()}"
    return Task(
        name=name,
        seq_len=SEQ_LEN,
        input_kind="continuous",
        num_classes=0,
        metric="r2",
        mask_ratio=0.25,  # Appendix C.3
        pretrain_loss="l1",
        loader=load_bidmc,
        channels=CHANNELS,
        data_subdir=f"bidmc/{target}/reshuffle",
        data_hint=(f"put S4's processed {{train,valid,test}}{{x,y}}.npy in <data root>/bidmc/{target}/reshuffle/, or "
                   f"`sptune data prepare {name} --from <dir or archive with BIDMC32{target}_TRAIN.ts and "
                   f"BIDMC32{target}_TEST.ts>` (https://zenodo.org/record/{zenodo})"),
        description=f"BIDMC32{target}: regress {target} from EKG + PPG (4000 x 2), R² on targets scaled to [-1, 1].",
        extras={"target": target, "zenodo": zenodo, "val_fraction": 0.1, "split_seed": 0},
        verifier=verify_bidmc,
        preparer=prepare_bidmc,
    )


TASKS: list[Task] = [_task("RR", "4001463"), _task("HR", "4001456"), _task("SpO2", "4001464")]
