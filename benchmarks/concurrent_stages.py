"""A study's wall time with concurrent stages (scratch beside pretrain -> finetune) vs sequential stages.

    python benchmarks/concurrent_stages.py                                   # the README's demo study
    python benchmarks/concurrent_stages.py optim.max_steps=150 optim.eval_every=50   # a shorter one

Runs `sptune study <config> --quiet` twice, back to back, into a temporary directory: first with
concurrent stages (the default), then with --sequential-stages. Printed: each arm's wall time (the
whole command: Ray's start included), their ratio, and whether both arms found the same numbers for
every trial (each trial is seeded by its own config, so the interleaving of the stages must not matter).

The default runs stages together only where the cluster has room for two stages' trials
(sptune.tune.resources.room_for_two_stages). On a machine one stage fills (2 cores, max_concurrent 2)
both arms therefore run sequentially; the README's 524.5 s vs 492.2 s was measured before that rule,
with both stages forced to run at once. Run it where two stages fit to see what concurrency buys.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# What must match between the arms: a trial is known by its stage and searched values.
COMPARED = ("best_val", "best_step", "test_metric")


def run_arm(config: str, overrides: list[str], study_dir: Path, sequential: bool) -> float:
    command = [sys.executable, "-m", "sptune.cli", "study", config, *overrides, "--dir", str(study_dir), "--quiet"]
    start = time.perf_counter()
    proc = subprocess.run(command + (["--sequential-stages"] if sequential else []), cwd=REPO,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return wall


def trial_numbers(study_dir: Path) -> dict[tuple, tuple]:
    with open(study_dir / "results.csv") as f:
        rows = list(csv.DictReader(f))
    return {(r["stage"], r["optim.lr"], r["optim.batch_size"]): tuple(r[k] for k in COMPARED) for r in rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("overrides", nargs="*", help="section.field=value for both arms")
    parser.add_argument("--config", default="configs/shapes_tiny_transformer.yaml")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sptune-stages-") as tmp:
        walls = {}
        for name, sequential in (("concurrent", False), ("sequential", True)):
            walls[name] = run_arm(args.config, args.overrides, Path(tmp) / name, sequential)
            print(f"{name:10s} stages: {walls[name]:7.1f} s", flush=True)
        print(f"concurrent / sequential: {walls['concurrent'] / walls['sequential']:.3f}")
        same = trial_numbers(Path(tmp) / "concurrent") == trial_numbers(Path(tmp) / "sequential")
        print(f"every trial's {', '.join(COMPARED)} identical in both arms: {same}")


if __name__ == "__main__":
    main()
