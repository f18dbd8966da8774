"""The driver's one signal path: Ctrl-C (SIGINT) and SIGTERM, at any moment of a run.

    before and after Tune's loop   the signal raises Interrupted in the main thread: the command line prints
                                   the resume command and exits 130 (SIGINT) or 143 (SIGTERM)
    during Tune's loop             the signal only sets the run's stopping event; the loop ends at its next
                                   step boundary (stopping.StopAtStepBoundary), never inside a write
                                   of Tune's state or of a trial's files, and the engine then raises
                                   Interrupted (no stage is marked done: its trials may have been cut short)
    a second signal                exits at once (os._exit), after printing the resume command

Ray's workers block SIGINT (ray._private.services), so a terminal's Ctrl-C reaches the driver alone; Ray's
own driver SIGTERM handler (sys.exit, set by ray.init) is replaced again after ray.init, and Tune's SIGINT
handler is disabled (TUNE_DISABLE_SIGINT_HANDLER, sptune.experiment.engine.session): there is one handler, this one.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_received: list[int] = []  # the signals this process got, first one first
_stopping: threading.Event | None = None  # the running Tune loop's event, while there is one
_resume_hint = ""  # what the user runs to continue, printed on the way out


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal; `exit_code` is the shell's 128 + signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.exit_code = 128 + signum


class StorageStopped(KeyboardInterrupt):
    """The run stopped itself because its durable storage kept failing: everything is saved locally, and the
    resume command pushes what the storage missed. Exits EX_TEMPFAIL (75): try again later."""

    exit_code = 75

    def __init__(self, cause: str) -> None:
        super().__init__(cause)
        self.cause = cause


def install(resume_hint: str = "") -> None:
    """Route SIGINT and SIGTERM to this module (main thread only: Python runs handlers there). Called at a
    command's start and again once Ray is up (ray.init replaces the SIGTERM handler)."""
    global _resume_hint
    if resume_hint:
        _resume_hint = resume_hint
    if threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            signal.signal(signum, _handle)


def received() -> int | None:
    """The first signal this process got, if any."""
    return _received[0] if _received else None


def reset() -> None:
    """Forget earlier signals (a test running several drivers in one process)."""
    _received.clear()


@contextmanager
def deferred_to(stopping: threading.Event) -> Iterator[None]:
    """While Tune's loop runs: a signal sets `stopping` instead of raising."""
    global _stopping
    _stopping = stopping
    if _received:  # it came before the loop started: stop at the loop's first step
        stopping.set()
    try:
        yield
    finally:
        _stopping = None


def raise_if_received() -> None:
    if _received:
        raise Interrupted(_received[0])


def stopped(stop: KeyboardInterrupt, where: str = "") -> int:
    """Print how to continue a run that a signal stopped (`where`: what to read meanwhile, e.g. the log) and
    return the exit code: 128 + the signal, 130 for a KeyboardInterrupt that came another way."""
    hint = _resume_hint or "rerun the same command"
    what = f"stopped: {stop.cause}" if isinstance(stop, StorageStopped) else "interrupted"
    print(f"sptune: {what}; continue with `{hint}`" + (f" ({where})" if where else ""), file=sys.stderr)
    return getattr(stop, "exit_code", 128 + signal.SIGINT)


def _handle(signum: int, frame: object) -> None:
    if _received:  # the second one: no more waiting
        _say(f"{signal.Signals(signum).name} again: exiting at once")
        os._exit(128 + _received[0])
    _received.append(signum)
    if _stopping is not None:
        _stopping.set()
        _say(f"{signal.Signals(signum).name}: stopping at the next step boundary (send it again to exit at once)")
        return
    raise Interrupted(signum)


def _say(text: str) -> None:
    hint = f"; continue with `{_resume_hint}`" if _resume_hint else ""
    try:
        stream = sys.__stderr__ or sys.stderr  # the terminal, even while sptune.output captures sys.stderr
        stream.write(f"sptune: {text}{hint}\n")
        stream.flush()
    except (OSError, ValueError):
        pass  # stderr closed: the exit code still tells
