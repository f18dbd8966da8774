"""One report over an experiment's seeds run in several directories (`sptune report DIR DIR ...`): a grid
experiment (the main job's confirmation) or a fraction experiment (data_fractions).

A confirmation on many seeds takes many hours on a small machine, and a run directory does not
outlive the machine it ran on. So the seeds run in batches, and each batch keeps a record small enough to
commit: its plan.json and summary.csv (one row per arm: the test metric, the selected lr, the costs). The
pooled report reads each batch's arms, from its cells where they are still on disk (test-set resampling needs
their result.json) or from its record, checks that the batches ran the same settings and that no seed ran
twice, and writes the experiment's sections once over all their seeds (sptune.report.tables).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from sptune import files
from sptune.errors import UserError
from sptune.experiment import looks
from sptune.experiment.backends import experiment_rows
from sptune.experiment.plan import Cell, Plan, load_plan
from sptune.report import tables as report

FLOAT_COLUMNS = ("test", "val", "lr", "device_seconds", "search_device_seconds", "flops", "train_loss")
INT_COLUMNS = ("n_params", "best_step", "steps")
TEXT_COLUMNS = ("experiment", "cell", "arm", "row", "status", "metric", "run_dir", "test_hits")
POOLED_LAYOUTS = ("grid", "fraction")  # the layouts whose sections are built from arms alone (not from run files)


def is_record(experiment_dir: str | Path) -> bool:
    """A kept record: an experiment's plan.json and summary.csv without its cells."""
    path = Path(experiment_dir)
    return (path / files.PLAN).is_file() and (path / files.SUMMARY_CSV).is_file() and not (path / files.CELLS).is_dir()


def batch_arms(experiment_dir: Path, plan: Plan, record: bool) -> list[dict[str, Any]]:
    """The batch's arms: from its cells when they are on disk, else (`record`) from its summary.csv."""
    if not record:
        return report.arms(experiment_dir, plan, experiment_rows(experiment_dir, plan))
    labels = {cell.key: cell.labels for cell in plan.cells}
    with open(experiment_dir / files.SUMMARY_CSV, newline="") as handle:
        return [record_arm(row, labels, experiment_dir) for row in csv.DictReader(handle)]


def record_arm(row: dict[str, str], labels: dict[str, dict[str, Any]], experiment_dir: Path) -> dict[str, Any]:
    """One summary.csv row as report.arms() built it: the cell's labels with their types from plan.json, and its
    run_dir (kept relative to the experiment directory) resolved against the record's directory."""
    if row.get("cell") not in labels:
        raise UserError(f"summary.csv names cell {row.get('cell')!r}, which its plan.json lacks; keep the two files "
                        f"of one experiment directory together")
    arm: dict[str, Any] = {**labels[row["cell"]], **{k: row.get(k) or None for k in TEXT_COLUMNS}}
    arm.update({k: float(row[k]) if row.get(k) else None for k in FLOAT_COLUMNS})
    arm["run_dir"] = str(experiment_dir / arm["run_dir"]) if arm["run_dir"] else None
    arm.update({k: int(row[k]) if row.get(k) else None for k in INT_COLUMNS})
    paper = row.get("paper_value")
    arm["paper"] = {"value": float(paper), "source": row.get("paper_source")} if paper else None
    return arm


def unseeded(cell: Cell) -> str:
    """A cell's labels, overrides, stages and declared grid, without its seed."""
    labels = {k: v for k, v in cell.labels.items() if k != "seed"}
    overrides = [o for o in cell.overrides if not o.startswith("run.seed=")]
    return json.dumps([labels, overrides, cell.stages, cell.space], sort_keys=True)


def settings(plan: Plan) -> set[str]:
    """What a batch ran, seeds aside: the experiment, backend and layout, and every cell unseeded."""
    return {unseeded(cell) for cell in plan.cells} | {
        json.dumps([plan.experiment, plan.backend, plan.smoke, plan.layout], sort_keys=True)}


def check_same_settings(batches: list[tuple[Path, Plan]]) -> None:
    first_dir, first = batches[0]
    for experiment_dir, plan in batches[1:]:
        differ = sorted(settings(plan) ^ settings(first))
        if differ:
            raise UserError(f"{experiment_dir} ran other settings than {first_dir} (e.g. {differ[0][:160]}); pool only "
                            f"batches of one command that differ in --seeds")


def check_each_cell_once(arms: list[tuple[Path, dict[str, Any]]]) -> None:
    seen: dict[tuple[str, str], Path] = {}
    for experiment_dir, arm in arms:
        key = (arm["cell"], arm["arm"])
        if key in seen:
            raise UserError(f"cell {arm['cell']} ({arm['arm']}) is in both {seen[key]} and {experiment_dir}; pool each "
                            f"seed from one batch only")
        seen[key] = experiment_dir


def seeds_text(cells: list[Cell]) -> str:
    seeds = sorted({cell.labels.get("seed") for cell in cells if cell.labels.get("seed") is not None})
    return ", ".join(map(str, seeds)) or "none"


def pooled(experiment_dirs: list[str | Path], design: str | Path | None = None) -> list[str]:
    """The pooled report's lines (markdown): the batches, then the experiment's sections over all their arms, then
    the sequential looks where a design is declared (`design`, else a design.json of the batches: looks.py)."""
    batches = [(Path(d).resolve(), load_plan(d)) for d in experiment_dirs]
    check_same_settings(batches)
    first = batches[0][1]
    kind = first.layout["kind"]
    if kind not in POOLED_LAYOUTS:
        raise UserError(f"pooling covers {' and '.join(POOLED_LAYOUTS)} experiments; {first.experiment} is a {kind} "
                        f"experiment: report each of its directories alone")
    records = {d: is_record(d) for d, _ in batches}
    tagged = [(d, arm) for d, plan in batches for arm in batch_arms(d, plan, records[d])]
    check_each_cell_once(tagged)
    arm_rows = [arm for _, arm in tagged]
    lines = [f"# {first.title}: {len(batches)} batch{'es' * (len(batches) > 1)} pooled", ""]
    lines += [f"- `{d}`: {'kept record (plan.json + summary.csv)' if records[d] else 'experiment directory'}, "
              f"seeds {seeds_text(plan.cells)}" for d, plan in batches]
    if kind == "fraction":
        sections = report.fraction_sections(report.with_column_arms(arm_rows), first.layout)
    else:
        table, rest = report.grid_sections(arm_rows, first.layout)
        sections = table + rest
    found = looks.find_design(experiment_dirs, design)
    return lines + [""] + sections + report.not_completed_lines(arm_rows) + looks.lines(arm_rows, first.layout, found)
