"""cluster.yaml against Ray's own schema, and a real two-node Ray cluster on this machine running a study."""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from ray_fixtures import CONFIG, REPO, sptune_env

from sptune import checkpoints, results
from sptune.tune import pipeline


def test_cluster_yaml_matches_the_schema_shipped_with_ray():
    import jsonschema
    import ray

    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    cluster = yaml.safe_load((REPO / "cluster.yaml").read_text())
    jsonschema.validate(cluster, schema)
    assert cluster["provider"]["type"] == "aws"
    head, workers = cluster["available_node_types"][cluster["head_node_type"]], [
        spec for name, spec in cluster["available_node_types"].items() if name != cluster["head_node_type"]]
    assert "GPU" not in head["resources"] and all(w["resources"].get("GPU", 0) >= 1 for w in workers)
    assert sum(w["max_workers"] for w in workers) <= cluster["max_workers"]
    setup = " ".join(cluster["setup_commands"])
    assert "/home/ubuntu/sptune" in setup and "[gpu]" in setup and "torch==" in setup
    mounts = cluster["file_mounts"]
    assert mounts["/home/ubuntu/sptune"] == "." and any("sptune_data" in remote for remote in mounts)
    # Every node sees the studies at the same path: the head exports them, the workers mount them.
    assert any("/home/ubuntu/studies" in c for c in cluster["head_setup_commands"])
    assert any("mount -t nfs" in c for c in cluster["worker_start_ray_commands"])


def free_ports(n):
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def ray_start(args, env, ports):
    """`ray start` with every port chosen here, so two nodes (and other Ray instances) never collide."""
    names = ["--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
             "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port"]
    cmd = [str(Path(sys.executable).parent / "ray"), "start", "--node-ip-address=127.0.0.1", "--num-cpus=1",
           "--object-store-memory=200000000", "--disable-usage-stats", *args,
           *[f"{name}={port}" for name, port in zip(names, ports)],
           "--worker-port-list=" + ",".join(map(str, ports[len(names):]))]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.mark.slow
def test_study_on_a_two_node_cluster(tmp_path):
    temp_dir = Path(tempfile.mkdtemp(prefix="spr-", dir="/tmp"))  # short: Ray's socket paths have a length limit
    tag = f"sptune-test-cluster-{os.getpid()}"
    # Every process of both nodes carries the tag, so the cleanup below stops exactly them. Token
    # authentication is off: the nodes only listen on 127.0.0.1.
    env = sptune_env(SPTUNE_RAY_TAG=tag, RAY_AUTH_MODE="disabled")
    gcs_port, dashboard_port, client_port, *ports = free_ports(3 + 2 * 36)
    study_dir = tmp_path / "study"
    try:
        ray_start(["--head", f"--port={gcs_port}", f"--dashboard-port={dashboard_port}",
                   f"--ray-client-server-port={client_port}", f"--temp-dir={temp_dir / 'head'}",
                   '--resources={"sptune_head_node": 1}'], env, ports[:36])
        ray_start([f"--address=127.0.0.1:{gcs_port}", f"--temp-dir={temp_dir / 'second'}",
                   '--resources={"sptune_second_node": 1}'], env, ports[36:])
        proc = subprocess.run([sys.executable, "-m", "sptune.cli", "study", str(CONFIG), "--smoke", "--quiet",
                               "--dir", str(study_dir), "--address", f"127.0.0.1:{gcs_port}"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        rows = results.collect(study_dir)
        assert len(rows) == 3 * pipeline.SMOKE_SAMPLES and all(r["status"] == "completed" for r in rows)
        nodes = {r["node_id"] for r in rows}
        assert len(nodes) == 2, f"all trials ran on {nodes}"  # 1 CPU per node, 2 trials at once: one on each
        attempts = [checkpoints.read_json(Path(r["run_dir"]) / "trial.json")["attempts"][-1] for r in rows]
        assert all(a["hostname"] and a["pid"] for a in attempts)
        # The study joined the cluster instead of starting Ray itself: nothing of its own to stop.
        assert checkpoints.read_json(study_dir / pipeline.DRIVER_FILE)["address"] == f"127.0.0.1:{gcs_port}"
    finally:
        pipeline.stop_processes(pipeline.ray_processes(tag))
        shutil.rmtree(temp_dir, ignore_errors=True)
