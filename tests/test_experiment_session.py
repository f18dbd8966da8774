"""The one Ray session of a paper experiment: a cell run through Ray Tune on Ray Train's TorchTrainer
path leaves no placement group and no process of its Ray instance behind.

What this covers is a trial that finishes: Tune's and Ray Train's groups are removed and the tagged
instance is gone after the Ray session. A trial whose Train controller dies (stopped, killed) relies on Ray
Train's PlacementGroupCleaner, which asks the dashboard's state API (ray#54305): that is why the Ray session
keeps the dashboard on; this test does not stop a trial, so it passes without the dashboard too.
The experiment runs in a subprocess, so that its session starts its own tagged Ray instance (the pytest
session's shared Ray instance would be reused).
"""

import json
import subprocess
import sys

import pytest

from ray_fixtures import REPO, TINY, sptune_env

pytestmark = pytest.mark.slow  # ~40 s on 2 CPU cores: Ray's start, one Tune stage, one TorchTrainer trial

EXPERIMENT = """
import json, sys, time
from pathlib import Path

import ray

from sptune.experiment.backends import run_experiment
from sptune.experiment.engine import session
from sptune.experiment.plan import Cell, Plan, fixed_space
from sptune.search.options import Options

experiment_dir = Path(sys.argv[1])
cell = Cell(key="scratch-s0", labels={"task": "listops-mini", "model": "transformer", "seed": 0},
            overrides=("task.name=listops-mini", "model.name=transformer", *json.loads(sys.argv[2])),
            stages=("scratch",), space=fixed_space({"scratch": {"optim.lr": 1e-3, "optim.batch_size": 8}}))
plan = Plan(experiment="leak", title="leak", axis="-", nuisance="-", fixed="-", layout={"kind": "grid"},
            cells=[cell], backend="tune")
seen = {}


def after_cell(cell, status, seconds):  # still inside the session: Ray Train's cleaner may need a moment
    deadline = time.monotonic() + 30
    while True:
        groups = ray.util.placement_group_table()
        if all(g["state"] == "REMOVED" for g in groups.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    seen.update(status=status, groups=[g["state"] for g in groups.values()],
                tagged=session.ray_processes(session.ray_tag(experiment_dir)))


failed = run_experiment(experiment_dir, plan, Options(train_path="train", max_concurrent=1), on_cell=after_cell)
deadline = time.monotonic() + 30
while session.ray_processes(session.ray_tag(experiment_dir)) and time.monotonic() < deadline:
    time.sleep(0.5)
seen.update(failed=failed, left=session.ray_processes(session.ray_tag(experiment_dir)),
            leftover=session.leftover_processes(experiment_dir))
print("RESULT " + json.dumps(seen))
"""


def test_a_torchtrainer_cell_leaves_no_placement_group_and_no_process(tmp_path):
    experiment_dir = tmp_path / "leak"
    proc = subprocess.run([sys.executable, "-c", EXPERIMENT, str(experiment_dir), json.dumps(TINY)],
                          capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=sptune_env(PYTHONPATH=str(REPO)))
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    seen = json.loads(lines[-1][len("RESULT "):])
    assert seen["failed"] == [] and seen["status"] == "done"
    assert seen["tagged"], "the session's Ray processes carry the experiment's tag"
    # Tune's trial group and the TorchTrainer's worker group both existed and were removed.
    assert len(seen["groups"]) >= 2 and set(seen["groups"]) == {"REMOVED"}, seen["groups"]
    assert seen["left"] == [] and seen["leftover"] == []
    state = json.loads((experiment_dir / "cells" / "scratch-s0" / "study.json").read_text())
    assert state["options"]["path"] == "train" and state["stage_status"]["scratch"] == "done"
    assert state["space"]["stages"]["scratch"]["points"] == [{"optim.lr": 1e-3, "optim.batch_size": 8}]
    assert not (experiment_dir / "cells" / "scratch-s0" / "space.yaml").exists()  # the space is passed, not written
