"""cluster.yaml against Ray's own schema, the ready image's Dockerfile against cluster.yaml, and a real two-node Ray
cluster on this machine, laid out as cluster.yaml's, running a study."""

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from launch_harness import GUARD, dockerfile, image_records, with_ready_image
from ray_fixtures import CONFIG, REPO, sptune_env

from sptune import files
from sptune.experiment.engine import session
from sptune.records import studies, results


def test_cluster_yaml_matches_the_schema_shipped_with_ray():
    import jsonschema
    import ray

    schema = json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())
    cluster = yaml.safe_load((REPO / "cluster.yaml").read_text())
    jsonschema.validate(cluster, schema)
    # Its ready-image variant too (a node type's own docker.worker_image), as a user switches it on.
    jsonschema.validate(yaml.safe_load(with_ready_image((REPO / "cluster.yaml").read_text(), "registry")), schema)
    assert cluster["provider"]["type"] == "aws"
    head, workers = cluster["available_node_types"][cluster["head_node_type"]], [
        spec for name, spec in cluster["available_node_types"].items() if name != cluster["head_node_type"]]
    # The head takes no trials (what its `ray start` gets: test_cluster_launch.py); GPU workers take them.
    assert head["resources"] == {"CPU": 0} and all(w["resources"].get("GPU", 0) >= 1 for w in workers)
    assert sum(w["max_workers"] for w in workers) <= cluster["max_workers"]
    # A pinned image on every node (Ray's own, Python 3.11, this Ray version) and a named host AMI.
    docker = cluster["docker"]
    assert docker["head_image"].startswith(f"rayproject/ray:{ray.__version__}-py311-cpu")
    # GPU workers: an image that names its CUDA version (test_cluster_launch.py matches torch's build to it);
    # docker.image too, which Ray's v2 autoscaler reads when it sets up a worker.
    assert re.fullmatch(rf"rayproject/ray:{re.escape(ray.__version__)}-py311-cu\d+", docker["worker_image"])
    assert docker["image"] == docker["worker_image"]
    assert all(spec["node_config"]["ImageId"] for spec in cluster["available_node_types"].values())
    # An AMI resolved from SSM at launch needs ssm:GetParameters from the head, which launches the workers:
    # a head role that grants it, not Ray's default (EC2 and S3 only).
    if any(spec["node_config"]["ImageId"].startswith("resolve:ssm:") for spec in workers):
        assert head["node_config"]["IamInstanceProfile"]
    # torch's CUDA build and the GPU libraries go on GPU workers only, and nothing is compiled.
    head_setup = " ".join(cluster["setup_commands"] + cluster["head_setup_commands"])
    assert "torch==" in head_setup and "whl/cpu" in head_setup and "[cluster]" in head_setup
    for worker in workers:
        setup = " ".join(worker["worker_setup_commands"])
        assert "torch==" in setup and "/home/ray/sptune[keops]" in setup
        assert "flash-attn" not in setup and "[gpu]" not in setup and "--no-build-isolation" not in setup
    assert "worker_setup_commands" not in cluster or not cluster["worker_setup_commands"]
    # apt-get install always after apt-get update, in the same command list.
    for spec in [cluster, *cluster["available_node_types"].values()]:
        commands = spec.get("initialization_commands", [])
        installs = [i for i, c in enumerate(commands) if "apt-get" in c and " install " in c]
        updates = [i for i, c in enumerate(commands) if "apt-get" in c and " update" in c]
        assert all(updates and min(updates) < i for i in installs)
    # Code is copied; data is not (it is prepared once into the shared NFS directory).
    mounts = cluster["file_mounts"]
    assert mounts["/home/ray/sptune"] == "." and not any("sptune_data" in local for local in mounts.values())
    # `ray up` never runs the head node type's initialization_commands (the head's are the top-level ones),
    # and a worker type without its own would run the head's: what each node runs is checked in
    # test_cluster_launch.py.
    assert "initialization_commands" not in head and all("initialization_commands" in w for w in workers)


def pip_args(command: str) -> list[str]:
    """What a `pip install` command installs, with its options, guard and cache switch left out."""
    return [a for a in shlex.split(GUARD.sub("", command).split("pip install", 1)[1]) if a != "--no-cache-dir"]


