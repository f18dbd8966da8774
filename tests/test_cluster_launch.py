"""What `ray up cluster.yaml` would run on every node, read from Ray's own launcher code (tests/launch_harness.py).

The schema test in test_cluster.py cannot see these: they depend on which of the file's command lists
Ray hands to which node, how it wraps them for Docker and how it applies rsync_exclude. Each check
returns its problems, so one run reports all of them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from launch_harness import CHECKOUT_EXTRAS, NodeView, launch, rsync_copies, user_checkout
from ray_fixtures import REPO

CONTAINER_UID = "1000"  # the user of Ray's rayproject/ray images
TORCH_INDEX = "https://download.pytorch.org/whl/"


def nfs_exported_before_mounted(head: NodeView, workers: list[NodeView]) -> list[str]:
    """The head exports every shared directory, owned by the container's user, before its container
    starts (Docker's -v would create missing directories as root) and before any worker mounts it;
    each worker mounts them, at the same paths, before its own container starts."""
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
            mounted = worker.first(rf"mount -t nfs \S+:{re.escape(path)} {re.escape(path)}\b", worker.host())
            if mounted is None or mounted > worker_run_at:
                problems.append(f"{worker.name} does not mount the head's {path} before its container starts")
            elif exported is not None and mounted < exported:
                problems.append(f"{worker.name} mounts {path} before the head exports it")
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
    wanted = {p.relative_to(checkout).as_posix() for p in [*checkout.glob("studies/*.py"), *checkout.glob("configs/*")]}
    if not wanted <= copied:
        problems.append(f"rsync_exclude drops {sorted(wanted - copied)[:5]} ... from the file mount")
    if copied & set(CHECKOUT_EXTRAS):
        problems.append(f"the file mount copies {sorted(copied & set(CHECKOUT_EXTRAS))}")
    target = copy.command.split(" -> ")[1]
    for worker in workers:
        if not any(s.command.endswith(f" -> {target}") and s.options == copy.options for s in worker.copies()):
            problems.append(f"{worker.name} does not get the repository as the head does")
    return problems


def torch_builds(head: NodeView, workers: list[NodeView], gpu_types: list[str]) -> list[str]:
    """The head installs torch's CPU build; each GPU worker the CUDA build of its image's CUDA version
    (rayproject/ray:...-cuXYZ and .../whl/cuXYZ); one torch version everywhere; torch before sptune."""
    problems, versions = [], set()
    for node in [head, *workers]:
        image = node.docker_run()[1][-2]
        cuda = re.search(r"-(cu\d+)$", image)
        build = (cuda.group(1) if cuda else "the image's CUDA") if node.name in gpu_types else "cpu"
        installs = [(i, c) for i, c in node.container() if re.search(r"pip install .*\btorch==", c)]
        matching = [(i, c) for i, c in installs if f"--index-url {TORCH_INDEX}{build} " in c + " "]
        sptune = node.first(r"pip install -e", node.container())
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


def installs_then_starts_ray(node: NodeView, package_dir: str) -> list[str]:
    """sptune is installed from the repository's file mount, and `ray start` is the node's last step."""
    problems = []
    if node.first(rf'pip install -e "?{re.escape(package_dir)}\b', node.container()) is None:
        problems.append(f"{node.name} does not install sptune from {package_dir}")
    last = node.steps[-1][1].command
    if "ray start" not in last:
        problems.append(f"{node.name}'s last step is not `ray start`: {last[:200]}")
    return problems


@pytest.mark.parametrize("autoscaler", ["v2", "v1"])
def test_ray_up_gives_every_node_what_a_study_needs(tmp_path, monkeypatch, autoscaler):
    checkout = user_checkout(REPO, tmp_path / "checkout")
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("token")  # `ray get-auth-token --generate` writes it
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.chdir(checkout)  # `ray up cluster.yaml` from the repository root

    cluster, steps = launch(REPO / "cluster.yaml", home, autoscaler)

    head = NodeView.of(cluster["head_node_type"], steps)
    workers = [NodeView.of(name, steps) for name in cluster["available_node_types"] if name != head.name]
    gpu_types = cluster["provider"]["gpu_node_types"]
    package_dir = next(remote for remote, local in cluster["file_mounts"].items() if local == ".")
    assert gpu_types and all(w.steps for w in workers) and head.steps
    problems = (nfs_exported_before_mounted(head, workers) + same_paths_everywhere(head, workers)
                + repository_copied(head, workers, checkout) + torch_builds(head, workers, gpu_types)
                + sum((installs_then_starts_ray(n, package_dir) for n in [head, *workers]), []))
    assert not problems, "cluster.yaml under `ray up`:\n- " + "\n- ".join(problems)
