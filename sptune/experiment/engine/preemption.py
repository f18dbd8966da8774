"""Trials lost with their node are retried from their checkpoint without limit; other crashes are retried
--max-failures times (deterministic failures never reach Tune: sptune.trials.failures).

Ray's own signal comes first: an actor that died on a node drained with reason PREEMPTION and a deadline, the
node dying past it (`ray drain-node --reason DRAIN_NODE_REASON_PREEMPTION --deadline-remaining-seconds N`, a
cloud's spot notice relayed to Ray), raises a RayActorError marked `preempted`, which Tune does not count toward
max_failures. But a node that just disappears (a spot instance reclaimed without a drain, a dead machine, a
killed raylet) reaches the driver as ActorUnavailableError ("Socket closed") or ActorDiedError, counted like a
bug: a long trial on spot instances would fail after max_failures losses. And Tune decides whether to retry
(Trial.should_recover, in TuneController._process_trial_failure) before any callback hears of the failure, so a
callback can only uncount a failure after its retry was decided. Hence, as the fallback for losses Ray did not
mark:

    tune_limit(n)        Tune's max_failures: n + 1, one failure of room, so that a node loss is retried
                         even when the trial's crashes have spent their n retries
    NodeLossRetries      a Tune callback, after each retry decision: a failure Ray marked preempted, or whose
                         attempt ran on a node that is gone, is a node loss, any other a crash; for an
                         unmarked failure Tune's count of the trial's failures (Trial.run_metadata.num_failures)
                         is set to its crashes; a crash that used the room marks the trial spent
    retries.raise_if_spent the trial's guard (sptune.trials.retries, run by its entry point): a spent trial's
                         retry fails at once with that crash's error, so Tune ends the trial as errored, as
                         any trial whose retries are spent (error.json, and a resume runs it again)

Each failure is recorded in the run directory's retries.json (sptune.trials.retries): attempt, node, cause.
"""

from __future__ import annotations

import logging
import pickle
import socket
from pathlib import Path
from typing import Any

from ray.exceptions import RayActorError, RayTaskError
from ray.tune import Callback

from sptune import atomic, files
from sptune.trials import failures, retries, trainable

log = logging.getLogger("sptune.engine")

NODE_LOST, CRASH = "node lost", "crash"
PROBE_S = 3.0  # how long a live raylet may take to accept a connection


def tune_limit(max_failures: int) -> int:
    """Tune's FailureConfig.max_failures for sptune's --max-failures (see module docstring)."""
    return max_failures + 1


class NodeLossRetries(Callback):
    """Keeps Tune's failure count of each trial at its crashes alone; marks a trial spent when they exceed
    `max_failures`."""

    def __init__(self, max_failures: int) -> None:
        self.max_failures = max_failures

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        run_dir = trainable.trial_run_dir(trial.config, trial.trial_id)
        record = retries.read(run_dir)
        marked = preempted_by_ray(trial)
        failure = classify(run_dir, record, marked)
        record["failures"].append(failure)
        crashes = sum(f["cause"] == CRASH for f in record["failures"])
        if not marked:  # Tune counted it; set, not decremented, as Tune leaves the preempted ones uncounted
            trial.run_metadata.num_failures = crashes
            trial.run_metadata.invalidate_cache()
        if failure["cause"] == NODE_LOST:
            log.warning("trial %s lost its node %s: retried from its checkpoint, not counted as a failure",
                        trial.trial_id, failure["node_id"])
        elif crashes > self.max_failures:
            record["spent"] = (f"crashed {crashes} times, more than --max-failures {self.max_failures}; "
                               f"the last: {failures.one_line(_error_text(trial))}")
        atomic.write_json(run_dir / retries.RETRIES, record)


def preempted_by_ray(trial: Any) -> bool:
    """Whether the trial's last error is Ray's own preemption signal (its actor died on a drained node).

    Read from the trial's local folder, where Tune's Trial.handle_error pickles each error just before the
    callbacks run (Trial.pickled_error_file). Trial.get_pickled_error reads the copy in Tune's storage path,
    which Tune's sync brings later: at this point it holds an earlier failure's error, or none."""
    path = Path(trial.pickled_error_file) if trial.pickled_error_file else None
    if path is None or not path.is_file():
        return False
    error = pickle.loads(path.read_bytes())  # written by Tune's handle_error (cloudpickle), in this process
    if isinstance(error, RayTaskError):
        error = error.as_instanceof_cause()
    return isinstance(error, RayActorError) and error.preempted


def classify(run_dir: Path, record: dict[str, Any], preempted: bool = False) -> dict[str, Any]:
    """The failed attempt (trial.json's last), its node, and whether that node is gone (`preempted`: Ray
    said so). An attempt already classified means the retry failed before it recorded itself (on whatever
    node): a crash."""
    trial_path = run_dir / files.TRIAL
    attempts = files.read_json(trial_path)["attempts"] if trial_path.is_file() else []
    seen = {failure["attempt"] for failure in record["failures"]}
    if not attempts or len(attempts) in seen:
        return {"attempt": len(attempts), "node_id": None, "cause": CRASH}
    node_id = attempts[-1]["node_id"]
    if preempted:
        return {"attempt": len(attempts), "node_id": node_id, "cause": NODE_LOST, "preempted": True}
    return {"attempt": len(attempts), "node_id": node_id, "cause": NODE_LOST if node_gone(node_id) else CRASH}


def node_gone(node_id: str) -> bool:
    """Whether the node is dead for Ray, or its raylet does not answer. The GCS declares a node dead only
    after its health checks fail (about 30 s with Ray's defaults), while Tune hears of the lost trial at
    once: a raylet that refuses or never accepts a connection is the earlier sign of the same loss."""
    import ray

    node = next((n for n in ray.nodes() if n["NodeID"] == node_id), None)
    if node is None or not node["Alive"]:
        return True
    try:
        socket.create_connection((node["NodeManagerAddress"], node["NodeManagerPort"]), timeout=PROBE_S).close()
    except OSError:
        return True
    return False


def _error_text(trial: Any) -> str:
    """The trial's last error as Tune wrote it on the driver (error.txt: every failure, the last one last)."""
    local = Path(trial.error_file) if trial.error_file else None
    return local.read_text() if local and local.is_file() else "unknown error"
