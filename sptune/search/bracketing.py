"""Grids that bracket themselves: a stage whose selected value sits at an edge of an ordered grid runs the
next value beyond that edge, one step of the grid's own spacing at a time, until the best is interior or a
limit stops it.

The deep learning tuning playbook asks a person to check that the best trial is not at a search-space
boundary; Ray Tune and Optuna search the space they are given. A selected value at an edge means the grid,
not the model, decided the comparison (on the paper experiments' declared grids, 31 of 80 searched
selections sat at an edge), so sptune extends the grid itself:

    declared lr grid {1e-5, 3e-5}, best 3e-5  ->  run 9e-5 (spacing x3); best 9e-5 -> run 2.7e-4; ...

Rules, for every listed numeric parameter of two or more values (a one-value grid is a fixed setting; a seed
or fold grid is a set of labels, never extended):
- the step is the declared grid's spacing: its mean ratio when every value is positive (lr, batch size; a
  half-decade grid 1e-4, 3e-4, 1e-3 steps by sqrt(10)), else its mean difference; integer grids stay integers;
- the new point is the best trial's point with that one parameter moved; parameters at an edge each get one
  (on every fold, in a cross-validated stage: sptune.folds);
- it stops at the search space's `limits:` (e.g. `optim.lr: [1.0e-6, 1.0e-1]`; lr defaults to
  DEFAULT_LIMITS), at a value the config rejects, or after MAX_STEPS beyond the declared grid on one side;
  the stop is recorded, and the boundary warning (sptune.search.boundary) stays only there.

The edge is read from the values the stage has TRIED, not from the grid study.json lists (which the
extension updates first): a driver that died between the two runs the recorded value on its resume, and
so does one that died while the value's trial ran, before Tune's next snapshot (`known`). Only a
best at or past the declared grid's edge extends (a best next to a crashed grid value does not).
study.json keeps every step (StudyState.extensions) and the grid with the new values, so the table, the
boundary check and TensorBoard's HParams domains see the extended grid.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Collection

from sptune import folds
from sptune.errors import UserError
from sptune.folds import FOLD_KEY
from sptune.records import results, study_state
from sptune.records.study_state import StudyState
from sptune.search import spaces
from sptune.search.boundary import number, ordered_grid

DEFAULT_LIMITS = {"optim.lr": [1e-6, 1.0]}
MAX_STEPS = 4  # beyond the declared grid, per parameter and side


def extend(study_dir: Path, state: StudyState, stage: str, known: Collection[str]) -> list[dict[str, Any]]:
    """The stage's next points beyond its grid's edges (recorded in study.json), or [] when its best is
    interior in every ordered parameter, or stopped (also recorded).

    `known`: the ids of the trials the running engine proposed or restored. An unfinished trial not among
    them was started by a killed driver after Tune's last snapshot, and the resumed run never heard of it:
    its value counts as untried, so the round proposes it again and the trial continues in its directory
    from its checkpoint (sptune.trials.trainable.adopt_orphan)."""
    rows = [r for r in results.collect(study_dir, state) if r["stage"] == stage
            and not (r["status"] == "unfinished" and r["trial_id"] not in known)]
    stage_space = state.space["stages"][stage]
    unrun = missing_folds(rows, stage_space["params"])
    if unrun:  # a setting's other folds ran: its mean waits for these (their trials continue where they were)
        return unrun
    best, _ = results.best_row(rows, stage)
    if best is None:
        return []
    points = []
    for key, grid in stage_space["params"].items():
        declared = declared_grid(state, stage, key, grid)
        if not ordered_grid(key, declared) or not number(best.get(key)):
            continue
        tried = sorted({float(r[key]) for r in rows if number(r.get(key))})
        side = edge_side(float(best[key]), tried, declared)
        if side is None:
            continue
        value, stop = next_value(key, declared, tried, side, limits(state).get(key))
        if stop:
            record(state, stage, {"param": key, "side": side, "stopped": stop})
            continue
        point = {k: best[k] for k in stage_space["params"]} | {key: value}
        if value not in grid:
            grid.append(value)
            record(state, stage, {"param": key, "side": side, "value": value})
        points += [point | {FOLD_KEY: fold} for fold in stage_space["params"][FOLD_KEY]] \
            if FOLD_KEY in stage_space["params"] else [point]
    study_state.save(study_dir, state)
    return points


def missing_folds(rows: list[dict[str, Any]], params: dict[str, Any]) -> list[dict[str, Any]]:
    """In a cross-validated stage (sptune.folds), the points of settings that ran on some folds but not on all:
    an extension trial a killed driver started after Tune's last snapshot (see `known`) leaves its fold out."""
    if FOLD_KEY not in params:
        return []
    keys = [k for k in params if k != FOLD_KEY]
    ran: dict[tuple, tuple[dict[str, Any], set[Any]]] = {}  # a setting (folds.setting): a row of it, its folds
    for row in rows:
        ran.setdefault(folds.setting(row), (row, set()))[1].add(row.get(FOLD_KEY))
    return [{k: row.get(k) for k in keys} | {FOLD_KEY: fold} for row, have in ran.values()
            for fold in params[FOLD_KEY] if fold not in have]


