"""Kernel backends that cannot crash a study: pykeops is probed in a child process before any use.

Stand-in `pykeops` packages (written here into tmp_path) import fine and then, on first use of Genred, crash
with SIGSEGV (what pykeops 2.3 did on an H100 node), hang, return wrong numbers, or compute the Cauchy sum
correctly. Each scenario runs in its own Python process with the stand-in first on sys.path: code that used
pykeops in-process would die or hang there, which shows up as this test failing, not as pytest crashing.
"""

import json
import logging
import os
import socket
import subprocess
import sys
import textwrap

import pytest
import torch

from sptune.errors import UserError
from sptune.models import backend_probe, ssm

HANG_S = 5  # the probe's time limit in these tests ($SPTUNE_PROBE_TIMEOUT)
SCENARIO_TIMEOUT_S = 60  # a scenario that needs longer hung (in-process pykeops), and fails

PACKAGE = """\
import os

if os.environ.get("STANDIN_LOG"):  # one line per process that imports pykeops
    with open(os.environ["STANDIN_LOG"], "a") as f:
        f.write(f"{os.getpid()}\\n")
"""

# Genred as cauchy.keops_cauchy_op builds it: aliases v, w = Vj(2) (the state), a, b = Vi(2) (the frequencies),
# complex numbers as (re, im) pairs, the sum over j.
GENRED = """\
import os
import signal
import time

import torch


def cauchy(v, w, a, b):  # v, w (..., N, 2); a, b (..., F, 2) -> (..., F, 2)
    v, w, a, b = (torch.view_as_complex(t.contiguous()) for t in (v, w, a, b))
    v, w, a, b = v[..., None, :], w[..., None, :], a[..., :, None], b[..., :, None]
    return torch.view_as_real((v / (a - b * w) + v.conj() / (a - b * w.conj())).sum(-1))


class Genred:
    def __init__(self, formula, aliases, reduction_op, axis):
        assert aliases == ["v = Vj(2)", "w = Vj(2)", "a = Vi(2)", "b = Vi(2)"] and axis == 1

    def __call__(self, v, w, a, b):
        {body}
"""

BEHAVIOURS = {
    "crash": "os.kill(os.getpid(), signal.SIGSEGV)",
    "hang": "time.sleep(3600)",
    "wrong values": "return 1.5 * cauchy(v, w, a, b)",
    "wrong gradients": "r = cauchy(v, w, a, b); return r + (r - r.detach())  # right values, doubled gradients",
    "correct": "return cauchy(v, w, a, b)",
    "slow": "time.sleep(1); return cauchy(v, w, a, b)  # a probe long enough for every racer to arrive",
}

# A small S4 system whose kernel goes through the Cauchy backend `auto` picks; one logged line per choice.
SYSTEM = """\
import logging, sys
import torch
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="LOG %(levelname)s %(message)s")
from sptune.models import ssm
print("IMPORTED pykeops at import:", "pykeops" in sys.modules)
g = torch.Generator().manual_seed(0)
def randc(*shape):
    return torch.complex(torch.randn(*shape, generator=g), torch.randn(*shape, generator=g))
dt, A = torch.full((2,), 0.1), torch.complex(-0.5 * torch.ones(2, 4), torch.randn(2, 4, generator=g))
P, B, C = randc(2, 4), randc(2, 4), randc(1, 2, 4)
"""


def write_standin(root, behaviour: str):
    (root / "pykeops" / "torch").mkdir(parents=True)
    (root / "pykeops" / "__init__.py").write_text(PACKAGE)
    (root / "pykeops" / "torch" / "__init__.py").write_text(GENRED.format(body=BEHAVIOURS[behaviour]))
    return root


def scenario(tmp_path, behaviour: str, code: str) -> subprocess.CompletedProcess:
    """Run SYSTEM + code in a fresh Python with the stand-in inserted into sys.path by the script itself (so
    the probe's child must be given the parent's sys.path), the node cache in tmp_path/cache."""
    root = tmp_path / "standin"
    if not root.exists():
        write_standin(root, behaviour)
    script = f"import sys; sys.path.insert(0, {str(root)!r})\n" + SYSTEM + textwrap.dedent(code)
    env = {**os.environ, "SPTUNE_CACHE": str(tmp_path / "cache"), backend_probe.TIMEOUT_ENV: str(HANG_S),
           "STANDIN_LOG": str(tmp_path / "imports")}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                          timeout=SCENARIO_TIMEOUT_S)


