"""How the driver's own cost grows with the number of trials and cells.

    python benchmarks/driver_scale.py                      # a 500-trial study, a 100-cell experiment
    python benchmarks/driver_scale.py --trials 200 --cells 40 --slots 8   # smaller, for a loaded machine

Every trial only reports (benchmarks/reporting_trial.py with 0 s of work, injected as studies.run's and
run_experiment's `trainable`), so what is timed is Ray Tune, the searchers, the Optuna journal and
sptune's bookkeeping. A local Ray instance with --slots CPUs runs them (1-CPU trials, max_concurrent =
slots: full concurrency).

Printed, each with its target and PASS/MISS:
  per-trial driver overhead  wall / trials of the study (trial work is 0 s) at each third of its run, and
                             of the experiment (--cells cells x 3 trials); target <= 0.5 s and flat
                             (the last third's rate at most 1.5x the first's)
  driver RSS                 at 100 / 250 / 500 finished trials (or the thirds of a smaller study);
                             target growth <= 1 MB per trial
  results.csv and report     time to collect and write results.csv, and the study summary
  resume                     a copy of the study killed (SIGKILL) half-way in a subprocess, resumed by
                             another: wall time of the resume; target <= 60 s
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from reporting_trial import reporting_stage  # noqa: E402

from sptune import files  # noqa: E402
from sptune.experiment.engine import driver  # noqa: E402
from sptune.records import studies, results  # noqa: E402
from sptune.search import spaces  # noqa: E402
from sptune.search.options import Options  # noqa: E402

TINY = ["task.name=listops-mini", "model.name=transformer", "model.d_model=16", "model.n_layers=1",
        "model.n_heads=2", "model.d_ff=16", "optim.max_steps=8", "optim.eval_every=4"]
# The study's resume in a subprocess: the same reporting trials, on a local Ray of its own unless given an address.
RESUME = ("import sys; sys.path.insert(0, sys.argv[2]); from reporting_trial import reporting_stage; "
          "from sptune.experiment.engine import driver; "
          "driver.run_study(sys.argv[1], address=sys.argv[3] or None, verbose=0, trainable=reporting_stage)")


def create_study(study_dir: Path, trials: int, slots: int) -> None:
    """One pretraining and one finetuning trial, then `trials` scratch trials (a grid of that many lrs)."""
    lrs = [round(1e-4 * (1 + i / trials), 10) for i in range(trials)]
    space = spaces.parse({"task": "listops-mini", "model": "transformer", "num_samples": trials,
                          "max_concurrent": slots,
                          "stages": {"pretrain": {"params": {"optim.lr": [1e-3]}},
                                     "finetune": {"params": {"optim.lr": [1e-3]}},
                                     "scratch": {"params": {"optim.lr": lrs}}}})
    studies.create(None, TINY, study_dir, options=Options(asha=False, extend_grids=False), space=space)  # N trials


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024


class Sampler(threading.Thread):
    """Driver RSS and elapsed time when the study's finished trials pass each mark."""

    def __init__(self, stage_dir: Path, marks: list[int]):
        super().__init__(daemon=True)
        self.stage_dir, self.marks, self.seen, self.began = stage_dir, marks, {}, time.perf_counter()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set() and len(self.seen) < len(self.marks):
            self.sample()
            time.sleep(0.5)

    def sample(self) -> None:
        finished = finished_trials(self.stage_dir)
        for mark in self.marks:
            if finished >= mark and mark not in self.seen:
                self.seen[mark] = (time.perf_counter() - self.began, rss_mb())