def edge_side(best: float, tried: list[float], declared: list[Any]) -> str | None:
    """"above" / "below" when the best is the outermost value tried on that side AND at or past the declared
    grid's edge there; None when it is interior. A best inside the declared grid is never extended from: a
    grid value with no result (its trial crashed) is a retry's business, not an extension's."""
    if best == tried[-1] and best >= max(declared):
        return "above"
    if best == tried[0] and best <= min(declared):
        return "below"
    return None


def next_value(key: str, declared: list[Any], tried: list[float], side: str,
               limit: list[float] | None) -> tuple[Any, str | None]:
    """(the next value beyond `side` of the tried values, None) or (None, why the extension stops)."""
    ordered = sorted(declared)
    outer, edge = (ordered[-1], tried[-1]) if side == "above" else (ordered[0], tried[0])
    sign = 1 if side == "above" else -1
    if all(v > 0 for v in ordered):  # geometric: the grid's mean ratio, e.g. sqrt(10) for 1e-4, 3e-4, 1e-3
        ratio = (ordered[-1] / ordered[0]) ** (1 / (len(ordered) - 1))
        steps, value = round(sign * math.log(edge / outer, ratio)), edge * ratio**sign
    else:  # arithmetic: the grid's mean difference
        step = (ordered[-1] - ordered[0]) / (len(ordered) - 1)
        steps, value = round(sign * (edge - outer) / step), edge + sign * step
    if steps >= MAX_STEPS:
        return None, f"{MAX_STEPS} steps beyond the declared grid"
    value = round(value) if all(isinstance(v, int) for v in declared) else float(f"{value:.6g}")
    if limit is not None and not limit[0] <= value <= limit[1]:
        return None, f"the limit [{limit[0]:g}, {limit[1]:g}]"
    try:
        spaces.check_value("grid extension", key, value)
    except UserError:
        return None, f"{key}={value:g} is not a valid setting"
    return value, None


def declared_grid(state: StudyState, stage: str, key: str, grid: list[Any]) -> list[Any]:
    """The grid as the search-space file gave it: today's grid without the values extensions added."""
    added = {step["value"] for step in state.extensions.get(stage, []) if step["param"] == key and "value" in step}
    return [v for v in grid if v not in added] if isinstance(grid, list) else grid


def limits(state: StudyState) -> dict[str, list[float]]:
    return DEFAULT_LIMITS | (state.space.get("limits") or {})


def record(state: StudyState, stage: str, step: dict[str, Any]) -> None:
    steps = state.extensions.setdefault(stage, [])
    if step not in steps:
        steps.append(step)


def max_extra_trials(params: dict[str, Any], extend_grids: bool) -> int:
    """The most trials extensions can add to a stage searching `params` (its grid as study.json keeps it; 0
    when the study's grids do not extend): Tune's trial count and the plan leave room for them."""
    if not extend_grids:
        return 0
    return 2 * MAX_STEPS * sum(ordered_grid(key, grid) for key, grid in params.items()) * \
        len(params.get(FOLD_KEY, [0]))  # a cross-validated stage runs each new value on every fold
