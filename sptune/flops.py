"""FLOPs of a run that compare architectures: counted on the model as it runs, plus what counting misses.

6 x parameters x tokens (the dense rule) ignores attention's O(L^2 d) and the SSMs' FFTs and kernel
generation, so it cannot compare a Transformer with S4 or DLR. Here, once per run and outside the timed
loop, torch.utils.flop_counter.FlopCounterMode counts one forward + backward (and one forward) of the
run's model on the meta device: shapes only, so nothing is computed, no RNG is drawn and the model, its
buffers and gradients are untouched. What the counter counts:

    real matmuls (mm, bmm, addmm, baddbmm; linear layers, attention's math path)   torch's formulas
    attention kernels (SDPA flash / efficient / cudnn; the CPU flash kernel below)  torch's formulas
    FFTs (rfft / irfft / fft of length n, forward and backward)                      FFT_REAL / FFT_COMPLEX

Elementwise work (norms, activations, softmax, the pointwise product of an FFT convolution) counts for
no model, as in the counter's convention. Complex matmuls are left out of the count and the SSM kernel
generation they belong to is priced analytically (sptune.models.ssm *_kernel_flops, per kernel call:
its elementwise power tables and Cauchy terms, pykeops and linalg.solve are invisible to the counter,
and a complex multiply-accumulate is 8 real flops, not 2). Training adds 3x that forward cost (forward
+ backward, the usual backward = 2 x forward rule).

Everything counted is linear in the batch: measure() counts batches of 1 and 2 examples, so a run's
FLOPs are exact for any batch sizes it processed: per_example x examples + per_call x calls.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, flop_registry, sdpa_backward_flop_count, sdpa_flop_count

aten = torch.ops.aten
log = logging.getLogger("sptune.run.train")

# FFTW's benchFFT convention (fftw.org/speed/method.html): a complex transform of size n is credited
# 5 n log2 n real flops (radix-2 Cooley-Tukey), a real-data transform half of that.
FFT_COMPLEX = 5.0
FFT_REAL = 2.5
BACKWARD_FACTOR = 2.0  # backward ~ 2 x forward (grads w.r.t. inputs and w.r.t. weights)


def _fft_flops(per_point: float, n: int, batch: int) -> int:
    return int(per_point * n * math.log2(n) * batch) if n > 1 else 0


def _transform(shape: Any, dim: Any) -> tuple[int, int]:
    """(transform size, number of transforms) of an FFT over `dim` of a tensor of `shape`."""
    n = math.prod(shape[d] for d in dim)
    return n, math.prod(shape) // max(n, 1)


def fft_r2c_flop(self_shape, dim, *args, out_shape=None, **kwargs) -> int:
    return _fft_flops(FFT_REAL, *_transform(self_shape, dim))  # the real input's length


def fft_c2r_flop(self_shape, dim, *args, out_shape=None, **kwargs) -> int:
    return _fft_flops(FFT_REAL, *_transform(out_shape, dim))  # the real output's length


def fft_c2c_flop(self_shape, dim, *args, out_shape=None, **kwargs) -> int:
    return _fft_flops(FFT_COMPLEX, *_transform(self_shape, dim))


def sdpa_cpu_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    # torch registers the CUDA attention kernels only, so on CPU tensors SDPA (this kernel) would count 0.
    # On meta tensors (measure()) SDPA takes its math path, whose bmm's are counted: 4 L^2 d forward and
    # 8 L^2 d backward per sequence (no recomputation of the scores, unlike this kernel's backward).
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def sdpa_cpu_backward_flop(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None,
                           **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _real_only(op: Any) -> Callable[..., int]:
    """torch's formula for `op`, or 0 when an input is complex (SSM kernel generation, priced analytically)."""
    counted = flop_registry[op]

    def count(*args: Any, out_val: Any = None, **kwargs: Any) -> int:
        if any(isinstance(a, torch.Tensor) and a.is_complex() for a in args):
            return 0
        return counted(*args, out_val=out_val, **kwargs)

    count._get_raw = True  # FlopCounterMode hands tensors (not shapes) to formulas marked so: we need dtypes
    return count


