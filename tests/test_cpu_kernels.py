"""Importing sptune pins oneDNN's instruction set to AVX2, so its kernels (GELU among them) compute the same bits
on every x86 CPU with AVX2 (sptune.cpu_kernels). Each case runs in a fresh process, because oneDNN reads its
setting once, at its first op. On a CPU whose widest set is AVX2 an unpinned run computes the same bits, so
there the main check cannot tell the pin from its absence; on an AVX-512 CPU (a recent AMD EPYC or Intel Xeon) it
fails without it."""

import os
import subprocess
import sys

SCRIPT = """
import hashlib, os, sys
import sptune  # first, as every sptune process imports it before a model runs
import torch
from sptune.build import build_task_model
from sptune.config import ModelConfig
from sptune.registry import get_task

torch.manual_seed(0)
torch.set_num_threads(1)
model = build_task_model(ModelConfig(name=sys.argv[1]), get_task("ucr-osuleaf"))  # (B, L, 1) -> (B, classes)
x = torch.randn(4, 427, 1)
logits = model(x, torch.full((4,), 427))
logits.square().sum().backward()
found = torch.cat([logits.detach().flatten()] + [p.grad.flatten() for p in model.parameters()])
print(os.environ.get("ONEDNN_MAX_CPU_ISA"), hashlib.sha1(found.numpy().tobytes()).hexdigest())
"""


def fresh_process(code: str, *args: str, isa: str | None = None) -> str:
    """The stdout of `code` run in a new Python process, with ONEDNN_MAX_CPU_ISA set to `isa` (None: unset)."""
    env = {k: v for k, v in os.environ.items() if k != "ONEDNN_MAX_CPU_ISA"}
    if isa:
        env["ONEDNN_MAX_CPU_ISA"] = isa
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                          check=True).stdout


def run(model: str, isa: str | None) -> tuple[str, str]:
    """(the ONEDNN_MAX_CPU_ISA a fresh sptune process ran under, a hash of its logits and gradients)."""
    setting, digest = fresh_process(SCRIPT, model, isa=isa).split()
    return setting, digest


def test_importing_sptune_pins_avx2_and_keeps_a_choice_the_user_made():
    assert run("transformer", None)[0] == "AVX2"
    assert run("transformer", "ALL")[0] == "ALL"


def test_both_models_compute_what_an_avx2_machine_computes():
    for model in ("transformer", "s4d-legs"):  # both have GELU in their feed-forward, which oneDNN runs
        pinned, explicit = run(model, None)[1], run(model, "AVX2")[1]
        assert pinned == explicit, f"{model}: the default differs from ONEDNN_MAX_CPU_ISA=AVX2"


DEVICE = ("import sptune, torch; from sptune.run.provenance import cpu_model, describe_device; print(cpu_model()); "
          "print(torch.backends.cpu.get_cpu_capability()); print(describe_device(torch.device('cpu')))")


def test_the_provenance_names_the_cpu_and_the_instruction_sets():
    """The same seed gave other numbers on an Intel Xeon than on an AMD EPYC with oneDNN pinned on both (MKL picks
    its kernels per CPU), so a run names its CPU model and ATen's and oneDNN's instruction sets."""
    model, capability, device = fresh_process(DEVICE).strip().splitlines()
    assert device.startswith(f"cpu ({model}, ") and f"ATen {capability}, " in device, device
    assert device.endswith("oneDNN AVX2)"), device


def test_the_provenance_names_an_mkl_setting_the_user_made():
    env = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")}
    env["MKL_CBWR"] = "AVX2"
    out = subprocess.run([sys.executable, "-c", DEVICE], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("oneDNN AVX2, MKL_CBWR=AVX2)"), out
