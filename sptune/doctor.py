"""`sptune doctor`: can this node train, and with which kernels? Run it before a paid study.

    sptune doctor                    this machine
    sptune doctor --address auto     every alive node of the running Ray cluster (or RAY_ADDRESS)

Per node: the device, the torch / CUDA versions, a tiny forward and backward through each compute
backend the models use, which of them a run would use and why the others are not used, and a
2-second throughput figure (training tokens/s of a small Transformer). `check_node` returns a plain
dict, `check_cluster` one per node, `format_report` prints them; the command exits 0 when every node
can train, else 1.

Backends:
    sdpa            torch's scaled_dot_product_attention: the Transformer's attention (and which kernel
                    it picks here: flash / efficient / cudnn / math)
    flash-attn      Dao et al.'s kernels: full attention on CUDA in fp16/bf16 (paper §2), when installed
    pykeops-cauchy  the S4 Cauchy kernel through pykeops (no (H, 2N, L) matrix in memory), checked in a
                    child process against torch's (sptune.models.backend_probe): a crash or hang is reported
    torch           the same S4 kernel in plain torch: the fallback that needs nothing extra
"""

from __future__ import annotations

import dataclasses
import os
import platform
import socket
import time
from typing import Any, Callable

import torch

from sptune.errors import UserError
from sptune.run.provenance import describe_device

THROUGHPUT_SECONDS = 2.0
# The throughput model: small, with inputs long enough that attention and the MLPs dominate. A batch
# per device kind: a GPU needs a large one to be busy, a CPU must fit steps into the 2 seconds.
THROUGHPUT_MODEL = ["model.d_model=128", "model.n_layers=2", "model.n_heads=4", "model.d_ff=256"]
THROUGHPUT_SHAPE = {"cuda": (32, 1024), "cpu": (2, 512)}  # (batch, length)
# How long a cluster node may take to answer (its first CUDA call and kernel builds included).
NODE_TIMEOUT_S = 300.0


def device_of() -> torch.device:
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def forward_backward(fn: Callable[[], torch.Tensor]) -> None:
    """Run fn (a loss of tensors that require grad), backpropagate, and insist on finite numbers."""
    loss = fn()
    loss.backward()
    if not torch.isfinite(loss):
        raise RuntimeError(f"non-finite loss {loss.item()}")


def attention_inputs(device: torch.device, dtype: torch.dtype) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    shape = (2, 4, 128, 32)  # (B, H, L, hd)
    return [torch.randn(shape, generator=generator).to(device, dtype).requires_grad_() for _ in range(3)]


def sdpa_kernel_name(q: torch.Tensor) -> str:
    """The kernel SDPA dispatches to for these inputs (torch's own choice function; private, so guarded)."""
    try:
        from torch.nn.attention import SDPBackend

        return SDPBackend(torch._fused_sdp_choice(q, q, q)).name.lower().replace("_attention", "")
    except Exception:  # noqa: BLE001 - a torch without the private function: the check still ran
        return "unknown"


def check_sdpa(device: torch.device) -> dict[str, Any]:
    dtypes = [torch.float32] + ([torch.bfloat16] if device.type == "cuda" else [])
    kernels = []
    for dtype in dtypes:
        q, k, v = attention_inputs(device, dtype)
        forward_backward(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v).float().square().mean())
        kernels.append(f"{str(dtype).removeprefix('torch.')}: {sdpa_kernel_name(q)} kernel")
    return {"ok": True, "active": True, "detail": "Transformer attention; " + ", ".join(kernels)}


def check_flash_attn(device: torch.device) -> dict[str, Any]:
    from sptune.models import transformer

    if transformer.flash_attn_func is None:
        return {"ok": None, "active": False,
                "detail": "not installed (pip install 'sptune[gpu]' on a CUDA node); SDPA computes the same attention"}
    if device.type != "cuda":
        return {"ok": None, "active": False, "detail": "installed, but no CUDA device: it runs only on CUDA"}
    # flash-attn takes (B, L, H, hd)
    q, k, v = (t.detach().transpose(1, 2).requires_grad_() for t in attention_inputs(device, torch.bfloat16))
    forward_backward(lambda: transformer.flash_attn_func(q, k, v).float().square().mean())
    return {"ok": True, "active": True,
            "detail": "full attention of run.precision=bf16 runs (flash-attn needs fp16/bf16)"}


