"""The one report writer: any results folder's table and the files beside it, rebuilt from its run directories
(no training), whatever its kind (sptune.records.layout):

    study        its stages' table (sptune.records.results.summary), results.csv, and with plots the selected
                 trials' learning curves and Optuna's plots of each stage
    seeds        a multi-seed study (an experiment whose cells are seeds): the paired SPT - scratch table over its
                 seed studies, seeds.md, seeds.csv, seeds.png and summary.json (sptune.report.pairs)
    experiment   results.csv, summary.csv, table.md and its figures (sptune.report.tables); a kept record (plan.json
                 and summary.csv only, docs/records/): its report read from the record, nothing rewritten

Every path ends here: `sptune study` and `sptune resume` after their run, the experiment scripts and
`sptune evaluate` after theirs, `sptune report` and `sptune results`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sptune import atomic, files
from sptune.records import layout, results
from sptune.records import seeds as seed_cells
from sptune.report import pairs


@dataclass
class Report:
    """What a report wrote: its table as the command prints it, the files beside it, and the rows it was made
    from (a study's trials, a multi-seed study's pairs, an experiment's arms)."""

    text: str
    paths: list[Path]
    rows: list[Any] = field(default_factory=list)
    table: Path | None = None  # the markdown table, where the kind writes one

    @property
    def plots(self) -> list[Path]:
        return [path for path in self.paths if path.suffix == ".png"]


def write(results_dir: str | Path, plots: bool = True, plot_path: str | Path | None = None,
          rows: list[Any] | None = None) -> Report:
    """The report of `results_dir` (`plots`: also a study's PNG plots; `plot_path`: a multi-seed study's plot
    once more at that path; `rows`: a study's rows its driver has just collected and written to results.csv)."""
    results_dir = Path(results_dir).resolve()
    kind = layout.kind_of(results_dir)
    if kind == layout.SEEDS:
        return seeds_report(results_dir, plot_path)
    if kind == layout.EXPERIMENT:
        return experiment_report(results_dir)
    return study_report(results_dir, plots, rows)


def study_report(study_dir: Path, plots: bool = True, rows: list[Any] | None = None) -> Report:
    from sptune.report import curves, search_plots

    if rows is None:
        rows = results.collect(study_dir)
        results.write_csv(rows, study_dir / files.RESULTS_CSV)
    text = results.summary(study_dir, rows)
    if not plots:
        return Report(text, [], rows)
    curve = curves.write(study_dir, rows)
    return Report(text, search_plots.write(study_dir) + ([curve] if curve else []), rows)


def seeds_report(parent: Path, plot_path: str | Path | None = None) -> Report:
    spec = files.read_json(parent / files.SEEDS)
    seed_pairs, metric = seed_cells.all_pairs(parent, spec)
    title = f"{Path(spec['config']).name}" + (f" {' '.join(spec['overrides'])}" if spec.get("overrides") else "")
    text = pairs.table(seed_pairs, metric, title=f"multi-seed study {parent} ({title})")
    if spec.get("wall_seconds"):
        text += f"\nwall time of the multi-seed study: {spec['wall_seconds'] / 60:.1f} min"
    paired = pairs.paired(seed_pairs)
    atomic.write_json(parent / files.SEEDS_SUMMARY, {
        "config": spec["config"], "overrides": spec.get("overrides", []), "seeds": spec["seeds"], "metric": metric,
        "pairs": [asdict(q) | {"gain": q.gain} for q in seed_pairs],
        "paired_gain": paired.to_dict() if paired else None, "wall_seconds": spec.get("wall_seconds")})
    atomic.write_text(parent / files.SEEDS_TABLE, "```\n" + text + "\n```\n\n![seeds](seeds.png)\n")
    paths = [parent / files.SEEDS_TABLE, pairs.write_csv(seed_pairs, parent / files.SEEDS_CSV),
             pairs.plot(seed_pairs, metric, parent / files.SEEDS_PLOT, title=title)]
    if plot_path is not None:
        paths.append(pairs.plot(seed_pairs, metric, Path(plot_path), title=title))
    return Report(text, paths, seed_pairs, parent / files.SEEDS_TABLE)


def experiment_report(experiment_dir: Path) -> Report:
    from sptune.report import pool, tables

    if pool.is_record(experiment_dir):  # a kept record: its rows are read, nothing is rewritten
        return Report("\n".join(pool.pooled([experiment_dir])), [])
    out = tables.write(experiment_dir)
    return Report("\n".join(out.get("summary_lines", [])), [out["table"], out["results"], *out["plots"]],
                  out["arm_rows"], out["table"])
