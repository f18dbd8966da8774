"""A node provider for Ray's cluster launcher that starts no machine and runs nothing.

`provider: {type: external, module: recording_provider.RecordingNodeProvider}` in a cluster YAML makes
`ray up` (and the autoscaler's worker setup) go through Ray's own code (NodeUpdater, DockerCommandRunner)
with this provider's nodes. Ray's DockerCommandRunner still wraps each command for the container
(`docker exec ... /bin/bash -c ...`) and turns file mounts into host rsyncs; only its SSH layer is
replaced, by `RecordingHost`, which records what would go over ssh, in order, and answers the few
questions Ray asks a host (is Docker installed, the image's HOME, free memory) as a fresh Ubuntu host
with Docker and the NVIDIA container toolkit would. tests/test_cluster_launch.py reads the record.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray.autoscaler._private.command_runner import DockerCommandRunner
from ray.autoscaler.command_runner import CommandRunnerInterface
from ray.autoscaler.node_provider import NodeProvider
from ray.autoscaler.tags import TAG_RAY_NODE_KIND, TAG_RAY_USER_NODE_TYPE

# The rayproject/ray images' user (uid 1000) has this home directory.
IMAGE_HOME = "/home/ray"


class FailedOnHost(Exception):
    """A host command that fails on this kind of node (nvidia-smi without a GPU)."""


@dataclass
class Step:
    node: str  # the node's type name (available_node_types)
    kind: str  # "host": run over ssh on the host; "rsync": a file-mount copy to the host
    command: str  # exactly what would run on the host (container commands are Ray's `docker exec` lines)
    options: dict[str, Any] = field(default_factory=dict)  # rsync: Ray's options (rsync_exclude ...)
    source_text: str | None = None  # rsync of a file: its content at the time (the bootstrap config)


class Recording:
    """Every node's steps, in the order they would happen across the cluster."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.lock = threading.Lock()  # Ray updates nodes from threads

    def add(self, step: Step) -> None:
        with self.lock:
            self.steps.append(step)


RECORDING = Recording()


class RecordingHost(CommandRunnerInterface):
    """Stands in for Ray's SSHCommandRunner under its DockerCommandRunner: records, runs nothing."""

    def __init__(self, node_type: str, has_gpu: bool, cluster_name: str) -> None:
        self.node_type, self.has_gpu = node_type, has_gpu
        self.cluster_name, self.ssh_user = cluster_name, "ubuntu"

    def run(self, cmd: str | None = None, with_output: bool = False, **_: Any) -> bytes | str:
        RECORDING.add(Step(self.node_type, "host", cmd or ""))
        if cmd == "nvidia-smi" and not self.has_gpu:
            raise FailedOnHost(cmd)
        return self.answer(cmd or "").encode() if with_output else ""

    def answer(self, cmd: str) -> str:
        if cmd.startswith("command -v docker"):
            return "/usr/bin/docker"
        if "{{json .Config.Env}}" in cmd:
            return f'["PATH=/usr/bin", "HOME={IMAGE_HOME}"]'
        if "{{.Runtimes}}" in cmd:
            return "map[nvidia:{nvidia-container-runtime [] <nil>} runc:{runc [] <nil>}]"
        if cmd.startswith("cat /proc/meminfo"):
            return "MemAvailable:   30000000 kB"
        if "printenv HOME" in cmd:
            return IMAGE_HOME
        return ""  # `docker inspect` of the container: none runs yet

    def run_rsync_up(self, source: str, target: str, options: dict[str, Any] | None = None) -> None:
        text = Path(source).read_text() if Path(source).is_file() else None
        RECORDING.add(Step(self.node_type, "rsync", f"{source} -> {target}", dict(options or {}), text))

    def run_rsync_down(self, source: str, target: str, options: dict[str, Any] | None = None) -> None:
        raise AssertionError(f"ray up copies nothing back ({source})")

    def remote_shell_command_str(self) -> str:
        return "true"


class RecordingNodeProvider(NodeProvider):
    """Nodes that exist only here; `provider_config["gpu_node_types"]` names the types with GPUs."""

    nodes: dict[str, dict[str, Any]] = {}  # shared by the launcher's and the autoscaler's instances

    def non_terminated_nodes(self, tag_filters: dict[str, str]) -> list[str]:
        return [node_id for node_id, node in self.nodes.items()
                if all(node["tags"].get(k) == v for k, v in tag_filters.items())]

    def is_running(self, node_id: str) -> bool:
        return node_id in self.nodes

    def is_terminated(self, node_id: str) -> bool:
        return node_id not in self.nodes

    def node_tags(self, node_id: str) -> dict[str, str]:
        return dict(self.nodes[node_id]["tags"])

    def external_ip(self, node_id: str) -> str:
        return self.internal_ip(node_id)

    def internal_ip(self, node_id: str) -> str:
        return f"10.0.0.{list(self.nodes).index(node_id) + 1}"

    def create_node(self, node_config: dict[str, Any], tags: dict[str, str], count: int) -> None:
        for _ in range(count):
            kind = tags[TAG_RAY_NODE_KIND]
            self.nodes[f"{kind}-{len(self.nodes)}"] = {"tags": dict(tags), "node_config": node_config}

    def set_node_tags(self, node_id: str, tags: dict[str, str]) -> None:
        self.nodes[node_id]["tags"].update(tags)

    def terminate_node(self, node_id: str) -> None:
        self.nodes.pop(node_id, None)

    def get_command_runner(self, log_prefix: str, node_id: str, auth_config: dict[str, Any], cluster_name: str,
                           process_runner: Any, use_internal_ip: bool,
                           docker_config: dict[str, Any] | None = None) -> CommandRunnerInterface:
        assert docker_config and docker_config.get("container_name"), "cluster.yaml runs every node in Docker"
        node_type = self.nodes[node_id]["tags"][TAG_RAY_USER_NODE_TYPE]
        runner = DockerCommandRunner(docker_config, log_prefix=log_prefix, node_id=node_id, provider=self,
                                     auth_config=auth_config, cluster_name=cluster_name,
                                     process_runner=process_runner, use_internal_ip=use_internal_ip)
        runner.ssh_command_runner = RecordingHost(
            node_type, node_type in self.provider_config.get("gpu_node_types", []), cluster_name)
        return runner
