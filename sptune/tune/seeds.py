"""A multi-seed study: the same SPT study (sptune.tune.pipeline) once per seed, plus a paired summary.

    sptune study configs/shapes_tiny_transformer.yaml --seeds 0 1 2 3 4 --dir runs/seeds
    sptune resume runs/seeds          # finished seeds are kept, an interrupted one continues
    sptune report runs/seeds          # seeds.md / seeds.csv / seeds.png / summary.json, no training

Layout: <dir>/seeds.json (what was asked), <dir>/seed-<s>/ one complete study directory per seed
(its own study.json, trials, results.csv; `run.seed=<s>` appended to the overrides), and the
summary files of sptune.seeds. Each seed's study is exactly the single-seed protocol; this layer only
loops over seeds, shares one Ray instance among them and writes the paired statistics.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

from sptune import atomic, files, seeds
from sptune.errors import UserError
from sptune.tune import pipeline, session
from sptune.tune.options import Options


def create(config_path: str, overrides: list[str], parent: str | Path, seed_list: list[int],
           space_path: str | None, options: Options) -> dict[str, Any]:
    """Write <parent>/seeds.json and every seed's study.json (validated before any training)."""
    parent = Path(parent).resolve()
    if not seed_list or len(set(seed_list)) != len(seed_list):
        raise UserError(f"--seeds needs distinct seeds, got {seed_list}")
    if any(o.split("=", 1)[0] in ("run.seed", "scratch.run.seed", "pretrain.run.seed", "finetune.run.seed")
           for o in overrides):
        raise UserError("pass seeds with --seeds, not a run.seed= override")
    if (parent / files.SEEDS).is_file():
        raise UserError(f"{parent} already holds a multi-seed study; continue it with `sptune resume {parent}` "
                        f"or pass another --dir")
    if (parent / files.STUDY).is_file():
        raise UserError(f"{parent} holds a single-seed study; pass another --dir")
    spec = {"version": 1, "config": str(config_path), "overrides": list(overrides), "seeds": list(seed_list),
            "search_space": space_path, "options": asdict(options), "created": time.time()}
    for seed in seed_list:
        pipeline.create(config_path, [*overrides, f"run.seed={seed}"], parent / seeds.seed_dir_name(seed),
                        space_path, options)
    atomic.write_json(parent / files.SEEDS, spec)
    return spec


def run(parent: str | Path, address: str | None = None, verbose: int = 1,
        on_seed: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run (or continue) every seed's study inside one Ray instance, then write the summary files."""
    parent = Path(parent).resolve()
    spec = files.read_json(parent / files.SEEDS)
    start = time.perf_counter()
    with session.ray_session(parent, address):
        for seed in spec["seeds"]:
            if on_seed is not None:
                on_seed(seed)
            pipeline.run(parent / seeds.seed_dir_name(seed), address=address, verbose=verbose)
    return seeds.report(parent, wall_seconds=(spec.get("wall_seconds") or 0.0) + time.perf_counter() - start)
