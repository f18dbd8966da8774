"""A trial's retry record, retries.json in its run directory: each failure (attempt, node, cause) and, once its
crashes have used every retry --max-failures allows, the mark `spent` that makes the next retry fail at once.
The driver writes it (sptune.experiment.engine.preemption.NodeLossRetries); the trial reads it (`raise_if_spent`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sptune import atomic, files

# {"failures": [{"attempt", "node_id", "cause", "preempted" where Ray marked it}], "spent": error or absent}
RETRIES = "retries.json"


class RetriesSpent(RuntimeError):
    """A trial's crashes used every retry --max-failures allows."""


def read(run_dir: Path) -> dict[str, Any]:
    path = run_dir / RETRIES
    return files.read_json(path) if path.is_file() else {"failures": []}


def raise_if_spent(run_dir: Path) -> None:
    """Fail a trial marked spent at once (RetriesSpent), so Tune ends it as errored like any trial whose
    retries are spent; the mark is consumed, so a later resume runs it again."""
    record = read(run_dir)
    if record.get("spent"):
        atomic.write_json(run_dir / RETRIES, {key: value for key, value in record.items() if key != "spent"})
        raise RetriesSpent(record["spent"])
