"""benchmarks/gpu_acceptance.py: its quick mode runs every check at toy sizes on any machine and passes, and a
check that misses its target, or breaks, fails the run."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_acceptance.py"


@pytest.fixture(scope="module")
def acceptance():
    spec = importlib.util.spec_from_file_location("gpu_acceptance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_quick_mode_runs_every_check_and_passes(tmp_path):
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "RAY_ADDRESS": ""}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    found = re.fullmatch(r"acceptance: (\d+) passed, 0 failed", lines[-1])
    assert found and int(found.group(1)) >= 3, lines[-1]  # resume, tests, no out-of-memory: judged on a CPU too
    checks = {line.split()[0] for line in lines[2:-2] if line.strip() and not line.startswith(" ")}
    assert {"resume", "tests", "transformer", "s4", "plan", "packing", "wall"} <= checks, proc.stdout


def test_a_resume_that_strays_fails_the_run(acceptance, monkeypatch, capsys):
    monkeypatch.setattr(acceptance, "gap", lambda a, b: 1e-3)  # a resumed run 1e-3 off the uninterrupted one
    assert acceptance.main(["--quick", "--only", "resume"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1] == "acceptance: 0 passed, 1 failed"
    assert any(line.startswith("resume") and line.endswith("FAIL") for line in out)


def test_a_check_that_breaks_fails_the_run_and_the_others_still_run(acceptance, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access")

    monkeypatch.setitem(acceptance.CHECKS, "plan", broken)
    assert acceptance.main(["--quick", "--only", "plan", "tests"]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert "error: RuntimeError: CUDA error: an illegal memory access" in next(l for l in out if l.startswith("plan"))
    assert out[-1] == "acceptance: 1 passed, 1 failed"


@pytest.mark.parametrize("summary, counts", [
    ("== 12 passed, 3 skipped in 9.10s ==", {"passed": 12, "skipped": 3}),
    ("1 failed, 40 passed, 2 errors in 61.2s", {"failed": 1, "passed": 40, "errors": 2}),
    ("no tests ran in 0.01s", {}),
])
def test_pytests_summary_is_read(acceptance, summary, counts):
    assert acceptance.pytest_counts(f"collected\n{summary}\n") == counts
