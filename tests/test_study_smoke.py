"""Every study's --smoke-test end to end, as CI runs them (pytest --slow): real runs behind every table
entry, the table and plots written, Ray Tune behind one study, and a killed study resumed.

Measured on a 2-core CPU: about 4 minutes for the whole file, most of it the six studies' training
(pathfinder-tiny is generated once per pytest session into that session's cache, ~10 s).
"""

import csv
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PLOTS = {  # study -> the PNGs its report must write
    "lra_table": {"bars.png"},
    "data_fractions": {"fractions.png"},
    "model_sizes": {"sizes.png"},
    "spt_ratio": {"shares.png"},
    "kernels": {"kernels-listops-mini-for-listops.png", "kernels-pathfinder-tiny-for-pathx.png"},
    "modalities": {"bars.png"},
}


def command(study, study_dir, *extra):
    return [sys.executable, str(ROOT / "experiments" / f"{study}.py"), "--smoke-test", "--dir", str(study_dir), *extra]


def run(study, study_dir, *extra):
    proc = subprocess.run(command(study, study_dir, *extra), capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return proc.stdout


def check_study(study, study_dir):
    """Table and plots exist, and every trial row of every cell comes from a finished run directory."""
    table = (study_dir / "table.md").read_text()
    assert "not done" not in table and "Not completed" not in table
    for name in PLOTS[study]:
        png = study_dir / name
        assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size > 10_000, png
    plan = json.loads((study_dir / "plan.json").read_text())
    with open(study_dir / "results.csv") as f:
        rows = list(csv.DictReader(f))
    for cell in plan["cells"]:
        mine = [r for r in rows if r["cell"] == cell["key"]]
        assert {r["stage"] for r in mine} == set(cell["stages"]), cell["key"]
        for row in mine:
            result = json.loads((Path(row["run_dir"]) / "result.json").read_text())
            assert result["status"] == "completed" and result["steps"] > 0
            assert float(row["test_metric"]) == pytest.approx(result["test_metric"])
            assert (Path(row["run_dir"]) / "best.pt").is_file() and row["device"].startswith("cpu (")
    return plan, rows


@pytest.mark.parametrize("study", ["lra_table", "data_fractions", "spt_ratio", "modalities"])
def test_smoke_study_runs_end_to_end(study, tmp_path):
    run(study, tmp_path / study)
    check_study(study, tmp_path / study)


def test_kernels_smoke_study_through_ray_tune(tmp_path):
    study_dir = tmp_path / "kernels"
    run("kernels", study_dir, "--backend", "tune")
    plan, rows = check_study("kernels", study_dir)
    for cell in plan["cells"]:  # each cell is a pipeline study: Tune ran the pretraining search
        state = json.loads((study_dir / "cells" / cell["key"] / "study.json").read_text())
        assert state["stage_status"]["pretrain"] == "done"
        assert state["stage_status"]["finetune"].startswith("skipped") and state["stage_status"]["scratch"].startswith("skipped")
    assert all(r["trial_id"] != "plain" for r in rows)
    assert "| listops-mini (for Listops) | 1 | 256 |" in (study_dir / "table.md").read_text()


def test_model_sizes_smoke_study_killed_and_resumed(tmp_path):
    study_dir = tmp_path / "model_sizes"

    def finished():  # a cell's scratch stage runs last: its result.json marks the cell finished
        return sorted(study_dir.glob("cells/*/scratch/result.json"))

    proc = subprocess.Popen(command("model_sizes", study_dir), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=ROOT)
    deadline = time.monotonic() + 600
    while len(finished()) < 3:
        assert proc.poll() is None, "the study ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.1)
    proc.kill()  # SIGKILL: no cleanup, as a crash or a lost machine
    proc.wait()
    before = {p: p.stat().st_mtime_ns for p in study_dir.glob("cells/*/*/result.json")}
    assert 3 <= len({p.parent.parent for p in before}) < 12

    out = run("model_sizes", study_dir)
    assert "already finished, skipped" in out
    for path, mtime in before.items():  # finished stages are never run again
        assert path.stat().st_mtime_ns == mtime
    plan, _ = check_study("model_sizes", study_dir)
    assert len(plan["cells"]) == 12
    assert " ± " in (study_dir / "table.md").read_text()  # two seeds: mean ± std
