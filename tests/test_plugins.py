"""A researcher's layer from outside sptune: named by import path, entry point or register_model; held to its
contract at load (one line, exit 2); fingerprinted by its source; compared by `sptune evaluate`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sptune import config, plugins, registry
from sptune.build import build_task_model
from sptune.cli import main as cli
from sptune.errors import UserError
from sptune.run import fingerprint

REPO = Path(__file__).resolve().parents[1]
LAYERS = '''
import torch
from torch import nn


class Conv(nn.Module):
    """A depthwise convolution over time; causal pads on the left only."""

    def __init__(self, d_model, causal, width=3):
        super().__init__()
        self.pad = (width - 1, 0) if causal else ((width - 1) // 2, width // 2)
        self.conv = nn.Conv1d(d_model, d_model, width, groups=d_model)
        self.conv.weight._optim = {"lr": 0.123, "weight_decay": 0.0}

    def forward(self, x):
        return self.conv(nn.functional.pad(x.transpose(1, 2), self.pad)).transpose(1, 2)


def make(d_model, causal, width=3):
    return Conv(d_model, causal, width)


def peeks(d_model, causal):
    return Conv(d_model, False, 3)


def widens(d_model, causal):
    return nn.Linear(d_model, d_model + 1)


class Log(nn.Module):
    def forward(self, x):
        return torch.log(x)  # NaN wherever x < 0


def blows_up(d_model, causal):
    return Log()


class ScaledByItsMax(Conv):
    def forward(self, x):
        return super().forward(x) / float(x.abs().max())  # needs values: no meta tensors


def needs_values(d_model, causal):
    return ScaledByItsMax(d_model, causal)


def not_a_module(d_model, causal):
    return "a layer"

NOT_CALLABLE = 3
'''


@pytest.fixture
def layers(tmp_path, monkeypatch):
    """The module `my_layers` in a directory outside the checkout, importable in this process only."""
    root = tmp_path / "outside"
    (root / "my_layers").mkdir(parents=True)
    (root / "my_layers" / "__init__.py").write_text(LAYERS)
    monkeypatch.syspath_prepend(str(root))
    yield root
    for name in [m for m in sys.modules if m.startswith("my_layers")]:
        del sys.modules[name]


def checked(*overrides):
    cfg = config.load(None, list(overrides))
    registry.check_names(cfg)
    return cfg


def test_an_import_path_builds_inside_the_shared_backbone(layers):
    cfg = checked("model.name=my_layers:make", "model.options.width=5", "task.name=listops-mini")
    assert cfg.model.options == {"width": 5}
    model = build_task_model(cfg.model, registry.task_of(cfg.task))
    mixers = [block.mixer for block in model.backbone.blocks]
    assert len(mixers) == cfg.model.n_layers and all(type(m).__name__ == "Conv" for m in mixers)
    assert mixers[0].conv.kernel_size == (5,)
    from sptune.run.train_setup import make_optimizer  # the layer's own optimizer settings are honoured

    optimizer = make_optimizer(model, cfg.optim)
    assert any(group["lr"] == 0.123 for group in optimizer.param_groups)
    x = torch.randint(3, 10, (2, 32))
    assert model(x, torch.full((2,), 32)).shape == (2, 10)  # listops-mini: 10 classes


def test_options_are_searched_and_fingerprinted_like_any_key(layers):
    from sptune.search import spaces

    spaces.check_value("stages.finetune", "model.options.width", 5)  # a searchable key
    base = checked("model.name=my_layers:make")
    wider = checked("model.name=my_layers:make", "finetune.model.options.width=5")  # stage-prefixed: not here
    assert fingerprint.of(base, "scratch").digest == fingerprint.of(wider, "scratch").digest
    other = checked("model.name=my_layers:make", "model.options.width=5")
    assert fingerprint.differences(fingerprint.of(base, "scratch"), fingerprint.of(other, "scratch")) == [
        'model.options: {} -> {"width": 5}']


def test_a_changed_layer_source_is_another_run(layers):
    cfg = checked("model.name=my_layers:make")
    before = fingerprint.of(cfg, "scratch")
    assert before.fields[fingerprint.LAYER_SOURCE]
    (layers / "my_layers" / "__init__.py").write_text(LAYERS + "\n# width of the kernel changed\n")
    after = fingerprint.of(cfg, "scratch")
    assert fingerprint.differences(before, after) == [
        f'model.source: "{before.fields["model.source"]}" -> "{after.fields["model.source"]}"']
    builtin = checked("model.name=s4d-legs")
    assert fingerprint.LAYER_SOURCE not in fingerprint.of(builtin, "scratch").fields  # sptune's own code


def test_register_model_and_entry_points(layers, monkeypatch):
    from my_layers import make

    plugins.register_model("conv", make)
    monkeypatch.setitem(plugins._registered[plugins.MODEL_GROUP], "conv", make)  # undone after the test
    assert checked("model.name=conv").model.name == "conv"
    env = plugins.runtime_env()
    assert str(layers / "my_layers") in env["py_modules"] and '"conv": "my_layers:make"' in \
        env["env_vars"][plugins.REGISTERED_ENV]

    class Point:
        name, value = "ep-conv", "my_layers:make"

        def load(self):
            return make

    monkeypatch.setattr(plugins, "entry_points", lambda group: {"ep-conv": Point()} if group == plugins.MODEL_GROUP
                        else {})
    assert checked("model.name=ep-conv").model.name == "ep-conv"
    with pytest.raises(UserError, match="unknown model 'nope'.*ep-conv"):
        checked("model.name=nope")


@pytest.mark.parametrize("overrides, message", [
    (["model.name=absent_package.layers:make"], "cannot import module 'absent_package.layers'"),
    (["model.name=my_layers:missing"], "module 'my_layers' has no attribute 'missing'"),
    (["model.name=my_layers:NOT_CALLABLE"], "not a callable"),
    (["model.name=my_layers:not_a_module"], "returned a str, not a torch.nn.Module"),
    (["model.name=my_layers:widens"], r"returned shape \(2, 12, 65\); a layer must return \(B, L, D\)"),
    (["model.name=my_layers:blows_up"], "NaN or inf"),
    (["model.name=my_layers:make", "model.options.depth=2"], "unexpected keyword argument 'depth'"),
    (["model.name=my_layers:peeks", "objective.kind=causal"], "built with causal=True, its output at step 0 moved"),
    (["model.name=transformer", "model.options.width=3"], "model.options .* is for layers from outside sptune"),
])
def test_a_broken_layer_is_one_line_and_exit_2(layers, capsys, tmp_path, overrides, message):
    out_dir = tmp_path / "runs"
    code = cli.main(["scratch", str(REPO / "configs" / "listops_mini_transformer.yaml"), *overrides,
                     f"run.out_dir={out_dir}", "optim.max_steps=2"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("sptune: error: ")
    assert __import__("re").search(message, err), err
    assert not out_dir.exists()  # nothing half-made


def test_a_causal_layer_passes_the_perturbation_check(layers):
    assert checked("model.name=my_layers:make", "objective.kind=causal").objective.kind == "causal"


def write_files_task(root: Path, seed: int = 0) -> Path:
    """A small continuous task in the files format (.npz): class = which half of the series holds a bump."""
    import numpy as np

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True)
    for split, n in (("train", 96), ("test", 48)):
        targets = rng.integers(0, 2, n)
        inputs = rng.normal(0, 0.3, (n, 40)).astype("float32")
        for i, target in enumerate(targets):
            start = 5 + 20 * target
            inputs[i, start:start + 8] += 2.0
        np.savez(root / f"{split}.npz", inputs=inputs, targets=targets)
    return root


@pytest.mark.slow
def test_evaluate_a_layer_and_a_files_task_from_outside_the_checkout(layers, tmp_path):
    """`sptune evaluate` end to end at smoke size, run where sptune's checkout is not, on a layer and a task that
    live in a temporary directory: the layer reaches the Ray workers by runtime_env, the task by its path."""
    data = write_files_task(tmp_path / "bumps")
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(layers), PYTHONUNBUFFERED="1")
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-m", "sptune.cli", "evaluate", "--model", "my_layers:make", "--task",
                           "files", "--task-path", str(data), "--baselines", "transformer", "--smoke", "--backend",
                           "tune", "--seeds", "0", "1", "model.options.width=5"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "grid of make: one point (smoke)" in out
    assert "- make: scratch" in out and "- Transformer: scratch" in out
    assert "architecture gap (make - Transformer) under SPT" in out and "95% CI" in out  # two seeds: intervals
    assert "logistic" in out  # the trivial baselines of the same splits
    experiment = work / "runs" / "evaluate" / "make-files-smoke"
    import csv

    with open(experiment / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    done = {(r["model"], r["seed"], r["stage"]) for r in rows if r["status"] == "completed"}
    assert done == {(m, s, stage) for m in ("make", "Transformer") for s in ("0", "1")
                    for stage in ("pretrain", "finetune", "scratch")}
    run = next((experiment / "cells" / "files-make-s0" / "scratch").glob("*/result.json"))
    layer = __import__("json").loads(run.read_text())["provenance"]["layer"]
    assert layer["import_path"] == "my_layers:make" and layer["source_sha"]


def test_doctor_measures_a_layer_from_outside(layers, capsys):
    code = cli.main(["doctor", "--model", "my_layers:make", "--seconds", "0.2"])
    out = capsys.readouterr().out
    assert code == 0 and "training tokens/s" in out and "my_layers:make d_model 128" in out
    assert cli.main(["doctor", "--model", "my_layers:widens"]) == 2  # held to its contract first


@pytest.mark.slow  # ~20 s: four plain runs per model at smoke size
def test_the_python_api_returns_the_architecture_table(layers, tmp_path):
    import math

    import sptune

    data = write_files_task(tmp_path / "bumps")
    frame = sptune.evaluate(model="my_layers:make", task="files", task_path=str(data), baselines=["transformer"],
                            seeds=[0, 1], smoke=True, dir=tmp_path / "evaluated")
    def row(quantity, model):
        (found,) = frame[(frame["quantity"] == quantity) & (frame["model"] == model)].to_dict("records")
        return found

    assert set(frame["quantity"]) == {"scratch", "SPT", "SPT gain", "gap", "gap change"}
    gain = row("SPT gain", "make")
    assert gain["n"] == 2 and math.isfinite(gain["low"]) and gain["low"] <= gain["mean"] <= gain["high"]
    assert math.isclose(gain["mean"], row("SPT", "make")["mean"] - row("scratch", "make")["mean"], abs_tol=1e-9)
    gaps = frame[frame["quantity"] == "gap"]
    assert set(zip(gaps["model"], gaps["baseline"], gaps["init"])) == {("make", "Transformer", "scratch"),
                                                                        ("make", "Transformer", "SPT")}


def broken_data(root: Path, problem: str) -> Path:
    """A files-task directory with one problem."""
    import numpy as np

    write_files_task(root)
    if problem == "missing test split":
        (root / "test.npz").unlink()
    elif problem == "NaN":
        with np.load(root / "train.npz") as data:
            inputs = data["inputs"].copy()
            targets = data["targets"]
        inputs[3, 7] = np.nan
        np.savez(root / "train.npz", inputs=inputs, targets=targets)
    elif problem == "label out of range":
        with np.load(root / "test.npz") as data:
            inputs, targets = data["inputs"], data["targets"].copy()
        targets[0] = 9
        np.savez(root / "test.npz", inputs=inputs, targets=targets)
    return root


@pytest.mark.parametrize("problem, message", [("missing test split", "test"), ("NaN", "NaN"),
                                              ("label out of range", "9")])
def test_bad_data_stops_an_evaluation_before_anything_is_made(tmp_path, capsys, monkeypatch, problem, message):
    data = broken_data(tmp_path / "data", problem)
    monkeypatch.chdir(tmp_path)
    code = cli.main(["evaluate", "--model", "s4d-legs", "--baselines", "transformer", "--task", "files",
                     "--task-path", str(data), "--smoke"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    assert not (tmp_path / "runs").exists()  # nothing half-made


def test_the_contract_check_leaves_the_global_generator_as_it_was(layers):
    from sptune import layer_contract

    layer_contract._checked.clear()
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    checked("model.name=my_layers:make", "model.options.width=7")
    assert torch.equal(torch.rand(3), expected)


def test_flops_of_a_layer_that_needs_values_are_counted_on_cpu(layers, caplog):
    from sptune import flops

    x, lengths = torch.randint(3, 10, (1, 32)), torch.full((1,), 32)
    counts = {}
    for name in ("make", "needs_values"):
        cfg = checked(f"model.name=my_layers:{name}")
        torch.manual_seed(0)
        counts[name] = flops.measure(build_task_model(cfg.model, registry.task_of(cfg.task)), x, lengths, 32)
    assert counts["needs_values"] == counts["make"] and counts["make"].train_example > 0  # elementwise work is free
    assert "FLOPs counted on CPU tensors" in caplog.text


def test_the_paper_grid_fits_the_training_split():
    from sptune.search import spaces

    small = spaces.paper_space("files", "my_layers:make", 159)
    assert small.stages["finetune"].params == {"optim.lr": spaces.PAPER_LRS, "optim.batch_size": [8, 32]}
    assert small.stages["finetune"].params == small.stages["scratch"].params  # the same grid for both arms
    assert small.stages["pretrain"].params == {"optim.lr": [1e-3], "optim.batch_size": [32]}
    assert small.limits == {"optim.batch_size": [1, 159]}  # no extension past the whole split
    assert spaces.paper_space("files", "x", 10).stages["scratch"].params["optim.batch_size"] == [8]
    assert spaces.paper_space("files", "x", 10_000).stages["scratch"].params["optim.batch_size"] == [8, 32, 128]
