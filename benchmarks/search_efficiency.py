"""Does TPE and/or early stopping (ASHA) find the grid's answer for less compute than the grid?

    python benchmarks/search_efficiency.py                    # train the grid (7 min on 2 busy cores), then compare
    python benchmarks/search_efficiency.py --curves c.json    # keep the grid's learning curves / reuse them

1. The grid: every point of GRID is trained for real (`sptune.run.train.run_stage`, stage `scratch` of the
   embedded shapes-tiny task, a small Transformer, OVERRIDES), recording at each eval the running best
   validation accuracy and the compute spent so far: CPU seconds of the trial's process (one torch thread,
   so its device-seconds, unaffected by other load on the shared machine).
2. The methods are then replayed on those learning curves, per search seed: a trial of a point has exactly
   the curve recorded for it, since training is seeded and deterministic on CPU (run.seed is fixed; only
   the searched params differ). Trials run one after another, in the order the method proposes them:
       grid        Optuna's BruteForceSampler(seed): every point, in a seeded order (the study's sampler
                   for a categorical grid)
       grid+asha   the same order with ASHA (the study's rungs: spaces.DEFAULT_ASHA, Ray's cutoff rule:
                   a trial stops at a rung when it is below the (1 - 1/reduction_factor) quantile of the
                   values recorded there before it)
       tpe         Optuna's TPESampler(seed), never repeating a point (search.UniqueOptunaSearch's rule)
       tpe+asha    TPE with ASHA; stopped trials are told to Optuna as PRUNED with their intermediate values
   A stopped trial costs its compute up to the rung where it stopped plus its test evaluation at best.pt.
3. Printed per method and seed: the share of the grid's total compute spent when the best completed
   trial so far (what a study can select: stopped trials are never selected) first came within TOLERANCE
   of the grid's best validation accuracy; then the median over seeds. The last line names the method a
   study uses by default for this grid (sptune.records.studies.resolve_options) and its median share.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "shapes_tiny_transformer.yaml"
# A smaller model and budget than the demo so the 12-point grid trains in minutes on 2 cores; evals every
# 1/8 of the budget so ASHA's rungs (1/8, 1/4, 1/2) each meet an eval (spaces.check_rungs).
OVERRIDES = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=64", "optim.max_steps=160",
             "optim.eval_every=20", "optim.warmup_steps=10", "task.max_val_examples=200",
             "task.max_test_examples=200", "run.num_threads=1", "run.progress=false"]
# --quick: the same grid and methods at 16 steps (seconds; the figures mean nothing), for the test suite.
QUICK_OVERRIDES = ["optim.max_steps=16", "optim.eval_every=2", "optim.warmup_steps=0", "task.max_val_examples=32",
                   "task.max_test_examples=32"]
GRID = {"optim.lr": [3.0e-3, 1.0e-3, 3.0e-4, 1.0e-4], "optim.batch_size": [16, 32, 64]}
SEEDS = (0, 1, 2)
TOLERANCE = 0.01  # "within 1 point" of accuracy
METHODS = ("grid", "grid+asha", "tpe", "tpe+asha")


# ----------------------------------------------------------------------------- 1. the grid, for real
def key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def train_point(params: dict[str, Any], out: str) -> dict[str, Any]:
    """One grid point: its curve [(budget fraction, running best val, device-seconds so far)] and totals."""
    from sptune import config as cfg_mod
    from sptune.run import train

    overrides = OVERRIDES + [f"{k}={v}" for k, v in params.items()]
    cfg = cfg_mod.load(str(CONFIG), overrides, stage="scratch")
    curve: list[tuple[float, float, float]] = []
    # Compute = CPU seconds of this process (one torch thread: the device-seconds of a CPU trial). Wall
    # seconds would count the other processes sharing the machine's cores (measured: up to 3x apart
    # between two grid points doing the same work).
    start = time.process_time()

    def on_eval(record: dict[str, Any], run_dir: Path) -> None:
        curve.append((record["step"] / record["max_steps"], record["best_metric"], time.process_time() - start))

    run_dir = Path(out) / key(params).translate(str.maketrans('{}":, ', "______"))
    result = train.run_stage(cfg, "scratch", None, on_eval, run_dir)
    total = time.process_time() - start
    test_seconds = total - curve[-1][2]  # the final test evaluation at best.pt
    return {"params": params, "status": result["status"], "best_val": result.get("best_val"), "curve": curve,
            "seconds": total, "test_seconds": test_seconds,
            "wall_device_seconds": result["train_seconds"] + result["eval_seconds"]}


def train_grid(workers: int) -> dict[str, dict[str, Any]]:
    from sptune.search.spaces import StageSpace, grid_points

    points = grid_points(StageSpace(params=GRID))
    with tempfile.TemporaryDirectory(prefix="search-efficiency-") as out:
        train_point({k: v[0] for k, v in GRID.items()}, out + "/warmup")  # data generated and cached once
        with ProcessPoolExecutor(workers) as pool:
            trials = list(pool.map(train_point, points, [out] * len(points)))
    return {key(t["params"]): t for t in trials}


# ----------------------------------------------------------------------------- 2. the methods, replayed
def asha_stop(curve: list[list[float]], rungs: list[float], recorded: list[list[float]],
              reduction_factor: float) -> int | None:
    """The index of the eval where ASHA stops this trial (None: it runs to its end), as Ray's ASHA bracket
    decides: at the highest rung reached and not yet judged, stop when below the (1 - 1/rf) quantile of
    the values recorded there before; the trial's value is recorded either way."""
    import numpy as np

    judged: set[int] = set()
    for index, (budget, best, _) in enumerate(curve[:-1]):  # the last eval is no rung (spaces.FULL_BUDGET)
        reached = [level for level, rung in enumerate(rungs) if budget >= rung and level not in judged]
        if not reached:
            continue
        level = max(reached)
        judged.update(range(level + 1))
        values = recorded[level]
        cutoff = float(np.nanpercentile(values, (1 - 1 / reduction_factor) * 100)) if values else None
        values.append(best)
        if cutoff is not None and best < cutoff:
            return index
    return None