def choice_lines(result) -> list[str]:
    return [line for line in result.stdout.splitlines() if "S4 Cauchy kernel backend" in line]


def imports(tmp_path) -> int:
    """How many processes imported the stand-in pykeops (each probe is one child process)."""
    path = tmp_path / "imports"
    return len(path.read_text().splitlines()) if path.exists() else 0


AUTO = """\
print("BACKEND", ssm.resolve_backend("auto"), ssm.resolve_backend("auto"))
k = ssm.dplr_kernel(dt, A, P, B, C, 16, backend="auto")
print("KERNEL", tuple(k.shape))
"""


@pytest.mark.parametrize("behaviour, why", [("crash", "pykeops probe crashed (signal 11): SIGSEGV"),
                                            ("hang", f"pykeops probe hung: no answer in {HANG_S} s")])
def test_auto_falls_back_to_torch_when_pykeops_crashes_or_hangs(tmp_path, behaviour, why):
    result = scenario(tmp_path, behaviour, AUTO)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "IMPORTED pykeops at import: False" in result.stdout  # importing ssm never runs pykeops
    assert "BACKEND torch torch" in result.stdout and "KERNEL (1, 2, 16)" in result.stdout
    [line] = choice_lines(result)  # one line, though the backend was resolved three times
    assert line.startswith("LOG WARNING S4 Cauchy kernel backend: torch (" + why), line
    assert imports(tmp_path) == 1  # one probe child: the verdict is memoised in the process


def test_an_explicit_keops_that_fails_its_probe_is_a_one_line_user_error(tmp_path):
    result = scenario(tmp_path, "crash", """\
        import json
        from sptune.errors import UserError
        for attempt in (lambda: ssm.resolve_backend("keops"), lambda: ssm.dplr_kernel(dt, A, P, B, C, 16, "keops")):
            try:
                attempt()
            except UserError as exc:
                print("ERROR", json.dumps(str(exc)))
        """)
    assert result.returncode == 0, result.stderr[-2000:]
    errors = [line for line in result.stdout.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 2 and errors[0] == errors[1], result.stdout
    message = json.loads(errors[0].removeprefix("ERROR "))
    assert "\n" not in message and "crashed (signal 11)" in message
    assert "use model.kernel_backend=torch or auto" in message


@pytest.mark.parametrize("behaviour, why", [
    ("wrong values", "pykeops probe failed: values differ from the torch backend's"),
    ("wrong gradients", "pykeops probe failed: gradients of v differ from the torch backend's")])
def test_wrong_numbers_fail_the_probe(tmp_path, behaviour, why):
    result = scenario(tmp_path, behaviour, AUTO)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "BACKEND torch torch" in result.stdout
    [line] = choice_lines(result)
    assert why in line, line


def test_auto_uses_a_pykeops_that_passes_its_probe(tmp_path):
    result = scenario(tmp_path, "correct", AUTO + textwrap.dedent("""\
        k_torch = ssm.dplr_kernel(dt, A, P, B, C, 16, backend="torch")
        print("REL_ERR", ((k - k_torch).abs().max() / k_torch.abs().max()).item())
        """))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "BACKEND keops keops" in result.stdout
    assert "LOG INFO S4 Cauchy kernel backend: keops (pykeops probe passed)" in choice_lines(result)
    rel_err = float(result.stdout.split("REL_ERR ")[1].split()[0])
    assert rel_err < 1e-5


def test_the_verdict_is_cached_per_node_and_versions(tmp_path):
    first = scenario(tmp_path, "crash", AUTO)
    second = scenario(tmp_path, "crash", AUTO)
    assert imports(tmp_path) == 1  # the second process spawned no probe: it read the verdict
    assert choice_lines(first) == choice_lines(second) and "crashed (signal 11)" in choice_lines(second)[0]
    [(key, verdict)] = json.loads((tmp_path / "cache" / "backend_probe.json").read_text()).items()
    assert verdict == {"kind": "crashed", "detail": "crashed (signal 11): SIGSEGV"}
    fields = key.split(" | ")
    assert fields[:2] == ["keops", socket.gethostname()] and f"torch {torch.__version__}" in fields
    assert fields[4].startswith("pykeops (no version) at " + str(tmp_path))
    assert fields[5] == (f"cuda {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "cpu")


RACERS = 4
# Each racer waits until all have started, then asks for the verdict at the same moment (packed trials starting).
RACE = """\
import time
from pathlib import Path
from sptune.models import backend_probe
here = Path(sys.argv[1])
(here / f"ready-{sys.argv[2]}").touch()
while len(list(here.glob("ready-*"))) < int(sys.argv[3]):
    time.sleep(0.01)
print("VERDICT", backend_probe.probe("keops", device=torch.device("cpu")).detail)
"""


def test_racing_processes_on_one_node_probe_once(tmp_path):
    """Trials packed on one GPU start together: one of them probes, the others wait for its verdict."""
    write_standin(tmp_path / "standin", "slow")
    script = f"import sys; sys.path.insert(0, {str(tmp_path / 'standin')!r})\n" + SYSTEM + RACE
    env = {**os.environ, "SPTUNE_CACHE": str(tmp_path / "cache"), "STANDIN_LOG": str(tmp_path / "imports")}
    racers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), str(i), str(RACERS)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
              for i in range(RACERS)]
    outputs = [racer.communicate(timeout=SCENARIO_TIMEOUT_S) for racer in racers]
    assert all(racer.returncode == 0 for racer in racers), [err[-2000:] for _, err in outputs]
    assert [out.splitlines()[-1] for out, _ in outputs] == ["VERDICT passed"] * RACERS
    assert imports(tmp_path) == 1  # one probe child for the node


