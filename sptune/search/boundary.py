"""Boundary check: warn when a stage's selected value sits at the edge of its searched grid.

A selected value at the top or bottom of a grid says the optimum may lie outside it (the deep learning
tuning playbook's "check the search space boundaries"): the grid, not the model, decided the result.
Only numeric grids of two or more values are checked (learning rate, batch size, ...); a one-value
grid is a fixed setting and a categorical string grid has no edge.

    selected = {"finetune": finetune_row, "scratch": scratch_row}   # each stage's selected trial (a results row)
    for line in boundary.warnings(selected, state.space):
        print(line)
"""

from __future__ import annotations

from typing import Any

from sptune.config import STAGES
from sptune.folds import FOLD_KEY
from sptune.records.trial_rows import TrialRow


def warnings(selected: dict[str, TrialRow | None], space: dict[str, Any]) -> list[str]:
    """One line per stage whose selected trial has a value at an edge of a numeric grid.

    `selected` maps a stage to its selected row (absent or None: no trial completed); `space` is the
    search space as recorded in study.json (`SearchSpace.to_dict()`)."""
    lines = []
    for stage in STAGES:
        grid = (space.get("stages", {}).get(stage) or {}).get("params", {})
        best = selected.get(stage)
        if best is None:
            continue
        edges = [edge_note(key, best.get(key), values) for key, values in grid.items()]
        edges = [e for e in edges if e]
        if edges:
            lines.append(f"warning: {stage} selected " + "; ".join(edges) + ": extend the grid")
    return lines


def edge_note(key: str, value: Any, values: Any) -> str | None:
    """'optim.lr=0.001, the top of its grid [0.0001, 0.001]', or None when `value` is interior or unchecked."""
    if not ordered_grid(key, values) or not number(value):
        return None
    ordered = sorted(float(v) for v in values)
    where = "top" if float(value) == ordered[-1] else "bottom" if float(value) == ordered[0] else None
    if where is None:
        return None
    shown = ", ".join(f"{v:g}" for v in ordered)
    return f"{key}={float(value):g}, the {where} of its grid [{shown}]"


def ordered_grid(key: str, values: Any) -> bool:
    """A grid of two or more numbers whose order means something: not seeds (run.seed) or validation folds
    (sptune.folds), which are labels."""
    return (isinstance(values, list) and len(values) >= 2 and all(number(v) for v in values)
            and not key.endswith("seed") and key != FOLD_KEY)


def number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
