"""Autoscaling and node loss on Ray's fake multi-node provider: cluster.yaml's node types on one machine.

`RAY_FAKE_CLUSTER=1 ray start --head --autoscaling-config=<file>` with `provider: fake_multinode` runs
the real autoscaler, which starts and stops worker nodes as local raylets. The config is built from
cluster.yaml's node types (read from the file) with resources scaled to this 2-core machine: CPUs
divided by the GPU worker's CPU count (4 -> 1), GPU counts kept. A fake node advertises GPUs it does
not have, so the trials (which request what the paper's search spaces request, scaled the same way:
1 CPU + 1 GPU) hold a GPU that torch cannot see: they run with run.device=cpu, the explicit choice
the GPU check allows (with run.device=auto such a trial fails at once, as the last check here shows).

`fake_cluster(..., v2=True)` runs Ray's autoscaler v2 instead, as `ray up` does since Ray 2.50
(RAY_enable_autoscaler_v2=1 on the head). Its monitor prepares the config with the provider's defaults
file, which Ray's wheel does not ship for `fake_multinode` (fake_multi_node/example.yaml), so the same
provider class is named as an `external` provider, whose defaults are built in.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
import yaml
from ray.autoscaler._private.fake_multi_node.node_provider import FAKE_HEAD_NODE_ID
from ray_fixtures import CONFIG, REPO, sptune_env
from reproducibility import assert_pretraining_uninterrupted
from test_cluster import free_ports

from sptune import files
from sptune.experiment.engine import session
from sptune.records import results, studies
from sptune.search import spaces

pytestmark = pytest.mark.slow

IDLE_MINUTES = 0.2  # idle workers go after 12 s (cluster.yaml: 10 minutes)


def fake_cluster_config(gcs_address: str) -> tuple[dict, float]:
    """cluster.yaml's node types for the fake provider, and the CPU scale applied to them."""
    cluster = yaml.safe_load((REPO / "cluster.yaml").read_text())
    types = cluster["available_node_types"]
    workers = {name: spec for name, spec in types.items() if name != cluster["head_node_type"]}
    scale = 1 / max(spec["resources"]["CPU"] for spec in workers.values())
    fake = {
        # The fake provider names its head node type ray.head.default.
        "ray.head.default": {"resources": {"CPU": types[cluster["head_node_type"]]["resources"]["CPU"] * scale},
                             "node_config": {}, "max_workers": 0},
        **{name: {"resources": {"CPU": spec["resources"]["CPU"] * scale, "GPU": spec["resources"].get("GPU", 0),
                                "object_store_memory": 100_000_000},
                  "node_config": {}, "min_workers": spec.get("min_workers", 0), "max_workers": spec["max_workers"]}
           for name, spec in workers.items()},
    }
    config = {
        "cluster_name": "sptune-fake", "max_workers": cluster["max_workers"], "upscaling_speed": 1.0,
        "idle_timeout_minutes": IDLE_MINUTES, "head_node_type": "ray.head.default", "available_node_types": fake,
        "provider": {"type": "fake_multinode", "use_node_id_as_ip": True, "disable_node_updaters": True,
                     "disable_launch_config_check": True, "gcs_address": gcs_address},
        "auth": {}, "docker": {}, "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [], "setup_commands": [],
        "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }
    return config, scale


def as_v2(config: dict) -> dict:
    """The config for autoscaler v2 (see the module docstring), as Ray's own AutoscalingCluster sets it up."""
    provider = {**config["provider"], "type": "external", "launch_multiple": True, "head_node_id": FAKE_HEAD_NODE_ID,
                "module": "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider"}
    return {**config, "provider": provider}


@dataclass
class FakeCluster:
    address: str  # the GCS, for --address
    env: dict[str, str]  # for sptune subprocesses (the processes they start carry the tag too)
    tag: str  # SPTUNE_RAY_TAG of every process of the cluster
    config_path: Path  # the monitor's --autoscaling-config
    scale: float  # CPU scale of cluster.yaml's node types (fake_cluster_config)


@contextmanager
def fake_cluster(tmp_path: Path, v2: bool = False, workers: dict | None = None) -> Iterator[FakeCluster]:
    """A head running the fake provider's autoscaler (v1, or v2 as `ray up` starts it) with cluster.yaml's
    scaled node types, or `workers` in place of its worker types; every process of it is stopped on exit,
    on failure too."""
    temp_dir = Path(tempfile.mkdtemp(prefix="spf-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    tag = f"sptune-test-fake-{os.getpid()}"
    gcs_port, dashboard_port, client_port = free_ports(3)
    address = f"127.0.0.1:{gcs_port}"
    config, scale = fake_cluster_config(address)
    if workers is not None:
        config["available_node_types"] = {"ray.head.default": config["available_node_types"]["ray.head.default"],
                                          **workers}
    config_path = tmp_path / "fake.yaml"
    config_path.write_text(yaml.safe_dump(as_v2(config) if v2 else config))
    env = sptune_env(SPTUNE_RAY_TAG=tag, RAY_AUTH_MODE="disabled", RAY_FAKE_CLUSTER="1",
                     AUTOSCALER_UPDATE_INTERVAL_S="1")
    head_env = dict(env, RAY_enable_autoscaler_v2="1", RAY_CLOUD_INSTANCE_ID=FAKE_HEAD_NODE_ID,
                    RAY_OVERRIDE_NODE_ID_FOR_TESTING=FAKE_HEAD_NODE_ID) if v2 else env
    try:
        head = subprocess.run(
            [str(Path(sys.executable).parent / "ray"), "start", "--head", "--node-ip-address=127.0.0.1",
             f"--port={gcs_port}", f"--dashboard-port={dashboard_port}", f"--ray-client-server-port={client_port}",
             f"--num-cpus={int(config['available_node_types']['ray.head.default']['resources']['CPU'])}",
             "--object-store-memory=100000000", "--disable-usage-stats", f"--temp-dir={temp_dir}",
             f"--autoscaling-config={config_path}",
             # Node loss must not hide behind Ray's slow default health checks (~30 s to declare a node dead).
             '--system-config={"health_check_period_ms":1000,"health_check_timeout_ms":1000,'
             '"health_check_failure_threshold":3}'],
            env=head_env, capture_output=True, text=True, timeout=120)
        assert head.returncode == 0, head.stdout[-2000:] + head.stderr[-2000:]
        yield FakeCluster(address, env, tag, config_path, scale)
    finally:
        session.stop_processes(session.ray_processes(tag))
        subprocess.run(["rm", "-rf", str(temp_dir)])


def monitor_script(tag: str) -> str:
    """The autoscaler monitor script the cluster's head runs: autoscaler/_private/monitor.py (v1) or v2's."""
    for pid in session.ray_processes(tag):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        script = next((a for a in args if a.endswith("/monitor.py") and "autoscaler" in a), None)
        if script:
            return script
    return ""


def worker_raylets(tag: str) -> dict[str, int]:
    """{node id: raylet pid} of the fake worker nodes alive now (the provider gives each an id in its environment)."""
    out = {}
    for pid in session.ray_processes(tag):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            exe = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
        except OSError:
            continue
        node = [e.split(b"=", 1)[1].decode() for e in env if e.startswith(b"RAY_OVERRIDE_NODE_ID_FOR_TESTING=")]
        if exe.endswith(b"/raylet") and node and node[0] != FAKE_HEAD_NODE_ID:
            out[node[0]] = pid
    return out


def kill_node(raylet: int) -> None:
    """SIGKILL a fake node at once: its raylet and every process under it (the trial's worker among
    them), as when a machine disappears. A worker whose raylet alone died could finish its trial first."""
    tree, children = [raylet], {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            children.setdefault(int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]), []).append(int(proc.name))
        except (OSError, IndexError, ValueError):
            continue
    for pid in tree:
        tree += children.get(pid, [])
    for pid in tree:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_autoscaling_study_survives_losing_a_worker_node(tmp_path):
    space = spaces.load(REPO / "search_spaces" / "listops" / "transformer.yaml").resources  # a paper search space
    study_dir = tmp_path / "study"
    started = time.time()
    with fake_cluster(tmp_path) as cluster:
        address, env, tag = cluster.address, cluster.env, cluster.tag
        cpus, gpus = space["cpus_per_worker"] * cluster.scale, space["gpus_per_worker"]
        assert monitor_script(tag).endswith("autoscaler/_private/monitor.py")
        assert worker_raylets(tag) == {}  # min_workers: 0

        # No node type offers 2 GPUs per node: the study stops before any trial, naming the node types.
        proc = subprocess.run(
            [sys.executable, "-m", "sptune.cli", "study", str(CONFIG), "--smoke", "--quiet",
             "--dir", str(tmp_path / "two"), "--address", address, "--gpus-per-worker", "2"],
            env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "node types offer gpu_worker: 1 GPU" in proc.stderr, proc.stderr[-2000:]
        assert not (tmp_path / "two" / "pretrain").exists()

        # Pretraining is long enough (40 steps, an eval every 4) to lose its node in the middle.
        study = subprocess.Popen(
            [sys.executable, "-m", "sptune.cli", "study", str(CONFIG), "--smoke", "--quiet", "--dir", str(study_dir),
             "--address", address, "--cpus-per-worker", f"{cpus:g}", "--gpus-per-worker", f"{gpus:g}",
             "run.device=cpu", "pretrain.optim.max_steps=40"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        most_workers, killed = 0, None
        deadline = time.monotonic() + 240
        while study.poll() is None and time.monotonic() < deadline:
            most_workers = max(most_workers, len(worker_raylets(tag)))
            if killed is None:
                for run_dir in sorted((study_dir / "pretrain").glob("pretrain-*")):
                    progress = run_dir / "progress.json"
                    if progress.is_file() and files.read_json(progress)["step"] >= 12:
                        node = files.read_json(run_dir / "trial.json")["attempts"][-1]["node_id"]
                        killed = (run_dir, node, files.read_json(progress)["step"])
                        kill_node(worker_raylets(tag)[node])
                        break
            time.sleep(0.2)
        output = study.communicate(timeout=60)[0]
        assert study.returncode == 0, output[-4000:]
        assert "waiting for the autoscaler" not in output  # the GPU check read the autoscaler's node types

        # Scale-up: the cluster started with no worker; the autoscaler added GPU workers while trials
        # waited (2 at once: the search space runs 2 trials concurrently), and every trial ran on one.
        rows = results.collect(study_dir)
        assert len(rows) == 3 * studies.SMOKE_SAMPLES and all(r["status"] == "completed" for r in rows), output[-3000:]
        assert most_workers >= 2
        for row in rows:
            for attempt in files.read_json(Path(row["run_dir"]) / "trial.json")["attempts"]:
                assert attempt["node_id"].startswith("fffff") and attempt["node_id"] != FAKE_HEAD_NODE_ID
                assert attempt["started"] > started

        # Node loss: the trial continued from its last checkpoint on another node, every eval once.
        assert killed is not None, "no pretraining trial reached step 12"
        run_dir, dead_node, seen = killed
        trial = files.read_json(run_dir / "trial.json")
        assert [a["node_id"] for a in trial["attempts"]][0] == dead_node
        assert len(trial["attempts"]) == 2 and trial["attempts"][1]["node_id"] != dead_node
        assert trial["attempts"][1]["start_step"] >= seen > 0  # from its last checkpoint, not from step 0
        history = files.read_json(run_dir / "result.json")["history"]
        assert [h["step"] for h in history] == list(range(4, 41, 4))

        # ...and its numbers are those of an uninterrupted run of the same config (plain run_stage).
        assert_pretraining_uninterrupted(study_dir, rows, tmp_path / "plain")

        # A trial that holds a GPU torch cannot see, with run.device=auto, fails at once with the reason.
        proc = subprocess.run(
            [sys.executable, "-m", "sptune.cli", "study", str(CONFIG), "--smoke", "--quiet",
             "--dir", str(tmp_path / "auto"), "--address", address, "--cpus-per-worker", f"{cpus:g}", "--gpus-per-worker", f"{gpus:g}",
             "--num-samples", "1"], env=env, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
        rows = results.collect(tmp_path / "auto")
        assert rows and all(r["status"] == "failed" and r["attempts"] == 1 and "sees no CUDA device" in r["reason"]
                            for r in rows)

        # Scale-down: idle workers are removed (idle_timeout_minutes) once the study is done.
        deadline = time.monotonic() + 90
        while worker_raylets(tag) and time.monotonic() < deadline:
            time.sleep(1)
        assert worker_raylets(tag) == {}, "idle workers were not removed"


def test_gpu_check_reads_the_node_types_of_autoscaler_v2(tmp_path):
    """Under autoscaler v2 the GCS holds no cluster config either (Ray 2.60's monitors report none): the check
    reads the v2 monitor's --autoscaling-config. No node type with a GPU: a GPU study stops at once with the
    fix; a node type with one: the check passes without waiting for it."""
    cpu_only = {"cpu_worker": {"resources": {"CPU": 1}, "node_config": {}, "min_workers": 0, "max_workers": 2}}
    with fake_cluster(tmp_path, v2=True, workers=cpu_only) as cluster:
        assert monitor_script(cluster.tag).endswith("autoscaler/v2/monitor.py")
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "sptune.cli", "study", str(CONFIG), "--smoke", "--quiet", "--dir",
             str(tmp_path / "gpu"), "--address", cluster.address, "--gpus-per-worker", "1"],
            env=cluster.env, capture_output=True, text=True, timeout=120)  # a study waiting for GPUs never ends
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
        [line] = [line for line in proc.stderr.splitlines() if "GPU" in line]
        assert "node types offer cpu_worker: 0 GPU" in line and "--gpus-per-worker 0" in line, proc.stderr[-2000:]
        assert time.monotonic() - started < 60 and not (tmp_path / "gpu" / "pretrain").exists()

        # The same head with cluster.yaml's node types: the check reads the file when it runs, as the monitor
        # does at each update, so one head serves both cases (written whole: the monitor may read it meanwhile).
        config = yaml.safe_load(cluster.config_path.read_text())
        config["available_node_types"] = fake_cluster_config(cluster.address)[0]["available_node_types"]
        (tmp_path / "gpu.yaml").write_text(yaml.safe_dump(config))
        (tmp_path / "gpu.yaml").replace(cluster.config_path)
        check = ("import logging, ray; from sptune.trials import resources; logging.basicConfig(); "
                 f"ray.init(address='{cluster.address}', logging_level='WARNING'); resources.check_cluster(1); "
                 "print(sorted(resources.autoscaler_node_types()))")
        proc = subprocess.run([sys.executable, "-c", check], env=cluster.env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0 and "gpu_worker" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "waiting for the autoscaler" not in proc.stderr