def replay(method: str, seed: int, grid: dict[str, dict[str, Any]]) -> list[tuple[float, float | None]]:
    """[(device-seconds of the trial, its best val if it completed else None)] in the order trials finish."""
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState

    from sptune.search import searcher as search, spaces

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = (optuna.samplers.BruteForceSampler(seed=seed) if method.startswith("grid")
                   else optuna.samplers.TPESampler(seed=seed))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    distributions = {k: CategoricalDistribution(v) for k, v in GRID.items()}
    asha = spaces.DEFAULT_ASHA if method.endswith("+asha") else None
    rungs = spaces.rungs(asha) if asha else []
    recorded: list[list[float]] = [[] for _ in rungs]
    seen: set[str] = set()
    events: list[tuple[float, float | None]] = []
    repeats = 0
    while len(seen) < len(grid) and repeats < search.UniqueOptunaSearch.MAX_REPEATS:
        trial = study.ask(distributions)
        point = key(trial.params)
        if point in seen:  # UniqueOptunaSearch: a repeat is told back as pruned, never run
            repeats += 1
            tell(study, trial, None, TrialState.PRUNED)
            continue
        seen.add(point)
        repeats = 0
        record = grid[point]
        if record["status"] != "completed":
            tell(study, trial, None, TrialState.FAIL)
            events.append((record["seconds"], None))
            continue
        stop = asha_stop(record["curve"], rungs, recorded, asha["reduction_factor"]) if asha else None
        if stop is None:
            tell(study, trial, record["best_val"], TrialState.COMPLETE)
            events.append((record["seconds"], record["best_val"]))
        else:
            for budget, best, _ in record["curve"][:stop + 1]:
                trial.report(best, round(budget * 10**6))
            tell(study, trial, None, TrialState.PRUNED)
            events.append((record["curve"][stop][2] + record["test_seconds"], None))
    return events


