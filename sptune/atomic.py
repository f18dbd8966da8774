"""Atomic file writes: a reader (or a resumed run) sees the old file or the complete new one, never half.

Everything is written to a temporary name in the destination's directory and renamed over it
(os.replace is atomic on POSIX within one file system).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

# mkstemp creates 0600 files; a written file gets the mode a plain open() would give it (0666 less the
# umask), so other accounts on a shared study directory (a cluster's NFS) can read results and plots.
_UMASK = os.umask(0)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK


@contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path; on success it replaces `path`, on failure it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with replacing(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    with replacing(path) as tmp:
        tmp.write_text(text)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True))


def write_torch(path: str | os.PathLike, obj: Any) -> None:
    """torch.save, atomically (for caches a crash or a concurrent run must never leave truncated)."""
    import torch  # here, not at the top: config and the CLI import this module and need no torch

    with replacing(path) as tmp:
        torch.save(obj, tmp)


@contextmanager
def replacing_dir(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory next to `dest`; on success it replaces `dest` (the old copy, if
    any, is moved aside first and deleted after), on failure it is removed."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}."))
    try:
        yield tmp
        if dest.exists():
            old = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.old."))
            os.replace(dest, old / dest.name)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def copy_file(source: str | os.PathLike, dest: str | os.PathLike) -> None:
    with replacing(dest) as tmp:
        shutil.copyfile(source, tmp)