def finished_trials(stage_dir: Path) -> int:
    return sum(1 for _ in stage_dir.glob("*/" + files.RESULT)) if stage_dir.is_dir() else 0


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def study_figures(tmp: Path, trials: int, slots: int) -> None:
    study_dir = tmp / "study"
    create_study(study_dir, trials, slots)
    marks = [m for m in (100, 250, 500) if m <= trials] or [trials]
    marks = sorted({trials // 3, 2 * trials // 3, trials} | set(marks))
    sampler = Sampler(study_dir / "scratch", marks)
    sampler.start()
    start = time.perf_counter()
    driver.run_study(study_dir, verbose=0, trainable=reporting_stage)
    wall = time.perf_counter() - start
    sampler.done.set()
    sampler.join()
    sampler.sample()  # marks passed since its last poll (a short study ends between two)
    print(f"study of {trials + 2} trials: {wall:.1f} s wall, {wall / (trials + 2):.3f} s per trial "
          f"(target <= 0.5 s) {verdict(wall / (trials + 2) <= 0.5)}")
    thirds = [m for m in marks if m in (trials // 3, 2 * trials // 3, trials)]
    times = [sampler.seen[m][0] for m in thirds if m in sampler.seen]
    if len(times) == 3:
        first, last = times[0] / thirds[0], (times[2] - times[1]) / (thirds[2] - thirds[1])
        print(f"  per-trial rate, first third {first:.3f} s, last third {last:.3f} s "
              f"(target: flat, last <= 1.5x first) {verdict(last <= 1.5 * first)}")
    for mark in marks:
        if mark in sampler.seen:
            print(f"  driver RSS at {mark} finished trials: {sampler.seen[mark][1]:.0f} MB")
    low, high = min(sampler.seen), max(sampler.seen)
    growth = (sampler.seen[high][1] - sampler.seen[low][1]) / max(1, high - low)
    print(f"  RSS growth {growth:.3f} MB per trial (target <= 1 MB) {verdict(growth <= 1)}")
    start = time.perf_counter()
    rows = results.collect(study_dir)
    results.write_csv(rows, study_dir / files.RESULTS_CSV)
    csv_s = time.perf_counter() - start
    start = time.perf_counter()
    results.summary(study_dir, rows)
    print(f"  results.csv of {len(rows)} rows: {csv_s:.2f} s; report: {time.perf_counter() - start:.2f} s")


def resume_figure(tmp: Path, trials: int, slots: int, address: str = "") -> None:
    """`address`: both drivers join that Ray instead of starting their own (--quick: two Ray starts fewer)."""
    study_dir = tmp / "killed"
    create_study(study_dir, trials, slots)
    env = dict(os.environ)  # main() put this folder and the checkout on its PYTHONPATH
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, "-c", RESUME, str(study_dir), str(HERE), address], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while finished_trials(study_dir / "scratch") < trials // 2:
        if proc.poll() is not None:
            sys.exit("the study to kill ended before half of its trials")
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RESUME, str(study_dir), str(HERE), address], env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"resume failed:\n{done.stderr[-2000:]}")
    start_note = "Ray joined, not started" if address else "Ray's start included"
    print(f"resume of the {trials + 2}-trial study killed half-way: {wall:.1f} s "
          f"({start_note}; target <= 60 s) {verdict(wall <= 60)}")


def experiment_figure(tmp: Path, cells: int, slots: int) -> None:
    from sptune.experiment.backends import run_experiment
    from sptune.experiment.plan import Cell, Plan

    space = {stage: {"params": {"optim.lr": [1e-3]}, "points": []} for stage in ("pretrain", "finetune", "scratch")}
    plan = Plan(experiment="scale", title="scale", axis="-", nuisance="-", fixed="-", layout={"kind": "grid"},
                backend="tune", cells=[Cell(key=f"cell{i:03d}", labels={}, space=space, overrides=(*TINY,))
                                       for i in range(cells)])
    start = time.perf_counter()
    failed = run_experiment(tmp / "experiment", plan, Options(max_concurrent=slots, asha=False, extend_grids=False),
                            trainable=partial(reporting_stage, seconds=0.0))
    wall = time.perf_counter() - start
    per_trial = wall / (3 * cells)
    print(f"experiment of {cells} cells x 3 trials: {wall:.1f} s wall, {per_trial:.3f} s per trial "
          f"(target <= 0.5 s) {verdict(per_trial <= 0.5 and not failed)}" + (f"; failed {failed}" if failed else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--cells", type=int, default=100)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds: checks the benchmark runs (the test suite uses it); its figures mean nothing")
    args = parser.parse_args()
    if args.quick:
        args.trials, args.cells, args.slots = 8, 2, 2  # enough trials that the resume figure can kill half-way
    import ray

    # Ray's workers inherit this environment: the resume's drivers (--quick) put reporting_trial in their trials.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE.parent), str(HERE), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=args.slots, log_to_driver=False, include_dashboard=False)
    with tempfile.TemporaryDirectory() as tmp:
        study_figures(Path(tmp), args.trials, args.slots)
        experiment_figure(Path(tmp), args.cells, args.slots)
        if args.quick:  # the resume's drivers join this Ray: its figure means nothing here, its path is checked
            resume_figure(Path(tmp), args.trials, args.slots, ray.get_runtime_context().gcs_address)
        else:
            ray.shutdown()  # the resume runs in subprocesses with their own Ray, as `sptune resume` would
            resume_figure(Path(tmp), args.trials, args.slots)


if __name__ == "__main__":
    main()
