"""Can this node run a Cauchy kernel backend? Asked of a child process, answered once per node.

pykeops builds its kernels on first use; on an H100 node pykeops 2.3 segfaulted (exit 139) inside that first
build, in the trial's own process, so every S4 trial and `sptune doctor` died with it. Here the first use
happens in a child process (`probe`): a tiny forward and backward of the DPLR Cauchy sum through the backend,
checked against the torch backend's values and gradients. A crash or a hang of the child is a verdict, not the
end of the caller: "crashed (signal 11): SIGSEGV", "hung: no answer in 180 s", "failed: <first line>", or
"passed".

A verdict is cached in cache_root()/backend_probe.json (sptune.tasks.base: $SPTUNE_CACHE, default
~/.cache/sptune) under the node and the versions it depends on (host, Python, torch, the backend's library and
where it is installed, the device), so a node pays for a probe once, not once per trial; in a process it is
also memoised. Only this (parent) side reads and writes the cache, under an exclusive lock on
backend_probe.lock beside it: 16 trials packed on one GPU (--trials-per-gpu) start together, and without the
lock each would find no verdict and run its own child (16 pykeops builds at once).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import contextlib
import fcntl
import json
import os
import platform
import signal
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

import torch

from sptune import atomic
from sptune.models import cauchy
from sptune.tasks.base import cache_root

# Long enough for pykeops's first build on a fresh node (it compiles its own module, then the formula and its
# gradient); a real hang costs this once per node, since the verdict is cached.
TIMEOUT_S = 180.0
TIMEOUT_ENV = "SPTUNE_PROBE_TIMEOUT"
LIBRARIES = {"keops": "pykeops"}  # backend -> the library whose version a verdict depends on
MARK = "sptune-probe-verdict "  # prefixes the child's answer: compilers may print to stdout too
TOLERANCE = 1e-4  # relative to the largest entry; float32 sums of 2N = 8 terms agree to ~1e-6
H, N, L = 2, 4, 8  # a tiny system: channels, conjugate pairs, kernel length (L // 2 + 1 = 5 frequencies)

# The child: the parent's sys.path (not only $PYTHONPATH: a test or a launcher may have extended it), then answer.
_CHILD = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
          "from sptune.models.backend_probe import answer; answer(sys.argv[2], sys.argv[3])")

@dataclass(frozen=True)
class Probe:
    kind: str  # "ok" | "failed" | "crashed" | "hung"
    detail: str  # "passed", "failed: ...", "crashed (signal 11): SIGSEGV", "hung: no answer in 180 s"

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


_memo: dict[tuple[str, str], Probe] = {}  # (backend, device type) -> verdict, in this process


def probe(backend: str, timeout_s: float | None = None, device: torch.device | None = None,
          fresh: bool = False) -> Probe:
    """The verdict on `backend` ("keops" | "torch") on `device` (default: the device a run uses).

    Memoised in this process, then read from the node's cache; else a child process runs the check, killed
    after timeout_s (default $SPTUNE_PROBE_TIMEOUT, else TIMEOUT_S). fresh=True (sptune doctor) always runs
    the child and replaces the cached verdict.
    """
    device = device or default_device()
    memo_key = (backend, device.type)
    if not fresh and memo_key in _memo:
        return _memo[memo_key]
    key = cache_key(backend, device)
    with node_lock():  # a process that waited here reads the verdict the holder wrote
        cached = None if fresh else read_cache().get(key)
        verdict = Probe(**cached) if cached else run_child(backend, device, timeout_s or default_timeout())
        if not cached:  # merged: the file holds other backends' and devices' verdicts too
            atomic.write_json(cache_path(), {**read_cache(), key: asdict(verdict)})
    _memo[memo_key] = verdict
    return verdict


@contextlib.contextmanager
def node_lock() -> Iterator[None]:
    """This node's probe lock (flock on a file beside the cache): one process at a time reads, probes and writes.
    The holder waits at most its child's timeout; the lock goes with its process, however that ends."""
    path = cache_path().with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_timeout() -> float:
    return float(os.environ.get(TIMEOUT_ENV, TIMEOUT_S))


def cache_path() -> Path:
    return cache_root() / "backend_probe.json"


def read_cache() -> dict[str, dict[str, str]]:
    try:
        return json.loads(cache_path().read_text())
    except (OSError, ValueError):  # none yet, or unreadable: probe again and rewrite it
        return {}


def cache_key(backend: str, device: torch.device) -> str:
    """The node and every version the verdict depends on, e.g.
    'keops | node-3 | python 3.12.3 | torch 2.13.0 | pykeops 2.3 at /venv/.../pykeops | cuda NVIDIA H100 80GB HBM3'."""
    where = f"cuda {torch.cuda.get_device_name(device)}" if device.type == "cuda" else device.type
    return " | ".join([backend, socket.gethostname(), f"python {platform.python_version()}",
                       f"torch {torch.__version__}", library_version(backend), where])


