"""Files sptune keeps for real data sets: the memory-mapped array cache, and unpacking the sources
that `sptune data prepare` reads (placing the result atomically is sptune.atomic.replacing_dir).

Parsing a release (tokenizing 150k document pairs, decoding 100k wav files) takes minutes, so each
loader does it once and keeps the result as plain .npy arrays under

    cache_root()/arrays/<task>-<key>/<name>.npy

where <key> hashes the source files' paths, sizes and mtimes and the loader's settings: replacing
or touching a source file, or changing a setting, makes a new entry instead of reusing a stale one.
Entries are reopened memory-mapped, so a 9 GB split costs no RAM until batches touch it.

A cache entry is written atomically (a temporary sibling directory, then a rename; a concurrent run
that finished the same entry first wins), so a crash never leaves a half-written entry behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from sptune.errors import UserError
from sptune.tasks.base import Split, cache_root

# Bump when any loader's array layout changes, so entries written by older code are not reused.
CACHE_VERSION = 1
_MANIFEST = "manifest.json"  # written last: an entry without it is incomplete and ignored


def _files_of(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file())
    return [path] if path.exists() else []


def cache_key(task_name: str, sources: Sequence[Path], settings: dict) -> str:
    """A short hash of (task, every source file's path, size and mtime, settings)."""
    stamp = []
    for source in sources:
        for f in _files_of(Path(source)):
            st = f.stat()
            stamp.append([str(f.resolve()), st.st_size, st.st_mtime_ns])
    blob = json.dumps([CACHE_VERSION, task_name, stamp, settings], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class ArrayWriter:
    """Creates the arrays of one cache entry inside its temporary directory.

    `create` hands out a writable memory map, so a builder can fill an array larger than RAM
    row by row; `save` stores an array it already holds.
    """

    def __init__(self, directory: Path):
        self.directory = directory
        self.names: list[str] = []

    def create(self, name: str, shape: tuple[int, ...], dtype) -> np.memmap:
        self.names.append(name)
        return np.lib.format.open_memmap(self.directory / f"{name}.npy", mode="w+", dtype=dtype, shape=shape)

    def save(self, name: str, array: np.ndarray) -> None:
        self.names.append(name)
        np.save(self.directory / f"{name}.npy", np.ascontiguousarray(array))


def _open_entry(directory: Path) -> dict[str, np.ndarray] | None:
    """The arrays of a complete entry, memory-mapped; None if missing or damaged."""
    try:
        names = json.loads((directory / _MANIFEST).read_text())["arrays"]
        # Copy-on-write maps: torch.from_numpy needs a writable array, and "c" gives one whose
        # writes stay in this process's memory, so the cache file itself is never modified.
        return {name: np.load(directory / f"{name}.npy", mmap_mode="c") for name in names}
    except (OSError, ValueError, KeyError):
        return None


def cached_arrays(task_name: str, sources: Sequence[Path], settings: dict,
                  build: Callable[[ArrayWriter], None]) -> dict[str, np.ndarray]:
    """The arrays `build` writes for these sources and settings, built on the first call only."""
    root = cache_root() / "arrays"
    directory = root / f"{task_name}-{cache_key(task_name, sources, settings)}"
    arrays = _open_entry(directory)
    if arrays is not None:
        return arrays
    if directory.exists():  # damaged (e.g. a disk filled up after the rename): rebuild it
        shutil.rmtree(directory, ignore_errors=True)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{task_name}-"))
    try:
        writer = ArrayWriter(tmp)
        build(writer)
        (tmp / _MANIFEST).write_text(json.dumps({"arrays": writer.names, "settings": settings}, default=str))
        try:
            os.rename(tmp, directory)
        except OSError:
            if not directory.exists():
                raise
            # Another process finished the same entry first; its copy is as good as ours.
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    arrays = _open_entry(directory)
    if arrays is None:
        raise UserError(f"could not reopen the array cache at {directory}; delete it and retry")
    return arrays


def to_split(arrays: dict[str, np.ndarray], split: str) -> Split:
    """Wrap the `<split>_inputs/_targets/_lengths` arrays of an entry as a Split (no copy)."""
    return Split(
        inputs=torch.from_numpy(arrays[f"{split}_inputs"]),
        targets=torch.from_numpy(arrays[f"{split}_targets"]),
        lengths=torch.from_numpy(arrays[f"{split}_lengths"]),
    )


def holdout(n: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(kept, held-out) sorted row indices: a fixed random `fraction` of n rows held out.

    Keyed by the task's data seed, never the run seed, so every run of a task sees the same
    validation set.
    """
    order = np.random.default_rng(seed).permutation(n)
    n_out = int(round(n * fraction))
    return np.sort(order[n_out:]), np.sort(order[:n_out])


# --- reading the sources of `sptune data prepare` ---------------------------------------------


@contextmanager
def unpacked(source: Path, scratch: Path, wanted: Callable[[str], bool] | None = None) -> Iterator[Path]:
    """A directory holding `source`'s files: `source` itself if it is a directory, else the
    archive (tar in any compression, or zip) extracted into a temporary directory under `scratch`.

    `wanted(member_name)` limits extraction, e.g. to the two ListOps files of the 7.7 GB LRA
    release. The temporary directory is removed afterwards.
    """
    source = Path(source).expanduser()
    if source.is_dir():
        yield source
        return
    if not source.is_file():
        raise UserError(f"--from {source}: no such file or directory")
    scratch.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=scratch, prefix=".unpack-"))
    try:
        _extract(source, tmp, wanted or (lambda name: True))
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _extract(archive: Path, dest: Path, wanted: Callable[[str], bool]) -> None:
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            z.extractall(dest, members=[m for m in z.namelist() if wanted(m)])
        return
    try:
        with tarfile.open(archive) as t:
            members = (m for m in t if (m.isfile() or m.isdir()) and wanted(m.name))
            # The "data" filter refuses absolute paths, links out of dest and device files.
            t.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as err:
        raise UserError(f"--from {archive}: not a readable tar or zip archive ({err}); "
                        f"pass a directory or an intact archive") from None


def find_file(root: Path, name: str) -> Path | None:
    """The shallowest file called `name` below `root`, or None."""
    matches = sorted(root.rglob(name), key=lambda p: (len(p.parts), str(p)))
    return next((m for m in matches if m.is_file()), None)


def missing_files(directory: Path, names: Iterable[str], fix: str) -> list[str]:
    """One problem line per expected file that is absent or empty (one line if the directory is)."""
    if not directory.is_dir():
        return [f"missing {directory}; {fix}"]
    problems = []
    for name in names:
        path = directory / name
        if not path.is_file():
            problems.append(f"missing {path}; {fix}")
        elif path.stat().st_size == 0:
            problems.append(f"empty file {path} (truncated download?); {fix}")
    return problems