def tell(study: Any, trial: Any, value: float | None, state: Any) -> None:
    """study.tell; BruteForceSampler calls Study.stop once the grid is exhausted, which raises outside
    study.optimize after the state is stored (as in search.UniqueOptunaSearch._tell)."""
    try:
        study.tell(trial, value, state=state)
    except RuntimeError as exc:
        if "Study.stop" not in str(exc):
            raise


def share_to_reach(events: list[tuple[float, float | None]], target: float, grid_total: float) -> float | None:
    spent, best = 0.0, float("-inf")
    for seconds, value in events:
        spent += seconds
        if value is not None:
            best = max(best, value)
        if best >= target:
            return spent / grid_total
    return None


def default_method() -> str:
    """What a study runs on this grid by default: the sampler and ASHA that resolve_options picks."""
    from sptune.records import studies
    from sptune.search import spaces

    space = spaces.parse({"stages": {"scratch": {"params": GRID}}}, "<benchmark grid>")
    options = studies.resolve_options(studies.Options(num_samples=len(spaces.grid_points(space.stages["scratch"]))),
                                       space)
    sampler = "grid" if options.sampler in ("auto", "brute") else "tpe"
    trials = spaces.trial_count(space.stages["scratch"], options.num_samples)
    return sampler + ("+asha" if spaces.stage_asha(options, trials) else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--curves", type=Path, help="JSON file of the grid's curves: read if it exists, else written")
    parser.add_argument("--workers", type=int, default=2, help="grid points trained at once (one core each)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes, seconds: checks the benchmark runs (the test suite uses it); its figures "
                             "mean nothing")
    args = parser.parse_args()
    if args.quick:
        OVERRIDES.extend(QUICK_OVERRIDES)  # before the worker processes fork: they see it
    print(f"config {CONFIG.relative_to(REPO)}, stage scratch, overrides: {' '.join(OVERRIDES)}")
    print(f"grid: {json.dumps(GRID)} ({len(GRID['optim.lr']) * len(GRID['optim.batch_size'])} points)")
    if args.curves and args.curves.is_file():
        grid = json.loads(args.curves.read_text())
        print(f"grid curves read from {args.curves}")
    else:
        start = time.perf_counter()
        grid = train_grid(args.workers)
        print(f"grid trained in {time.perf_counter() - start:.0f} s wall ({args.workers} at once)")
        if args.curves:
            args.curves.write_text(json.dumps(grid))
    total = sum(t["seconds"] for t in grid.values())
    best = max(t["best_val"] for t in grid.values() if t["status"] == "completed")
    print(f"grid: {total:.0f} device-seconds (CPU s) in all, best validation accuracy {best:.4f}; "
          f"target: within {TOLERANCE} ({best - TOLERANCE:.4f})")
    for point, t in sorted(grid.items()):
        print(f"  {point}: best val {t['best_val']:.4f}, {t['seconds']:.1f} CPU s "
              f"({t.get('wall_device_seconds', float('nan')):.1f} s wall)")
    medians: dict[str, float] = {}
    for method in METHODS:
        shares, totals = [], []
        for seed in SEEDS:
            events = replay(method, seed, grid)
            share = share_to_reach(events, best - TOLERANCE, total)
            shares.append(share if share is not None else float("inf"))
            totals.append(sum(s for s, _ in events) / total)
        medians[method] = statistics.median(shares)
        print(f"{method:10s} reach share per seed: " + ", ".join(f"{s:.0%}" for s in shares)
              + f"; median {medians[method]:.0%}; whole search: "
              + ", ".join(f"{s:.0%}" for s in totals) + " of grid compute")
    name = default_method()
    print(f"default method {name}: {medians[name] * 100:.0f}% of grid compute")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
