"""run.compile=auto (the default) and TF32: what they resolve to, that a run records it, and that neither changes
a run's identity."""

import pytest
import torch
import yaml

from sptune import config, files
from sptune.run import fingerprint, runs, train, train_setup


@pytest.mark.parametrize("overrides, device, expected", [
    ([], "cuda", True),  # a Transformer without dropout on a GPU
    ([], "cpu", False),
    (["model.dropout=0.1"], "cuda", False),  # other dropout masks compiled: another run
    (["model.name=s4"], "cuda", False),  # complex kernel arithmetic: inductor does not generate code for it
    (["model.name=dlr"], "cuda", False),
])
def test_auto_compiles_a_transformer_without_dropout_on_cuda(overrides, device, expected):
    cfg = config.load(None, [*overrides, f"run.device={device}"])
    assert cfg.run.compile is None  # auto
    assert config.compile_default(cfg) is expected
    assert config.resolve_compile(cfg).run.compile is expected
    assert config.resolve_compile(config.load(None, [*overrides, "run.compile=false"])).run.compile is False


@pytest.mark.parametrize("value, parsed", [("auto", None), ("true", True), ("false", False), ("null", None)])
def test_run_compile_reads_auto_true_or_false(value, parsed):
    assert config.load(None, [f"run.compile={value}"]).run.compile is parsed


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_default_never_changes_a_runs_fingerprint(device):
    def digest(*overrides):
        cfg = config.resolve_compile(config.load(None, [f"run.device={device}", *overrides]))  # as runs.resolve does
        return fingerprint.of(cfg, "scratch").digest

    assert digest() == digest("run.compile=auto") == digest("run.compile=false") == digest("run.compile=true")
    dropout = digest("model.dropout=0.1")
    assert dropout == digest("model.dropout=0.1", "run.compile=false") != digest("model.dropout=0.1",
                                                                                "run.compile=true")


def test_a_run_dumps_its_resolved_compile(tmp_path):
    cfg = config.load(None, ["run.device=cpu", f"run.out_dir={tmp_path}"])
    run = train.set_up(cfg, "scratch", None, tmp_path / "run", False, None)
    assert run.cfg.run.compile is False
    runs.claim(run.run_dir, run.cfg, run.fp, False)
    assert yaml.safe_load((run.run_dir / files.CONFIG).read_text())["run"]["compile"] is False
    resolved = runs.resolve(cfg, run.task, "scratch")  # the one place a run's config is resolved, compile included
    assert resolved.run.compile is False and run.fp == fingerprint.of(resolved, "scratch")


@pytest.fixture
def tf32_off():
    """The CUDA TF32 flag off for the test, and as it was afterwards (a process-wide setting)."""
    matmul = torch.backends.cuda.matmul
    before, matmul.allow_tf32 = matmul.allow_tf32, False
    yield matmul
    matmul.allow_tf32 = before


def test_a_cuda_run_turns_tf32_on_and_a_cpu_run_leaves_it(monkeypatch, tf32_off):
    matmul = tf32_off
    assert train_setup.pick_device("cpu", 0) == torch.device("cpu")
    assert not matmul.allow_tf32 and train_setup.fp32_matmul(torch.device("cuda")) == "ieee"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU node, as far as pick_device asks
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert train_setup.pick_device("cuda", 0) == torch.device("cuda", 0)
    assert matmul.allow_tf32 and train_setup.fp32_matmul(torch.device("cuda")) == "tf32"
    assert train_setup.fp32_matmul(torch.device("cpu")) == "ieee"
    assert torch.backends.mkldnn.matmul.fp32_precision in ("none", "ieee")  # CPU matmuls untouched
