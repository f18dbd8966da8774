"""Stopping the engine's Tune run without interrupting a write: its loop ends at a step boundary.

A signal (sptune.experiment.engine.interrupts) sets the run's stopping event; a time budget sets a deadline; a storage
that kept failing (sptune.experiment.engine.mirroring) sets the event with its cause. Tune runs its callbacks
between steps, so StopAtStepBoundary acts there, never inside a checkpoint or an experiment-state write.
It ends the loop as Tune's own Ctrl-C does: it raises SIGUSR1, whose handler tune.run installs in the main
thread, so the loop ends after this step, Tune writes its final snapshot (a Ray user reading `tune/` sees the
trials as they were) and stops the trial actors; the run's unfinished trials continue on a resume. Where
tune.run installed no handler (a loop outside the main thread), it raises StageInterrupted instead and
tune.run's `except Exception` stops the actors: the last periodic snapshot stands.

Tune pickles its callbacks with the Tuner (they come back on restore) and an Event cannot be pickled,
so the callback holds a key and finds the run's live stop in this module's registry.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ray.tune import Callback


@dataclass
class Stop:
    event: threading.Event = field(default_factory=threading.Event)  # set by a signal, or when the deadline passed
    deadline: float | None = None  # time.monotonic() at which the run's time budget ends
    budget_reached: bool = False
    failure: str = ""  # why the run stopped itself (its storage kept failing); '' for a signal or a budget
    loop_told: bool = False  # Tune's loop was asked to end (once: it ends after the current step)


_stops: dict[str, Stop] = {}
# What tune.run logs when its loop ends on a stop: its own Ctrl-C advice and Tuner.restore hint. The resume
# command a stopped run prints is sptune's (interrupts).
TUNE_STOP_NOTES = ("Stop signal received", "Experiment has been interrupted", "Trials did not complete")


class StageInterrupted(Exception):
    """Raised inside the Tune loop, at a step boundary, when its run is stopping."""


def key(run_dir: str | Path, name: str) -> str:
    return f"{Path(run_dir).resolve()}::{name}"


def register(run_key: str, time_budget_s: float | None = None) -> Stop:
    stop = Stop(deadline=time.monotonic() + time_budget_s if time_budget_s else None)
    _stops[run_key] = stop
    return stop


def unregister(run_key: str) -> None:
    _stops.pop(run_key, None)


def stop_every_run(failure: str) -> None:
    """Stop every running loop at its next step boundary because of `failure` (called from any thread)."""
    for stop in list(_stops.values()):
        stop.failure = stop.failure or failure
        stop.event.set()


def is_stopping(run_key: str) -> bool:
    stop = _stops.get(run_key)
    return stop is not None and stop.event.is_set()


class StopAtStepBoundary(Callback):
    def __init__(self, run_key: str) -> None:
        self.run_key = run_key

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        stop = _stops.get(self.run_key)
        if stop is None:
            return
        if stop.deadline is not None and time.monotonic() >= stop.deadline and not stop.event.is_set():
            stop.budget_reached = True
            stop.event.set()
        if stop.event.is_set() and not stop.loop_told:
            stop.loop_told = True
            end_tune_loop(self.run_key)


def end_tune_loop(run_key: str) -> None:
    """Tune's graceful end (its SIGUSR1 handler, as for Ctrl-C) where tune.run installed it, else a raise."""
    if threading.current_thread() is threading.main_thread() and callable(signal.getsignal(signal.SIGUSR1)):
        signal.raise_signal(signal.SIGUSR1)
    else:
        raise StageInterrupted(f"{run_key}: the run is stopping")


@contextlib.contextmanager
def quiet_tune_stop_notes(run_key: str) -> Iterator[None]:
    """Drop tune.run's notes on a stop this run asked for (TUNE_STOP_NOTES); its other records pass."""
    def keep(record: logging.LogRecord) -> bool:
        return not (is_stopping(run_key) and record.getMessage().startswith(TUNE_STOP_NOTES))
    logger = logging.getLogger("ray.tune.tune")
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)
