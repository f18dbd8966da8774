"""A task read from the researcher's own files: `task.name=files task.path=DIR`.

DIR holds the splits in one of three formats, detected from its file names:

    npz        train.npz      [val.npz]      test.npz       arrays  inputs, targets, [lengths]
    parquet    train.parquet  [val.parquet]  test.parquet   columns inputs, targets, [lengths]
    datasets   a DatasetDict saved with `save_to_disk` (DIR/dataset_dict.json), splits train,
               [validation or val], test, columns as for parquet; read offline with load_from_disk

Every split is padded to one length L. inputs is (N, L) or (N, L, C), in parquet and datasets a
list column (a list of L lists of C values for several channels); lengths (N,) gives each example's
valid length (default L). Positions at or beyond it are padding: their values are never checked or
used, so any pad value works.

What the files decide:

    inputs integer   tokens (N, L). Ids in the files are >= 0 and are shifted by
                     len(SPECIAL_TOKENS) = 3 on load, because sptune reserves 0 <pad>, 1 <mask> and
                     2 <unk>; padding becomes PAD_ID. vocab_size = the largest id + 1 + 3.
    inputs float     continuous (N, L, C) float32; (N, L) is one channel.
    targets integer  classification over max(train targets) + 1 classes, metric accuracy.
    targets float    regression, metric r2.

Masked SPT defaults follow the paper (§2): 15% with cross-entropy for tokens, 25% with L1 for
continuous inputs. Without a val split, val is 20% of train drawn with seed 0 (stratified by class
for classification), so every run and seed of the task shares one split; with task.resample_splits=true
each run draws it with its run seed instead (test stays the files'). A given val split is never redrawn.

`verify_dir` lists every problem (`sptune data verify DIR` prints them); `load_files_task` refuses a
directory with any. Converted splits are kept in the array cache (sptune.tasks.cache), keyed by the
files' paths, sizes and mtimes.
"""

from __future__ import annotations

import dataclasses
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sptune.errors import UserError
from sptune.tasks import cache
from sptune.tasks.base import PAD_ID, SPECIAL_TOKENS, Split, Task

if TYPE_CHECKING:
    import pyarrow as pa

NAME = "files"
SPLITS = ("train", "val", "test")
REQUIRED = ("train", "test")
COLUMNS = ("inputs", "targets", "lengths")
SUFFIXES = {"npz": ".npz", "parquet": ".parquet"}
DATASET_SPLITS = {"train": ("train",), "val": ("validation", "val"), "test": ("test",)}
OFFSET = len(SPECIAL_TOKENS)  # file token id i is sptune token id i + OFFSET
VAL_FRACTION = 0.2
SPLIT_SEED = 0
# input kind -> (mask ratio, pretraining loss) of masked SPT (paper §2)
DEFAULTS = {"tokens": (0.15, "ce"), "continuous": (0.25, "l1")}
LOSS_NAMES = {"ce": "cross-entropy", "l1": "L1"}
LAYOUT = ("train.npz and test.npz (arrays inputs, targets, optional lengths), train.parquet and test.parquet "
          "(same columns), or a datasets DatasetDict saved with save_to_disk (splits train, test)")
PAD_FIX = "pad every sequence to one length L and give each one's true length in `lengths`"


# --- reading ----------------------------------------------------------------------------------


@dataclass
class _Raw:
    """One split as read, before any check."""

    where: str  # the file (or datasets split directory) that problems name
    entry: str  # "array" (npz) or "column" (parquet, datasets)
    present: set[str] = field(default_factory=set)  # names in the file, readable or not
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # the readable ones
    opened: bool = True  # False: the file itself is unreadable (reported), so nothing else about it is


