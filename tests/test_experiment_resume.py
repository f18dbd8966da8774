"""Kill and resume at the experiment level: the driver of a 3-cell experiment (one Tune run for all cells)
is SIGKILLed, or gets Ctrl-C (SIGINT: it stops at a step boundary and exits 130), while trials of two cells
are mid-run; rerunning the same command resumes the experiment's Tune run, and every trial ends with the
numbers of an uninterrupted run; no Ray process is left."""

import os
import signal
import subprocess
import sys
import time

import pytest
from ray_fixtures import REPO, TINY, ray_instance, sptune_env  # noqa: F401 (a fixture)
from test_resume_study import midway, ray_left_behind

from sptune import files
from sptune.experiment.engine import session
from sptune.records import results, study_state

pytestmark = pytest.mark.slow  # ~90 s on 2 CPU cores: the killed run, its resume, an uninterrupted run

# Pretraining and scratch long enough to be caught mid-way; one trial per stage at a time.
LONG = ["pretrain.optim.max_steps=120", "pretrain.optim.eval_every=10",
        "scratch.optim.max_steps=120", "scratch.optim.eval_every=10"]
SPACE = {"pretrain": {"params": {"optim.lr": [1e-3, 3e-3]}, "points": []},
         "finetune": {"params": {"optim.lr": [1e-3]}, "points": []},
         "scratch": {"params": {"optim.lr": [1e-3]}, "points": []}}
CELLS = ("c0", "c1", "c2")

EXPERIMENT = """
import sys
from sptune.experiment.backends import run_experiment
from sptune.experiment.engine import interrupts
from sptune.search.options import Options
from test_experiment_resume import plan

interrupts.install("the same command")  # as the experiments/*.py scripts do (sptune.cli.experiment.main)
try:
    print("FAILED", run_experiment(sys.argv[1], plan(), Options(max_concurrent=1, extend_grids=False)), flush=True)
except KeyboardInterrupt as stop:
    print("INTERRUPTED", flush=True)
    sys.exit(stop.exit_code)
"""


def plan():
    from sptune.experiment.plan import Cell, Plan

    cells = [Cell(key=key, labels={"seed": i}, space=SPACE,
                  overrides=("task.name=listops-mini", "model.name=transformer", f"run.seed={i}", *TINY, *LONG))
             for i, key in enumerate(CELLS)]
    return Plan(experiment="resume", title="resume", axis="-", nuisance="-", fixed="-", layout={"kind": "grid"},
                cells=cells, backend="tune")


def start(experiment_dir):
    env = sptune_env(PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]))
    return subprocess.Popen([sys.executable, "-c", EXPERIMENT, str(experiment_dir)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def wait_for_two_cells_midway(experiment_dir, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        busy = [key for key in CELLS for stage in ("pretrain", "scratch")
                if midway(experiment_dir / files.CELLS / key, stage)]
        if len(set(busy)) >= 2:
            return
        time.sleep(0.2)
    raise AssertionError("no two cells had trials mid-run at once")


def numbers(experiment_dir):
    """{(cell, stage, lr): the trial's evaluations and test metric}; trial ids differ between runs."""
    table = {}
    for key in CELLS:
        for row in results.collect(experiment_dir / files.CELLS / key):
            result = files.read_json(row["run_dir"] + "/" + files.RESULT)
            table[(key, row["stage"], row["optim.lr"])] = (
                [(h["step"], h["val_metric"], h["val_loss"]) for h in result["history"]], result.get("test_metric"))
    return table


def counted_done_unfinished(experiment_dir):
    """(cell, stage, status) a stopped driver recorded that are not "done with every trial's result": a status
    other than done, or done with a trial lacking its result. A cell may finish all its stages before two others
    are caught mid-way (on a loaded machine, such as a CI runner, it does), so "done" is allowed when it is true."""
    wrong = []
    for key in CELLS:
        cell = experiment_dir / files.CELLS / key
        for stage, status in files.read_json(cell / files.STUDY)["stage_status"].items():
            runs = list((cell / stage).iterdir()) if (cell / stage).is_dir() else []
            if status != study_state.DONE or not runs or not all((run / files.RESULT).is_file() for run in runs):
                wrong.append((key, stage, status))
    return wrong


def all_done(experiment_dir):
    return all(files.read_json(experiment_dir / files.CELLS / key / files.STUDY)["stage_status"].keys()
               >= {"pretrain", "finetune", "scratch"} for key in CELLS)


REFERENCE = {}  # the uninterrupted run's numbers, computed once for both signals


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_a_killed_experiment_resumes_with_an_uninterrupted_runs_numbers(sig, tmp_path, ray_instance):  # noqa: F811
    from sptune.experiment.backends import run_experiment
    from sptune.search.options import Options

    killed = tmp_path / "killed"
    tag = session.ray_tag(killed)
    procs = [start(killed)]
    try:
        wait_for_two_cells_midway(killed, procs[0])
        os.kill(procs[0].pid, sig)
        output = procs[0].communicate(timeout=120)[0]
        if sig == signal.SIGINT:  # it stopped itself at a step boundary, exit 130; nothing unfinished is done
            assert procs[0].returncode == 130 and "INTERRUPTED" in output, output[-3000:]
            assert counted_done_unfinished(killed) == [] and not all_done(killed)
        procs.append(start(killed))
        output = procs[1].communicate(timeout=420)[0]
        assert procs[1].returncode == 0 and "FAILED []" in output, output[-3000:]
        resumed = [files.read_json(run / files.TRIAL) for key in CELLS for stage in ("pretrain", "scratch")
                   for run in (killed / files.CELLS / key / stage).iterdir()]
        assert any(len(t["attempts"]) == 2 and t["attempts"][1]["start_step"] > 0 for t in resumed)

        if not REFERENCE:
            reference = tmp_path / "reference"
            assert run_experiment(reference, plan(), Options(max_concurrent=1, extend_grids=False)) == []
            REFERENCE.update(numbers(reference))
        assert len(REFERENCE) == 12 and numbers(killed) == REFERENCE
        assert ray_left_behind(killed) == {}  # the resumed driver stopped its own Ray instance on the way out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        session.stop_processes(session.leftover_processes(killed) + session.ray_processes(tag))
