"""A multi-seed study: the same SPT study (sptune.records.studies) once per seed, each seed a cell of the
engine's one Tune run (sptune.experiment.engine.driver), plus a paired summary.

    sptune study configs/shapes_tiny_transformer.yaml --seeds 0 1 2 3 4 --dir runs/seeds
    sptune resume runs/seeds          # finished seeds are kept, an interrupted one continues
    sptune report runs/seeds          # seeds.md / seeds.csv / seeds.png / summary.json, no training

Layout: <dir>/seeds.json (what was asked), <dir>/seed-<s>/ one complete study directory per seed
(its own study.json, trials, results.csv; `run.seed=<s>` appended to the overrides), and the
summary files (the pairs and statistics of sptune.report.pairs). Each seed's study is exactly the single-seed
protocol; this layer only makes the seed cells and writes the paired statistics.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sptune import atomic, files
from sptune.atomic import write_text as write_text_atomic
from sptune.config import STAGES
from sptune.records import layout, results, studies, study_state
from sptune.report import pairs
from sptune.search.options import Options


def create(config_path: str, overrides: list[str], parent: str | Path, seed_list: list[int],
           space_path: str | None, options: Options) -> dict[str, Any]:
    """Write <parent>/seeds.json and every seed's study.json (validated before any training)."""
    parent = Path(parent).resolve()
    pairs.check_seeds(seed_list, overrides)
    layout.check_free(parent)
    spec = {"version": 1, "config": str(config_path), "overrides": list(overrides), "seeds": list(seed_list),
            "search_space": space_path, "options": asdict(options), "created": time.time()}
    for seed in seed_list:
        studies.create(config_path, [*overrides, f"run.seed={seed}"], parent / seed_dir_name(seed),
                        space_path, options)
    atomic.write_json(parent / files.SEEDS, spec)
    return spec


# ----------------------------------------------------------------------------- a multi-seed study directory
def study_pair(seed: int, study_dir: Path) -> tuple[pairs.Pair, str | None]:
    """One seed's pair from its study directory (sptune.records.results: each stage's selected trial; a
    stage that has not finished has none, so its best so far is never reported as the seed's result)."""
    if not (study_dir / files.STUDY).is_file():
        return pairs.Pair(seed, None, None, status="not started"), None
    rows = results.collect(study_dir)
    best = {stage: results.selected_row(rows, stage) for stage in STAGES}
    metric = (best["scratch"] or best["finetune"] or {}).get("metric")
    missing = [s for s in ("finetune", "scratch") if best[s] is None]
    stages = study_state.load(study_dir).stage_status
    status = "completed" if not missing else (
        ("no selected " + "/".join(missing) + " trial (the stage has not finished, or no trial of it completed); "
         "stages: " + ", ".join(f"{k} {v}" for k, v in stages.items()))
        if stages else "not run yet")
    seconds = sum(r.get("device_seconds") or 0.0 for r in rows)
    runs = {stage: results.run_result(best[stage]) for stage in ("finetune", "scratch")}
    return pairs.of_seed(seed, best, seconds, status, runs), metric


def all_pairs(parent: Path, spec: dict[str, Any]) -> tuple[list[pairs.Pair], str | None]:
    """Every seed's pair, in the order asked, and the task's metric (read from the seed studies, nothing written)."""
    found = [study_pair(seed, parent / seed_dir_name(seed)) for seed in spec["seeds"]]
    return [pair for pair, _ in found], next((metric for _, metric in found if metric), None)


def all_paired(parent: str | Path) -> bool:
    """Every seed has both arms completed (the exit code of `sptune study --seeds`)."""
    spec = files.read_json(Path(parent) / files.SEEDS)
    return all(pair.complete for pair in all_pairs(Path(parent), spec)[0])


def report(parent: str | Path, wall_seconds: float | None = None, plot_path: str | Path | None = None
           ) -> dict[str, Any]:
    """Rebuild seeds.md, seeds.csv, seeds.png and summary.json of a multi-seed study from its seed studies
    (`plot_path`: the plot once more at that path)."""

    parent = Path(parent).resolve()
    spec = files.read_json(parent / files.SEEDS)
    seed_pairs, metric = all_pairs(parent, spec)
    if wall_seconds is not None:  # the run that just finished: keep its wall time for later reports
        spec["wall_seconds"] = wall_seconds
        atomic.write_json(parent / files.SEEDS, spec)
    title = f"{Path(spec['config']).name}" + (f" {' '.join(spec['overrides'])}" if spec.get("overrides") else "")
    text = pairs.table(seed_pairs, metric, title=f"multi-seed study {parent} ({title})")
    if spec.get("wall_seconds"):
        text += f"\nwall time of the multi-seed study: {spec['wall_seconds'] / 60:.1f} min"
    p = pairs.paired(seed_pairs)
    summary = {"config": spec["config"], "overrides": spec.get("overrides", []), "seeds": spec["seeds"],
               "metric": metric, "pairs": [asdict(q) | {"gain": q.gain} for q in seed_pairs],
               "paired_gain": p.to_dict() if p else None, "wall_seconds": spec.get("wall_seconds")}
    atomic.write_json(parent / files.SEEDS_SUMMARY, summary)
    write_text_atomic(parent / files.SEEDS_TABLE, "```\n" + text + "\n```\n\n![seeds](seeds.png)\n")
    paths = {"table": parent / files.SEEDS_TABLE, "csv": pairs.write_csv(seed_pairs, parent / files.SEEDS_CSV),
             "plot": pairs.plot(seed_pairs, metric, parent / files.SEEDS_PLOT, title=title), "summary": parent / files.SEEDS_SUMMARY,
             "text": text, "paired": p}
    if plot_path is not None:
        paths["extra_plot"] = pairs.plot(seed_pairs, metric, Path(plot_path), title=title)
    return paths


def seed_dir_name(seed: int) -> str:
    return f"seed-{seed}"