class _Unreadable(Exception):
    """A column that is no rectangular array; the message says why and how to fix it."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _detect(path: Path) -> tuple[str | None, list[str]]:
    """The one format DIR holds, or the problem why none can be chosen."""
    found = [fmt for fmt, suffix in SUFFIXES.items() if any((path / f"{s}{suffix}").is_file() for s in SPLITS)]
    if (path / "dataset_dict.json").is_file():
        found.append("datasets")
    if len(found) > 1:
        return None, [f"{path}: holds {' and '.join(found)} splits; keep the files of one format only"]
    if found:
        return found[0], []
    if (path / "state.json").is_file():
        return None, [f"{path}: holds a single datasets Dataset; save a DatasetDict with train and test splits "
                      f"(DatasetDict(train=..., test=...).save_to_disk(DIR))"]
    return None, [f"{path}: no recognised data files; add {LAYOUT}"]


def _read_npz(file: Path) -> tuple[_Raw, list[str]]:
    raw = _Raw(str(file), "array", opened=False)
    try:
        npz = np.load(file, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        return raw, [f"{file}: not a readable .npz archive ({_one_line(exc)}); write it with "
                     f"numpy.savez(file, inputs=..., targets=...)"]
    if not isinstance(npz, np.lib.npyio.NpzFile):
        return raw, [f"{file}: holds one unnamed array; write named arrays with numpy.savez(file, inputs=..., "
                     f"targets=...)"]
    problems, raw.opened = [], True
    with npz:
        raw.present = set(npz.files) & set(COLUMNS)
        for name in sorted(raw.present):
            try:
                raw.arrays[name] = npz[name]
            except ValueError as exc:
                if "allow_pickle" in str(exc):  # an object array: how numpy saves ragged sequences (never unpickled)
                    problems.append(f"{file}: `{name}` is an object array (sequences of different lengths?); "
                                    f"{PAD_FIX}")
                else:
                    problems.append(f"{file}: cannot read `{name}` ({_one_line(exc)}); write the file again")
            except (OSError, EOFError, zipfile.BadZipFile) as exc:
                problems.append(f"{file}: cannot read `{name}` ({_one_line(exc)}); write the file again")
    return raw, problems


def _read_parquet(file: Path) -> tuple[_Raw, list[str]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(file)
    except (OSError, pa.ArrowException) as exc:
        problem = f"{file}: not a readable parquet file ({_one_line(exc)}); write it with pyarrow.parquet.write_table"
        return _Raw(str(file), "column", opened=False), [problem]
    return _from_table(table, str(file))


def _read_datasets(path: Path) -> tuple[dict[str, _Raw], list[str]]:
    import datasets

    try:
        saved = datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises many types (FileNotFoundError, JSON, Arrow) for a damaged copy
        return {}, [f"{path}: cannot load the saved DatasetDict ({_one_line(exc)}); save it again with "
                    f"DatasetDict.save_to_disk"]
    if not isinstance(saved, datasets.DatasetDict):
        return {}, [f"{path}: holds a single datasets Dataset; save a DatasetDict with train and test splits"]
    raws, problems = {}, []
    for split, names in DATASET_SPLITS.items():
        found = [name for name in names if name in saved]
        if len(found) > 1:
            problems.append(f"{path}: the DatasetDict has both {' and '.join(found)} splits; keep one")
        if found:
            raw, bad = _from_table(saved[found[0]].with_format("arrow")[:], str(path / found[0]))
            raws[split] = raw
            problems += bad
    missing = [split for split in REQUIRED if split not in raws]
    if missing:
        problems.append(f"{path}: the DatasetDict has no {' or '.join(missing)} split (splits: "
                        f"{', '.join(saved) or 'none'}); save it with splits named train and test")
    return raws, problems


def _from_table(table: pa.Table, where: str) -> tuple[_Raw, list[str]]:
    raw = _Raw(where, "column", present=set(table.column_names) & set(COLUMNS))
    problems = []
    for name in sorted(raw.present):
        try:
            fix = PAD_FIX if name == "inputs" else "give every example a value or drop it"
            raw.arrays[name] = _column_array(table.column(name), fix)
        except _Unreadable as exc:
            problems.append(f"{where}: `{name}` {exc}")
    return raw, problems


def _column_array(column: pa.ChunkedArray, null_fix: str) -> np.ndarray:
    """A column of scalars (N,), equal-length lists (N, L) or lists of lists (N, L, C) as one array;
    `null_fix` says how to fill missing values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = column.combine_chunks()
    shape = [len(values)]
    for level in ("rows", "steps"):
        if isinstance(values, pa.ExtensionArray):  # e.g. datasets' Array2D: a list array underneath
            values = values.storage
        if not (pa.types.is_list(values.type) or pa.types.is_large_list(values.type)
                or pa.types.is_fixed_size_list(values.type)):
            break
        if values.null_count:
            raise _Unreadable(f"has null {level}; {null_fix}")
        sizes = pc.list_value_length(values).to_numpy(zero_copy_only=False)
        if len(sizes) and sizes.min() != sizes.max():
            if level == "rows":
                raise _Unreadable(f"rows differ in length ({sizes.min()} to {sizes.max()}); {PAD_FIX}")
            raise _Unreadable(f"steps differ in channel count ({sizes.min()} to {sizes.max()}); give every step "
                              f"the same channels")
        shape.append(int(sizes[0]) if len(sizes) else 0)
        values = values.flatten()
    if isinstance(values, pa.ExtensionArray):
        values = values.storage
    if pa.types.is_nested(values.type):
        raise _Unreadable(f"has type {column.type}; give (N,), (N, L) or (N, L, C) values")
    if values.null_count:
        raise _Unreadable(f"holds {values.null_count} null value(s); {null_fix}")
    return values.to_numpy(zero_copy_only=False).reshape(shape)


