"""What a study shows: a few lines on the terminal, and everything Ray and the trials print in a log file.

    with output.captured(study_dir / files.STUDY_LOG, echo=False) as console:
        console.line("...")   # our own lines: the terminal and the log
        ...                   # Ray, Tune and the trials print into the log (echo=True: the terminal too)

Inside `captured`, Python's sys.stdout / sys.stderr write to the log, and so do the process's file
descriptors 1 and 2 when they are the real ones (a terminal or a pipe; not a notebook's or pytest's
streams), which catches what Ray's C++ core and child processes write. Trials print their evals in
their worker processes; Ray forwards those lines to the driver (`ray.init(log_to_driver=True)`, the
default), whose streams are the log.

Progress (a tqdm bar) is drawn only on a terminal; elsewhere (a pipe, a CI log) the finished-trial
lines carry the counts and the ETA instead.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, TextIO


_active: list["Console"] = []  # the console of the innermost `captured` block


class Console:
    """Our own lines: written to the terminal the study started on, and copied into the log."""

    def __init__(self, terminal: TextIO, log: TextIO, show_trials: bool = True, bars: bool = True):
        self.terminal, self.log, self.show_trials = terminal, log, show_trials
        self.bars = bars and hasattr(terminal, "isatty") and terminal.isatty()

    def line(self, text: str = "") -> None:
        from tqdm.auto import tqdm

        tqdm.write(text, file=self.terminal)  # above any progress bar, which is redrawn below it
        self.log.write(text + "\n")

    def bar(self, total: float, desc: str, initial: float = 0):
        """A progress bar on the terminal (None when it is not one, or when Ray's output is echoed)."""
        if not self.bars:
            return None
        from tqdm.auto import tqdm

        return tqdm(total=total, initial=initial, desc=desc, file=self.terminal, dynamic_ncols=True, leave=True,
                    bar_format="{desc} {percentage:3.0f}%|{bar:24}| [{elapsed}<{remaining}]")


def current() -> Console | None:
    """The console of the running study, if it shows progress (callbacks print through it)."""
    return _active[-1] if _active else None


def say(text: str) -> None:
    """One line on the running study's console; nothing without one (tests, plain pipeline calls)."""
    if _active:
        _active[-1].line(text)


class _Tee:
    def __init__(self, *streams: TextIO):
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()

    def isatty(self) -> bool:
        return False


def _is_fd(stream: TextIO, fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        return False


@contextmanager
def captured(log_path: str | Path, echo: bool = False, show_trials: bool = True) -> Iterator[Console]:
    """Send everything printed inside to `log_path` (appended: a resume continues the same log);
    with `echo` also to the terminal. Yields the Console for our own lines."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    log = open(log_path, "a", buffering=1, encoding="utf-8", errors="replace")
    log.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} pid {os.getpid()}: {' '.join(sys.argv)}\n")
    real_fds = _is_fd(sys.stdout, 1) and _is_fd(sys.stderr, 2)
    terminal: TextIO = sys.stdout
    saved: dict[int, int] = {}
    if real_fds:
        # Our lines keep the original fd 1; fds 1 and 2 then point at the log.
        terminal = os.fdopen(os.dup(1), "w", buffering=1, encoding=sys.stdout.encoding, errors="replace")
        saved = {fd: os.dup(fd) for fd in (1, 2)}
        for fd in (1, 2):
            os.dup2(log.fileno(), fd)
    streams = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = _Tee(log, terminal) if echo else log
    console = Console(terminal, log, show_trials, bars=not echo)  # a bar would be torn by echoed output
    _active.append(console)
    try:
        yield console
    finally:
        _active.remove(console)
        sys.stdout.flush()
        sys.stdout, sys.stderr = streams
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        if real_fds:
            terminal.close()
        log.close()


def duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def eta(elapsed: float, done: float, left: float) -> str:
    """Time left at the rate so far (or ? before any progress)."""
    return duration(elapsed / done * left) if done > 0 else "?"
