"""What does Ray Tune cost per trial? K identical trials as plain calls vs as a Tune study.

    python benchmarks/ray_overhead.py                                   # K=4 trials of ~30 s (2 CPUs)
    python benchmarks/ray_overhead.py --trials 3 optim.max_steps=20     # quicker, overhead-dominated
    python benchmarks/ray_overhead.py --path train                      # the Ray Train TorchTrainer path
    python benchmarks/ray_overhead.py --seconds 10                      # ~10 s trials (steps from a timed warmup)

Both sides run the same `sptune.run.train.run_stage` (stage `scratch` of the config, one torch thread),
one trial at a time, trial i with run.seed=i. Printed: the wall time of the K plain calls, of the K
Tune trials (from Tuner start, Ray already up), their ratio, the ratio with Ray's start included,
and each trial's start latency (previous trial's end -> this trial's first line of code, the first
trial measured from the Tuner start). Target: ratio <= 1.2 for trials of >= 30 s of work, and for
10-second trials (--seconds 10). Wall times: on a machine shared with other work, compare the two
sides of one run only.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
# ~30 s of training per trial on one core of the CI machine (the demo model at batch 32).
DEFAULT_OVERRIDES = ["optim.max_steps=250", "optim.eval_every=50", "task.max_val_examples=200"]


def plain(config: str, overrides: list[str], trials: int, out: Path) -> float:
    from sptune import config as cfg_mod
    from sptune.run import train

    start = time.perf_counter()
    for i in range(trials):
        cfg = cfg_mod.load(config, overrides + [f"run.seed={i}", "run.num_threads=1", "run.progress=false"],
                           stage="scratch")
        result = train.run_stage(cfg, "scratch", run_dir=out / f"plain-{i}")
        assert result["status"] == "completed", result.get("reason")
    return time.perf_counter() - start


def tuned(config: str, overrides: list[str], trials: int, out: Path, path: str) -> tuple[float, float, list[float]]:
    from sptune import files
    from sptune.experiment.engine import driver, session
    from sptune.records import studies
    from sptune.search.options import Options
    from sptune.trials import trainable

    space = out / "space.yaml"
    seeds = {"params": {"run.seed": list(range(trials))}}
    space.write_text(yaml.safe_dump({"num_samples": trials, "max_concurrent": 1,
                                     "stages": {"pretrain": seeds, "finetune": seeds, "scratch": seeds}}))
    state = studies.create(config, overrides, out / "study", str(space), Options(train_path=path, max_concurrent=1))
    start = time.perf_counter()
    # The session every study uses: a local Ray instance, started here so that its start is timed apart.
    with session.ray_session(Path(state.dir)):
        ray_start = time.perf_counter() - start
        begin_wall = time.time()
        begin = time.perf_counter()
        driver.run_stage_search(Path(state.dir), state, "scratch", trainable.stage_trainable, verbose=0)
        total = time.perf_counter() - begin
    runs = sorted((Path(state.dir) / "scratch").iterdir(),
                  key=lambda d: files.read_json(d / "trial.json")["attempts"][0]["started"])
    latencies, previous_end = [], begin_wall
    for run in runs:
        started = files.read_json(run / "trial.json")["attempts"][0]["started"]
        latencies.append(started - previous_end)
        previous_end = (run / files.RESULT).stat().st_mtime
    return total, ray_start, latencies


def sized(config: str, overrides: list[str], seconds: float, out: Path) -> list[str]:
    """Overrides for trials of about `seconds`: a trial costs a fixed part (model, test evaluation) plus a
    time per step, both from two timed plain runs of 10 and 60 steps (5 evals per trial)."""
    times = {steps: plain(config, overrides + [f"optim.max_steps={steps}", f"optim.eval_every={steps // 5}"], 1,
                          out / f"size-{steps}") for steps in (10, 60)}
    per_step = max((times[60] - times[10]) / 50, 1e-6)
    steps = max(5, round((seconds - (times[10] - 10 * per_step)) / per_step / 5) * 5)
    return [f"optim.max_steps={steps}", f"optim.eval_every={steps // 5}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help=f"config overrides (default: {' '.join(DEFAULT_OVERRIDES)})")
    parser.add_argument("--config", default=str(REPO / "configs" / "listops_mini_transformer.yaml"))
    parser.add_argument("--trials", type=int, default=4, help="K: trials on each side")
    parser.add_argument("--path", choices=("direct", "train"), default="direct",
                        help="direct: trial runs the stage itself; train: a TorchTrainer with one worker")
    parser.add_argument("--seconds", type=float, help="trials of about this many seconds: optim.max_steps "
                        "from the warmup's time per step (5 evals per trial), appended to the overrides")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds: checks the benchmark runs (the test suite uses it); its figures mean nothing")
    args = parser.parse_args()
    if args.quick:
        args.trials, args.seconds = 1, None
    overrides = args.overrides or DEFAULT_OVERRIDES
    if args.quick:
        overrides = [*overrides, "optim.max_steps=4", "optim.eval_every=2", "task.max_val_examples=16"]
    with tempfile.TemporaryDirectory(prefix="ray-overhead-") as tmp:
        out = Path(tmp)
        plain(args.config, overrides, 1, out / "warmup")  # data generated and cached once, outside both timings
        if args.seconds:
            overrides = overrides + sized(args.config, overrides, args.seconds, out)
        base = plain(args.config, overrides, args.trials, out)
        total, ray_start, latencies = tuned(args.config, overrides, args.trials, out, args.path)
    print(f"{args.trials} trials of `scratch` with {' '.join(overrides)} ({args.path} path)")
    print(f"plain calls:      {base:8.1f} s   ({base / args.trials:.1f} s per trial)")
    print(f"Ray Tune trials:  {total:8.1f} s   ({total / args.trials:.1f} s per trial), Ray start {ray_start:.1f} s")
    print(f"ratio Tune / plain: {total / base:.2f}   with Ray start: {(total + ray_start) / base:.2f}"
          "   (target <= 1.2)")
    print("trial start latency: " + ", ".join(f"{x:.1f}" for x in latencies)
          + f" s (median {statistics.median(latencies):.1f} s)")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
