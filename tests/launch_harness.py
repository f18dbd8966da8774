"""`ray up cluster.yaml` on Ray's own launcher code with tests/recording_provider.py: what every node runs.

`launch` copies cluster.yaml (AWS's defaults and each node type's resources filled in, as Ray does for
`type: aws`), swaps only its provider section for the recording provider, and runs, with nothing launched
and nothing executed:
  1. `ray up`: `create_or_update_cluster`, which sets up the head (NodeUpdater with the head's lists);
  2. the autoscaler on the head, for one node of every worker type, from the bootstrap config `ray up`
     copied to the head: Ray 2.60's `ray up` starts the v2 autoscaler (RAY_enable_autoscaler_v2=1), whose
     RayInstaller runs a NodeUpdater per new node with that node type's lists; `autoscaler="v1"` runs
     the v1 StandardAutoscaler's launch and update instead (RAY_UP_enable_autoscaler_v2=0), whose lists
     come from `_get_node_type_specific_fields`.
`NodeView` reads one node's record: host commands, container commands (unwrapped from Ray's
`docker exec`), its `docker run` line and image, its file-mount copies and the resources its `ray start`
advertises. `with_ready_image` switches cluster.yaml's commented ready-image line on; `dockerfile` and
`image_records` read the Dockerfile that builds that image, and `NodeView.runs` resolves cluster.yaml's
`sha256sum --status -c RECORD || ...` guards for an image that holds such records.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml
from recording_provider import RECORDING, RecordingNodeProvider, Step

# cluster.yaml's switch to the ready image: a commented `docker: {worker_image: <registry>/...}` line.
READY_SWITCH = re.compile(r"^(?P<indent>[ \t]*)# (?P<line>docker: \{worker_image: <registry>/[^}\s]+\})[ \t]*$", re.M)
# The guard before a setup command that the ready image makes unnecessary (cluster.yaml says why).
GUARD = re.compile(r"\bsha256sum --status -c (?P<record>\S+)(?: 2>/dev/null)? \|\| ")
# DescribeInstanceTypes facts (AWS's instance type pages) of cluster.yaml's instance types, as Ray reads them.
EC2_TYPES = {"m5.2xlarge": {"VCpuInfo": {"DefaultVCpus": 8}, "MemoryInfo": {"SizeInMiB": 32768}},
             "g5.xlarge": {"VCpuInfo": {"DefaultVCpus": 4}, "MemoryInfo": {"SizeInMiB": 16384},
                           "GpuInfo": {"Gpus": [{"Name": "A10G", "Manufacturer": "NVIDIA", "Count": 1,
                                                 "MemoryInfo": {"SizeInMiB": 24576}}]}}}
# What a user's checkout holds besides the repository's files, which `ray up` must not copy to the nodes.
CHECKOUT_EXTRAS = [".venv/lib/python3.11/site-packages/torch/__init__.py", ".git/HEAD", "runs/scratch-x/last.pt",
                   "sptune/__pycache__/cli.cpython-311.pyc"]
NOT_COPIED = {"__pycache__", ".git", ".venv", ".pytest_cache", ".cache", "runs", "build", "dist", "data"}


def user_checkout(repo: Path, where: Path) -> Path:
    """The repository as a user runs `ray up` from it: its files, a venv, a git directory, local runs."""
    shutil.copytree(repo, where, ignore=lambda _, names: [n for n in names if n in NOT_COPIED
                                                          or n.endswith(".egg-info")])
    for extra in CHECKOUT_EXTRAS:
        (where / extra).parent.mkdir(parents=True, exist_ok=True)
        (where / extra).write_text("x")
    return where


def aws_resources(cluster: dict) -> dict:
    """What `ray up` does first with `type: aws` (commands.py _bootstrap_config): each node type's resources
    filled in from EC2's facts about its instance type, the file's own values winning; EC2 answers EC2_TYPES."""
    from unittest import mock

    from ray.autoscaler._private.aws import node_provider

    rows = [{"InstanceType": name, **facts} for name, facts in EC2_TYPES.items()]
    with mock.patch.object(node_provider, "list_ec2_instances", lambda region, credentials=None: rows):
        return node_provider.AWSNodeProvider.fillout_available_node_types_resources(cluster)


def recording_config(cluster_yaml: Path, out: Path) -> dict:
    """cluster.yaml as Ray sees it with `type: aws` (its AWS defaults under the file's keys, its resources
    filled in), with the recording provider in place of AWS; `gpu_node_types` tells the provider which
    nodes have GPUs."""
    import ray.autoscaler

    defaults = yaml.safe_load((Path(ray.autoscaler.__file__).parent / "aws" / "defaults.yaml").read_text())
    cluster = aws_resources({**defaults, **yaml.safe_load(cluster_yaml.read_text())})
    gpu_types = [name for name, spec in cluster["available_node_types"].items() if spec["resources"].get("GPU")]
    cluster["provider"] = {"type": "external", "module": "recording_provider.RecordingNodeProvider",
                           "gpu_node_types": gpu_types}
    out.write_text(yaml.safe_dump(cluster))
    return cluster


def with_ready_image(text: str, registry: str) -> str:
    """cluster.yaml's text with its ready-image line uncommented, as a user switches it, `<registry>` filled in."""
    switched, count = READY_SWITCH.subn(lambda m: m["indent"] + m["line"].replace("<registry>", registry), text)
    assert count == 1, f"cluster.yaml has {count} commented `docker: {{worker_image: <registry>/...}}` lines, not 1"
    return switched


