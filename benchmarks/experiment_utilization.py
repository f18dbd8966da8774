"""How well an experiment fills a cluster: one Tune run for all cells (sptune.experiment.engine.driver) vs the
old loop, one cell after another.

    python benchmarks/experiment_utilization.py                  # 12 cells, 8 slots, 8 s trials
    python benchmarks/experiment_utilization.py --cells 24 --seconds 5 --skip-sequential

A local Ray instance with more slots than cores (`ray.init(num_cpus=--slots)`, 1-CPU trials) runs an
experiment of --cells tune cells, each with the shape of a study: pretraining (a 2-point grid) ->
finetuning from the selected pretraining trial (2 points) and scratch (2 points), at most 2 trials per
stage at a time. Each trial's work is `--seconds` of sleep (benchmarks/reporting_trial.py): a slot held,
no core used, so the figures measure the scheduling, except at the start: the first wave's trial actors
import torch and Ray Tune together, and with more slots than cores that wait is set by the cores' speed.

Printed: each cell's critical path (its longest pretraining trial + longest finetuning trial, or its
longest scratch trial: the least time the cell could take with unlimited slots), the wall time of the
cells run one after another (each as a one-cell experiment in the same Ray instance, as the old
`for cell in todo` loop ran them) and of the cells run concurrently, their ratio, and as the LAST line
`slot utilization NN%` = busy slot-seconds / (slots x wall time) of the concurrent run, busy meaning
from each trial's start to its end as its trial.json records them (Ray's actor start is not busy).
Before it: where the idle slot-seconds went (before the first trial started, between the first start and
the last end, after the last end), and the CPU seconds of one actor's imports, measured here in a fresh
process, with the wait they imply for --slots actors starting on this machine's cores.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reporting_trial import busy_spans, reporting_stage  # noqa: E402

from sptune import files  # noqa: E402
from sptune.experiment.backends import run_experiment  # noqa: E402
from sptune.experiment.plan import Cell, Plan  # noqa: E402
from sptune.search.options import Options  # noqa: E402

TINY = ["task.name=listops-mini", "model.name=transformer", "model.d_model=16", "model.n_layers=1",
        "model.n_heads=2", "model.d_ff=16", "optim.max_steps=8", "optim.eval_every=4"]
SPACE = {stage: {"params": {"optim.lr": [1e-3, 3e-3]}, "points": []} for stage in ("pretrain", "finetune", "scratch")}


def make_plan(keys: list[str]) -> Plan:
    cells = [Cell(key=key, labels={"cell": key}, space=SPACE, overrides=(*TINY, f"run.seed={i}"))
             for i, key in enumerate(keys)]
    return Plan(experiment="utilization", title="utilization", axis="-", nuisance="-", fixed="-",
                layout={"kind": "grid"}, cells=cells, backend="tune")


def run_timed(experiment_dir: Path, keys: list[str], seconds: float) -> tuple[float, float]:
    """The run's wall seconds, and its start in epoch seconds (the clock of trial.json's spans)."""
    started, start = time.time(), time.perf_counter()
    # the declared grids: the figure is about packing a known set of trials, not about which grid wins
    failed = run_experiment(experiment_dir, make_plan(keys),
                            Options(max_concurrent=2, cpus_per_worker=1, extend_grids=False),
                            trainable=partial(reporting_stage, seconds=seconds))
    if failed:
        sys.exit(f"cells failed: {failed} (see {experiment_dir}/cells/<key>/error.txt)")
    return time.perf_counter() - start, started


def stage_spans(cell_dir: Path, stage: str) -> list[tuple[float, float]]:
    return busy_spans(sorted(p for p in (cell_dir / stage).iterdir() if (p / files.TRIAL).is_file()))


def critical_path(cell_dir: Path) -> float:
    longest = {stage: max(end - start for start, end in stage_spans(cell_dir, stage))
               for stage in ("pretrain", "finetune", "scratch")}
    return max(longest["pretrain"] + longest["finetune"], longest["scratch"])


def idle_parts(spans: list[tuple[float, float]], busy: float, started: float, wall: float, slots: int) -> str:
    """Where the idle slot-seconds went: before the first trial started (Tune's set-up, the first actors'
    start), between the first start and the last end (trials waiting on their stage), and after the last
    trial ended (results, shutdown)."""
    first, last = min(s for s, _ in spans), max(e for _, e in spans)
    lead, tail = slots * (first - started), slots * (started + wall - last)
    between = slots * (last - first) - busy
    return (f"idle slot-seconds: {lead:.0f} before the first trial, {between:.0f} between the first start and "
            f"the last end, {tail:.0f} after the last trial")


def import_cpu_seconds() -> float:
    """CPU seconds a fresh process takes to import what a trial actor imports before its trial starts
    (the engine's trainable: torch, Ray Tune, sptune)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import sptune.experiment.engine.driver"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=12)
    parser.add_argument("--slots", type=int, default=8, help="Ray's CPUs: 1-CPU trials, so trial slots")
    parser.add_argument("--seconds", type=float, default=8.0, help="each trial's work")
    parser.add_argument("--skip-sequential", action="store_true", help="only the concurrent run")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds: checks the benchmark runs (the test suite uses it); its figures mean nothing")
    args = parser.parse_args()
    if args.quick:
        args.cells, args.slots, args.seconds, args.skip_sequential = 2, 2, 0.5, True
    import ray

    ray.init(num_cpus=args.slots, log_to_driver=False, include_dashboard=False)
    keys = [f"cell{i:02d}" for i in range(args.cells)]
    with tempfile.TemporaryDirectory() as tmp:
        sequential = None
        if not args.skip_sequential:
            sequential = sum(run_timed(Path(tmp) / "sequential" / key, [key], args.seconds)[0] for key in keys)
        concurrent_dir = Path(tmp) / "concurrent"
        wall, started = run_timed(concurrent_dir, keys, args.seconds)
        cells = [concurrent_dir / files.CELLS / key for key in keys]
        for cell_dir in cells:
            print(f"{cell_dir.name}: critical path {critical_path(cell_dir):.1f} s")
        spans = [span for cell_dir in cells for stage in ("pretrain", "finetune", "scratch")
                 for span in stage_spans(cell_dir, stage)]
        busy = sum(end - start for start, end in spans)
        idle = idle_parts(spans, busy, started, wall, args.slots)
    print(f"{args.cells} cells x 6 trials of {args.seconds:g} s on {args.slots} slots")
    if sequential is not None:
        print(f"sequential cells: {sequential:.1f} s wall; concurrent cells: {wall:.1f} s wall; "
              f"ratio {sequential / wall:.2f}x")
    else:
        print(f"concurrent cells: {wall:.1f} s wall")
    print(idle)
    imports = import_cpu_seconds()
    print(f"a trial actor's imports: {imports:.1f} CPU-s; {args.slots} actors starting on {os.cpu_count()} cores: "
          f"about {args.slots * imports / os.cpu_count():.0f} s before the first trial can start")
    print(f"slot utilization {100 * busy / (args.slots * wall):.0f}%")


if __name__ == "__main__":
    main()
