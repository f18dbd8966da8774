"""Every benchmark runs to its end in its quick mode (`--quick`: tiny sizes, seconds), so a refactor that breaks
one fails here rather than rotting unseen. The figures of a quick run mean nothing; docs/benchmarks.md holds
the measured ones."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HELPERS = {"reporting_trial.py"}  # imported by the benchmarks, not one itself
OWN_TESTS = {"gpu_acceptance.py"}  # its quick mode, and that it can fail: tests/test_gpu_acceptance.py
# Each benchmark and a line its end prints (its last figure).
ENDS = {
    "data_loading.py": "bidmc",
    "throughput.py": "dlr",
    "ssm_kernels.py": "dlr",
    "search_efficiency.py": "default method",
    "ray_overhead.py": "trial start latency",
    "driver_scale.py": "resume",
    "experiment_utilization.py": "slot utilization",
    "plan_accuracy.py": "plan / measured device-seconds",
    "interval_coverage.py": "lowest coverage:",
    "sequential_error_rates.py": "largest simulated type I error",
    "storage_scale.py": "push at 60 trials",
}
STARTS_RAY = {"ray_overhead.py", "driver_scale.py", "experiment_utilization.py", "plan_accuracy.py"}


def test_every_benchmark_is_listed():
    assert {p.name for p in (REPO / "benchmarks").glob("*.py")} - HELPERS - OWN_TESTS == set(ENDS)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in STARTS_RAY else n for n in ENDS])
def test_benchmark_runs_to_its_end_in_quick_mode(name, tmp_path):
    # The pytest session's SPTUNE_CACHE (conftest): the embedded tasks are generated once, not once per benchmark
    # (listops-mini: ~7 s of a quiet core each time). Generation itself is tested in test_listops / test_shapes.
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "SPTUNE_DATA": str(tmp_path / "data"),
           "RAY_ADDRESS": ""}
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / name), "--quick"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "Traceback" not in out and "failed:" not in proc.stdout, out[-3000:]
    assert ENDS[name] in proc.stdout.strip().splitlines()[-1] or ENDS[name] in proc.stdout, out[-3000:]
