"""Budget before paying (`sptune plan`, the scripts' --plan): trials, FLOPs and device-hours, nothing trains."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from sptune import config, doctor
from sptune.cli.main import main
from sptune.experiment import budget
from sptune.records import studies
from sptune.run import train, train_setup
from sptune.search import spaces

ROOT = Path(__file__).resolve().parents[1]


def this_node(threads):
    """What the plan's "this node" names: the GPU a run would take, else the CPU with its torch threads."""
    device = train_setup.pick_device("auto", 0)
    return doctor.describe_device(device) if device.type == "cuda" else f"cpu, {threads} thread{'s' * (threads > 1)}"
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
    lines = budget.format_budget("t", short, (7200.0, "this node (test)"))
    total = next(line for line in lines if line.startswith("total")).split()
    assert int(total[1]) == sum(p.trials for p in short)
    assert float(total[2]) == pytest.approx(sum(p.train_flops for p in short) / 1e15, rel=1e-3)
    assert lines[len(short) + 3] == "this node (test): 2 device-hours"


def hour_at(model, precision, seq_len, tflops):
    """A stage costing one hour at `tflops` TFLOP/s."""
    return budget.StageBudget("", "scratch", 1, precision, 10, 3.6e15 * tflops, 0.0, model=model, seq_len=seq_len)


def gpu_lines(stages, gpu, *utilization):
    lines = budget.format_budget("t", stages, (0.0, "node"), gpu, *utilization)
    start = next(i for i, line in enumerate(lines) if line.startswith(gpu))
    return lines[start:-1]


def test_a_gpu_is_projected_at_each_models_utilization_measured_on_it():
    """The Transformer at a measured length; S4D (any diagonal init) between two, in log2 of the length; a model
    with no measurement at the stated default, and the plan says which stage got which."""
    s4d_at_2k = (25.5 + 29.6) / 2  # fp32, halfway between L 1024 and 4096 in log2
    stages = [hour_at("transformer", "bf16", 2048, 266.0), hour_at("s4d-lin", "fp32", 2048, s4d_at_2k),
              hour_at("dlr", "bf16", 1024, 989 * budget.MEASURED_UTILIZATION["bf16"]),
              hour_at("transformer", "bf16", 256, 111.0)]  # below the shortest measured length: held there
    head, *rows = gpu_lines(stages, "h100")
    assert head.endswith("x each stage's utilization below): 4 device-hours")
    assert rows == [
        "  dlr bf16 L 1024: 27.0% (default, the ListOps Transformer's on an H100: no measurement of dlr bf16 on h100)",
        f"  s4d-lin fp32 L 2048: {s4d_at_2k / 67:.1%} (measured on h100 at L 1024/4096, d_model 512, 6 layers, "
        "batch 16, torch kernel; 2026-11-25, torch 2.11.0+cu130, CUDA 13.0, commit c316a3e)",
        f"  transformer bf16 L 256: {111 / 989:.1%} (measured on h100 at L 1024/2048/4096, d_model 512, 6 layers, "
        "batch 16, the nearest length's; 2026-11-25, torch 2.11.0+cu130, CUDA 13.0, commit c316a3e)",
        f"  transformer bf16 L 2048: {266 / 989:.1%} (measured on h100 at L 1024/2048/4096, d_model 512, 6 layers, "
        "batch 16; 2026-11-25, torch 2.11.0+cu130, CUDA 13.0, commit c316a3e)"]


def test_a_gpu_without_measurements_takes_the_default_and_utilization_overrides_all():
    # An hour of each precision at the default fractions of the a100's peaks (bf16 312, fp32 19.5 TFLOP/s).
    stages = [hour_at("transformer", "bf16", 2048, 312 * 0.27), hour_at("transformer", "fp32", 2048, 19.5 * 0.57)]
    head, *rows = gpu_lines(stages, "a100")
    assert head.endswith(": 2 device-hours") and len(rows) == 2
    assert all("(default, the ListOps Transformer's on an H100: no measurement of transformer" in r for r in rows)
    [line] = gpu_lines(stages, "a100", 0.4)
    assert line.endswith(f": {0.27 / 0.4 + 0.57 / 0.4:.4g} device-hours")
    assert "x 40% utilization (--utilization)" in line


