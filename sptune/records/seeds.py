"""A multi-seed study: the same SPT study (sptune.records.studies) once per seed, each seed a cell of the
engine's one Tune run (sptune.experiment.engine.driver), plus a paired summary.

    sptune study configs/shapes_tiny_transformer.yaml --seeds 0 1 2 3 4 --dir runs/seeds
    sptune resume runs/seeds          # finished seeds are kept, an interrupted one continues
    sptune report runs/seeds          # seeds.md / seeds.csv / seeds.png / summary.json, no training

Layout: <dir>/seeds.json (what was asked), <dir>/seed-<s>/ one complete study directory per seed
(its own study.json, trials, results.csv; `run.seed=<s>` appended to the overrides), and the
summary files (the pairs and statistics of sptune.report.pairs, written by sptune.report.writer). Each seed's
study is exactly the single-seed protocol; this layer only makes the seed cells and reads their pairs.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sptune import atomic, files
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


def add_wall_seconds(parent: str | Path, seconds: float) -> None:
    """Add a run's wall time to seeds.json, for the reports (sptune.report.writer)."""
    spec = files.read_json(Path(parent) / files.SEEDS)
    spec["wall_seconds"] = (spec.get("wall_seconds") or 0.0) + seconds
    atomic.write_json(Path(parent) / files.SEEDS, spec)


def seed_dir_name(seed: int) -> str:
    return f"seed-{seed}"
