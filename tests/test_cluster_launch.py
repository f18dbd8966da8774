"""What `ray up cluster.yaml` would run on every node, read from Ray's own launcher code (tests/launch_harness.py).

The schema test in test_cluster.py cannot see these: they depend on which of the file's command lists
Ray hands to which node, how it wraps them for Docker, how it applies rsync_exclude and which resources
it gives each node's `ray start`. Each check returns its problems, so one run reports all of them. Two
variants of the file: as it is (Ray's stock images, every node installs) and with its ready-image line
switched on (the GPU workers run the image the repository's Dockerfile builds, and install nothing).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from launch_harness import (CHECKOUT_EXTRAS, NodeView, dockerfile, image_records, launch, rsync_copies,
                            user_checkout, with_ready_image)
from ray_fixtures import REPO

CONTAINER_UID = "1000"  # the user of Ray's rayproject/ray images
TORCH_INDEX = "https://download.pytorch.org/whl/"
REGISTRY = "registry.example.com/team"  # what a user puts in place of <registry>


def nfs_exported_before_mounted(head: NodeView, workers: list[NodeView]) -> list[str]:
    """The head exports every shared directory, owned by the container's user, before its container
    starts (Docker's -v would create missing directories as root) and before any worker mounts it;
    each worker mounts them, at the same paths and soft (a lost head fails writes, never hangs them), before
    its own container starts."""
    problems = []
    run_at, _ = head.docker_run()
    exported = head.first(r"\bexportfs\b", head.host())
    if exported is None or exported > run_at:
        problems.append(f"the head runs no `exportfs` before its container starts (its host commands: "
                        f"{[c for _, c in head.host()]})")
    for path in head.volumes():
        listed = head.first(rf"{re.escape(path)} .*/etc/exports|/etc/exports.*{re.escape(path)}", head.host())
        owned = head.first(rf"chown {CONTAINER_UID}\S* .*{re.escape(path)}\b", head.host())
        if listed is None or exported is None or listed > exported:
            problems.append(f"the head does not list {path} in /etc/exports before exportfs")
        if owned is None or owned > run_at:
            problems.append(f"the head does not give {path} to uid {CONTAINER_UID} before its container starts")
    for worker in workers:
        worker_run_at, _ = worker.docker_run()
        if worker.first(r"\bexportfs\b", worker.host()) is not None:
            problems.append(f"{worker.name} runs the head's NFS server commands")
        for path in worker.volumes():
            pattern = rf"mount -t nfs (?:-o \S+ )?\S+:{re.escape(path)} {re.escape(path)}\b"
            mounted = worker.first(pattern, worker.host())
            if mounted is None or mounted > worker_run_at:
                problems.append(f"{worker.name} does not mount the head's {path} before its container starts")
            elif exported is not None and mounted < exported:
                problems.append(f"{worker.name} mounts {path} before the head exports it")
            elif worker.first(rf"mount -t nfs -o \S*\bsoft\b\S* \S+:{re.escape(path)} ", worker.host()) is None:
                problems.append(f"{worker.name} mounts {path} hard: a lost head would hang every trial's write "
                                f"instead of failing it")
    return problems


def same_paths_everywhere(head: NodeView, workers: list[NodeView]) -> list[str]:
    """Every node's container sees the shared directories at the same paths, backed by the same host
    paths, and SPTUNE_DATA names one of them."""
    problems = []
    for node in [head, *workers]:
        if node.volumes() != head.volumes():
            problems.append(f"{node.name} mounts {node.volumes()}, the head {head.volumes()}")
        data = node.env().get("SPTUNE_DATA")
        if data not in node.volumes().values():
            problems.append(f"{node.name}: SPTUNE_DATA={data} is not a shared directory ({node.volumes()})")
    if len(head.volumes()) < 2:
        problems.append(f"the nodes share {head.volumes()}: no study directory and data directory")
    return problems


def repository_copied(head: NodeView, workers: list[NodeView], checkout: Path) -> list[str]:
    """The repository's file mount holds the study scripts and configs, and none of the checkout's venv,
    git directory, local runs or bytecode; every worker gets the head's copy of it, excluded alike."""
    problems = []
    (copy,) = [s for s in head.copies() if Path(s.command.split(" -> ")[0]).resolve() == checkout]
    if copy.options.get("rsync_filter"):
        problems.append("rsync_filter is set: this test models rsync_exclude only")
    copied = rsync_copies(checkout, copy.options.get("rsync_exclude") or [])
    wanted = {p.relative_to(checkout).as_posix() for p in [*checkout.glob("experiments/*.py"), *checkout.glob("configs/*")]}
    if not wanted <= copied:
        problems.append(f"rsync_exclude drops {sorted(wanted - copied)[:5]} ... from the file mount")
    if copied & set(CHECKOUT_EXTRAS):
        problems.append(f"the file mount copies {sorted(copied & set(CHECKOUT_EXTRAS))}")
    target = copy.command.split(" -> ")[1]
    for worker in workers:
        if not any(s.command.endswith(f" -> {target}") and s.options == copy.options for s in worker.copies()):
            problems.append(f"{worker.name} does not get the repository as the head does")
    return problems


def torch_builds(nodes: list[NodeView], gpu_types: list[str]) -> list[str]:
    """Of the nodes that install (Ray's stock images): the head installs torch's CPU build; each GPU worker
    the CUDA build of its image's CUDA version (rayproject/ray:...-cuXYZ and .../whl/cuXYZ); one torch
    version everywhere; torch before sptune."""
    problems, versions = [], set()
    for node in nodes:
        image = node.image()
        cuda = re.search(r"-(cu\d+)$", image)
        build = (cuda.group(1) if cuda else "the image's CUDA") if node.name in gpu_types else "cpu"
        installs = [(i, c) for i, c in node.runs() if re.search(r"pip install .*\btorch==", c)]
        matching = [(i, c) for i, c in installs if f"--index-url {TORCH_INDEX}{build} " in c + " "]
        sptune = node.first(r"pip install -e", node.runs())
        if node.name in gpu_types and not cuda:
            problems.append(f"{node.name}: image {image} names no CUDA version (cuXYZ) to match torch's build to")
        if not matching:
            problems.append(f"{node.name}: no `pip install torch==... --index-url {TORCH_INDEX}{build}` "
                            f"(it runs {[c for _, c in installs]})")
        elif sptune is None or matching[0][0] > sptune:
            problems.append(f"{node.name}: torch's {build} build is not installed before sptune")
        versions |= {re.search(r"torch==(\S+)", c).group(1) for _, c in installs}
    if len(versions) > 1:
        problems.append(f"the nodes install different torch versions: {sorted(versions)}")
    return problems


def installs_sptune(node: NodeView, package_dir: str) -> list[str]:
    """A node on a stock image installs sptune from the repository's file mount."""
    if node.first(rf'pip install -e "?{re.escape(package_dir)}\b', node.runs()) is None:
        return [f"{node.name} does not install sptune from {package_dir}"]
    return []


def starts_ray_last(node: NodeView) -> list[str]:
    last = node.steps[-1][1].command
    return [] if "ray start" in last else [f"{node.name}'s last step is not `ray start`: {last[:200]}"]


def on_the_ready_image(node: NodeView, image: str) -> list[str]:
    """A worker switched to the ready image pulls and runs it, and runs no pip install (its installs'
    guards pass there: the image records the pyproject.toml it was built from)."""
    problems = []
    if node.image() != image or node.first(rf"^docker pull {re.escape(image)}$", node.host()) is None:
        problems.append(f"{node.name} runs {node.image()}, not the ready image {image}")
    installs = [c for _, c in node.runs() if re.search(r"\bpip install\b", c)]
    if installs:
        problems.append(f"{node.name} installs on the ready image: {installs}")
    return problems


def head_takes_no_trials(head: NodeView, workers: list[NodeView], node_types: dict) -> list[str]:
    """The head's `ray start` advertises no CPU and no GPU, so no trial trains there (a trial trains with the
    CPUs and GPUs it reserves); each worker's advertises its node type's resources (`node_types`: the file's, before
    AWS's additions). Ray's launcher sets them after AWS filled in its instance facts: a head type without
    `resources: {CPU: 0}` gets the instance's vCPUs, which also override a `--num-cpus=0` flag."""
    problems = []
    if head.advertised().get("CPU") != 0 or head.advertised().get("GPU", 0):
        problems.append(f"the head's `ray start` advertises {head.advertised()} (no CPU count is the "
                        f"machine's cores): trials can run on the head")
    for worker in workers:
        wanted = node_types[worker.name]["resources"]
        if {k: worker.advertised().get(k) for k in wanted} != wanted or not wanted.get("CPU"):
            problems.append(f"{worker.name}'s `ray start` advertises {worker.advertised()}, its type {wanted}")
    return problems


def cluster_file(image: str, where: Path) -> Path:
    """cluster.yaml as it is ("stock") or with its ready-image line switched on ("ready")."""
    if image == "stock":
        return REPO / "cluster.yaml"
    where.write_text(with_ready_image((REPO / "cluster.yaml").read_text(), REGISTRY))
    return where


@pytest.mark.parametrize("image", ["stock", "ready"])
@pytest.mark.parametrize("autoscaler", ["v2", "v1"])
def test_ray_up_gives_every_node_what_a_study_needs(tmp_path, monkeypatch, autoscaler, image):
    checkout = user_checkout(REPO, tmp_path / "checkout")
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("token")  # `ray get-auth-token --generate` writes it
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.chdir(checkout)  # `ray up cluster.yaml` from the repository root

    file = cluster_file(image, tmp_path / "cluster.yaml")
    cluster, steps = launch(file, home, autoscaler)

    types = cluster["available_node_types"]
    gpu_types = cluster["provider"]["gpu_node_types"]
    package_dir = next(remote for remote, local in cluster["file_mounts"].items() if local == ".")
    ready_images = {name: types[name]["docker"]["worker_image"] for name in types if "docker" in types[name]}
    # The ready image was built from this checkout: a record of the mounted pyproject.toml's sum passes.
    built = frozenset(r for r, f in image_records(dockerfile(REPO / "Dockerfile")).items()
                      if f == f"{package_dir}/pyproject.toml")
    head = NodeView.of(cluster["head_node_type"], steps)
    workers = [NodeView.of(name, steps, built if name in ready_images else frozenset())
               for name in types if name != head.name]
    stock = [node for node in [head, *workers] if node.name not in ready_images]
    assert gpu_types and all(w.steps for w in workers) and head.steps
    assert set(ready_images) == (set(gpu_types) if image == "ready" else set())
    problems = (nfs_exported_before_mounted(head, workers) + same_paths_everywhere(head, workers)
                + repository_copied(head, workers, checkout) + torch_builds(stock, gpu_types)
                + head_takes_no_trials(head, workers, yaml.safe_load(file.read_text())["available_node_types"])
                + sum((installs_sptune(n, package_dir) for n in stock), [])
                + sum((on_the_ready_image(w, ready_images[w.name]) for w in workers if w.name in ready_images), [])
                + sum((starts_ray_last(n) for n in [head, *workers]), []))
    assert not problems, f"cluster.yaml ({image} images) under `ray up`:\n- " + "\n- ".join(problems)
