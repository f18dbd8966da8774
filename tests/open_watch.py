"""Which processes open given files, measured (Linux only, standard library only).

`OpenWatch(dirs, names)` watches directories with the kernel's inotify and counts every open of a file named in
`names` there, by any process: the test process, its subprocesses, Ray's workers. `own_opens(names)` counts the
opens this process makes, through an audit hook. The opens made by other processes are the difference
(`other_opens`).

What each one sees, and what it does not:
  * an open is an open(2) of the file (builtins.open, Path.read_text, os.open, a C library's fopen in another
    process); os.stat, Path.is_file / exists and listing the directory open no file and are counted by neither;
  * an atomic write (sptune.atomic: a temporary name, then os.replace) opens the temporary name, not the file
    it replaces, so it is no open of `study.json`; a later read of the new file is one;
  * OpenWatch is not recursive: only the directories it is given, each one's own entries;
  * the kernel merges an event identical to the last one still queued. OpenWatch also subscribes to closes so
    that open, close, open, close stays four events, and a background thread drains the queue as events
    arrive; two opens of one file with no event between them (both held open at once, before a drain) still
    reach it as one, so its counts are lower bounds, exact for opens that close before the next one.
    `other_opens` raises when the watch saw fewer opens of a file than this process made alone;
  * the kernel's queue is bounded (/proc/sys/fs/inotify/max_queued_events): an overflow loses events, so
    `counts` raises `QueueOverflow` instead of answering;
  * own_opens sees the opens Python's audit events report (builtins.open, io.open, os.open and everything
    built on them); an open made by C code inside this process without Python's io (a compiled extension's
    fopen) reaches only OpenWatch, and `other_opens` would count it as another process's.

Paths are keyed the same way in both: the directory's real path (symlinks resolved) joined with the file name.

    with OpenWatch([study_dir]) as watch, own_opens() as own:
        ...  # the work, to its end (a Ray result returned, a subprocess exited)
    assert other_opens(watch, own) == {}
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import sys
import threading
from collections import Counter
from contextlib import contextmanager
from typing import Iterable, Iterator, NamedTuple

DEFAULT_NAMES = ("study.json", "plan.json")

# <sys/inotify.h>
IN_CLOSE_WRITE = 0x00000008
IN_CLOSE_NOWRITE = 0x00000010
IN_OPEN = 0x00000020
IN_Q_OVERFLOW = 0x00004000
IN_ONLYDIR = 0x01000000
WATCHED = IN_OPEN | IN_CLOSE_WRITE | IN_CLOSE_NOWRITE | IN_ONLYDIR  # closes: see the merge rule above
EVENT = struct.Struct("iIII")  # struct inotify_event: int wd; uint32_t mask, cookie, len; char name[len]
READ_SIZE = 1 << 16  # many events a read; at least one with the longest name (16 + NAME_MAX + 1 bytes)


class QueueOverflow(RuntimeError):
    """The kernel's inotify queue overflowed: events were lost, and no count can be trusted."""


def _name_set(names: str | Iterable[str] | None) -> frozenset[str] | None:
    if names is None:
        return None  # every name
    return frozenset([names] if isinstance(names, str) else names)


def _libc() -> ctypes.CDLL:
    if not sys.platform.startswith("linux"):
        raise OSError("OpenWatch needs Linux's inotify")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_init1.restype = ctypes.c_int
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_add_watch.restype = ctypes.c_int
    return libc


class OpenWatch:
    """Counts opens of files named in `names` (None: any name) in each of `dirs` (not recursive), by any
    process, between entering and leaving the context. `counts()` drains the events the kernel has queued
    and answers {path: opens}; call it once the work is done (an open is queued before open(2) returns)."""

    def __init__(self, dirs: str | os.PathLike | Iterable[str | os.PathLike],
                 names: str | Iterable[str] | None = DEFAULT_NAMES, background: bool = True):
        if isinstance(dirs, (str, os.PathLike)):
            dirs = [dirs]
        self.dirs = [os.path.realpath(d) for d in dirs]
        if not self.dirs:
            raise ValueError("OpenWatch needs at least one directory")
        self.names = _name_set(names)
        self.background = background  # False: drained only by counts() (a test of the overflow uses it)
        self._counts: Counter[str] = Counter()
        self._by_wd: dict[int, str] = {}
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._wake: int | None = None
        self._thread: threading.Thread | None = None
        self._overflowed = False
        self._error: BaseException | None = None

    def __enter__(self) -> OpenWatch:
        libc = _libc()
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            error = ctypes.get_errno()
            raise OSError(error, f"inotify_init1: {os.strerror(error)}")
        self._fd = fd
        try:
            for directory in self.dirs:
                wd = libc.inotify_add_watch(fd, os.fsencode(directory), WATCHED)
                if wd < 0:
                    error = ctypes.get_errno()
                    raise OSError(error, f"inotify_add_watch: {os.strerror(error)}", directory)
                self._by_wd[wd] = directory
            if self.background:
                self._wake = os.eventfd(0, os.EFD_CLOEXEC)
                self._thread = threading.Thread(target=self._drain_forever, name="open-watch", daemon=True)
                self._thread.start()
        except BaseException:
            self._close()
            raise
        return self

    def __exit__(self, kind, value, traceback) -> None:
        try:
            self._drain()
        finally:
            self._close()
        if kind is None:
            self._check()

    def counts(self) -> dict[str, int]:
        """{path: opens seen} for the files opened at least once; drains pending events first."""
        self._drain()
        self._check()
        with self._lock:
            return dict(self._counts)

    def _check(self) -> None:
        if self._error is not None:
            raise RuntimeError("OpenWatch's background drain failed") from self._error
        if self._overflowed:
            raise QueueOverflow("the inotify queue overflowed: opens were lost (see "
                                "/proc/sys/fs/inotify/max_queued_events)")

    def _drain(self) -> None:
        with self._lock:
            while self._fd is not None:
                try:
                    data = os.read(self._fd, READ_SIZE)
                except BlockingIOError:
                    return
                self._parse(data)

    def _parse(self, data: bytes) -> None:
        offset = 0
        while offset < len(data):
            wd, mask, _cookie, length = EVENT.unpack_from(data, offset)
            name = os.fsdecode(data[offset + EVENT.size: offset + EVENT.size + length].rstrip(b"\0"))
            offset += EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                self._overflowed = True
            elif mask & IN_OPEN and name and wd in self._by_wd and (self.names is None or name in self.names):
                self._counts[os.path.join(self._by_wd[wd], name)] += 1

    def _drain_forever(self) -> None:
        """Drains as soon as events arrive (fewer merged events, no overflow) until the eventfd is written."""
        try:
            poller = select.poll()
            poller.register(self._fd, select.POLLIN)
            poller.register(self._wake, select.POLLIN)
            while True:
                ready = {fd for fd, _ in poller.poll()}
                if self._wake in ready:
                    return
                self._drain()
        except BaseException as error:  # raised by counts() and __exit__ in the test's thread
            self._error = error

    def _close(self) -> None:
        if self._thread is not None:
            os.eventfd_write(self._wake, 1)
            self._thread.join()
            self._thread = None
        with self._lock:
            for fd in (self._fd, self._wake):
                if fd is not None:
                    os.close(fd)
            self._fd = self._wake = None