def _read(path: Path) -> tuple[str | None, dict[str, _Raw], list[str]]:
    """(format, the splits found by name, problems reading them)."""
    if not path.exists():
        return None, {}, [f"{path}: no such directory; point task.path at a directory holding {LAYOUT}"]
    if not path.is_dir():
        return None, {}, [f"{path}: not a directory; point task.path at a directory holding {LAYOUT}"]
    fmt, problems = _detect(path)
    if fmt is None:
        return None, {}, problems
    if fmt == "datasets":
        raws, problems = _read_datasets(path)
        return fmt, raws, problems
    raws = {}
    for split in SPLITS:
        file = path / f"{split}{SUFFIXES[fmt]}"
        if file.is_file():
            raws[split], bad = _read_npz(file) if fmt == "npz" else _read_parquet(file)
            problems += bad
        elif split in REQUIRED:
            entries = "arrays" if fmt == "npz" else "columns"
            problems.append(f"{file}: missing {split} split; add it ({entries} inputs, targets, optional lengths)")
    return fmt, raws, problems


# --- checking ---------------------------------------------------------------------------------


@dataclass
class _Shape:
    """What one split says about the task; None where its arrays are unusable (already reported)."""

    input_kind: str | None = None
    seq_len: int | None = None
    channels: int | None = None
    target_kind: str | None = None  # "classes" | "regression"


def _input_kind(x: np.ndarray) -> str | None:
    if np.issubdtype(x.dtype, np.integer):
        return "tokens"
    return "continuous" if np.issubdtype(x.dtype, np.floating) else None


def _target_kind(y: np.ndarray) -> str | None:
    if np.issubdtype(y.dtype, np.integer):
        return "classes"
    return "regression" if np.issubdtype(y.dtype, np.floating) else None


def _valid(lengths: np.ndarray, seq_len: int) -> np.ndarray:
    """(N, L) True at the positions before each example's length."""
    return np.arange(seq_len)[None, :] < lengths[:, None]


def _first_bad(bad: np.ndarray) -> str:
    """'3 value(s), first in example 7' for a boolean array (N, ...)."""
    rows = np.flatnonzero(bad.reshape(len(bad), -1).any(axis=1))
    return f"{int(bad.sum())} value(s), first in example {rows[0]}"


