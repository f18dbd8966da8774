"""GPUs and the Ray cluster: a GPU study needs a cluster that has GPUs or can add them, and a trial
that holds GPUs trains on them (or fails with the reason), one that holds none trains on CPU.

    check_cluster(gpus_per_worker)   the driver, before any trial: a one-line UserError when no node
                                     has, and no autoscaler node type offers, that many GPUs
    packed_cpus(asked, n)            the driver, for trials packed n to a GPU: CPUs per trial that fit
                                     the GPU nodes' CPUs
    trial_device(requested)          in a trial: the run.device to train with, or why it cannot

Ray hands out GPUs as a resource count; whether torch can use them is another matter (a CPU build of
torch, a missing driver). Without these checks a GPU trial on a CUDA-less torch trains on CPU without
a word, and a GPU study on a GPU-less cluster waits forever while Train retries its start-up.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import yaml

from sptune.errors import UserError

log = logging.getLogger("sptune.engine")


# ----------------------------------------------------------------------------- the trial's device
def trial_device(requested: str) -> tuple[str, str | None]:
    """(run.device, None) to train with in this Ray trial or Train worker, or (requested, reason)."""
    import ray
    import torch

    return choose_device(requested, [str(i) for i in ray.get_gpu_ids()], torch.cuda.is_available(),
                         torch.__version__)


def choose_device(requested: str, gpu_ids: list[str], cuda_available: bool,
                  torch_version: str = "") -> tuple[str, str | None]:
    """GPUs held -> cuda (run.device=cpu still trains on CPU: an explicit choice); none held -> cpu,
    so a CPU trial on a GPU node never takes a GPU another trial reserved."""
    if requested == "cpu":
        return "cpu", None
    if gpu_ids:
        if cuda_available:
            return "cuda", None
        return requested, (f"this trial holds GPU {','.join(gpu_ids)} but torch {torch_version} sees no CUDA "
                           f"device (a CPU build of torch, or no NVIDIA driver on this node); install torch's "
                           f"CUDA build on the GPU nodes, or set run.device=cpu to train on CPU anyway")
    if requested == "cuda":
        return requested, ("run.device=cuda but this trial holds no GPU; give trials GPUs with "
                           "--gpus-per-worker 1 (or resources.gpus_per_worker in the search space)")
    return "cpu", None


# A CUDA context with torch's kernels loaded (cuBLAS, cuDNN, the trainer's own): memory each process holds outside
# its allocator, which set_per_process_memory_fraction does not cap. 0.3-0.6 GB per process on an H100 (CUDA 13,
# lazy module loading); benchmarks/gpu_acceptance.py measures it beside this figure.
CONTEXT_BYTES = 640 * 2**20


def start_gpu_trial(share: float) -> None:
    """A trial starting on its GPU: the peak statistics restart (a reused actor keeps its process, and the
    out-of-memory classifier, sptune.trials.failures, must read this trial's peak, not an earlier
    trial's), and a trial packed with others (0 < share < 1, --trials-per-gpu) is capped to its share."""
    import torch

    torch.cuda.reset_peak_memory_stats()
    if 0 < share < 1:
        cap_gpu_memory(share)


def cap_gpu_memory(share: float) -> None:
    """Let this process's allocator use `share` of its GPU's memory less its CUDA context (allocator_share):
    trials packed on one GPU cannot starve each other, and one that outgrows its share fails as its own
    out-of-memory (sptune.trials.failures) instead of a neighbour's."""
    import torch

    device = torch.cuda.current_device()
    fraction = allocator_share(share, torch.cuda.get_device_properties(device).total_memory)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    log.info("GPU memory capped at %.3g of %s (its share %.3g less a CUDA context of %.2g GiB)", fraction,
             torch.cuda.get_device_name(), share, CONTEXT_BYTES / 2**30)


def allocator_share(share: float, total: int) -> float:
    """The fraction of a GPU's `total` bytes a trial's allocator may reserve: its share less its context, so N
    trials of share 1/N fit with their contexts. A share smaller than a context leaves 0: every allocation
    fails as the trial's own out-of-memory, whose reason says to pack fewer trials per GPU."""
    return max(0.0, share - CONTEXT_BYTES / total)


# ----------------------------------------------------------------------------- the cluster
def check_cluster(gpus_per_worker: float) -> None:
    """Stop a GPU study up front when its trials could never start (see module docstring)."""
    if gpus_per_worker <= 0:
        return
    import ray

    nodes = [node.get("Resources", {}).get("GPU", 0.0) for node in ray.nodes() if node.get("Alive")]
    if max(nodes, default=0.0) >= gpus_per_worker:
        return
    types = autoscaler_node_types()
    if types is None:
        # An autoscaler we cannot read (its monitor runs on another machine) may still add GPU nodes.
        log.warning("no node has %g GPU(s) yet; waiting for the autoscaler to add one", gpus_per_worker)
        return
    offered = {name: spec["resources"].get("GPU", 0) for name, spec in types.items()
               if spec.get("max_workers", 0) > 0}
    if max(offered.values(), default=0) >= gpus_per_worker:
        return
    where = f"its autoscaler's node types offer {_describe(offered)}" if types else "it has no autoscaler"
    raise UserError(f"each trial worker needs {gpus_per_worker:g} GPU(s), but no node of this Ray cluster has "
                    f"that many (largest: {max(nodes, default=0.0):g}) and {where}; start a GPU cluster "
                    f"(cluster.yaml) and pass --address, or run on CPU with --gpus-per-worker 0")


def packed_cpus(asked: float, trials_per_gpu: int) -> float:
    """CPUs per trial when `trials_per_gpu` trials share each GPU: at most the CPUs a GPU node has per trial
    slot (its CPUs / (its GPUs x N), over the nodes and autoscaler node types with GPUs, the smallest), so
    the CPU request never keeps a GPU's slots empty (the paper-scale spaces ask for 4 CPUs a trial; 16
    trials on a 16-core, 1-GPU node could otherwise run only 4 at once). Never more than asked, at least 1."""
    import ray

    nodes = [node.get("Resources", {}) for node in ray.nodes() if node.get("Alive")]
    nodes += [spec["resources"] for spec in (autoscaler_node_types() or {}).values()]
    return fit_cpus(asked, trials_per_gpu, nodes)


def fit_cpus(asked: float, trials_per_gpu: int, nodes: list[dict[str, float]]) -> float:
    """packed_cpus's arithmetic over node resource dicts ({"CPU": 16, "GPU": 1})."""
    shares = [node.get("CPU", 0) // (node["GPU"] * trials_per_gpu) for node in nodes if node.get("GPU", 0) > 0]
    return float(max(1, min([asked, *shares])))


def _describe(offered: dict[str, float]) -> str:
    return ", ".join(f"{name}: {gpus:g} GPU" for name, gpus in offered.items()) or "no worker nodes"


def autoscaler_node_types() -> dict[str, dict[str, Any]] | None:
    """{node type: {resources, max_workers}} the cluster's autoscaler can add; {} when it has no
    autoscaler; None when that cannot be told from here.

    The GCS holds a cluster config only where something reports one (ReportClusterConfig); neither of
    Ray 2.60's own monitors does, v1 or v2 (`ray up`'s default), so it is read first and rarely found.
    Every Ray head runs a monitor process, with --autoscaling-config=<file> when it autoscales
    (~/ray_bootstrap_config.yaml under `ray up`; `ray.init()` and a plain `ray start --head` have none);
    a driver on the head (`ray job submit`, a local study, a test) can read its command line."""
    import ray
    import ray._private.state

    config = ray._private.state.state.get_cluster_config()
    if config is not None and config.node_group_configs:
        return {group.name: {"resources": dict(group.resources), "max_workers": group.max_count}
                for group in config.node_group_configs}
    cmdline = _monitor_cmdline(ray.get_runtime_context().gcs_address)
    if cmdline is None:
        return None
    path = next((Path(m.group(1)).expanduser() for arg in cmdline
                 if (m := re.fullmatch(r"--autoscaling-config=(.+)", arg))), None)
    if path is None:
        return {}
    types = yaml.safe_load(path.read_text()).get("available_node_types") or {}
    return {name: {"resources": dict(spec.get("resources") or {}), "max_workers": spec.get("max_workers", 0)}
            for name, spec in types.items()}


# The monitor's script: v1's, or v2's (RAY_enable_autoscaler_v2=1, which `ray up` sets since Ray 2.50).
MONITORS = ("autoscaler/_private/monitor.py", "autoscaler/v2/monitor.py")


def _monitor_cmdline(gcs_address: str) -> list[str] | None:
    """The command line of this cluster's monitor process (v1 or v2) when it runs on this machine (Linux /proc)."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        # By port: the host part may be another name of this machine (127.0.0.1 vs its address).
        port = gcs_address.rsplit(":", 1)[-1]
        if any(a.endswith(MONITORS) for a in args) and \
                any(a.startswith("--gcs-address=") and a.endswith(f":{port}") for a in args):
            return args
    return None
