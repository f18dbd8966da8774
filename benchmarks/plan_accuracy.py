"""Does `sptune plan` project what a study then spends? Plan a short study on this node, run it, compare.

    python benchmarks/plan_accuracy.py           # the shapes-tiny demo study, 300 steps a trial (~4 min, 2 quiet cores)
    python benchmarks/plan_accuracy.py --quick   # a tiny model, 8 steps a trial (seconds + Ray's start)

1. The plan: `sptune plan`'s "this node" figure (sptune.experiment.budget.node_seconds: every stage's own model timed
   here, then the stage's training and evaluation FLOPs at those FLOP/s), in device-seconds, for the study
   below; nothing trains.
2. The study: the same config, overrides and options run through sptune.api.run_study (a local Ray instance,
   the search space's 2 trials per stage, 2 at once, one torch thread each); ASHA is off so every trial runs
   its whole budget, as the plan assumes. On the device the plan timed: where torch sees a GPU, the plan
   times there (run.device auto), so each trial holds one (--gpus-per-worker 1) and trains there too.
3. Compared: the plan's device-seconds against the sum, over every trial's result.json, of train_seconds +
   eval_seconds: the wall seconds the trial spent in its training steps (from its first step, warm-up
   included, to its last, evaluations excluded) and in its validation and test passes. Not compared: what a
   trial spends outside those (starting its process, loading data, building the model, writing checkpoints)
   and Ray's own time, which the plan does not project either.
Printed per stage, then as the LAST line `plan / measured device-seconds: R` (target 0.67-1.5), R from the plan
as `sptune plan` makes it, before the study, and in brackets from the plan timed again after it. Both sides are
wall seconds: on a machine shared with other work they are slowed at different moments (the plan's timing
takes seconds, the study minutes), so the machine's load averages are printed beside them; compare runs on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

from sptune import api, files
from sptune.config import STAGES
from sptune.experiment import budget
from sptune.records import studies
from sptune.search.options import Options

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "shapes_tiny_transformer.yaml"
# The demo study, cut to half its steps so it runs in minutes; its search space, model and evaluations as they are.
OVERRIDES = ["optim.max_steps=300", "optim.eval_every=50"]
QUICK_OVERRIDES = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16", "optim.max_steps=8",
                   "optim.eval_every=4", "optim.warmup_steps=0", "task.max_val_examples=32",
                   "task.max_test_examples=32"]
# The plan counts the declared grids; so does the run. Its trials train where the plan timed (module docstring).
OPTIONS = Options(asha=False, extend_grids=False, gpus_per_worker=1.0 if torch.cuda.is_available() else None)


def planned(overrides: list[str], seconds: float) -> tuple[dict[str, float], str]:
    """The plan's device-seconds on this node, per stage, and what it timed."""
    state = studies.resolve(str(CONFIG), overrides, options=OPTIONS, check_rungs=False)
    stages = budget.study_budget(state)
    what = budget.node_seconds(stages, seconds)[1]
    return {s.stage: budget.node_seconds([s], seconds)[0] for s in stages}, what


def measured(study_dir: Path) -> dict[str, float]:
    """Every stage's trials' train_seconds + eval_seconds, from their result.json."""
    spent = {}
    for stage in STAGES:
        results = [files.read_json(p) for p in sorted((study_dir / stage).glob(f"*/{files.RESULT}"))]
        if not results or any(r["status"] != "completed" for r in results):
            sys.exit(f"{stage}: not every trial completed (see {study_dir / stage})")
        spent[stage] = sum(r["train_seconds"] + r["eval_seconds"] for r in results)
    return spent


def timed_plan(label: str, overrides: list[str], seconds: float) -> dict[str, float]:
    start = time.perf_counter()
    plan, what = planned(overrides, seconds)
    print(f"{label}: {time.perf_counter() - start:.1f} s wall, {load()}; {what}")
    return plan


def load() -> str:
    averages = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"load average {averages} (1 / 5 / 15 min, {os.cpu_count()} cores)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="the plan's timing per model (sptune plan --seconds)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes, seconds: checks the benchmark runs (the test suite uses it); its figures "
                             "mean little: Ray's and a trial's fixed costs weigh more than its steps")
    args = parser.parse_args()
    overrides = OVERRIDES + (QUICK_OVERRIDES if args.quick else [])
    seconds = 0.2 if args.quick else args.seconds
    where = f"each trial on one GPU ({torch.cuda.get_device_name()})" if OPTIONS.gpus_per_worker else "on the CPU"
    print(f"config {CONFIG.relative_to(REPO)}, overrides: {' '.join(overrides)}; ASHA off; trials train {where}")
    plan = timed_plan("plan", overrides, seconds)
    with tempfile.TemporaryDirectory(prefix="plan-accuracy-") as tmp:
        start = time.perf_counter()
        api.run_study(str(CONFIG), overrides, Path(tmp) / "study", options=OPTIONS, output="quiet")
        print(f"study: {time.perf_counter() - start:.1f} s wall, {load()} at its end")
        spent = measured(Path(tmp) / "study")
    budget.time_model.cache_clear()
    again = timed_plan("plan again after the study", overrides, seconds)
    for stage in STAGES:
        print(f"{stage:9s} plan {plan[stage]:8.1f} s, measured {spent[stage]:8.1f} s (train + eval seconds of its "
              f"trials): {plan[stage] / spent[stage]:.2f}")
    print(f"plan / measured device-seconds: {sum(plan.values()) / sum(spent.values()):.2f} "
          f"(timed again after the study: {sum(again.values()) / sum(spent.values()):.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
