"""Training FLOP/s sptune's models reached on named GPUs: what `sptune plan --gpu` projects with
(sptune.experiment.budget).

Each entry is one model at one precision and sequence length, trained on one GPU (forward + backward + AdamW,
FLOPs counted by sptune.flops), with the day, the versions and the commit it ran under. A plan divides the
achieved TFLOP/s by the GPU's datasheet peak (budget.GPU_PEAK_TFLOPS) for the utilisation of a stage of that
model and precision, interpolated between the measured sequence lengths. `python benchmarks/gpu_acceptance.py`
on a GPU prints its measurements as entries of this table.

The figures below were taken as shares of a dense matmul peak measured in the same process (bf16 785-792
TFLOP/s, the midpoint taken where only the range was recorded; fp32 52 TFLOP/s, TF32 off): achieved = share x
that peak. They predate compiling by default and TF32 for fp32 matmuls, so they are conservative for code that
has both.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Measurement:
    gpu: str  # a key of budget.GPU_PEAK_TFLOPS
    model: str  # model.name, or a kind of MODEL_KINDS
    precision: str  # "fp32" | "bf16"
    seq_len: int
    tflops: float  # achieved training TFLOP/s
    setting: str  # the rest of the shape: width, depth, batch
    date: str
    versions: str  # torch, CUDA, the commit


# Models that train the same kernels at the same cost: one measurement stands for all of them.
MODEL_KINDS = {"s4d-legs": "s4d", "s4d-lin": "s4d", "s4d-inv": "s4d"}

_H100 = ("2026-11-25", "torch 2.11.0+cu130, CUDA 13.0, commit c316a3e")
MEASUREMENTS = (
    Measurement("h100", "transformer", "bf16", 1024, 111.0, "d_model 512, 6 layers, batch 16", *_H100),
    Measurement("h100", "transformer", "bf16", 2048, 266.0, "d_model 512, 6 layers, batch 64 (the ListOps config)",
                *_H100),
    Measurement("h100", "transformer", "bf16", 4096, 294.0, "d_model 512, 6 layers, batch 16", *_H100),
    Measurement("h100", "transformer", "fp32", 1024, 36.7, "d_model 512, 6 layers, batch 16", *_H100),
    Measurement("h100", "transformer", "fp32", 2048, 38.4, "d_model 512, 6 layers, batch 64 (the ListOps config)",
                *_H100),
    Measurement("h100", "transformer", "fp32", 4096, 37.5, "d_model 512, 6 layers, batch 16", *_H100),
    Measurement("h100", "s4d", "bf16", 1024, 26.0, "d_model 512, 6 layers, batch 16, torch kernel", *_H100),
    Measurement("h100", "s4d", "bf16", 4096, 62.3, "d_model 512, 6 layers, batch 16, torch kernel", *_H100),
    Measurement("h100", "s4d", "fp32", 1024, 25.5, "d_model 512, 6 layers, batch 16, torch kernel", *_H100),
    Measurement("h100", "s4d", "fp32", 4096, 29.6, "d_model 512, 6 layers, batch 16, torch kernel", *_H100),
)

# Where a GPU, model or precision has no entry: the ListOps Transformer's on an H100 (gpu, model, seq_len).
DEFAULT = ("h100", "transformer", 2048)


def default(precision: str) -> Measurement:
    """The DEFAULT entry at `precision` ("fp32" | "bf16")."""
    return next(m for m in MEASUREMENTS if (m.gpu, m.model, m.seq_len, m.precision) == (*DEFAULT, precision))