def test_this_node_times_each_grid_points_own_model_with_the_trials_threads():
    """A stage's grid points share a timing when only lr differs and are timed apart at each batch size;
    the timing runs with a trial's torch threads (one per reserved CPU) and leaves the caller's threads and
    random stream as they were."""
    state = studies.resolve("configs/shapes_tiny_transformer.yaml", [*TINY, "optim.max_steps=8"], check_rungs=False)
    state.space["stages"]["scratch"].update(params={"optim.lr": [1e-3, 1e-4], "optim.batch_size": [8, 16]}, points=[])
    scratch = budget.study_budget(state, stages=("scratch",))[0]
    assert len(scratch.points) == 4 and len({p.key for p in scratch.points}) == 2
    assert sum(p.train_flops for p in scratch.points) == pytest.approx(scratch.train_flops)
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    seconds, what = budget.node_seconds([scratch], 0.05)
    assert torch.get_num_threads() == threads and torch.equal(torch.get_rng_state(), rng)
    assert seconds > 0 and what.startswith(f"this node ({this_node(1)}): timed ")
    assert "evaluation batches of each stage's model (2 models, each after a warm-up step and batch" in what
    timed = {key: budget.time_model(key, "scratch", 0.05) for key in {p.key for p in scratch.points}}
    assert seconds == pytest.approx(sum(p.train_flops / timed[p.key].train_flops_per_s +
                                        p.eval_flops / timed[p.key].eval_flops_per_s for p in scratch.points))


def timed(compile_s=0.0, busy=None):
    return budget.Timed(1e9, 2e9, 3, 3, 8, 8, "somewhere", compile_s, busy)


@pytest.mark.parametrize("t, trials_per_gpu, seconds", [
    (timed(), 0, 10 + 5),  # FLOPs at the timed FLOP/s: 1e10 / 1e9 + 1e10 / 2e9
    (timed(compile_s=30.0), 0, 15 + 2 * 30),  # each of the point's 2 trials compiles once
    (timed(busy=0.25), 16, 15 * 0.25),  # packed 16 to a GPU kept busy a quarter of each step: the GPU binds
    (timed(busy=0.01), 16, 15 / 16),  # launch-bound steps: the 16 slots bind
    (timed(compile_s=32.0, busy=0.01), 16, 15 / 16 + 2 * 32 / 16),  # compiling holds its slot only
    (timed(busy=None), 16, 15),  # a CPU node: no GPU to pack
])
def test_a_points_device_seconds_count_compiling_and_packing(t, trials_per_gpu, seconds):
    point = budget.Point("key", "scratch", 1e10, 1e10, trials=2)
    assert budget.point_seconds(point, t, trials_per_gpu) == pytest.approx(seconds)


def test_this_nodes_line_says_what_compiling_and_packing_added():
    assert budget.compile_note([timed(), timed(compile_s=12.0), timed(compile_s=30.0)]) == \
        "; compiling counted once a trial (12-30 s a model, run.compile)"
    assert budget.packing_note([timed(busy=0.05), timed(busy=0.4)], 16) == \
        "; 16 trials per GPU: a step charged max(1/16, the GPU's busy share of it, 5%-40%)"
    assert budget.packing_note([timed()], 16) == "; --trials-per-gpu 16 not counted: this node has no GPU"
    assert budget.compile_note([timed()]) == budget.packing_note([timed(busy=0.4)], 0) == ""


@pytest.mark.slow  # ~20 s on 2 cores: inductor compiles the training and the evaluation graphs
def test_a_compiled_model_is_timed_with_its_compiling():
    identity = torch.nn.Identity()
    if train_setup.compile_model(identity, train_setup.pick_device("auto", 0)) is identity:
        pytest.skip("torch.compile does not work here (no C++ compiler for inductor)")
    state = studies.resolve("configs/shapes_tiny_transformer.yaml", [*TINY, "optim.max_steps=8", "run.compile=true"],
                            check_rungs=False)
    (point, *_) = budget.study_budget(state, stages=("scratch",))[0].points
    assert budget.time_model(point.key, "scratch", 0.05).compile_s > 0