def test_the_ready_image_installs_what_a_gpu_worker_would():
    """The Dockerfile builds FROM cluster.yaml's worker image (the same tag, which the ready image's tag in
    cluster.yaml repeats); runs the GPU workers' installs, same order and arguments (torch's pin, within
    pyproject.toml's range, and index; sptune from where file_mounts put the repository, copied there first);
    and records the pyproject.toml that the workers' guards check. Not built here: no Docker daemon."""
    import tomllib

    from packaging.requirements import Requirement

    cluster = yaml.safe_load((REPO / "cluster.yaml").read_text())
    steps = dockerfile(REPO / "Dockerfile")
    package_dir = next(remote for remote, local in cluster["file_mounts"].items() if local == ".")
    workers = [spec for name, spec in cluster["available_node_types"].items() if name != cluster["head_node_type"]]
    assert [args for keyword, args in steps if keyword == "FROM"] == [cluster["docker"]["worker_image"]]
    ready = yaml.safe_load(with_ready_image((REPO / "cluster.yaml").read_text(), "registry"))["available_node_types"]
    assert {spec["docker"]["worker_image"].rsplit(":", 1)[1] for spec in ready.values() if "docker" in spec} == {
        cluster["docker"]["worker_image"].rsplit(":", 1)[1]}
    installs = [(k, pip_args(args)) for k, (keyword, args) in enumerate(steps)
                if keyword == "RUN" and "pip install" in args]
    for worker in workers:
        assert [a for _, a in installs] == [pip_args(c) for c in worker["worker_setup_commands"]]
    torch = next(a for a in sum((a for _, a in installs), []) if a.startswith("torch=="))
    (floor,) = [r for r in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
                if Requirement(r).name == "torch"]
    assert Requirement(floor).specifier.contains(torch.split("==")[1]), (torch, floor)
    copied = [k for k, (keyword, args) in enumerate(steps)
              if keyword == "COPY" and args.split()[-2:] == [".", package_dir]]
    (sptune,) = [k for k, args in installs if any(a.strip('"').startswith(package_dir) for a in args)]
    assert copied and copied[0] < sptune
    guarded = {GUARD.search(c)["record"] for w in workers for c in w["worker_setup_commands"]}
    assert {r: image_records(steps).get(r) for r in guarded} == {r: f"{package_dir}/pyproject.toml" for r in guarded}


def test_the_workers_install_only_where_the_image_does_not_match(tmp_path):
    """The GPU workers' setup commands and the Dockerfile's record step, run by bash under a stand-in for
    /home/ray (pip replaced by echo): in an image built from the mounted pyproject.toml the installs are
    skipped; with another pyproject.toml, or no record (Ray's stock image), they run."""
    cluster = yaml.safe_load((REPO / "cluster.yaml").read_text())
    home = tmp_path / "home" / "ray"
    (home / "sptune").mkdir(parents=True)
    (home / "sptune" / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    (record_step,) = [args for keyword, args in dockerfile(REPO / "Dockerfile")
                      if keyword == "RUN" and "sha256sum" in args]
    commands = [c for name, spec in cluster["available_node_types"].items() if name != cluster["head_node_type"]
                for c in spec["worker_setup_commands"]]

    def bash(command: str) -> str:
        command = command.replace("/home/ray", str(home)).replace("python -m pip install", "echo pip install")
        proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert all(bash(c).startswith("pip install") for c in commands)  # the stock image: no record
    bash(record_step)
    assert [bash(c) for c in commands] == [""] * len(commands)  # the image built from this pyproject.toml
    (home / "sptune" / "pyproject.toml").write_text("[project]\nname = 'sptune'\ndependencies = ['new']\n")
    assert all(bash(c).startswith("pip install") for c in commands)  # built from another one


def test_the_image_leaves_out_what_ray_up_leaves_out():
    """.dockerignore is cluster.yaml's rsync_exclude in Docker's terms: Docker anchors every pattern at the
    root, where rsync matches a pattern without a leading '/' at any depth (its tail, for one with a '/')."""
    cluster = yaml.safe_load((REPO / "cluster.yaml").read_text())
    docker_form = [p[1:] if p.startswith("/") else p if p.startswith("**/") else f"**/{p}"
                   for p in cluster["rsync_exclude"]]
    lines = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    assert sorted(line for line in lines if line and not line.startswith("#")) == sorted(docker_form)


def test_declared_dependencies_match_the_imports():
    """Every third-party module sptune imports is declared in pyproject.toml (or comes with one that is)."""
    import ast
    import sys
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = " ".join(project["dependencies"] + sum(project["optional-dependencies"].values(), [])).lower()
    # Import name -> distribution name, where they differ.
    dist = {"yaml": "pyyaml", "PIL": "pillow", "flash_attn": "flash-attn", "sklearn": "scikit-learn"}
    imported = set()
    for path in (REPO / "sptune").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {name for name in imported if name not in sys.stdlib_module_names and name != "sptune"}
    missing = [name for name in sorted(third_party) if dist.get(name, name).replace("_", "-").lower()
               not in declared.replace("_", "-")]
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"
    # And the other way: every core dependency is imported (nothing declared that sptune does not use).
    core = {re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0].lower() for requirement in project["dependencies"]}
    module = {dist_name: name for name, dist_name in dist.items()}
    data_only = {"sktime"}  # ships the UCR files that sptune.tasks.ucr reads (found by its spec, never imported)
    unused = sorted(d for d in core - data_only
                    if module.get(d, d).replace("-", "_").lower() not in {m.lower() for m in third_party})
    assert not unused, f"declared in pyproject.toml but never imported: {unused}"
    assert project["optional-dependencies"]["cluster"] == ["boto3>=1.26"]

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
    cmd = [str(Path(sys.executable).parent / "ray"), "start", "--node-ip-address=127.0.0.1",
           "--object-store-memory=200000000", "--disable-usage-stats", *args,
           *[f"{name}={port}" for name, port in zip(names, ports)],
           "--worker-port-list=" + ",".join(map(str, ports[len(names):]))]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


