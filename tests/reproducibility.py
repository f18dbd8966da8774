"""How far a run's numbers may stray from an uninterrupted run of the same config.

On a CPU a run is reproducible bit for bit, so a resumed (or restarted) run must give the same numbers
exactly. On a GPU two uninterrupted runs already differ a little (atomic adds in backward kernels sum in
another order each run): the test measures that floor with a second uninterrupted run, and the run under test
may differ from the first by FLOOR_MULTIPLE times it, no more. A floor of 0 (a deterministic GPU run) asks
for exact equality there too.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from sptune import files
from sptune.experiment.engine import domain
from sptune.records import study_state
from sptune.trials import trainable

FLOOR_MULTIPLE = 4  # gaps of independent reorderings vary by a small factor from one pair of runs to another


def numbers(result: dict[str, Any]) -> list[float]:
    """The figures a run reports: each evaluation's training loss and validation metric, then the test metric."""
    return [x for h in result["history"] for x in (h["train_loss"], h["val_metric"])] + [result["test_metric"]]


def gap(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest difference between two runs' figures (inf when their histories differ in length)."""
    x, y = numbers(a), numbers(b)
    return max((abs(p - q) for p, q in zip(x, y)), default=0.0) if len(x) == len(y) else math.inf


def assert_reproduces(run: dict[str, Any], full: dict[str, Any], again: Callable[[], dict[str, Any]]) -> None:
    """`run` gives `full`'s numbers: exactly where `full` trained on a CPU, else within FLOOR_MULTIPLE x the
    gap between `full` and `again()`, another uninterrupted run (trained only on a GPU)."""
    if full["provenance"]["device"] == "cpu":
        assert numbers(run) == numbers(full)
        return
    floor = gap(again(), full)
    assert gap(run, full) <= FLOOR_MULTIPLE * floor, \
        f"gap {gap(run, full):.3g} > {FLOOR_MULTIPLE} x the floor {floor:.3g} of two uninterrupted runs"


def assert_pretraining_uninterrupted(study_dir: Path, rows: list[dict[str, Any]], out_dir: Path) -> None:
    """Each pretraining trial of a finished study in `rows` (results.collect's) gives the numbers of an
    uninterrupted run of its config, trained here by a plain run_stage: every evaluation, the test metric, the
    best step and the steps trained."""
    spec = domain.trial_spec(study_dir, study_state.load(study_dir), "pretrain")
    for row in (r for r in rows if r["stage"] == "pretrain"):
        run_dir = Path(row["run_dir"])
        params = files.read_json(run_dir / files.TRIAL)["params"]
        plain = trainable.run_stage(trainable.trial_config(spec, params), "pretrain", None, None,
                                    out_dir / run_dir.name)
        assert (row["best_val"], row["best_step"], row["test_metric"], row["steps"]) == \
            (plain["best_val"], plain["best_step"], plain["test_metric"], plain["steps"]), run_dir.name
        assert_reproduces(files.read_json(run_dir / files.RESULT), plain, lambda: trainable.run_stage(
            trainable.trial_config(spec, params), "pretrain", None, None, out_dir / f"{run_dir.name}-again"))
