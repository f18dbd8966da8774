"""Readers of the official Long Range Arena release (Tay et al. 2020), `lra_release.gz`.

Layout below the data root, as the release unpacks:

    lra_release/listops-1000/basic_{train,val,test}.tsv       listops-lra
    lra_release/tsv_data/new_aan_pairs.{train,eval,test}.tsv  retrieval

`sptune data prepare <task> --from lra_release.gz` extracts just these files (the release is
7.7 GB, mostly Pathfinder images). Parsed splits are kept in the memory-mapped array cache.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterable

import numpy as np

from sptune import atomic
from sptune.errors import UserError
from sptune.tasks import cache, listops
from sptune.tasks.base import PAD_ID, SPECIAL_TOKENS, Split, Task

# Byte-level vocabulary of the character tasks (Text, Retrieval): byte b has id b + 3, after the
# special tokens, so no byte collides with <pad>/<mask>/<unk>.
BYTE_OFFSET = len(SPECIAL_TOKENS)
BYTE_VOCAB_SIZE = 256 + BYTE_OFFSET

# Rows are written into zero-filled memory maps, which is already padding only because PAD_ID is 0.
assert PAD_ID == 0

LISTOPS_FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}
AAN_FILES = {"train": "new_aan_pairs.train.tsv", "val": "new_aan_pairs.eval.tsv", "test": "new_aan_pairs.test.tsv"}


def encode_bytes(data: bytes, seq_len: int) -> np.ndarray:
    """Token ids of the first `seq_len` bytes of `data` (int64)."""
    return np.frombuffer(data[:seq_len], dtype=np.uint8).astype(np.int64) + BYTE_OFFSET


def _fix(task: Task) -> str:
    return f"run `sptune data prepare {task.name} --from lra_release.gz` (or see `sptune data list`)"


def _require(task: Task, data_dir: Path, files: dict[str, str]) -> None:
    problems = cache.missing_files(data_dir, files.values(), _fix(task))
    if problems:
        raise UserError(f"{task.name}: {problems[0]}")


# --- listops-lra ------------------------------------------------------------------------------


def load_listops_lra(task: Task, data_dir: Path, seed: int) -> dict[str, Split]:
    """The official ListOps splits (96k/2k/2k), tokenized without parentheses like `listops`.

    The release fixes the splits, so the run seed does not enter.
    """
    _require(task, data_dir, LISTOPS_FILES)
    paths = [data_dir / name for name in LISTOPS_FILES.values()]

    def build(writer: cache.ArrayWriter) -> None:
        for split, name in LISTOPS_FILES.items():
            path = data_dir / name
            try:
                expressions, labels = listops.read_tsv(path)
            except (ValueError, IndexError) as err:  # a row without a label, or a label not an int
                raise UserError(f"corrupt file {path} ({err}); {_fix(task)}") from None
            inputs = writer.create(f"{split}_inputs", (len(expressions), task.seq_len), np.int64)
            lengths = np.zeros(len(expressions), dtype=np.int64)
            for i, expression in enumerate(expressions):
                try:
                    ids = listops.encode(listops.tokenize(expression))[: task.seq_len]
                except ValueError as err:
                    raise UserError(f"{path}: row {i + 1}: {err}; {_fix(task)}") from None
                inputs[i, : len(ids)] = ids
                lengths[i] = len(ids)
            targets = np.asarray(labels, dtype=np.int64)
            if targets.size and not (0 <= targets.min() and targets.max() < task.num_classes):
                raise UserError(f"{path}: labels outside 0..{task.num_classes - 1}; {_fix(task)}")
            writer.save(f"{split}_lengths", lengths)
            writer.save(f"{split}_targets", targets)

    arrays = cache.cached_arrays(task.name, paths, {"seq_len": task.seq_len}, build)
    return {split: cache.to_split(arrays, split) for split in LISTOPS_FILES}


def _last_line(path: Path, window: int = 1 << 20) -> bytes:
    """The last non-empty line of a file (reads at most `window` bytes from its end)."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        f.seek(max(0, size - window))
        tail = f.read()
    lines = [line for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else b""


def _present(data_dir: Path, names: Iterable[str]) -> list[Path]:
    """The files that are there and not empty: the ones whose contents are worth checking
    (cache.missing_files reports the others)."""
    paths = (data_dir / name for name in names)
    return [path for path in paths if path.is_file() and path.stat().st_size > 0]


def verify_listops_lra(task: Task, data_dir: Path) -> list[str]:
    """Each file is present, starts with the `Source<TAB>Target` header and its last row is a
    complete expression whose value is its label (a truncated file fails that)."""
    problems = cache.missing_files(data_dir, LISTOPS_FILES.values(), _fix(task))
    for path in _present(data_dir, LISTOPS_FILES.values()):
        with open(path, "rb") as f:
            header = f.readline().rstrip(b"\r\n")
        if header != b"Source\tTarget":
            problems.append(f"corrupt file {path}: header is not 'Source<TAB>Target'; {_fix(task)}")
            continue
        try:
            expression, label = _last_line(path).decode().rstrip("\r\n").split("\t")
            complete = listops.label_of(expression) == int(label)
        except ValueError:  # also UnicodeDecodeError, and a row without exactly two columns
            complete = False
        if not complete:
            problems.append(f"truncated or corrupt file {path}: its last row is not a complete "
                            f"expression with its label; {_fix(task)}")
    return problems


# --- retrieval (AAN) --------------------------------------------------------------------------


def _count_rows(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def _read_pairs(task: Task, path: Path, split: str, writer: cache.ArrayWriter) -> None:
    """One AAN TSV (label, id1, id2, text1, text2; no header) into (N, 2, L) byte ids.

    Fields are split on tabs only, never quotes, like the LRA input pipeline
    (`use_quote_delim=False`): the texts contain stray quote characters.
    """
    n = _count_rows(path)
    inputs = writer.create(f"{split}_inputs", (n, 2, task.seq_len), np.int64)
    lengths = np.zeros((n, 2), dtype=np.int64)
    targets = np.zeros(n, dtype=np.int64)
    with open(path, "rb") as f:
        row = 0
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            fields = line.rstrip(b"\r\n").split(b"\t")
            try:
                if len(fields) != 5:
                    raise ValueError(f"{len(fields)} tab-separated columns instead of 5 "
                                     f"(label, id1, id2, text1, text2)")
                label = float(fields[0])
                if label not in (0.0, 1.0):
                    raise ValueError(f"label {fields[0].decode(errors='replace')!r} is not 0 or 1")
            except ValueError as err:
                raise UserError(f"{path}:{line_no}: {err}; {_fix(task)}") from None
            targets[row] = int(label)
            for j, text in enumerate(fields[3:]):
                ids = encode_bytes(text, task.seq_len)
                inputs[row, j, : len(ids)] = ids
                lengths[row, j] = len(ids)
            row += 1
    writer.save(f"{split}_lengths", lengths)
    writer.save(f"{split}_targets", targets)


def load_retrieval(task: Task, data_dir: Path, seed: int) -> dict[str, Split]:
    """AAN document pairs as bytes, each document truncated to seq_len; official splits."""
    _require(task, data_dir, AAN_FILES)
    paths = [data_dir / name for name in AAN_FILES.values()]

    def build(writer: cache.ArrayWriter) -> None:
        for split, name in AAN_FILES.items():
            _read_pairs(task, data_dir / name, split, writer)

    arrays = cache.cached_arrays(task.name, paths, {"seq_len": task.seq_len}, build)
    return {split: cache.to_split(arrays, split) for split in AAN_FILES}


def verify_retrieval(task: Task, data_dir: Path) -> list[str]:
    """Each file is present, its first and last rows have the five AAN columns, and it ends
    with a newline (a download cut mid-document does not)."""
    problems = cache.missing_files(data_dir, AAN_FILES.values(), _fix(task))
    for path in _present(data_dir, AAN_FILES.values()):
        with open(path, "rb") as f:
            first = f.readline()
            f.seek(-1, 2)
            ends_with_newline = f.read(1) == b"\n"
        for line in (first, _last_line(path)):
            fields = line.rstrip(b"\r\n").split(b"\t")
            try:
                well_formed = len(fields) == 5 and float(fields[0]) in (0.0, 1.0)
            except ValueError:
                well_formed = False
            if not well_formed:
                problems.append(f"corrupt file {path}: a row is not label<TAB>id1<TAB>id2<TAB>text1<TAB>text2; "
                                f"{_fix(task)}")
                break
        else:
            if not ends_with_newline:
                problems.append(f"truncated file {path}: it ends mid-row; {_fix(task)}")
    return problems


# --- prepare ----------------------------------------------------------------------------------


def _preparer(files: dict[str, str]):
    def prepare(task: Task, source: Path, data_dir: Path) -> None:
        """Copy the task's files out of the LRA release (archive or unpacked directory)."""
        names = set(files.values())
        with cache.unpacked(source, data_dir.parent, wanted=lambda m: Path(m).name in names) as root:
            found = {name: cache.find_file(root, name) for name in names}
            absent = sorted(name for name, path in found.items() if path is None)
            if absent:
                raise UserError(f"--from {source}: no {', '.join(absent)} inside; pass lra_release.gz "
                                f"from https://github.com/google-research/long-range-arena or its unpacked directory")
            for name, path in found.items():
                atomic.copy_file(path, data_dir / name)

    return prepare


# The generated `listops` task's settings (length, vocabulary, mask ratio, ...), read from the release.
LISTOPS_LRA = replace(
    listops.LISTOPS,
    name="listops-lra",
    loader=load_listops_lra,
    data_subdir="lra_release/listops-1000",
    data_hint="put basic_{train,val,test}.tsv in <data root>/lra_release/listops-1000/: "
              "`sptune data prepare listops-lra --from lra_release.gz` (the LRA release, "
              "https://github.com/google-research/long-range-arena)",
    description="LRA ListOps from the official release files (96k/2k/2k); `listops` generates the same locally.",
    extras={},  # the generator's settings do not apply
    verifier=verify_listops_lra,
    preparer=_preparer(LISTOPS_FILES),
)

RETRIEVAL = Task(
    name="retrieval",
    seq_len=4000,
    input_kind="tokens",
    num_classes=2,
    metric="accuracy",
    mask_ratio=0.15,  # paper §2
    pretrain_loss="ce",
    loader=load_retrieval,
    vocab_size=BYTE_VOCAB_SIZE,
    paired=True,
    data_subdir="lra_release/tsv_data",
    data_hint="put new_aan_pairs.{train,eval,test}.tsv in <data root>/lra_release/tsv_data/: "
              "`sptune data prepare retrieval --from lra_release.gz` (the LRA release, "
              "https://github.com/google-research/long-range-arena)",
    description="LRA Retrieval: do two AAN papers cite each other? Byte level, 4000 bytes per document, "
                "inputs (N, 2, 4000).",
    verifier=verify_retrieval,
    preparer=_preparer(AAN_FILES),
)

TASKS: list[Task] = [LISTOPS_LRA, RETRIEVAL]