def _check_split(raw: _Raw) -> tuple[list[str], _Shape]:
    """Problems of one split on its own, and what it says about the task."""
    where, problems, shape = raw.where, [], _Shape()
    if not raw.opened:
        return problems, shape
    for name, fix in (("inputs", "the sequences, (N, L) or (N, L, C)"),
                      ("targets", "one class id (integer) or regression value (float) per example")):
        if name not in raw.present:
            found = ", ".join(sorted(raw.present)) or "none of inputs, targets, lengths"
            problems.append(f"{where}: no `{name}` {raw.entry} (found: {found}); add `{name}` holding {fix}")
    x, y, lengths = (raw.arrays.get(name) for name in COLUMNS)

    if x is not None:
        kind = _input_kind(x)
        if kind is None:
            problems.append(f"{where}: `inputs` has dtype {x.dtype}; give integer token ids or float values")
            x = None
        elif x.ndim != 2 and not (kind == "continuous" and x.ndim == 3):
            what, wanted = ("integer `inputs` (tokens)", "(N, L)") if kind == "tokens" \
                else ("float `inputs` (continuous)", "(N, L) or (N, L, C)")
            problems.append(f"{where}: {what} have shape {x.shape}; give them as {wanted}")
            x = None
        else:
            shape.input_kind, shape.seq_len = kind, x.shape[1]
            shape.channels = x.shape[2] if x.ndim == 3 else 1 if kind == "continuous" else None
    if y is not None:
        if _target_kind(y) is None or y.ndim != 1:
            problems.append(f"{where}: `targets` has dtype {y.dtype} and shape {y.shape}; give one integer class id "
                            f"or float regression value per example, shape (N,)")
            y = None
        else:
            shape.target_kind = _target_kind(y)
    if lengths is not None and (not np.issubdtype(lengths.dtype, np.integer) or lengths.ndim != 1):
        problems.append(f"{where}: `lengths` has dtype {lengths.dtype} and shape {lengths.shape}; give one integer "
                        f"length per example, shape (N,)")
        lengths = None

    counts = {name: len(a) for name, a in zip(COLUMNS, (x, y, lengths)) if a is not None}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{n} {name}" for name, n in counts.items())
        problems.append(f"{where}: arrays of different lengths ({listed}); give one target and length per example")
        lengths = None  # no per-example pairing with the inputs to check
    if counts and max(counts.values()) == 0:
        problems.append(f"{where}: empty split (0 examples); add examples or remove the file")
    elif x is not None and x.shape[1] == 0:
        problems.append(f"{where}: `inputs` have length 0; give sequences of at least one step")
    problems += _check_values(raw.where, x, y, lengths)
    return problems, shape


def _check_values(where: str, x: np.ndarray | None, y: np.ndarray | None, lengths: np.ndarray | None) -> list[str]:
    """Lengths in range, then finite values and non-negative ids and labels, at valid positions only."""
    problems = []
    valid = None
    if x is not None and len(x) and x.shape[1]:
        if lengths is not None:
            out = (lengths < 1) | (lengths > x.shape[1])
            if out.any():
                problems.append(f"{where}: `lengths` outside [1, {x.shape[1]}] ({_first_bad(out)}, min "
                                f"{lengths.min()}, max {lengths.max()}); give each example's valid length, at most "
                                f"the padded length {x.shape[1]}")
            else:
                valid = _valid(lengths, x.shape[1])  # (N, L)
        if valid is None:
            valid = np.ones(x.shape[:2], dtype=bool)
        if _input_kind(x) == "tokens":
            negative = (x < 0) & valid
            if negative.any():
                problems.append(f"{where}: `inputs` holds negative token ids ({_first_bad(negative)}, min "
                                f"{x[valid].min()}); give ids >= 0 (sptune shifts them by {OFFSET} for its special "
                                f"tokens)")
        else:
            bad = ~np.isfinite(x) & (valid[..., None] if x.ndim == 3 else valid)
            if bad.any():
                problems.append(f"{where}: `inputs` holds NaN or inf ({_first_bad(bad)}); replace them with finite "
                                f"values or drop those examples")
    if y is not None and len(y):
        if _target_kind(y) == "regression" and not np.isfinite(y).all():
            problems.append(f"{where}: `targets` holds NaN or inf ({_first_bad(~np.isfinite(y))}); give finite "
                            f"regression targets or drop those examples")
        if _target_kind(y) == "classes" and (y < 0).any():
            problems.append(f"{where}: negative class labels ({_first_bad(y < 0)}, min {y.min()}); give class ids "
                            f"0 .. K-1")
    return problems