def library_version(backend: str) -> str:
    name = LIBRARIES.get(backend)
    spec = importlib.util.find_spec(name) if name else None  # found, not imported: importing may crash
    if spec is None:
        return f"no {name}" if name else "no library"
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:  # on sys.path without its metadata (a source checkout)
        version = "(no version)"
    return f"{name} {version} at {Path(spec.origin or '').parent}"


# --- the parent's side: run the child, read its end ---------------------------------------------------------

def run_child(backend: str, device: torch.device, timeout_s: float) -> Probe:
    """Run the check in `python -c _CHILD`; kill it (and whatever it started) after timeout_s."""
    command = [sys.executable, "-c", _CHILD, json.dumps(sys.path), backend, str(device)]
    # Its own process group (start_new_session): on timeout the whole group is killed, compilers the backend
    # started included.
    with subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as child:
        try:
            out, err = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return Probe("hung", f"hung: no answer in {timeout_s:g} s")
        finally:
            if child.poll() is None:  # timed out, or this process was interrupted
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
    return verdict_of(child.returncode, out, err)


def verdict_of(returncode: int, out: str, err: str) -> Probe:
    """A signal is a crash even after an answer (a crash at exit would end a trial too); else the answer."""
    if returncode < 0:
        return Probe("crashed", f"crashed (signal {-returncode}): {signal_name(-returncode)}")
    answers = [line[len(MARK):] for line in out.splitlines() if line.startswith(MARK)]
    if returncode == 0 and answers:
        return Probe(**json.loads(answers[-1]))
    last = (err.strip().splitlines() or ["no answer"])[-1][:200]
    return Probe("crashed", f"crashed (exit code {returncode}): {last}")


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:  # real-time signals between SIGRTMIN and SIGRTMAX have no name
        return "unnamed signal"


# --- the child's side: the check itself ---------------------------------------------------------------------

def answer(backend: str, device: str) -> None:
    """Check `backend` on `device` and print the verdict as one marked JSON line on stdout."""
    try:
        problem = compare(backend, torch.device(device))
        verdict = Probe("failed", f"failed: {problem}") if problem else Probe("ok", "passed")
    except Exception as exc:  # noqa: BLE001 - a backend that raises is a verdict, for the parent to read
        text = str(exc).strip().splitlines()
        verdict = Probe("failed", f"failed: {type(exc).__name__}: {text[0][:200] if text else ''}")
    print(MARK + json.dumps(asdict(verdict)), flush=True)


def compare(backend: str, device: torch.device) -> str | None:
    """None when `backend`'s Cauchy sums and their gradients match the torch backend's, else what differs."""
    inputs = cauchy_inputs(device)
    want = forward_backward(cauchy.CAUCHY["torch"], *inputs)
    got = forward_backward(cauchy.CAUCHY[backend], *inputs)
    for name, x, y in zip(("values", "gradients of v", "gradients of w"), got, want):
        if x is None or x.shape != y.shape:
            return f"{name}: {None if x is None else tuple(x.shape)}, the torch backend's {tuple(y.shape)}"
        err = ((x - y).abs().max() / y.abs().max()).item()
        if not err <= TOLERANCE:  # NaN fails too
            return f"{name} differ from the torch backend's by {err:.2g} (relative; tolerance {TOLERANCE:g})"
    return None


def cauchy_inputs(device: torch.device):
    """The Cauchy sum's operands as dplr_kernel_from_ctilde forms them, float32 as in a model.

    v (2, 2, H, N): rows C~ and p^* times columns B and p; a, b (L//2+1,) from the roots of unity; w = dt A (H, N)
    with Re(w) < 0 (a stable system, so no a - b w vanishes); g (2, 2, H, L//2+1, 2): a random cotangent.
    """
    gen = torch.Generator().manual_seed(0)
    omega = torch.polar(torch.ones(L // 2 + 1), -2 * torch.pi * torch.arange(L // 2 + 1) / L)  # (L//2+1,)
    v = torch.complex(*torch.randn(2, 2, 2, H, N, generator=gen))  # (2, 2, H, N)
    w = torch.complex(-0.1 - torch.rand(H, N, generator=gen), torch.randn(H, N, generator=gen))  # (H, N)
    g = torch.randn(2, 2, H, L // 2 + 1, 2, generator=gen)
    return [t.to(device) for t in (v, 1 - omega, (1 + omega) / 2, w, g)]


def forward_backward(cauchy, v, a, b, w, g):
    """(values, dv, dw) of cauchy(v, a, b, w) under the cotangent g."""
    v, w = v.clone().requires_grad_(), w.clone().requires_grad_()
    r = cauchy(v, a, b, w)  # (2, 2, H, L//2+1)
    torch.view_as_real(r).mul(g).sum().backward()
    return r.detach(), v.grad, w.grad
