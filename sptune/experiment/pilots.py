"""Pilot runs read as `sptune report` pools them, and the plan they support (`sptune power`).

    read(experiment_dirs)            the plan and the arms of one or more batches of one experiment (experiment
                                     directories or their kept records, sptune.report.pool's readers and
                                     checks: the same settings, no seed twice)
    power_lines(...)                 per endpoint (sptune.experiment.endpoints) and per stated SD: the per-seed SD
                                     of the paired difference, the power at the planned seeds for the stated effect,
                                     the seeds that effect needs at the stated power (and their device-hours, from
                                     the pilot's device-seconds per seed), the effect the planned seeds detect
                                     (sptune.report.power)
    design_lines(experiment_dirs, explicit)   the sequential looks of one experiment directory's report
                                     (sptune.experiment.looks); the pooled report prints them itself
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from sptune.errors import UserError
from sptune.experiment import endpoints, looks
from sptune.experiment.plan import Plan, load_plan
from sptune.report import pool, power


def read(experiment_dirs: list[str | Path]) -> tuple[Plan, list[dict[str, Any]]]:
    batches = [(Path(d).resolve(), load_plan(d)) for d in experiment_dirs]
    pool.check_same_settings(batches)
    tagged = [(d, arm) for d, plan in batches for arm in pool.batch_arms(d, plan, pool.is_record(d))]
    pool.check_each_cell_once(tagged)
    return batches[0][1], [arm for _, arm in tagged]


def design_lines(experiment_dirs: list[str | Path], explicit: str | Path | None = None) -> list[str]:
    """The looks section of one experiment directory's report (`sptune report DIR`); none for kept records, whose
    report is the pooled one, which prints it (pool.pooled)."""
    if explicit is None and all(pool.is_record(d) for d in experiment_dirs):
        return []
    found = looks.find_design(experiment_dirs, explicit)
    if found is None:
        return []
    plan, arm_rows = read(experiment_dirs)
    return looks.lines(arm_rows, plan.layout, found)


@dataclass(frozen=True)
class Question:
    """What `sptune power` is asked: the effect (points; None: no power or seeds columns), the power wanted, the
    planned seeds (None: each endpoint's pilot seeds), alpha."""

    effect: float | None
    target: float = 0.8
    planned: int | None = None
    alpha: float = 0.05

    def __post_init__(self) -> None:
        power.check_probability(self.target, "--power")
        power.check_probability(self.alpha, "--alpha")
        if self.effect is not None and self.effect <= 0:
            raise UserError(f"--effect is the size of the difference to detect, in points (> 0), got {self.effect}")
        if self.planned is not None and self.planned < 2:
            raise UserError(f"--seeds-planned must be >= 2 (a paired t-test), got {self.planned}")


def power_lines(question: Question, pilot: tuple[Plan, list[dict[str, Any]]] | None = None,
                sds: Sequence[float] = (), endpoint: str | None = None) -> list[str]:
    """The plan as markdown lines: a header, the pilot's cost per seed, one table row per endpoint and stated SD."""
    rows: list[tuple[str, int | None, float | None, float]] = []  # name, pilot seeds, mean, SD
    hours = None
    out = [f"# Seeds you can plan{f': {pilot[0].title}' if pilot else ''}", "",
           f"Paired t-test over seeds, two-sided alpha {question.alpha:g}; power "
           f"{power.METHOD_TEXT[power.method()]}. Points: accuracy x 100.", ""]
    if pilot is not None:
        plan, arm_rows = pilot
        found = endpoints.endpoints(arm_rows, plan.layout)
        found = [endpoints.find(found, endpoint)] if endpoint else found
        rows += [(e.name, len(e.values), statistics.fmean(e.values), statistics.stdev(e.values))
                 for e in found if len(e.values) >= 2]
        hours, cost_line = seed_hours(arm_rows)
        out += [cost_line, ""]
    for sd in sds:
        if sd <= 0:
            raise UserError(f"--sd is a per-seed SD in points (> 0), got {sd}")
        rows.append((f"stated SD {sd:g}", None, None, sd))
    if not rows:
        raise UserError("no endpoint with 2 or more seeds in the pilot: give more seeds or --sd")
    return out + table(question, rows, hours)


def seed_hours(arm_rows: list[dict[str, Any]]) -> tuple[float | None, str]:
    """Mean device-hours of one seed over the pilot seeds that recorded them, and the line that says so."""
    per_seed = endpoints.seed_seconds(arm_rows)
    known = [s for s in per_seed.values() if s is not None]
    if not known:
        return None, ("Device time per seed: unknown (the pilot's summary.csv has no search_device_seconds; "
                      "records rebuilt from a printed report lack it).")
    hours = statistics.fmean(known) / 3600.0
    return hours, (f"Device time per seed: {hours:.2f} device-hours, the mean over {len(known)} of {len(per_seed)} "
                   "pilot seeds (every trial of the seed's cells: summary.csv's search_device_seconds, on the "
                   "pilot's machines).")


def table(question: Question, rows: list[tuple[str, int | None, float | None, float]],
          hours: float | None) -> list[str]:
    effect, target, alpha = question.effect, question.target, question.alpha
    header = ["endpoint", "pilot seeds", "mean", "per-seed SD"]
    if effect is not None:
        header += [f"power at N seeds for ±{effect:g}", f"seeds for {target:.0%} power at ±{effect:g}"]
        header += ["device-hours for those seeds"] if hours is not None else []
    header += [f"detectable at N seeds ({target:.0%} power)"]
    body = []
    for name, n, mean, sd in rows:
        planned = question.planned or n
        cells = [name, "—" if n is None else str(n), "—" if mean is None else f"{mean:+.2f}", f"{sd:.2f}"]
        if sd == 0.0:  # every pilot seed gave the same value: no spread to plan from
            body.append("| " + " | ".join(cells + ["—"] * (len(header) - len(cells))) + " |")
            continue
        if effect is not None:
            needed = power.seeds_needed(effect, sd, target, alpha)
            cells += ["—" if planned is None else f"{power.power(planned, effect, sd, alpha):.1%} (N={planned})",
                      "more than a million" if needed is None else str(needed)]
            cells += ["—" if needed is None else f"{needed * hours:,.0f}"] if hours is not None else []
        detectable = None if planned is None else power.detectable_effect(planned, sd, target, alpha)
        cells += ["—" if planned is None else f"±{detectable:.2f} (N={planned})"]
        body.append("| " + " | ".join(cells) + " |")
    note = "N: --seeds-planned" if question.planned else "N: each endpoint's pilot seeds (set it with --seeds-planned)"
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *body, "", note + "."]