# property of a split -> (how a value reads in a problem, the fix when splits disagree)
_AGREE = {
    "input_kind": ({"tokens": "integer (token) inputs", "continuous": "float (continuous) inputs"}.get,
                   "store every split's inputs with the same kind of dtype"),
    "seq_len": ("sequence length {}".format,
                "pad every split to one length L and give each sequence's true length in `lengths`"),
    "channels": ("{} channel(s)".format, "give every split the same channels"),
    "target_kind": ({"classes": "integer (class) targets", "regression": "float (regression) targets"}.get,
                    "store every split's targets with the same kind of dtype"),
}


def _check_across(raws: dict[str, _Raw], shapes: dict[str, _Shape]) -> list[str]:
    """Splits that disagree with the first usable one (train, normally), and labels or sizes that only
    make sense against train."""
    problems = []
    for attr, (phrase, fix) in _AGREE.items():
        known = [(split, getattr(shape, attr)) for split, shape in shapes.items() if getattr(shape, attr) is not None]
        first, expected = known[0] if known else (None, None)
        problems += [f"{raws[split].where}: {phrase(value)}, but {raws[first].where} has {phrase(expected)}; {fix}"
                     for split, value in known[1:] if value != expected]
    problems += _check_labels(raws, shapes)
    if "val" not in raws and "train" in shapes and shapes["train"].target_kind is not None \
            and len(raws["train"].arrays["targets"]) == 1:
        problems.append(f"{raws['train'].where}: 1 example is too few to draw a validation split from; add a val "
                        f"split or more training examples")
    return problems


def _check_labels(raws: dict[str, _Raw], shapes: dict[str, _Shape]) -> list[str]:
    """val / test class labels the train split never reaches (>= max(train) + 1)."""
    if "train" not in shapes or shapes["train"].target_kind != "classes" or not len(raws["train"].arrays["targets"]):
        return []
    num_classes = int(raws["train"].arrays["targets"].max()) + 1
    problems = []
    for split in ("val", "test"):
        if split in shapes and shapes[split].target_kind == "classes":
            y = raws[split].arrays["targets"]
            unseen = np.unique(y[y >= num_classes])
            if len(unseen):
                shown = ", ".join(str(v) for v in unseen[:5]) + (", ..." if len(unseen) > 5 else "")
                problems.append(f"{raws[split].where}: class labels {shown} never occur in train (classes 0 .. "
                                f"{num_classes - 1}); relabel them or add examples of them to train")
    return problems


def _inspect(path: Path) -> tuple[str | None, dict[str, _Raw], list[str]]:
    """(format, splits, every problem)."""
    fmt, raws, problems = _read(path)
    checked = {split: _check_split(raw) for split, raw in raws.items()}
    for bad, _ in checked.values():
        problems += bad
    shapes = {split: shape for split, (_, shape) in checked.items()}
    if raws:
        problems += _check_across(raws, shapes)
    return fmt, raws, problems


def verify_dir(path: str | os.PathLike) -> list[str]:
    """Every problem with the files task data in `path`, each one line naming the file, split or array
    and the fix; [] when it loads."""
    return _inspect(_resolve(path))[2]


# --- the task ---------------------------------------------------------------------------------


def _resolve(path: str | os.PathLike) -> Path:
    return Path(path).expanduser().resolve()


def _lengths(raw: _Raw) -> np.ndarray:
    x = raw.arrays["inputs"]
    lengths = raw.arrays.get("lengths")
    return np.full(len(x), x.shape[1], dtype=np.int64) if lengths is None else lengths.astype(np.int64)


