"""Stopping a study's concurrent phase without interrupting a write: its Tune loop ends at a step boundary.

When the pretrain -> finetune chain stops (Ctrl-C, an error), the scratch phase running beside it in a
second thread must stop too and stay unfinished for a resume. Tune runs its callbacks between steps, so
StopAtStepBoundary raises there, never inside a checkpoint or experiment-state write; tune.run's
`except Exception` then stops the phase's trial actors and re-raises.

Tune pickles its callbacks with the Tuner (they come back on restore) and an Event cannot be pickled,
so the callback holds a key and finds the study's live event in this module's registry.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ray.tune import Callback

_events: dict[str, threading.Event] = {}


class PhaseInterrupted(Exception):
    """Raised inside a phase's Tune loop, at a step boundary, when its study is stopping."""


def key(study_dir: str | Path, phase: str) -> str:
    return f"{Path(study_dir).resolve()}::{phase}"


def register(phase_key: str, stopping: threading.Event) -> None:
    _events[phase_key] = stopping


class StopAtStepBoundary(Callback):
    def __init__(self, phase_key: str) -> None:
        self.phase_key = phase_key

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        event = _events.get(self.phase_key)
        if event is not None and event.is_set():
            raise PhaseInterrupted(f"{self.phase_key}: the study is stopping")