def dockerfile(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, its arguments) of each instruction of a Dockerfile: comments dropped, continued lines joined."""
    instructions, pending = [], ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
        elif pending.strip():
            keyword, _, args = pending.strip().partition(" ")
            instructions.append((keyword.upper(), args.strip()))
            pending = ""
    return instructions


def image_records(instructions: list[tuple[str, str]]) -> dict[str, str]:
    """{record file: the file whose sha256 it holds} of the image, from its `RUN sha256sum FILE > RECORD` steps."""
    return {m[2]: m[1] for keyword, args in instructions if keyword == "RUN"
            for m in re.finditer(r"sha256sum (\S+) > (\S+)", args)}


def launch(cluster_yaml: Path, home: Path, autoscaler: str = "v2") -> tuple[dict, list[Step]]:
    """Run `ray up` from the cwd (the checkout) with HOME=home, then the worker setup of the `autoscaler`
    ("v2", Ray 2.60's default, or "v1"); the cluster config and its record."""
    from ray.autoscaler._private import commands

    RECORDING.steps.clear()
    RecordingNodeProvider.nodes.clear()
    cluster = recording_config(cluster_yaml, home / "cluster.yaml")
    commands.create_or_update_cluster(str(home / "cluster.yaml"), None, None, no_restart=False, restart_only=False,
                                      yes=True, no_config_cache=True)
    bootstrap = bootstrap_config(RECORDING.steps, cluster["file_mounts"])
    workers = [name for name in cluster["available_node_types"] if name != cluster["head_node_type"]]
    {"v1": set_up_workers_v1, "v2": set_up_workers_v2}[autoscaler](bootstrap, workers)
    return cluster, list(RECORDING.steps)


def set_up_workers_v2(bootstrap: dict, node_types: list[str]) -> None:
    """What the v2 autoscaler on the head runs on one new node of each type (its RayInstaller)."""
    from ray.autoscaler._private.providers import _get_node_provider
    from ray.autoscaler.tags import NODE_KIND_HEAD, NODE_KIND_WORKER, TAG_RAY_NODE_KIND, TAG_RAY_USER_NODE_TYPE
    from ray.autoscaler.v2.instance_manager.config import AutoscalingConfig
    from ray.autoscaler.v2.instance_manager.ray_installer import RayInstaller
    from ray.core.generated.instance_manager_pb2 import Instance

    provider = _get_node_provider(bootstrap["provider"], bootstrap["cluster_name"])
    (head,) = provider.non_terminated_nodes({TAG_RAY_NODE_KIND: NODE_KIND_HEAD})
    installer = RayInstaller(provider, AutoscalingConfig(bootstrap))
    for node_type in node_types:
        provider.create_node(bootstrap["available_node_types"][node_type]["node_config"],
                             {TAG_RAY_NODE_KIND: NODE_KIND_WORKER, TAG_RAY_USER_NODE_TYPE: node_type}, 1)
        node_id = provider.non_terminated_nodes({TAG_RAY_USER_NODE_TYPE: node_type})[-1]
        installer.install_ray(Instance(instance_type=node_type, cloud_instance_id=node_id),
                              head_node_ip=provider.internal_ip(head))


def set_up_workers_v1(bootstrap: dict, node_types: list[str]) -> None:
    """What the v1 StandardAutoscaler on the head runs: it launches one node of each type (in the
    foreground) and updates it as its update loop does (should_update, then spawn_updater)."""
    from ray.autoscaler._private.autoscaler import NonTerminatedNodes, StandardAutoscaler
    from ray.autoscaler._private.load_metrics import LoadMetrics

    bootstrap["provider"]["foreground_node_launch"] = True
    autoscaler = StandardAutoscaler(lambda: bootstrap, LoadMetrics(), gcs_client=None)
    for node_type in node_types:
        autoscaler.launch_new_node(1, node_type)
    autoscaler.non_terminated_nodes = NonTerminatedNodes(autoscaler.provider)
    for node_id in autoscaler.non_terminated_nodes.worker_ids:
        _, setup, start, docker = autoscaler.should_update(node_id)
        autoscaler.spawn_updater(node_id, setup, start, autoscaler._node_resources(node_id),
                                 autoscaler._node_labels(node_id), docker)
        autoscaler.updaters[node_id].join()
        assert autoscaler.updaters[node_id].exitcode == 0, f"{node_id}: the update failed"


def bootstrap_config(steps: list[Step], local_mounts: dict[str, str]) -> dict:
    """The autoscaling config `ray up` copied to the head (~/ray_bootstrap_config.yaml). Its file mounts
    name the head's copies (/home/ray/sptune ...), which the head's autoscaler syncs to new workers;
    they are read here from the local paths `ray up` copied them from (the same files)."""
    (copy,) = [s for s in steps if s.kind == "rsync" and s.command.endswith("/ray_bootstrap_config.yaml")]
    config = json.loads(copy.source_text)
    config["file_mounts"] = {remote: os.path.expanduser(local_mounts[remote]) for remote in config["file_mounts"]}
    return config


def unwrap(command: str) -> str | None:
    """The shell command inside Ray's `docker exec ... /bin/bash -c CMD` (and its login-shell wrapper,
    `bash --login -c -i 'source ~/.bashrc; export ... && (CMD)'`), or None for a host command."""
    parts = shlex.split(command)
    if parts[:2] != ["docker", "exec"]:
        return None
    inner = parts[-1]
    login = shlex.split(inner)
    if login[:2] == ["bash", "--login"]:
        inner = re.fullmatch(r"source ~/\.bashrc; export [^&]* && \((.*)\)", login[-1], re.DOTALL).group(1)
    return inner


@dataclass
class NodeView:
    """One node's record, in order: (index in the whole cluster's record, step); `passing`: the records
    whose `sha256sum --status -c` check succeeds in the node's image (none in Ray's stock images)."""
    name: str
    steps: list[tuple[int, Step]]
    passing: frozenset[str] = frozenset()

    @classmethod
    def of(cls, name: str, steps: list[Step], passing: frozenset[str] = frozenset()) -> NodeView:
        return cls(name, [(i, s) for i, s in enumerate(steps) if s.node == name], passing)

    def host(self) -> list[tuple[int, str]]:
        return [(i, s.command) for i, s in self.steps if s.kind == "host" and unwrap(s.command) is None]

    def container(self) -> list[tuple[int, str]]:
        return [(i, unwrap(s.command)) for i, s in self.steps if s.kind == "host" and unwrap(s.command) is not None]

    def copies(self) -> list[Step]:
        return [s for _, s in self.steps if s.kind == "rsync"]

    def runs(self) -> list[tuple[int, str]]:
        """The container commands that run in the node's image: a command behind a `sha256sum --status -c
        RECORD ||` guard is skipped where RECORD is `passing`."""
        return [(i, c) for i, c in self.container() if not ((g := GUARD.search(c)) and g["record"] in self.passing)]

    def docker_run(self) -> tuple[int, list[str]]:
        (run,) = [(i, shlex.split(c)) for i, c in self.host() if c.startswith("docker run")]
        return run

    def image(self) -> str:
        """The image of the node's container (Ray's `docker run ... IMAGE bash`)."""
        return self.docker_run()[1][-2]

    def advertised(self) -> dict[str, float]:
        """The resources its `ray start` gives the node's raylet: the --num-cpus / --num-gpus / --resources
        flags, overridden by RAY_OVERRIDE_RESOURCES, which Ray's launcher exports from the node type's
        `resources` (updater.py) and which wins over the flags (resource_and_label_spec._resolve_resources).
        A CPU or GPU count absent here is the one Ray detects on the machine."""
        (start,) = [c for _, c in self.container() if re.search(r"\bray start\b", c)]
        args = shlex.split(start.split("ray start", 1)[1])
        value = {}
        for k, arg in enumerate(args):  # --flag=VALUE or --flag VALUE
            flag, equals, given = arg.partition("=")
            if flag in ("--resources", "--num-cpus", "--num-gpus"):
                value[flag] = given if equals else args[k + 1]
        resources = json.loads(value.get("--resources", "{}"))
        resources |= {name: float(value[flag]) for flag, name in [("--num-cpus", "CPU"), ("--num-gpus", "GPU")]
                      if flag in value}
        override = re.search(r"export RAY_OVERRIDE_RESOURCES=('[^']*'|[^;\s]+);", start)
        return resources | (json.loads(shlex.split(override[1])[0]) if override else {})

    def volumes(self) -> dict[str, str]:
        """{host path: container path} of the container's `-v` mounts, less Ray's file-mount copies."""
        _, args = self.docker_run()
        pairs = [args[k + 1].split(":")[:2] for k, a in enumerate(args) if a == "-v"]
        return {h: c for h, c in pairs if not h.startswith("/tmp/ray_tmp_mount/")}

    def env(self) -> dict[str, str]:
        _, args = self.docker_run()
        return dict(args[k + 1].split("=", 1) for k, a in enumerate(args) if a == "-e")

    def first(self, pattern: str, commands: list[tuple[int, str]]) -> int | None:
        return next((i for i, c in commands if re.search(pattern, c)), None)


def rsync_copies(source: Path, excludes: list[str]) -> set[str]:
    """The files (relative paths) `rsync -a --exclude P...` copies from source, by rsync's rules for the
    patterns Ray passes (`man rsync`, INCLUDE/EXCLUDE PATTERN RULES): a pattern with no '/' (other
    than a trailing one) and no '**' matches a name at any depth; otherwise it matches the end of the
    path ('/'-anchored: the whole path from the source); '*' stops at '/', '**' does not; a trailing
    '/' matches directories only. An excluded directory is not entered."""
    rules = [rsync_rule(p) for p in excludes]
    copied = set()
    for dirpath, dirnames, filenames in os.walk(source):
        rel_dir = Path(dirpath).relative_to(source).as_posix()
        prefix = "" if rel_dir == "." else rel_dir + "/"
        dirnames[:] = [d for d in dirnames if not any(rule(prefix + d, True) for rule in rules)]
        copied |= {prefix + f for f in filenames if not any(rule(prefix + f, False) for rule in rules)}
    return copied


def rsync_rule(pattern: str):
    dirs_only = pattern.endswith("/")
    pattern = pattern.rstrip("/")
    anchored = pattern.startswith("/")
    pattern = pattern.lstrip("/")
    regex = "".join(".*" if tok == "**" else "[^/]*" if tok == "*" else "[^/]" if tok == "?" else re.escape(tok)
                    for tok in re.findall(r"\*\*|\*|\?|[^*?]+", pattern))
    whole_path = anchored or "/" in pattern or "**" in pattern

    def matches(rel: str, is_dir: bool) -> bool:
        if dirs_only and not is_dir:
            return False
        if not whole_path:
            return re.fullmatch(regex, rel.rsplit("/", 1)[-1]) is not None
        return re.fullmatch(regex if anchored else f"(?:.*/)?{regex}", rel) is not None

    return matches
