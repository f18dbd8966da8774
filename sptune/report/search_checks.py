"""The checks a reader makes before trusting a searched experiment's table, printed under it for every cell of a
tune-backed experiment (the deep learning tuning playbook's "check the search space boundaries" and "did it
converge"):

    grid extensions   per cell and stage, what sptune.search.bracketing ran past the declared grid (or
                      where a limit stopped it), and how many trials and selections those values account for
    edges             how many searched selections sit at an edge of the grid their study searched (declared
                      plus extended; sptune.search.boundary), with a warning per such cell and stage
    late bests        selected trials whose best-validation step lies in the last 20% of their step budget
                      (sptune.report.pairs.LATE_FRACTION): pretraining cut off by its cap shows here

Each figure is counted from the cells' study.json and their trials' result.json, so the same run always
prints the same checks, and a selection that sits at an edge is never left for a reader to find in results.csv.
A kept record (plan.json + summary.csv) has neither, so a pooled report prints none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sptune import files
from sptune.config import STAGES
from sptune.experiment.plan import Plan
from sptune.records import results, study_state
from sptune.report import pairs
from sptune.search import boundary


def lines(plan: Plan, rows: list[dict[str, Any]], experiment_dir: Path) -> list[str]:
    """The checks section (ends with a blank line), or [] for the plain backend, which searches nothing (it runs
    the grid's first point), and for cells with no study.json yet."""
    if plan.backend != "tune":
        return []
    notes: list[str] = []
    counts = {"trials": 0, "stages": 0, "extension trials": 0, "extended stages": 0, "selected extensions": 0,
              "searched": 0, "at edge": 0}
    late = {stage: [0, 0] for stage in STAGES}  # stage -> [late, selected]
    for cell in plan.cells:
        state = study_state.read(experiment_dir / files.CELLS / cell.key)
        if state is None:
            continue
        mine = [r for r in rows if r["cell"] == cell.key]
        selected = {r["stage"]: r for r in mine if r.get("selected")}
        counts["trials"] += len(mine)
        counts["stages"] += len({r["stage"] for r in mine})
        counts["extension trials"] += sum(bool(r.get("extension")) for r in mine)
        counts["extended stages"] += sum(any("value" in step for step in steps) for steps in state.extensions.values())
        counts["selected extensions"] += sum(bool(r.get("extension")) for r in selected.values())
        notes += [f"{cell.key}: {line}" for line in results.extension_lines(state.extensions)]
        for stage, row in selected.items():
            grid = (state.space.get("stages", {}).get(stage) or {}).get("params", {})
            if any(boundary.ordered_grid(key, values) for key, values in grid.items()):
                counts["searched"] += 1
                counts["at edge"] += any(boundary.edge_note(key, row.get(key), values) for key, values in grid.items())
            late[stage][1] += 1
            late[stage][0] += is_late(row)
        notes += [f"{cell.key}: {line}" for line in boundary.warnings(selected, state.space)]
    if not counts["trials"]:
        return []
    late_text = ", ".join(f"{stage} {n} of {of}" for stage, (n, of) in late.items() if of)
    return ["Search checks (every cell's study.json and selected trials):", "",
            f"- grid extensions: {counts['extension trials']} of {counts['trials']} trials in "
            f"{counts['extended stages']} of {counts['stages']} stages; selections that are extension values: "
            f"{counts['selected extensions']}",
            f"- selections at an edge of the grid their study searched: {counts['at edge']} of {counts['searched']} "
            "searched",
            f"- selected trials whose best step is in the last {1 - pairs.LATE_FRACTION:.0%} of their step budget "
            f"(may not have converged): {late_text}",
            *[f"- {note}" for note in notes], ""]


def is_late(row: dict[str, Any]) -> bool:
    """The trial's best-validation step lies past 80% of its step budget (result.json's max_steps)."""
    found = pairs.convergence("run", results.run_result(row))
    best, budget = found["run_best_step"], found["run_steps"]
    return best is not None and bool(budget) and best > pairs.LATE_FRACTION * budget
