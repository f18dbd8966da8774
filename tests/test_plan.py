"""Budget before paying (`sptune plan`, the scripts' --plan): trials, FLOPs and device-hours, nothing trains."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sptune import budget, config, train
from sptune.cli import main
from sptune.tune.records import studies
from sptune.tune import spaces

ROOT = Path(__file__).resolve().parents[1]
TINY = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16", "task.max_val_examples=16",
        "task.max_test_examples=16", "optim.eval_every=2", "optim.batch_size=8"]


# Validation at steps 2, 4 and 5 / 2, 4 and 6, then one test pass; 20 training examples (0.5%) make the
# epoch's last batch short (8, 8, 4), and accumulation makes more model calls than steps.
@pytest.mark.parametrize("max_steps, extra", [(5, []), (6, []),
                                              (5, ["task.train_fraction=0.005", "optim.accumulate=2"])])
def test_the_plan_of_a_trial_is_what_its_run_reports(tmp_path, max_steps, extra):
    """The FLOPs the plan projects for a trial are the FLOPs the trainer counts when it runs."""
    overrides = ["task.name=listops-mini", *TINY, f"optim.max_steps={max_steps}", "run.progress=false",
                 f"run.out_dir={tmp_path}", *extra]
    cfg = config.load(None, overrides, stage="scratch")
    result = train.scratch(cfg)
    steps, train_flops, eval_flops = budget.trial_cost(cfg, "scratch", {"train": 4000, "val": 500, "test": 500})
    assert steps == result["steps"] == max_steps
    assert train_flops == pytest.approx(result["train_flops"])
    assert eval_flops == pytest.approx(result["eval_flops"])


def test_totals_are_sums_and_flops_scale_with_steps():
    def stages(max_steps):
        state = studies.resolve("configs/shapes_tiny_transformer.yaml", [*TINY, f"optim.max_steps={max_steps}"],
                                 check_rungs=False)
        return state, budget.study_budget(state)

    state, short = stages(40)
    _, long = stages(80)
    space = spaces.parse({"stages": state.space["stages"]}, "space")
    for p, q in zip(short, long):
        assert p.trials == q.trials == spaces.trial_count(space.stages[p.stage], state.options.num_samples)
        assert (p.steps, q.steps) == (40, 80)
        assert q.train_flops == pytest.approx(2 * p.train_flops)  # training cost is linear in the steps
        assert q.eval_flops > p.eval_flops  # twice the validation passes, the same single test pass
    lines = budget.format_budget("t", short, (1e9, "test node"))
    total = next(line for line in lines if line.startswith("total")).split()
    assert int(total[1]) == sum(p.trials for p in short)
    assert float(total[2]) == pytest.approx(sum(p.train_flops for p in short) / 1e15, rel=1e-3)
    assert f"{sum(p.flops for p in short) / 1e9 / 3600:.4g} device-hours" in lines[len(short) + 3]


def test_gpu_hours_use_the_peak_of_each_stages_precision():
    stage = budget.StageBudget("", "scratch", 1, "bf16", 10, 3.6e15 * 312 * 0.4, 0.0)
    lines = budget.format_budget("t", [stage, budget.StageBudget("", "pretrain", 1, "fp32", 10, 3.6e15 * 19.5 * 0.4,
                                                                 0.0)], (1e9, "node"), "a100", 0.4)
    assert any(line.startswith("a100") and line.endswith(": 2 device-hours") for line in lines)


def test_sptune_plan_prints_every_stage_and_makes_no_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["plan", str(ROOT / "configs" / "shapes_tiny_transformer.yaml"), "--seconds", "0.2",
                 "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()[2:6]] == ["pretrain", "finetune", "scratch", "total"]
    assert "this node (" in out and "h100 (" in out
    assert list(tmp_path.iterdir()) == []


def test_a_stage_whose_data_is_missing_is_shown_unknown_with_the_reason(offline_roots, capsys):
    assert main(["plan", str(ROOT / "configs" / "text_transformer.yaml"), "--seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    assert out.count(" ? ") >= 3 and "not counted: 3 stage(s)" in out and "sptune data prepare text" in out


@pytest.mark.parametrize("args, words", [(["configs/nope.yaml"], "does not exist"),
                                         (["configs/shapes_tiny_transformer.yaml", "--utilization", "2"],
                                          "--utilization 2.0 must be in (0, 1]")])
def test_bad_input_is_one_line_and_exit_2(args, words, capsys):
    assert main(["plan", *args, "--seconds", "0.1"]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_a_study_script_plans_every_cell_without_running(tmp_path):
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, str(ROOT / "studies" / "architectures.py"), "--plan", "--seconds", "0.2",
                          "--dir", str(tmp_path / "exp")], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split()[:2] for line in out.stdout.splitlines() if line.startswith("ucr-osuleaf-")]
    assert rows == [[f"ucr-osuleaf-{model}-s0", stage] for model in ("transformer", "s4")
                    for stage in ("pretrain", "finetune", "scratch")]
    assert list(tmp_path.iterdir()) == []