def s4_loss(backend: str, device: torch.device) -> Callable[[], torch.Tensor]:
    from sptune import config
    from sptune.build import build_task_model
    from sptune.registry import get_task

    cfg = config.load(None, ["model.name=s4", "model.d_model=16", "model.d_state=16", "model.n_layers=1",
                             "model.d_ff=0", f"model.kernel_backend={backend}"])
    task = dataclasses.replace(get_task("listops-mini"), seq_len=256)
    torch.manual_seed(0)
    model = build_task_model(cfg.model, task).to(device)
    tokens = torch.randint(0, task.vocab_size, (2, task.seq_len), device=device)  # (B, L)
    lengths = torch.full((2,), task.seq_len, device=device)  # (B,)
    return lambda: model(tokens, lengths).square().mean()


def check_keops(device: torch.device) -> dict[str, Any]:
    from sptune.models import backend_probe, ssm

    if not ssm.HAS_KEOPS:
        return {"ok": None, "active": False,
                "detail": "pykeops not installed (pip install 'sptune[keops]'); S4 uses the torch Cauchy kernel, "
                          "which holds an (H, 2N, L) matrix in memory"}
    # In a child process (a pykeops crash or hang is this report's finding, not its end), probed again
    # rather than read from the node's cache: runs then use the refreshed verdict.
    verdict = backend_probe.probe("keops", device=device, fresh=True)
    if not verdict.ok:
        return {"ok": False, "active": False,
                "detail": f"probe {verdict.detail}; S4 uses the torch Cauchy kernel (model.kernel_backend=auto)"}
    return {"ok": True, "active": ssm.resolve_backend("auto") == "keops",
            "detail": "S4 Cauchy kernel (model.kernel_backend=auto); probe passed"}


def check_torch(device: torch.device) -> dict[str, Any]:
    from sptune.models import ssm

    forward_backward(s4_loss("torch", device))
    used = ssm.resolve_backend("auto") == "torch"
    why = "pykeops probe did not pass" if ssm.HAS_KEOPS else "pykeops not installed"
    return {"ok": True, "active": used,
            "detail": "S4 Cauchy kernel" + (f" ({why})" if used else
                                            " with model.kernel_backend=torch only: pykeops is used")}


BACKENDS: dict[str, Callable[[torch.device], dict[str, Any]]] = {
    "sdpa": check_sdpa, "flash-attn": check_flash_attn, "pykeops-cauchy": check_keops, "torch": check_torch}


def check_backend(name: str, device: torch.device) -> dict[str, Any]:
    """{"name", "ok" (the tiny forward/backward ran; None = not applicable here), "active", "detail"}."""
    try:
        outcome = BACKENDS[name](device)  # {"ok", "active", "detail"}
    except Exception as exc:  # noqa: BLE001 - a failing backend is a finding of the report, not a crash
        return {"name": name, "ok": False, "active": False,
                "detail": f"forward/backward failed: {type(exc).__name__}: {first_line(exc)}"}
    return {"name": name, **outcome}


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


def measure_throughput(device: torch.device, seconds: float = THROUGHPUT_SECONDS,
                       model_name: str = "transformer") -> dict[str, Any]:
    """Training tokens/s of a small model (random tokens, AdamW, fp32) over about `seconds`: the Transformer, or
    `model_name` (any model name: a researcher's layer in the same backbone)."""
    from sptune import config
    from sptune.build import build_task_model
    from sptune.registry import get_task
    from sptune.run.train import make_optimizer

    try:
        cfg = config.load(None, THROUGHPUT_MODEL + [f"model.name={model_name}"])
        batch, length = THROUGHPUT_SHAPE["cuda" if device.type == "cuda" else "cpu"]
        task = dataclasses.replace(get_task("listops-mini"), seq_len=length)
        torch.manual_seed(0)
        model = build_task_model(cfg.model, task).to(device)
        optimizer = make_optimizer(model, cfg.optim)
        tokens = torch.randint(0, task.vocab_size, (batch, length), device=device)  # (B, L)
        lengths = torch.full((batch,), length, device=device)  # (B,)
        labels = torch.randint(0, task.num_classes, (batch,), device=device)  # (B,)

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(model(tokens, lengths), labels).backward()
            optimizer.step()

        step()  # warm-up: allocations, kernel selection
        synchronize(device)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            step()
            steps += 1
            if device.type == "cuda" and steps % 10 == 0:
                synchronize(device)  # the clock must see finished work, not queued work
        synchronize(device)
        elapsed = time.perf_counter() - start
    except Exception as exc:  # noqa: BLE001 - reported: this node cannot train
        return {"ok": False, "detail": f"training failed: {type(exc).__name__}: {first_line(exc)}"}
    return {"ok": True, "tokens_per_s": steps * batch * length / elapsed, "steps": steps, "seconds": elapsed,
            "detail": f"{model_name} d_model 128, 2 layers, batch {batch} x {length} tokens, fp32"}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_node(seconds: float = THROUGHPUT_SECONDS, model: str = "transformer") -> dict[str, Any]:
    """This process's node: versions, device, backends, throughput (of `model`) and the verdict `can_train`."""
    if not seconds > 0:
        raise UserError(f"throughput seconds={seconds} must be > 0; pass e.g. --seconds 2")
    device = device_of()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):  # the caller's RNG untouched
        backends = [check_backend(name, device) for name in BACKENDS]
        throughput = measure_throughput(device, seconds, model)
    can_train = any(b["ok"] is True for b in backends) and throughput["ok"]
    return {"host": socket.gethostname(), "python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "device": describe_device(device), "backends": backends,
            "throughput": throughput, "can_train": can_train}


