"""The driver's side of durable storage (sptune.tune.records.storage): while a driver runs a results folder
that has a storage URI, its mirror is pushed after every finished trial, at most every PUSH_SECONDS while
trials report, and a last time when the driver ends, however it ends."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ray.tune import Callback

from sptune.tune.records import storage

ACTIVE: storage.Mirror | None = None  # this driver's mirror, while it runs (one results folder per driver)


@contextmanager
def mirrored(results_dir: Path) -> Iterator[None]:
    """Run a driver on `results_dir` with its mirror active (nothing when the folder has no storage)."""
    global ACTIVE
    ACTIVE = storage.mirror_of(results_dir)
    try:
        yield
    finally:
        mirror, ACTIVE = ACTIVE, None
        if mirror is not None:
            mirror.push()
            storage.log.info("mirrored %s to %s", mirror.local, mirror.uri)


class PushMirror(Callback):
    """Tune's side: pushes the active mirror as trials report and finish. Holds no state, since Tune pickles
    its callbacks with the run and a restored run must push the mirror of the driver that restored it."""

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if ACTIVE is not None:
            ACTIVE.push_if_due()

    def on_trial_complete(self, iteration, trials, trial, **info):
        if ACTIVE is not None:
            ACTIVE.push()
