"""The driver's side of durable storage (sptune.records.storage): while a driver runs a results folder that
has a storage URI, an uploader thread pushes its mirror every PUSH_SECONDS and soon after every finished trial,
and a last time when the driver ends, however it ends.

Storage can fail (a throttled endpoint, expired credentials, a network gone for minutes); the study goes on.
Pushes run on the uploader's own thread, never on Tune's event loop, and never raise into Tune: a failed push
is logged with its cause, shown on the progress line, and retried with exponential backoff. After GIVE_UP_SECONDS
of nothing but failures the run stops cleanly (stopping.stop_every_run: its loop ends at a step boundary, every
file is saved locally) and the command exits EXIT_STORAGE naming the error and the resume command, which pushes
what the storage missed. A push cut short is finished by the next one (the storage module's order).
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ray.tune import Callback

from sptune.experiment.engine import interrupts, stopping
from sptune.records import storage

GIVE_UP_SECONDS = float(os.environ.get("SPTUNE_STORAGE_GIVE_UP_SECONDS", 900))  # of failures in a row
FIRST_RETRY_SECONDS, LONGEST_RETRY_SECONDS = 1.0, 60.0
LAST_PUSH_ATTEMPTS = 3  # when the driver ends: a storage back within seconds still gets the last push


class Uploader:
    """Pushes one mirror from its own thread: `request()` asks for a push soon, and never blocks."""

    def __init__(self, mirror: storage.Mirror, period: float = storage.PUSH_SECONDS,
                 give_up_after: float = GIVE_UP_SECONDS) -> None:
        self.mirror, self.period, self.give_up_after = mirror, period, give_up_after
        self.failing_since: float | None = None  # time.monotonic() of the first failure in a row
        self.error = ""  # the last failure's cause, while pushes fail
        self.given_up = False
        self._retry = FIRST_RETRY_SECONDS
        self._wake, self._closing = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sptune-storage", daemon=True)

    def start(self) -> "Uploader":
        self._thread.start()
        return self

    def request(self) -> None:
        self._wake.set()

    def status(self) -> str:
        """'' while the storage takes pushes, else how long it has failed and why (the progress line)."""
        if self.failing_since is None:
            return ""
        return f"storage failing for {time.monotonic() - self.failing_since:.0f} s ({self.error})"

    def close(self) -> str:
        """Stop the thread and push a last time; returns '' or the cause of the last push's failure."""
        self._closing.set()
        self._wake.set()
        self._thread.join()
        for attempt in range(LAST_PUSH_ATTEMPTS):
            if self.push_once(whole=True):
                return ""
            time.sleep(FIRST_RETRY_SECONDS * 2 ** attempt)
        return self.error

    def push_once(self, whole: bool = False) -> bool:
        """One push (periodic unless `whole`: storage.Mirror.push); a failure is recorded and logged, never raised."""
        try:
            self.mirror.push(whole)
        except Exception as exc:  # noqa: BLE001 - any storage error: the study goes on without the storage
            self._failed(storage.describe(exc))
            return False
        if self.failing_since is not None:
            storage.log.warning("storage %s takes pushes again after %.0f s", self.mirror.uri,
                                time.monotonic() - self.failing_since)
        self.failing_since, self.error, self._retry = None, "", FIRST_RETRY_SECONDS
        return True

    def _loop(self) -> None:
        wait = self.period
        while not self._closing.is_set():
            self._wake.wait(timeout=wait)
            self._wake.clear()
            if self._closing.is_set():
                return
            wait = self.period if self.push_once() else self._backoff()

    def _failed(self, cause: str) -> None:
        now = time.monotonic()
        self.failing_since = self.failing_since if self.failing_since is not None else now
        self.error = cause
        storage.log.warning("storage push to %s failed (%s); retrying in %.0f s", self.mirror.uri, cause, self._retry)
        if now - self.failing_since >= self.give_up_after and not self.given_up:
            self.given_up = True
            stopping.stop_every_run(f"storage {self.mirror.uri} failed for {now - self.failing_since:.0f} s "
                                    f"({cause})")

    def _backoff(self) -> float:
        wait, self._retry = self._retry, min(self._retry * 2, LONGEST_RETRY_SECONDS)
        return wait


ACTIVE: Uploader | None = None  # this driver's uploader, while it runs (one results folder per driver)


@contextmanager
def mirrored(results_dir: Path) -> Iterator[None]:
    """Run a driver on `results_dir` with its mirror pushed (nothing when the folder has no storage). A run
    that ended well but whose last push failed raises interrupts.StorageStopped: the storage is behind."""
    global ACTIVE
    mirror = storage.mirror_of(results_dir)
    ACTIVE = Uploader(mirror).start() if mirror is not None else None
    ended_well = False
    try:
        yield
        ended_well = True
    finally:
        uploader, ACTIVE = ACTIVE, None
        if uploader is not None:
            behind = uploader.close()
            if not behind:
                storage.log.info("mirrored %s to %s", uploader.mirror.local, uploader.mirror.uri)
            elif ended_well:
                raise interrupts.StorageStopped(f"the last push to {uploader.mirror.uri} failed ({behind})")


def status() -> str:
    return ACTIVE.status() if ACTIVE is not None else ""


class PushMirror(Callback):
    """Tune's side: asks the uploader for a push when a trial finishes. Holds no state, since Tune pickles
    its callbacks with the run and a restored run must push the mirror of the driver that restored it."""

    def on_trial_complete(self, iteration, trials, trial, **info):
        if ACTIVE is not None:
            ACTIVE.request()
