"""Failed trials: which failures are final, and how a crash reaches the results table and TensorBoard.

Two kinds of failure:

    deterministic   CUDA out of memory (on a shared GPU: beyond the trial's share), a non-finite loss, GPUs torch cannot use, a damaged checkpoint
                    (sptune.run.checkpoints.UnusableCheckpoint): running the same
                    config again fails the same way, so the trial ends at once with status `failed`
                    and the reason in result.json (no exception reaches Tune or Train, which would
                    retry it FailureConfig.max_failures times, Tune x Train times on the train path).
    crash           anything else (a bug, a killed process): Tune retries the trial from its last
                    checkpoint, max_failures times, and without limit when the trial lost its node
                    (sptune.experiment.engine.preemption); when the retries are spent,
                    sptune.trials.outcomes writes Tune's error into the run directory (error.json), so the table shows the trial as `failed` with
                    that error, and `sptune resume --retry-failed` runs it again from its checkpoint.
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Any

from sptune import atomic, files
from sptune.run import checkpoints

log = logging.getLogger("sptune.engine")


def deterministic_reason(exc: BaseException, gpu_share: float = 1.0) -> str | None:
    """The one-line reason when `exc` would recur on every retry, else None. Out of memory on a GPU the
    trial shares (gpu_share < 1, --trials-per-gpu) recurs only when the trial itself outgrew its share;
    below it, a neighbour took the memory, and a retry (from the checkpoint) may fit."""
    import torch

    if isinstance(exc, checkpoints.UnusableCheckpoint):
        return str(exc)  # the same file fails every retry; the message names it and the fix
    if isinstance(exc, torch.OutOfMemoryError):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory"
        shared = 0 < gpu_share < 1  # 0: a CPU trial; 1: a whole GPU
        if shared and not over_its_share(exc, gpu_share):
            log.warning("CUDA out of memory below this trial's %.3g of the GPU: a neighbouring trial's memory; "
                        "retried from its checkpoint (%s)", gpu_share, first[:160])
            return None
        return (f"CUDA out of memory ({first[:160]}): lower optim.batch_size or the model size, or use "
                f"run.precision=bf16" + (", or pack fewer --trials-per-gpu" if shared else ""))
    return None


# torch's out-of-memory message names the request that failed: "Tried to allocate 2.00 GiB."
REQUEST = re.compile(r"Tried to allocate ([\d.]+) (B|KiB|MiB|GiB|TiB)")
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def over_its_share(exc: BaseException, gpu_share: float) -> bool:
    """Whether this trial's own peak (reserved by its allocator since the trial started: its peak statistics
    are reset then, resources.start_gpu_trial) plus its CUDA context and the failed request exceeds its share
    of the GPU's memory; a message without the request counts as its own."""
    import torch

    from sptune.trials.resources import CONTEXT_BYTES

    found = REQUEST.search(str(exc))
    if found is None:
        return True
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    asked = float(found.group(1)) * UNITS[found.group(2)]
    return torch.cuda.max_memory_reserved() + CONTEXT_BYTES + asked > gpu_share * total


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