def check_cluster(address: str, seconds: float = THROUGHPUT_SECONDS,
                  timeout_s: float = NODE_TIMEOUT_S, model: str = "transformer") -> list[dict[str, Any]]:
    """check_node on every alive node with a CPU of the Ray cluster at `address`, by a task pinned to each
    node (with one of its GPUs, if it has any, so the task sees a CUDA device as a training worker would).
    Ray is joined and left through sptune.experiment.engine.session, as every other entry point does."""
    from sptune.experiment.engine.session import joined_cluster

    with joined_cluster(address):
        return _check_nodes(seconds, timeout_s, model)


def _check_nodes(seconds: float, timeout_s: float, model: str) -> list[dict[str, Any]]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # A node without a CPU takes no trials (cluster.yaml's head) and would never run the 1-CPU check.
    nodes = [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1]
    remote = ray.remote(check_node)
    pending = {}
    for node in nodes:
        gpus = 1 if node.get("Resources", {}).get("GPU", 0) >= 1 else 0
        strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
        pending[node["NodeID"]] = (node, remote.options(num_cpus=1, num_gpus=gpus, scheduling_strategy=strategy,
                                                        max_retries=0).remote(seconds, model))
    reports = []
    deadline = time.monotonic() + timeout_s
    for node_id, (node, ref) in pending.items():
        where = {"node_id": node_id, "node_ip": node.get("NodeManagerAddress", "")}
        try:
            reports.append({**where, **ray.get(ref, timeout=max(deadline - time.monotonic(), 1.0))})
        except Exception as exc:  # noqa: BLE001 - a node that cannot run the check cannot train
            ray.cancel(ref, force=True)
            why = (f"no answer within {timeout_s:.0f} s (its CPUs/GPUs busy?)"
                   if isinstance(exc, ray.exceptions.GetTimeoutError) else f"{type(exc).__name__}: {first_line(exc)}")
            reports.append({**where, "host": node.get("NodeManagerHostname", "?"), "can_train": False, "error": why})
    return reports


def cluster_address(cli_address: str | None) -> str | None:
    """--address, else RAY_ADDRESS, else None (this machine only)."""
    return cli_address or os.environ.get("RAY_ADDRESS") or None


def format_report(report: dict[str, Any]) -> str:
    """One node's report as the lines `sptune doctor` prints."""
    where = report["host"] + (f" ({report['node_ip']})" if report.get("node_ip") else "")
    verdict = "can train" if report["can_train"] else "CANNOT TRAIN"
    if "error" in report:
        return f"node {where}: {verdict}: {report['error']}"
    lines = [f"node {where}: {verdict}",
             f"  torch {report['torch']}, CUDA {report['cuda'] or 'none (CPU build)'}, Python {report['python']}",
             f"  device: {report['device']}", "  backends:"]
    for b in report["backends"]:
        state = "FAILED" if b["ok"] is False else ("active" if b["active"] else "inactive")
        lines.append(f"    {b['name']:<15} {state:<8} {b['detail']}")
    t = report["throughput"]
    lines.append(f"  throughput: {t['tokens_per_s']:,.0f} training tokens/s ({t['steps']} steps in "
                 f"{t['seconds']:.1f} s; {t['detail']})" if t["ok"] else f"  throughput: FAILED ({t['detail']})")
    return "\n".join(lines)
