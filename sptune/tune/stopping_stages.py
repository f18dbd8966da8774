"""Stopping a study's concurrent stage without interrupting a write: its Tune loop ends at a step boundary.

When the pretrain -> finetune chain stops (Ctrl-C, an error), the scratch stage running beside it in a
second thread must stop too and stay unfinished for a resume. Tune runs its callbacks between steps, so
StopAtStepBoundary raises there, never inside a checkpoint or experiment-state write; tune.run's
`except Exception` then stops the stage's trial actors and re-raises.

Tune pickles its callbacks with the Tuner (they come back on restore) and an Event cannot be pickled,
so the callback holds a key and finds the study's live event in this module's registry.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from ray.tune import Callback

_events: dict[str, threading.Event] = {}


class StageInterrupted(Exception):
    """Raised inside a stage's Tune loop, at a step boundary, when its study is stopping."""


def key(study_dir: str | Path, stage: str) -> str:
    return f"{Path(study_dir).resolve()}::{stage}"


def register(stage_key: str, stopping: threading.Event) -> None:
    _events[stage_key] = stopping


class StopAtStepBoundary(Callback):
    def __init__(self, stage_key: str) -> None:
        self.stage_key = stage_key

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        event = _events.get(self.stage_key)
        if event is not None and event.is_set():
            raise StageInterrupted(f"{self.stage_key}: the study is stopping")