class Opened(NamedTuple):
    """One open this process made: the absolute path, and the mode ('r', 'w', 'a', 'r+', ...; for os.open,
    the mode its flags amount to)."""
    path: str
    mode: str

    @property
    def writes(self) -> bool:
        return any(c in self.mode for c in "wax+")


class OwnOpens:
    """What own_opens yields: `opens`, every open of a file named in `names` (None: any), in order."""

    def __init__(self, names: str | Iterable[str] | None):
        self.names = _name_set(names)
        self.opens: list[Opened] = []
        self.errors: list[BaseException] = []

    def counts(self, writes: bool | None = None) -> dict[str, int]:
        """{path: opens}, keyed as OpenWatch keys them; writes=True / False: only opens for writing / reading."""
        found: Counter[str] = Counter()
        for opened in list(self.opens):
            if writes is None or opened.writes == writes:
                directory, name = os.path.split(opened.path)
                found[os.path.join(os.path.realpath(directory), name)] += 1
        return dict(found)


def _mode(mode: object, flags: int) -> str:
    if isinstance(mode, str):
        return mode  # io's own: 'r', 'w', 'a', 'x', 'r+', ...
    access = flags & os.O_ACCMODE  # os.open: no mode, only flags
    if flags & os.O_APPEND:
        return "a+" if access == os.O_RDWR else "a"
    return {os.O_RDONLY: "r", os.O_WRONLY: "w"}.get(access, "r+")


# sys.addaudithook cannot be undone: one hook, installed on first use, serves the recorders active now.
_ACTIVE: list[OwnOpens] = []
_INSTALLED = False
_INSTALL = threading.Lock()
_IN_HOOK = threading.local()


def _hook(event: str, args: tuple) -> None:
    if event != "open" or not _ACTIVE or getattr(_IN_HOOK, "busy", False):
        return
    _IN_HOOK.busy = True
    try:
        path, mode, flags = args
        if isinstance(path, int):
            return  # a file descriptor: its file was opened, and counted, by name
        path = os.fsdecode(path)
        name = os.path.basename(path)
        recorders = [r for r in list(_ACTIVE) if r.names is None or name in r.names]
        if recorders:
            opened = Opened(os.path.abspath(path), _mode(mode, flags or 0))
            for recorder in recorders:
                recorder.opens.append(opened)
    except Exception as error:  # never into the audited open: own_opens raises it when it ends
        for recorder in list(_ACTIVE):
            recorder.errors.append(error)
    finally:
        _IN_HOOK.busy = False


@contextmanager
def own_opens(names: str | Iterable[str] | None = DEFAULT_NAMES) -> Iterator[OwnOpens]:
    """Records every open this process makes (any thread) of a file named in `names`, by path and mode."""
    global _INSTALLED
    with _INSTALL:
        if not _INSTALLED:
            sys.addaudithook(_hook)
            _INSTALLED = True
        recorder = OwnOpens(names)
        _ACTIVE.append(recorder)
    try:
        yield recorder
    finally:
        with _INSTALL:
            _ACTIVE.remove(recorder)
    if recorder.errors:
        raise RuntimeError("own_opens could not read an open event") from recorder.errors[0]


def other_opens(watch: OpenWatch, own: OwnOpens) -> dict[str, int]:
    """{path: opens by other processes} in the watched directories: what the watch saw less what this process
    made. Raises when the watch saw fewer opens of a file than this process made (merged events: see above)."""
    seen = watch.counts()
    mine = {p: n for p, n in own.counts().items()
            if os.path.dirname(p) in watch.dirs and (watch.names is None or os.path.basename(p) in watch.names)}
    short = {p: (seen.get(p, 0), n) for p, n in mine.items() if seen.get(p, 0) < n}
    if short:
        raise AssertionError(f"the watch saw fewer opens than this process made ((seen, own) by path): {short}; "
                             f"opens of one file held at once reach inotify as one event")
    return {p: n - mine.get(p, 0) for p, n in seen.items() if n > mine.get(p, 0)}
