"""A seed's numbers across x86 CPUs: oneDNN's instruction set pinned to AVX2.

torch's CPU build runs some ops through oneDNN, whose kernels are generated at run time for the widest
instruction set the CPU has. GELU is one (both models' feed-forward): its AVX-512 kernel and its AVX2
kernel round differently in the last bits. On OSULeaf the S4D SPT arm of README command 1 (seed 0)
diverged from there and ended one test series apart: 77.69% on an AVX-512 machine, 78.10% with
ONEDNN_MAX_CPU_ISA=AVX2 on the same machine, trial for trial the figure an earlier machine printed
(measured 2026-11-29; ATEN_CPU_CAPABILITY=avx2 and MKL_ENABLE_INSTRUCTIONS=AVX2 changed no bit there).
AVX2 is the widest set every x86 machine of the last decade has.

What this does not pin: MKL's matrix products also choose their kernel per CPU. On that AMD machine MKL's
default already is its AVX2 path (MKL_ENABLE_INSTRUCTIONS=AVX2 changed nothing); an Intel AVX-512 CPU may
take another. MKL_CBWR=AVX2 pins MKL too, but it changed the pretraining's losses there in their last bits
(<= 2e-8), away from every figure recorded so far, so it is the user's choice, not the default.

oneDNN reads the variable once, at its first op in the process, so it is set when sptune is imported
(`sptune/__init__.py`), before any model runs. A value the user set is kept (`ONEDNN_MAX_CPU_ISA=ALL`
gives oneDNN's widest kernels back). Ray's workers inherit it from the driver, and a worker that does not
imports sptune before its trial trains.
"""

from __future__ import annotations

import os

VARIABLE = "ONEDNN_MAX_CPU_ISA"
PINNED = "AVX2"


def pin() -> str:
    """Set oneDNN's instruction set to AVX2 unless the environment already chose one; the value in force."""
    return os.environ.setdefault(VARIABLE, PINNED)


def describe() -> str:
    """'oneDNN AVX2' (or the user's choice), for a run's provenance."""
    return f"oneDNN {os.environ.get(VARIABLE, 'unpinned')}"
