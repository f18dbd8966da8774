"""A seed's numbers across x86 CPUs: oneDNN's instruction set pinned to AVX2.

torch's CPU build runs some ops through oneDNN, whose kernels are generated at run time for the widest
instruction set the CPU has. GELU is one (both models' feed-forward): its AVX-512 kernel and its AVX2
kernel round differently in the last bits. On OSULeaf the S4D SPT arm of README command 1 (seed 0)
diverged from there and ended one test series apart: 77.69% on an AVX-512 machine, 78.10% with
ONEDNN_MAX_CPU_ISA=AVX2 on the same machine, trial for trial the figure an earlier machine printed
(ATEN_CPU_CAPABILITY=avx2 and MKL_ENABLE_INSTRUCTIONS=AVX2 changed no bit there).
AVX2 is the widest set every x86 machine of the last decade has.

What this does not pin: MKL's matrix products also choose their kernel per CPU. On that AMD machine MKL's
default already is its AVX2 path (MKL_ENABLE_INSTRUCTIONS=AVX2 changed nothing); an Intel AVX-512 CPU may
take another. MKL_CBWR=AVX2 pins MKL too, but it changed the pretraining's losses there in their last bits
(<= 2e-8), away from every figure recorded so far, so it is the user's choice, not the default.

So the same seed gives the same numbers on the same kind of CPU, not across kinds. Measured on an
Intel Xeon (AVX-512, AMX): model_sizes seed 11's Transformer 20K scratch trial at lr 0.0289647, whose record
from the AMD EPYC machine reads best step 125, validation 0.585, test 43.39%, last training loss 0.01658, gave
best step 125, 0.537, 37.60%, 0.03759 (the engine's trial and a `sptune scratch` of its config.yaml bit for bit
alike); with MKL_ENABLE_INSTRUCTIONS=AVX2 or MKL_CBWR=AVX2, 200, 0.488, 42.15%, 0.00249; with
ATEN_CPU_CAPABILITY=avx2 added, 225, 0.585, 42.15%, 0.00168. No setting tried gave the AMD figures. That lr is
a grid extension's, where training is least stable; the same cell's finetuning at lr 3e-3 kept its test
accuracy (50.83%) while its last training loss moved (0.21417 -> 0.20846). A run's provenance therefore names
the CPU model and ATen's instruction set beside oneDNN's (sptune.run.provenance.describe_device).

oneDNN reads the variable once, at its first op in the process, so it is set when sptune is imported
(`sptune/__init__.py`), before any model runs. A value the user set is kept (`ONEDNN_MAX_CPU_ISA=ALL`
gives oneDNN's widest kernels back). Ray's workers inherit it from the driver, and a worker that does not
imports sptune before its trial trains.
"""

from __future__ import annotations

import os

VARIABLE = "ONEDNN_MAX_CPU_ISA"
PINNED = "AVX2"
MKL_VARIABLES = ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS")  # left to the user (see above)


def pin() -> str:
    """Set oneDNN's instruction set to AVX2 unless the environment already chose one; the value in force."""
    return os.environ.setdefault(VARIABLE, PINNED)


def describe() -> str:
    """'oneDNN AVX2' (or the user's choice), and MKL's settings where the user made one ('MKL_CBWR=AVX2'), for a
    run's provenance."""
    mkl = [f"{name}={os.environ[name]}" for name in MKL_VARIABLES if os.environ.get(name)]
    return ", ".join([f"oneDNN {os.environ.get(VARIABLE, 'unpinned')}", *mkl])