def _vocab_size(raws: dict[str, _Raw]) -> int:
    """The largest token id at a valid position of any split, + 1, + the special tokens."""
    top = max(int(raw.arrays["inputs"][_valid(_lengths(raw), raw.arrays["inputs"].shape[1])].max())
              for raw in raws.values())
    return top + 1 + OFFSET


def _id_dtype(vocab_size: int) -> type:
    """The smallest signed integer type holding every id (batches are cast to int64)."""
    return next(t for t in (np.int16, np.int32, np.int64) if vocab_size - 1 <= np.iinfo(t).max)


def _val_rows(targets: np.ndarray, classification: bool, seed: int = SPLIT_SEED) -> tuple[np.ndarray, np.ndarray, str]:
    """(kept, held-out) sorted train rows, drawn with `seed`, and how: "stratified" or "random"."""
    from sklearn.model_selection import train_test_split

    rows = np.arange(len(targets))
    if classification:
        try:
            keep, held = train_test_split(rows, test_size=VAL_FRACTION, random_state=seed, stratify=targets)
            return np.sort(keep), np.sort(held), "stratified"
        except ValueError:  # a class with a single example, or fewer val rows than classes
            pass
    keep, held = train_test_split(rows, test_size=VAL_FRACTION, random_state=seed)
    return np.sort(keep), np.sort(held), "random"