DOCTOR = """\
import json
from sptune import atomic, doctor
from sptune.models import backend_probe
cpu = torch.device("cpu")
# A stale "passed" for this node: the doctor probes again instead of trusting it.
atomic.write_json(backend_probe.cache_path(), {backend_probe.cache_key("keops", cpu): {"kind": "ok", "detail": "passed"}})
report = [doctor.check_backend(name, cpu) for name in ("pykeops-cauchy", "torch")]
print("REPORT", json.dumps(report))
print("CACHED", json.dumps(list(backend_probe.read_cache().values())))
"""


@pytest.mark.parametrize("behaviour, why", [("crash", "probe crashed (signal 11): SIGSEGV"),
                                            ("hang", f"probe hung: no answer in {HANG_S} s")])
def test_doctor_reports_a_crashing_or_hanging_pykeops(tmp_path, behaviour, why):
    result = scenario(tmp_path, behaviour, DOCTOR)
    assert result.returncode == 0, result.stderr[-2000:]
    keops, plain = json.loads(result.stdout.split("REPORT ")[1].splitlines()[0])
    assert keops["ok"] is False and not keops["active"] and keops["detail"].startswith(why), keops
    assert plain["ok"] and plain["active"] and "(pykeops probe did not pass)" in plain["detail"], plain
    [cached] = json.loads(result.stdout.split("CACHED ")[1].splitlines()[0])
    assert cached["kind"] == ("crashed" if behaviour == "crash" else "hung")  # the stale verdict replaced


def test_without_pykeops_no_probe_runs(monkeypatch, caplog):
    """The common path (CI, no pykeops): torch at once, no child process, nothing cached."""
    def no_child(*args, **kwargs):
        raise AssertionError("a probe child was started")

    monkeypatch.setattr(ssm, "HAS_KEOPS", False)
    monkeypatch.setattr(ssm, "_logged_backends", set())
    monkeypatch.setattr(backend_probe.subprocess, "Popen", no_child)
    with caplog.at_level(logging.INFO, logger="sptune.models.ssm"):
        assert ssm.resolve_backend("auto") == "torch"
    assert [r.getMessage() for r in caplog.records] == ["S4 Cauchy kernel backend: torch (pykeops not installed)"]
    with pytest.raises(UserError, match="pykeops is not installed.*model.kernel_backend=torch or auto"):
        ssm.resolve_backend("keops")


@pytest.mark.parametrize("returncode, out, err, detail", [
    (-11, backend_probe.MARK + '{"kind": "ok", "detail": "passed"}\n', "", "crashed (signal 11): SIGSEGV"),
    (-6, "", "", "crashed (signal 6): SIGABRT"),
    (1, "", "Traceback ...\nImportError: libcuda.so.1\n", "crashed (exit code 1): ImportError: libcuda.so.1"),
    (0, "[KeOps] Compiling ...\n" + backend_probe.MARK + '{"kind": "ok", "detail": "passed"}\n', "", "passed"),
])
def test_how_the_childs_end_reads(returncode, out, err, detail):
    """A signal is a crash even after an answer; an exit without an answer names stderr's last line."""
    assert backend_probe.verdict_of(returncode, out, err).detail == detail
