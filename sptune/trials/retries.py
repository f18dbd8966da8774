"""A trial's retry record, retries.json in its run directory: each failure (attempt, node, cause) and, once its
crashes have used every retry --max-failures allows, the mark `spent` that makes the next retry fail at once.
The driver writes it (sptune.experiment.engine.preemption.NodeLossRetries); the trial reads it (`unless_spent`)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

from sptune import atomic, files
from sptune.trials.trainable import trial_run_dir

# {"failures": [{"attempt", "node_id", "cause", "preempted" where Ray marked it}], "spent": error or absent}
RETRIES = "retries.json"


class RetriesSpent(RuntimeError):
    """A trial's crashes used every retry --max-failures allows."""


def read(run_dir: Path) -> dict[str, Any]:
    path = run_dir / RETRIES
    return files.read_json(path) if path.is_file() else {"failures": []}


def unless_spent(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The Tune function `fn`, failing at once (RetriesSpent) in a trial marked spent, so Tune ends it as
    errored like any trial whose retries are spent; the mark is consumed, so a later resume runs it again."""

    @functools.wraps(fn)
    def run(config: dict[str, Any], **kwargs: Any) -> Any:
        from ray import tune

        run_dir = trial_run_dir(config, tune.get_context().get_trial_id())
        record = read(run_dir)
        if record.get("spent"):
            atomic.write_json(run_dir / RETRIES, {key: value for key, value in record.items() if key != "spent"})
            raise RetriesSpent(record["spent"])
        return fn(config, **kwargs)

    return run
