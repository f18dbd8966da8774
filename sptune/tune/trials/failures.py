"""Failed trials: which failures are final, and how a crash reaches the results table and TensorBoard.

Two kinds of failure:

    deterministic   CUDA out of memory, a non-finite loss, GPUs torch cannot use, a damaged checkpoint
                    (sptune.checkpoints.UnusableCheckpoint): running the same
                    config again fails the same way, so the trial ends at once with status `failed`
                    and the reason in result.json (no exception reaches Tune or Train, which would
                    retry it FailureConfig.max_failures times, Tune x Train times on the train path).
    crash           anything else (a killed node, a bug): Tune retries the trial from its last
                    checkpoint; when the retries are spent, sptune.tune.trials.outcomes writes Tune's error into
                    the run directory (error.json), so the table shows the trial as `failed` with
                    that error, and `sptune resume --retry-failed` runs it again from its checkpoint.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from sptune import atomic, checkpoints, files


def deterministic_reason(exc: BaseException) -> str | None:
    """The one-line reason when `exc` would recur on every retry, else None."""
    import torch

    if isinstance(exc, checkpoints.UnusableCheckpoint):
        return str(exc)  # the same file fails every retry; the message names it and the fix
    if isinstance(exc, torch.OutOfMemoryError):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory"
        return (f"CUDA out of memory ({first[:160]}): lower optim.batch_size or the model size, or use "
                f"run.precision=bf16")
    return None


def failed_result(run_dir: Path, stage: str, reason: str) -> dict[str, Any]:
    """Write result.json of a trial that ended in a deterministic failure outside the training loop
    (the loop writes its own for a non-finite loss); what it reached comes from progress.json."""
    progress_path = run_dir / files.PROGRESS
    progress = files.read_json(progress_path) if progress_path.is_file() else {}
    result = {"stage": stage, "run_dir": str(run_dir), "status": "failed", "reason": reason,
              "steps": progress.get("step", 0), "best_step": progress.get("best_step", -1),
              "best_val": progress.get("best_val"), "final_val": progress.get("val_metric"), "history": []}
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_json(run_dir / files.RESULT, result)
    return result


def one_line(error: BaseException | str | None) -> str:
    """The last line of an error's text ("RuntimeError: ..."): what a table cell can hold."""
    lines = [line.strip() for line in str(error or "unknown error").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "unknown error"


def stopped_metrics(run_dir: Path) -> tuple[dict[str, float], int]:
    """HParams metrics of a trial that ended without a result (stopped or crashed): its latest eval."""
    progress_path = run_dir / files.PROGRESS
    progress = files.read_json(progress_path) if progress_path.is_file() else {}
    best = progress.get("best_val")
    return ({"best_val": math.nan if best is None else best, "final_val": progress.get("val_metric", math.nan),
             "test_metric": math.nan, "best_step": progress.get("best_step", -1)}, progress.get("step", 0))
