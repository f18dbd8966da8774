"""What the training loop runs on: device and rank, precision, the optimizer and its lr schedule,
torch.compile, TensorBoard and the progress bar. Kept apart from sptune.run.train so the loop reads top
to bottom; nothing here knows about stages or tasks."""

from __future__ import annotations

import logging
import math
import sys
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from sptune import files
from sptune.config import OptimConfig
from sptune.errors import UserError

log = logging.getLogger("sptune.run.train")


def autocast(device: torch.device, precision: str):
    """bf16 autocast when asked (matmuls and attention in bf16, reductions and FFTs in fp32)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def distributed_rank() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def pick_device(name: str, rank: int, train_device: torch.device | None = None) -> torch.device:
    """The device to train on. `train_device` is Ray Train's choice for this worker
    (ray.train.torch.get_device(), its GPU among those Ray assigned it): it is made the current CUDA
    device (NCCL and the fused optimizer allocate there). `cuda:{rank % device_count}` is only right
    for a plain run or evenly placed single-GPU ranks, not with gpus_per_worker > 1 or uneven placement.
    A CUDA run's fp32 matmuls use TF32 (use_tf32)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name != "cuda":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UserError("run.device=cuda but no CUDA device is visible; use run.device=auto or cpu")
    use_tf32()
    if train_device is not None and train_device.type == "cuda":
        torch.cuda.set_device(train_device)
        return train_device
    return torch.device("cuda", rank % torch.cuda.device_count())


def use_tf32() -> None:
    """fp32 matmuls on CUDA in TF32 (Ampere and later: ~8x the fp32 rate on an H100, a 10-bit mantissa on the
    inputs, fp32 accumulation); cuDNN convolutions already default to it. CUDA's flag only: the global
    torch.set_float32_matmul_precision("high") would also let oneDNN round CPU matmuls, which stay exact. The
    legacy flag, not torch >= 2.9's fp32_precision: setting that one makes every reader of the legacy flag
    (torch.get_float32_matmul_precision, which inductor calls) raise; this one both APIs read."""
    torch.backends.cuda.matmul.allow_tf32 = True


def fp32_matmul(device: torch.device) -> str:
    """'tf32' or 'ieee': how fp32 matmuls run on `device` (sptune.run.provenance records it)."""
    if device.type != "cuda":
        return "ieee"
    matmul = torch.backends.cuda.matmul
    # fp32_precision (torch >= 2.9) reads either API's setting; allow_tf32 raises after the new one was set
    tf32 = matmul.fp32_precision == "tf32" if hasattr(matmul, "fp32_precision") else matmul.allow_tf32
    return "tf32" if tf32 else "ieee"


class _NoWriter:
    """Stands in for the SummaryWriter on ranks other than 0."""

    def add_scalar(self, *args: Any, **kwargs: Any) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def make_writer(run_dir: Path, main_rank: bool):
    if not main_rank:
        return _NoWriter()
    from torch.utils.tensorboard import SummaryWriter  # imported here: tensorboard is slow to import

    return SummaryWriter(str(run_dir / files.TENSORBOARD))


def make_optimizer(model: nn.Module, optim: OptimConfig) -> torch.optim.Optimizer:
    """AdamW groups: SSM parameters with their own tagged lr and no weight decay (S4 convention),
    biases and norm weights without weight decay, the rest with optim.weight_decay."""
    decay, no_decay, tagged = [], [], {}
    for p in model.parameters():
        if not p.requires_grad:
            continue
        opt = getattr(p, "_optim", None)
        if opt:
            tagged.setdefault(tuple(sorted(opt.items())), []).append(p)
        elif p.dim() < 2:
            no_decay.append(p)
        else:
            decay.append(p)
    groups = [{"params": decay, "weight_decay": optim.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    groups += [{"params": ps, **dict(opt)} for opt, ps in tagged.items()]
    groups = [g for g in groups if g["params"]]
    # One fused kernel for all parameters on CUDA; elsewhere the multi-tensor (foreach) implementation.
    on_cuda = all(p.is_cuda for g in groups for p in g["params"])
    return torch.optim.AdamW(groups, lr=optim.lr, betas=optim.betas,
                             **({"fused": True} if on_cuda else {"foreach": True}))


def wrap_model(model: nn.Module, device: torch.device, distributed: bool,
               compile: bool) -> tuple[nn.Module, nn.parallel.DistributedDataParallel | None, nn.Module]:
    """(what the loop backpropagates through, its DDP wrapper or None, what evaluation calls).
    DDP wraps first, then torch.compile compiles the wrapper: PyTorch's documented order, in which the
    compiler sees DDP's gradient buckets and splits its graphs at their boundaries so each bucket's
    all-reduce overlaps the rest of the backward pass (compiled first, the backward is one graph whose
    gradients all arrive at its end). Evaluation never goes through DDP (its forward syncs buffers
    across ranks); under DDP it calls the model, compiled apart."""
    evaluated = compile_model(model, device) if compile else model
    if not distributed:
        return evaluated, None, evaluated
    ddp = nn.parallel.DistributedDataParallel(model)
    return (compile_model(ddp, device) if compile else ddp), ddp, evaluated


def compile_model(model: nn.Module, device: torch.device) -> nn.Module:
    """torch.compile(model), or the model itself, with a warning, where compiling cannot work here (no
    C++ compiler for inductor on CPU, an unsupported platform): probed on a tiny function, so a run
    never fails mid-way on a compile error it could have trained without."""
    try:
        probe = torch.compile(lambda t: torch.nn.functional.gelu(t) * 2.0 + 1.0)
        probe(torch.ones(4, device=device))
    except Exception as exc:  # noqa: BLE001 - any compile failure means: train eagerly
        log.warning("run.compile=true but torch.compile does not work here (%s: %s); training without it",
                    type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        return model
    return torch.compile(model)


def make_schedule(optim: OptimConfig, max_steps: int) -> Callable[[int], float]:
    warmup = optim.warmup_steps

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if optim.schedule == "constant":
            return 1.0
        progress = (step - warmup) / max(1, max_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return factor


def make_progress(show: bool, total: int, initial: int, desc: str):
    """A progress bar where `show` (run.progress) asks for one and stderr is a terminal."""
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, disable=not (show and sys.stderr.isatty()),
                leave=False, dynamic_ncols=True)