def _convert(raw: _Raw, task: Task) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs, targets, lengths) of a verified split as sptune stores them."""
    x, lengths = raw.arrays["inputs"], _lengths(raw)
    padding = ~_valid(lengths, x.shape[1])  # (N, L)
    if task.input_kind == "tokens":
        ids = x.astype(np.int64) + OFFSET  # (N, L)
        ids[padding] = PAD_ID
        inputs = ids.astype(_id_dtype(task.vocab_size))
    else:
        inputs = x.reshape(len(x), x.shape[1], -1).astype(np.float32)  # (N, L, C)
        inputs[padding] = 0.0  # whatever the files pad with (NaN included) never reaches a model
    targets = raw.arrays["targets"].astype(np.float32 if task.is_regression else np.int64)
    return inputs, targets, lengths


def _data_files(path: Path) -> list[Path]:
    """The files a task of `path` is read from, whose sizes and mtimes key the caches."""
    if (path / "dataset_dict.json").is_file():
        return sorted(p for p in path.rglob("*") if p.is_file())
    return [path / f"{split}{suffix}" for suffix in SUFFIXES.values() for split in SPLITS
            if (path / f"{split}{suffix}").is_file()]


def _stamp(path: Path) -> tuple:
    return tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in _data_files(path))


def load_files(task: Task, data_dir: Path, seed: int) -> dict[str, Split]:
    """train / val / test of the files in data_dir. A val split drawn from train uses extras["split_seed"]
    (SPLIT_SEED, or the run seed under task.resample_splits, which Task.load sets); `seed` is not read."""
    current = load_files_task(data_dir)
    if _signature(current) != _signature(task):
        raise UserError(f"the files in {data_dir} changed since the task was read ({current.description}); "
                        f"start the run again")

    def build(writer: cache.ArrayWriter) -> None:
        _, raws, _ = _read(Path(data_dir))
        splits = {split: _convert(raw, task) for split, raw in raws.items()}
        if "val" not in splits:
            inputs, targets, lengths = splits["train"]
            keep, held, _ = _val_rows(targets, not task.is_regression, task.extras["split_seed"])
            splits["train"] = inputs[keep], targets[keep], lengths[keep]
            splits["val"] = inputs[held], targets[held], lengths[held]
        for split, arrays in splits.items():
            for name, array in zip(COLUMNS, arrays):
                writer.save(f"{split}_{name}", array)

    settings = {"val_fraction": VAL_FRACTION, "split_seed": task.extras["split_seed"], "token_offset": OFFSET}
    arrays = cache.cached_arrays(task.name, _data_files(Path(data_dir)), settings, build)
    return {split: cache.to_split(arrays, split) for split in SPLITS}


def _signature(task: Task) -> tuple:
    """What a model is built from: a change means the data no longer fits the task."""
    return task.input_kind, task.seq_len, task.channels, task.vocab_size, task.num_classes


def _verify(task: Task, data_dir: Path) -> list[str]:
    return verify_dir(data_dir)


_LOADED: dict[str, tuple[tuple, Task]] = {}  # resolved path -> (stamp of its files, task)


def load_files_task(path: str | os.PathLike) -> Task:
    """The task of the files in `path`, with everything the files decide inferred; a UserError names
    the first problem (`sptune data verify DIR` lists them all). Cached until a file changes."""
    path = _resolve(path)
    stamp = _stamp(path) if path.is_dir() else ()
    if str(path) in _LOADED and _LOADED[str(path)][0] == stamp:
        return _LOADED[str(path)][1]
    fmt, raws, problems = _inspect(path)
    if problems:
        more = f" (and {len(problems) - 1} more: `sptune data verify {path}` lists them all)" \
            if len(problems) > 1 else ""
        raise UserError(f"files task: {problems[0]}{more}")
    task = _build(path, fmt, raws)
    _LOADED[str(path)] = (stamp, task)
    return task


def _build(path: Path, fmt: str, raws: dict[str, _Raw]) -> Task:
    train = raws["train"].arrays
    kind = _input_kind(train["inputs"])
    regression = _target_kind(train["targets"]) == "regression"
    sizes = {split: len(raw.arrays["targets"]) for split, raw in raws.items()}
    val_split = "given"
    if "val" not in raws:
        keep, held, val_split = _val_rows(train["targets"], not regression)
        sizes.update(train=len(keep), val=len(held))
    mask_ratio, loss = DEFAULTS[kind]
    task = Task(
        name=NAME, seq_len=train["inputs"].shape[1], input_kind=kind,
        num_classes=0 if regression else int(train["targets"].max()) + 1, metric="r2" if regression else "accuracy",
        mask_ratio=mask_ratio, pretrain_loss=loss, loader=load_files,
        vocab_size=_vocab_size(raws) if kind == "tokens" else 0,
        channels=train["inputs"].shape[2] if train["inputs"].ndim == 3 else 1 if kind == "continuous" else 0,
        data_subdir=str(path),  # absolute: data_dir(root) is this directory whatever the data root
        data_hint=f"put the files in {path}: {LAYOUT}",
        extras={"format": fmt, "val_from_train": "val" not in raws, "val_split": val_split,
                "val_fraction": VAL_FRACTION, "split_seed": SPLIT_SEED,
                **{f"num_{split}": sizes[split] for split in SPLITS}},
        verifier=_verify, resamplable="val" not in raws,
    )
    return dataclasses.replace(task, description=describe(task))


def describe(task: Task) -> str:
    """One line: what was inferred from the files, the split sizes and the masked SPT defaults."""
    extras = task.extras
    if task.input_kind == "tokens":
        inputs = f"tokens, vocab {task.vocab_size} (incl. {OFFSET} special)"
    else:
        inputs = f"continuous, {task.channels} channel{'s' if task.channels != 1 else ''}"
    output = "regression (r2)" if task.is_regression else f"{task.num_classes} classes ({task.metric})"
    val = f"val {extras['num_val']}"
    if extras["val_from_train"]:
        how = {"stratified": "stratified ", "random": ""}[extras["val_split"]]
        note = "; too few examples per class to stratify" if extras["val_split"] == "random" \
            and not task.is_regression else ""
        val += f" (drawn from train: {how}{extras['val_fraction']:.0%}, seed {extras['split_seed']}{note})"
    return (f"files task {task.data_subdir} ({extras['format']}): {inputs}, length {task.seq_len}, {output}; "
            f"train {extras['num_train']} / {val} / test {extras['num_test']}; masked SPT default "
            f"{task.mask_ratio:.0%} with {LOSS_NAMES.get(task.pretrain_loss, task.pretrain_loss)}")