def test_a_long_step_is_extrapolated_from_steps_of_fewer_examples(monkeypatch):
    """Where a whole batch's step would take longer than --seconds, steps of 1 and of b examples are timed
    and the step's time is extrapolated along the line through them: 1 s per step + 0.5 s per example here."""
    monkeypatch.setattr(budget, "time_steps", lambda batch, model, trained, seconds:
                        budget.Steps(1, 1.0 + 0.5 * batch, 4.0 + 0.5 * batch))
    timing = budget.step_seconds(lambda batch: batch, None, None, 32, 3.0)
    assert (timing.steps, timing.per_step, timing.batch) == (1, 1.0 + 0.5 * 32, 2)
    timing = budget.step_seconds(lambda batch: batch, None, None, 4, 100.0)
    assert (timing.steps, timing.per_step, timing.batch) == (1, 1.0 + 0.5 * 4, 4)  # timed whole
    assert timing.compile_s == 3.0 and timing.busy is None  # the first warm-up less its step; no GPU here


@pytest.mark.parametrize("instance, gpu", [("g5.xlarge", "a10g"), ("p4de.24xlarge", "a100"), ("p5.48xlarge", "h100")])
def test_the_default_gpu_is_cluster_yamls_worker_gpu(tmp_path, instance, gpu):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"head_node_type": "head", "available_node_types": {
        "head": {"node_config": {"InstanceType": "m5.2xlarge"}},
        "gpu_worker": {"node_config": {"InstanceType": instance}}}}))
    assert budget.default_gpu((tmp_path / "absent.yaml", path)) == (
        gpu, f"from cluster.yaml's worker InstanceType {instance}")


def test_without_a_cluster_gpu_the_default_is_a100_and_says_why(tmp_path):
    assert budget.default_gpu((tmp_path / "cluster.yaml",)) == ("a100", "default: no cluster.yaml found")
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"available_node_types": {"cpu": {"node_config": {"InstanceType": "m5.large"}}}}))
    assert budget.default_gpu((path,)) == (
        "a100", "default: no GPU known for cluster.yaml's worker InstanceType (m5.large)")


def test_sptune_plan_prints_every_stage_and_makes_no_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["plan", str(ROOT / "configs" / "shapes_tiny_transformer.yaml"), "--seconds", "0.2",
                 "--gpu", "h100"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()[2:6]] == ["pretrain", "finetune", "scratch", "total"]
    assert f"this node ({this_node(1)}): timed " in out and "h100 (--gpu; peak TFLOP/s" in out
    assert list(tmp_path.iterdir()) == []


def test_sptune_plan_reads_the_gpu_of_the_working_directorys_cluster_yaml(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({"available_node_types": {
        "gpu_worker": {"node_config": {"InstanceType": "p5.48xlarge"}}}}))
    assert main(["plan", str(ROOT / "configs" / "shapes_tiny_transformer.yaml"), *TINY, "--seconds", "0.05"]) == 0
    assert "\nh100 (from cluster.yaml's worker InstanceType p5.48xlarge; " in capsys.readouterr().out


def test_a_stage_whose_data_is_missing_is_shown_unknown_with_the_reason(offline_roots, capsys):
    assert main(["plan", str(ROOT / "configs" / "text_transformer.yaml"), "--seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    assert out.count(" ? ") >= 3 and "not counted: 3 stage(s)" in out and "sptune data prepare text" in out


@pytest.mark.parametrize("args, words", [(["configs/nope.yaml"], "does not exist"),
                                         (["configs/shapes_tiny_transformer.yaml", "--utilization", "2"],
                                          "--utilization 2.0 must be in (0, 1]"),
                                         (["configs/shapes_tiny_transformer.yaml", "--seconds", "0"],
                                          "--seconds 0.0 must be > 0")])
def test_bad_input_is_one_line_and_exit_2(args, words, capsys):
    assert main(["plan", "--seconds", "0.1", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1


def test_a_study_script_plans_every_cell_without_running(tmp_path):
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "architectures.py"), "--plan", "--seconds", "0.2",
                          "--dir", str(tmp_path / "exp")], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line.split()[:2] for line in out.stdout.splitlines() if line.startswith("ucr-osuleaf-")]
    assert rows == [[f"ucr-osuleaf-{model}-s0", stage] for model in ("transformer", "s4")
                    for stage in ("pretrain", "finetune", "scratch")]
    # Grids extend by default: 4 steps a side for each cell's finetune and scratch lr grids (2 cells).
    assert "extends itself (on by default, --no-extend-grids for none), up to 32 more trials in all" in out.stdout
    assert list(tmp_path.iterdir()) == []
