"""`sptune doctor`: the local check on CPU, the exit codes, and the Ray cluster path."""

import pytest
import torch

from ray_fixtures import ray_instance  # noqa: F401 - the session's one Ray
from sptune import doctor
from sptune.cli import main as cli


@pytest.fixture(scope="module")
def local_report():
    with pytest.MonkeyPatch.context() as patch:  # the CPU check, on a GPU node too
        patch.setattr(torch.cuda, "is_available", lambda: False)
        yield doctor.check_node(seconds=0.2)


def test_local_check_on_cpu_reports_versions_backends_and_throughput(local_report):
    report = local_report
    assert report["torch"] == torch.__version__ and report["device"].startswith("cpu")
    backends = {b["name"]: b for b in report["backends"]}
    assert set(backends) == {"sdpa", "flash-attn", "pykeops-cauchy", "torch"}
    assert backends["sdpa"]["ok"] and backends["sdpa"]["active"] and "kernel" in backends["sdpa"]["detail"]
    flash = backends["flash-attn"]
    assert not flash["active"] and flash["ok"] is not False  # not applicable here, not broken
    assert "not installed" in flash["detail"] or "no CUDA" in flash["detail"]
    assert backends["torch"]["ok"] is True
    # Exactly one S4 Cauchy backend is the one runs use.
    assert backends["torch"]["active"] != backends["pykeops-cauchy"]["active"]
    t = report["throughput"]
    assert t["ok"] and t["steps"] >= 1 and t["tokens_per_s"] > 0
    assert report["can_train"] is True


def test_report_prints_one_line_per_backend(local_report):
    text = doctor.format_report(local_report)
    assert f"torch {torch.__version__}" in text and "can train" in text and "training tokens/s" in text
    backend_lines = [line.split()[0] for line in text.splitlines() if line.startswith("    ")]
    assert backend_lines == ["sdpa", "flash-attn", "pykeops-cauchy", "torch"]


def test_cli_exits_0_when_the_node_can_train(capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert cli.main(["doctor", "--seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "can train" in out and "flash-attn" in out and f"torch {torch.__version__}" in out


def test_cli_exits_1_when_no_backend_can_train(capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)

    def broken(device):
        raise RuntimeError("CUDA error: no kernel image is available for execution on the device")

    monkeypatch.setattr(doctor, "BACKENDS", {name: broken for name in doctor.BACKENDS})
    assert cli.main(["doctor", "--seconds", "0.2"]) == 1
    out = capsys.readouterr().out
    assert "CANNOT TRAIN" in out and out.count("FAILED") == 4 and "no kernel image" in out


def test_a_node_whose_training_step_fails_cannot_train(monkeypatch):
    def no_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr("sptune.run.train.make_optimizer", no_memory)
    report = doctor.check_node(seconds=0.2)
    assert not report["can_train"] and "out of memory" in report["throughput"]["detail"]
    assert "throughput: FAILED" in doctor.format_report(report)


def test_bad_seconds_is_a_user_error(capsys):
    assert cli.main(["doctor", "--seconds", "0"]) == 2
    assert "--seconds" in capsys.readouterr().err


def test_cluster_check_runs_on_every_alive_node(ray_instance):
    """The session's one-node Ray cluster: the check runs as a task pinned to the node and reports it."""
    reports = doctor.check_cluster("auto", seconds=0.2, timeout_s=120)
    node_ids = {n["NodeID"] for n in ray_instance.nodes() if n["Alive"]}
    assert {r["node_id"] for r in reports} == node_ids and len(reports) == 1
    assert reports[0]["can_train"], reports[0]
    assert reports[0]["torch"] == torch.__version__
    assert "node " in doctor.format_report(reports[0])


def test_the_check_leaves_the_callers_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    doctor.check_node(seconds=0.05)
    assert torch.equal(torch.rand(3), expected)


def test_an_unreachable_cluster_is_a_one_line_user_error(capsys, monkeypatch):
    import ray

    def no_cluster(*args, **kwargs):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_cluster)
    monkeypatch.setenv("RAY_ADDRESS", "auto")  # the environment alone selects the cluster check
    assert cli.main(["doctor"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach a Ray cluster at auto" in err and "without --address" in err and err.count("\n") == 1


def test_a_joined_cluster_is_left_on_the_way_out(monkeypatch):
    """`sptune doctor --address` joins through sptune.experiment.engine.session and shuts its Ray connection down."""
    import ray

    calls = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: calls.append(("init", kwargs["address"])))
    monkeypatch.setattr(ray, "nodes", lambda: [])
    monkeypatch.setattr(ray, "shutdown", lambda: calls.append(("shutdown",)))
    assert doctor.check_cluster("ray://head:10001", seconds=0.1) == []
    assert calls == [("init", "ray://head:10001"), ("shutdown",)]
