"""The SPT protocol's order, in one place (paper §2, Appendix C.1): both the plain path
(`sptune.run.train.run_protocol`, one run per stage) and the Ray engine (`sptune.experiment.engine.driver`, a search
per stage) ask this module which stage waits for which and which candidate is selected.

    pretrain   denoising on the task's own training inputs; needs nothing
    finetune   starts from the selected pretraining candidate's best-validation checkpoint (best.pt), so it
               waits until pretraining has ended and one of its candidates completed; with none, it is
               skipped and the SPT arm reported as failed with pretraining's reason
    scratch    random init, the baseline; needs nothing, so it runs beside the pretrain -> finetune chain

Selection (sptune.selection): among a stage's completed candidates, the higher validation metric, a tie
(within the metric's resolution) broken by the lower validation loss, then by order. Test is never read.
A cross-validated stage (sptune.folds: candidates carry `task.val_fold`) compares settings by their mean over
the folds; only settings with the most completed folds compete (a fold that crashed does not let a setting be
judged on its easier folds), and the selected setting's lowest completed fold stands for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from sptune import files, folds, selection
from sptune.config import STAGES

# stage -> the stage whose selected candidate it starts from
STARTS_FROM = {"finetune": "pretrain"}
NO_PRETRAINING = "skipped: no pretraining trial completed"


def prerequisite(stage: str) -> str | None:
    return STARTS_FROM.get(stage)


def can_start(stage: str, ended: Callable[[str], bool]) -> bool:
    """Whether `stage` may start, given which stages have ended (`ended(stage)`)."""
    before = prerequisite(stage)
    return before is None or ended(before)


def ordered(stages: Sequence[str]) -> list[str]:
    """`stages` in the protocol's order (a stage after the one it starts from)."""
    return [s for s in STAGES if s in stages]


def completed(candidate: Mapping[str, Any] | None) -> bool:
    """A run or trial that reached its end (a plain run's only candidate: nothing to choose between)."""
    return candidate is not None and candidate.get("status") == "completed"


def select(candidates: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any] | None, str]:
    """The selected candidate among completed ones (result.json or a results row: status, metric, best_val,
    best_val_loss, val_targets) and what selected it (sptune.selection's wording)."""
    done = [c for c in candidates if completed(c) and _number(c.get("best_val"))]
    # Candidates of a stage share the validation set; the smallest resolution is the safe one if they did not.
    tol = min((selection.tolerance(c["metric"], c.get("val_targets")) for c in done), default=0.0)
    if any(c.get(folds.FOLD_KEY) not in (None, "") for c in done):  # a table's empty cell is no fold
        return _select_setting(done, tol)
    return selection.select(done, lambda c: (c["best_val"], c.get("best_val_loss")), tol)


def _select_setting(done: list[Mapping[str, Any]], tol: float) -> tuple[Mapping[str, Any] | None, str]:
    """The best setting of a cross-validated stage by its mean over folds, as its lowest completed fold."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for candidate in done:
        groups.setdefault(folds.setting(candidate), []).append(candidate)
    most = max(len(group) for group in groups.values())
    full = [sorted(g, key=lambda c: c[folds.FOLD_KEY]) for g in groups.values() if len(g) == most]
    # A mean of `most` accuracies moves in steps `most` times finer than one fold's.
    winner, how = selection.select(full, lambda g: (_mean([c["best_val"] for c in g]),
                                                    _mean([c.get("best_val_loss") for c in g])), tol / most)
    if winner is None:
        return None, how
    return winner[0], f"{how} (mean {_mean([c['best_val'] for c in winner]):.4f} over {most} folds)"


def _mean(values: list[Any]) -> float | None:
    return sum(values) / len(values) if all(_number(v) for v in values) else None


def init_checkpoint(selected_run_dir: str | Path) -> Path:
    """Where the dependent stage starts: the selected run's best-validation checkpoint."""
    return Path(selected_run_dir) / files.BEST


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and value == value  # NaN is not a number here