COUNTED = {
    **{op: _real_only(op) for op in (aten.mm, aten.bmm, aten.addmm, aten.baddbmm)},
    aten._fft_r2c: fft_r2c_flop, aten._fft_c2r: fft_c2r_flop, aten._fft_c2c: fft_c2c_flop,
    aten._scaled_dot_product_flash_attention_for_cpu: sdpa_cpu_flop,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: sdpa_cpu_backward_flop,
}


def count(fn: Callable[[], Any]) -> int:
    """FLOPs of everything fn() runs, as counted above (no analytic terms)."""
    with FlopCounterMode(display=False, custom_mapping=COUNTED) as counter:
        fn()
    return counter.get_total_flops()


def kernel_flops(model: nn.Module, L: int) -> float:
    """Forward FLOPs of generating every SSM kernel of `model` once at length L (0 for a Transformer)."""
    return sum(m.kernel_flops(L) for m in model.modules() if hasattr(m, "kernel_flops"))


@dataclass(frozen=True)
class Flops:
    """A model's FLOPs per example and per call (work independent of the batch: SSM kernels and their FFTs)."""

    train_example: float  # forward + backward
    train_call: float
    forward_example: float
    forward_call: float

    def train(self, examples: int, calls: int) -> float:
        return self.train_example * examples + self.train_call * calls

    def forward(self, examples: int, calls: int) -> float:
        return self.forward_example * examples + self.forward_call * calls


def measure(model: nn.Module, inputs: torch.Tensor, lengths: torch.Tensor, seq_len: int) -> Flops:
    """FLOPs of `model` on one example: `inputs` / `lengths` as model(inputs, lengths) takes them for a
    batch of one (leading dimension 1, or 2 rows for a pretraining pair); seq_len is what SSM kernels span.
    """
    try:
        return counted(model, inputs, lengths, seq_len, "meta")
    except Exception as exc:  # noqa: BLE001 - a researcher's layer may not run on meta tensors (.item(), numpy)
        log.warning("FLOPs counted on CPU tensors: %s on the meta device raised %s: %s", type(model).__name__,
                    type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        return counted(model, inputs, lengths, seq_len, "cpu")


def counted(model: nn.Module, inputs: torch.Tensor, lengths: torch.Tensor, seq_len: int, device: str) -> Flops:
    """measure() on a copy of the model on `device`: "meta" (shapes only, nothing computed) or "cpu" (computed,
    for layers whose forward needs values; the count is the same)."""
    meta = copy.deepcopy(model).to(device)
    for layer in meta.modules():
        if getattr(layer, "backend", None) == "keops":
            layer.backend = "torch"  # pykeops has no meta tensors; the Cauchy sum is priced analytically anyway
    x, n = inputs.to(device), lengths.to(device)

    def run(batch: int, train: bool) -> int:
        meta.train(train)
        xb = x.repeat(batch, *[1] * (x.dim() - 1))  # (b * rows, ...)
        nb = n.repeat(batch, *[1] * (n.dim() - 1))
        if not train:
            with torch.no_grad():
                return count(lambda: meta(xb, nb))
        params = [p for p in meta.parameters() if p.requires_grad]
        return count(lambda: torch.autograd.grad(meta(xb, nb).float().sum(), params, allow_unused=True))

    kernels = kernel_flops(model, seq_len)
    out = {}
    cuda = sorted({p.device.index or 0 for p in model.parameters() if p.is_cuda})
    # Meta tensors draw no random numbers today, CPU ones do (dropout); the count never shifts the run's random
    # stream (dropout masks, resume).
    with torch.random.fork_rng(devices=cuda):
        for train in (True, False):
            one, two = run(1, train), run(2, train)
            factor = 1.0 + BACKWARD_FACTOR if train else 1.0
            out[train] = (two - one, 2 * one - two + factor * kernels)  # (per example, per call)
    return Flops(train_example=out[True][0], train_call=out[True][1],
                 forward_example=out[False][0], forward_call=out[False][1])