# Joins the cluster at argv[1]: which nodes `sptune doctor`'s cluster check goes to (its check_node, tested in
# test_doctor.py, replaced by a stub), and every alive node's resources.
DOCTOR_AND_NODES = """
import json, sys
import ray
from sptune import doctor
doctor.check_node = lambda seconds, model: {"host": "checked", "can_train": True}
checked = [r["node_id"] for r in doctor.check_cluster(sys.argv[1], seconds=1, timeout_s=30)]
ray.init(address=sys.argv[1], logging_level="ERROR")
print(json.dumps({"checked": checked, "nodes": {n["NodeID"]: n["Resources"] for n in ray.nodes() if n["Alive"]}}))
"""


LAYER = "shipped_conv:make"


def write_layer_package(root: Path) -> Path:
    """A researcher's layer package under root (a depthwise causal convolution), outside the checkout."""
    package = root / "shipped_conv"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "from torch import nn\n\n\n"
        "class Conv(nn.Module):\n"
        "    def __init__(self, d_model, causal, width=3):\n"
        "        super().__init__()\n"
        "        self.pad = (width - 1, 0) if causal else ((width - 1) // 2, width // 2)\n"
        "        self.conv = nn.Conv1d(d_model, d_model, width, groups=d_model)\n\n"
        "    def forward(self, x):  # (B, L, D) -> (B, L, D)\n"
        "        return self.conv(nn.functional.pad(x.transpose(1, 2), self.pad)).transpose(1, 2)\n\n\n"
        "def make(d_model, causal, width=3):\n"
        "    return Conv(d_model, causal, width)\n")
    return root


@pytest.mark.slow
def test_study_on_a_two_node_cluster(tmp_path):
    """cluster.yaml's layout on this machine: a head that gets cluster.yaml's head resources as Ray's launcher
    passes them (RAY_OVERRIDE_RESOURCES: no CPU), and a worker with 2 CPUs. The study's driver joins at the
    head, every trial runs on the worker with a layer only the driver can import (shipped by runtime_env), and
    `sptune doctor` checks the worker only."""
    cluster = yaml.safe_load((REPO / "cluster.yaml").read_text())
    head_resources = cluster["available_node_types"][cluster["head_node_type"]]["resources"]
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
                   '--resources={"sptune_head_node": 1}'],
                  {**env, "RAY_OVERRIDE_RESOURCES": json.dumps(head_resources)}, ports[:36])
        ray_start([f"--address=127.0.0.1:{gcs_port}", f"--temp-dir={temp_dir / 'second'}", "--num-cpus=2",
                   '--resources={"sptune_second_node": 1}'], env, ports[36:])
        # The study's layer is a researcher's, importable by the driver alone (its PYTHONPATH): the nodes started
        # without it, so the trials can import it only through the runtime_env the driver ships it in.
        layers = write_layer_package(tmp_path / "layers")
        proc = subprocess.run([sys.executable, "-m", "sptune.cli", "study", str(CONFIG), "--smoke", "--quiet",
                               "--dir", str(study_dir), "--address", f"127.0.0.1:{gcs_port}",
                               f"model.name={LAYER}"],
                              env={**env, "PYTHONPATH": str(layers)}, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        rows = results.collect(study_dir)
        # The layer has no search-space file: the paper's grid, one pretraining lr (App. C.1), searched finetuning.
        assert len(rows) == 1 + 2 * studies.SMOKE_SAMPLES and all(r["status"] == "completed" for r in rows)
        layer = files.read_json(Path(rows[0]["run_dir"]) / "result.json")["provenance"]["layer"]
        assert layer["import_path"] == LAYER and layer["source_sha"]
        proc = subprocess.run([sys.executable, "-c", DOCTOR_AND_NODES, f"127.0.0.1:{gcs_port}"],
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        seen = json.loads(proc.stdout.strip().splitlines()[-1])
        (head,) = [node for node, res in seen["nodes"].items() if "sptune_head_node" in res]
        (worker,) = [node for node, res in seen["nodes"].items() if "sptune_second_node" in res]
        assert seen["nodes"][head].get("CPU", 0) == 0 and seen["nodes"][worker]["CPU"] == 2
        assert {r["node_id"] for r in rows} == {worker}, "a trial ran on the head"
        assert seen["checked"] == [worker]
        attempts = [files.read_json(Path(r["run_dir"]) / "trial.json")["attempts"][-1] for r in rows]
        assert all(a["hostname"] and a["pid"] for a in attempts)
        # The study joined the cluster instead of starting Ray itself: nothing of its own to stop.
        assert files.read_json(study_dir / files.DRIVER)["address"] == f"127.0.0.1:{gcs_port}"
    finally:
        session.stop_processes(session.ray_processes(tag))
        shutil.rmtree(temp_dir, ignore_errors=True)
