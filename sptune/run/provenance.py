"""Where a run trained, written into its result.json: the device (with its name), the precision, the kernels
its layers actually use (the attention kernel by name: flash-attn, or SDPA's cudnn / flash / efficient / math),
whether fp32 matmuls ran in TF32, and the library versions. A figure read months later, or beside another node's, needs
them: the same config runs different kernels on a CPU and on a GPU (flash-attn, pykeops), and the numbers
differ with them."""

from __future__ import annotations

import platform
from importlib import metadata
from typing import Any

import torch
from torch import nn

from sptune import cpu_kernels
from sptune.run.train_setup import autocast, fp32_matmul


def describe_device(device: torch.device) -> str:
    """'cuda:0 NVIDIA H100 80GB HBM3 (79 GiB, 1 visible)' or 'cpu (Intel(R) Xeon(R) Processor, x86_64, 2 threads,
    ATen AVX512, oneDNN AVX2)': a CPU's figures depend on the CPU and on its kernels' instruction sets (the same
    seed gave other numbers on an Intel Xeon than on an AMD EPYC, oneDNN pinned on both: sptune.cpu_kernels)."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return (f"cuda:{device.index} {props.name} ({props.total_memory / 2**30:.0f} GiB, "
                f"{torch.cuda.device_count()} visible)")
    return (f"cpu ({cpu_model()}, {platform.machine()}, {torch.get_num_threads()} threads, "
            f"ATen {torch.backends.cpu.get_cpu_capability()}, {cpu_kernels.describe()})")


def cpu_model() -> str:
    """The CPU's model name ('Intel(R) Xeon(R) Processor'): /proc/cpuinfo's on Linux, else what Python knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def kernels(model: nn.Module, device: torch.device, precision: str) -> list[str]:
    """The kernels the model's layers choose on `device` at `precision`, each named once ('attention sdpa',
    'cauchy torch'): every layer that picks one answers `backend_used(cuda, dtype)` with the decision its
    forward makes (None: no choice to report)."""
    dtype = compute_dtype(device, precision)
    found = {m.backend_used(device.type == "cuda", dtype) for m in model.modules() if hasattr(m, "backend_used")}
    return sorted(k for k in found if k)


def compute_dtype(device: torch.device, precision: str) -> torch.dtype:
    """The dtype a layer's projections produce under the run's autocast on `device`."""
    with autocast(device, precision):
        return torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else torch.float32


def attention(model: nn.Module, device: torch.device, precision: str) -> str | None:
    """The attention kernel the model's layers run on `device` at `precision` ('sdpa flash', 'sdpa cudnn',
    'flash-attn'): every layer that has one answers `attention_kernel(device, dtype, training)`. Where dropout
    makes training take another kernel than evaluation, both are named. None: no attention layer."""
    dtype = compute_dtype(device, precision)
    found = set()
    for layer in model.modules():
        if hasattr(layer, "attention_kernel"):
            train, evaluate = (layer.attention_kernel(device, dtype, training) for training in (True, False))
            found.add(train if train == evaluate else f"{train} (training), {evaluate} (evaluation)")
    return ", ".join(sorted(found)) or None


def version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def of_run(model: nn.Module, device: torch.device, precision: str, model_name: str = "") -> dict[str, Any]:
    """result.json's `provenance`; `layer` for a layer from outside sptune: its import path, package, version
    and source hash (sptune.plugins.origin)."""
    out = {"device": device.type, "device_name": describe_device(device), "precision": precision,
           "kernels": kernels(model, device, precision), "attention": attention(model, device, precision),
           "fp32_matmul": fp32_matmul(device), "python": platform.python_version(),
           "torch": torch.__version__, "cuda": torch.version.cuda, "ray": version("ray"),
           "sptune": version("sptune")}
    layer = layer_origin(model_name)
    return {**out, "layer": layer} if layer else out


def layer_origin(model_name: str) -> dict[str, Any] | None:
    from sptune import plugins, registry

    if not model_name or registry.is_builtin_model(model_name):
        return None
    return plugins.origin(registry.get_model(model_name).factory)
