"""The config's route, measured (tools/config_route.py: every call that carries the config, by a profiler): a
trial handles no study record, and the route grows no longer unnoticed (docs/architecture.md gives its files)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MEASURED = {"driver": (15, 6), "trial": (14, 8)}  # (stays, returns) as docs/architecture.md lists them


@pytest.mark.slow  # ~35 s: the driver's part starts Ray and runs Tune's loop to the first trial's start
def test_the_route_is_as_documented_and_a_trial_touches_no_study_record(tmp_path):
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "RAY_ADDRESS": ""}
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "config_route.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parts = {m[0]: (int(m[1]), int(m[2]), m[3]) for m in
             re.findall(r"^(driver|trial): (\d+) stays, (\d+) returns: (.*)$", proc.stdout, re.M)}
    assert set(parts) == set(MEASURED), proc.stdout
    for name, (stays, returns) in MEASURED.items():
        assert parts[name][0] <= stays and parts[name][1] <= returns, f"the {name}'s route grew: {parts[name][2]}"
    trial_files = parts["trial"][2].split(", ")
    assert trial_files[0] == "trials/entry" and not [f for f in trial_files if f.startswith("records/")]
