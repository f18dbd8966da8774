"""Grids that bracket themselves (sptune.search.bracketing): the next value past the edge a stage's
best sits at, its spacing and its limits, a study whose lr grid sits far below the optimum extending it,
and one killed during an extension round resuming it."""

import csv
import time
from pathlib import Path

import pytest
import yaml
from ray_fixtures import CONFIG, TINY, ray_instance  # noqa: F401 (fixture)
from test_resume_study import midway, sptune

from sptune import files
from sptune.errors import UserError
from sptune.experiment.engine import driver
from sptune.records import results, studies
from sptune.search import boundary, bracketing, spaces


@pytest.mark.parametrize("declared, tried, side, expected", [
    ([1e-5, 3e-5], [1e-5, 3e-5], "above", 9e-5),  # the grid's ratio at that edge
    ([1e-5, 3e-5], [1e-5, 3e-5, 9e-5], "above", 2.7e-4),  # one more step past the last tried value
    ([1e-4, 3e-4, 1e-3], [1e-4, 3e-4, 1e-3], "below", 3.16228e-5),  # the grid's mean ratio, sqrt(10)
    ([16, 32], [16, 32], "above", 64),  # integers stay integers
    ([0.0, 0.1], [0.0, 0.1], "above", 0.2),  # a zero in the grid: arithmetic spacing
])
def test_the_next_value_steps_past_the_tried_edge_with_the_grids_spacing(declared, tried, side, expected):
    value, stop = bracketing.next_value("optim.lr" if isinstance(expected, float) and expected < 0.1 else
                                        "optim.batch_size" if isinstance(expected, int) else "model.dropout",
                                        declared, tried, side, None)
    assert stop is None and value == pytest.approx(expected) and type(value) is type(expected)


@pytest.mark.parametrize("best, tried, side", [
    (3e-5, [1e-5, 3e-5], "above"), (1e-5, [1e-5, 3e-5], "below"), (9e-5, [1e-5, 3e-5, 9e-5], "above"),
    (2e-5, [1e-5, 2e-5, 3e-5], None),  # interior
    (1e-5, [1e-5], "below"),  # 3e-5 crashed: 1e-5 is the declared grid's lower edge
    (3e-5, [3e-5], "above"),
])
def test_only_a_best_at_or_past_the_declared_edge_extends(best, tried, side):
    assert bracketing.edge_side(best, tried, [1e-5, 3e-5]) == side
    # A best next to a crashed grid value is interior to the declared grid: no extension re-runs that value.
    assert bracketing.edge_side(1e-5, [1e-5], [1e-5, 3e-5, 9e-5]) == "below"
    assert bracketing.edge_side(3e-5, [1e-5, 3e-5], [1e-5, 3e-5, 9e-5]) is None


def test_a_seed_grid_is_labels_not_an_ordered_setting():
    assert boundary.ordered_grid("optim.lr", [1e-3, 3e-3]) and boundary.ordered_grid("optim.batch_size", [8, 16])
    assert not boundary.ordered_grid("run.seed", [0, 1, 2]) and not boundary.ordered_grid("optim.lr", [1e-3])
    assert boundary.edge_note("run.seed", 2, [0, 1, 2]) is None  # no boundary warning either


def test_grids_extend_by_default_unless_the_command_line_or_the_file_says_not():
    grid = {"stages": {"scratch": {"params": {"optim.lr": [1e-3, 3e-3]}}}}
    space, fixed = spaces.parse(grid, "space.yaml"), spaces.parse({**grid, "extend_grids": False}, "fixed.yaml")
    resolved = lambda options, space: studies.resolve_options(options, space).extend_grids  # noqa: E731
    assert resolved(studies.Options(), space) and not resolved(studies.Options(smoke=True), space)
    assert not resolved(studies.Options(extend_grids=False), space)
    assert not resolved(studies.Options(), fixed) and resolved(studies.Options(extend_grids=True), fixed)
    with pytest.raises(UserError, match="extend_grids='no' must be true or false"):
        spaces.parse({**grid, "extend_grids": "no"}, "space.yaml")


def test_a_limit_or_the_step_count_stops_the_extension():
    value, stop = bracketing.next_value("optim.lr", [1e-2, 3e-2], [1e-2, 3e-2], "above", [1e-6, 5e-2])
    assert value is None and stop == "the limit [1e-06, 0.05]"
    tried = [1e-5, 3e-5] + [3e-5 * 3**k for k in range(1, bracketing.MAX_STEPS + 1)]
    value, stop = bracketing.next_value("optim.lr", [1e-5, 3e-5], tried, "above", None)
    assert value is None and stop == f"{bracketing.MAX_STEPS} steps beyond the declared grid"
    value, stop = bracketing.next_value("model.dropout", [0.5, 1.0], [0.5, 1.0], "above", None)
    assert value is None and "not a valid setting" in stop


@pytest.mark.parametrize("limits, words", [({"optim.lr": [1e-1, 1e-3]}, "low <= high"),
                                           ({"optim.lr": 0.1}, "[low, high]"), ([1], "maps config keys")])
def test_bad_limits_are_one_line_errors(limits, words):
    data = {"stages": {"scratch": {"params": {"optim.lr": [1e-3]}}}, "limits": limits}
    with pytest.raises(UserError, match=words.replace("[", r"\[").replace("]", r"\]")):
        spaces.parse(data, "space.yaml")


def low_grid_study(tmp_path, lr_limits, steps, options):
    """A listops-mini study whose finetuning and scratch lr grids, {1e-5, 3e-5}, sit far below the optimum, run to
    its end; its results.csv rows."""
    low = {"params": {"optim.lr": [1e-5, 3e-5], "optim.batch_size": [8]}}
    space = {"task": "listops-mini", "model": "transformer", "num_samples": 2, "max_concurrent": 2,
             "limits": {"optim.lr": lr_limits},
             "stages": {"pretrain": {"params": {"optim.lr": [1e-3], "optim.batch_size": [8]}},
                        "finetune": low, "scratch": low}}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    state = studies.create(str(CONFIG), [*TINY, f"optim.max_steps={steps}", f"optim.eval_every={steps // 3}"],
                           tmp_path / "study", str(tmp_path / "space.yaml"), options)
    driver.run_study(state.dir, verbose=0)
    with open(tmp_path / "study" / "results.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow  # ~1-2 min: 1 pretraining trial, then finetune and scratch each extending their grid
def test_a_grid_far_below_the_optimum_extends_itself_in_both_stages(tmp_path, ray_instance):  # noqa: F811
    rows = low_grid_study(tmp_path, [1e-6, 3e-4], 60, studies.Options())  # extension: on by default
    for stage in ("finetune", "scratch"):
        mine = [r for r in rows if r["stage"] == stage]
        above = [r for r in mine if float(r["optim.lr"]) > 3e-5]
        assert above and all(r["extension"] == "True" for r in above), mine
        assert all(r["status"] == "completed" for r in mine)
        assert max(float(r["optim.lr"]) for r in mine) <= 3e-4  # the limit held
    text = results.summary(tmp_path / "study")
    assert "finetune grid extension: optim.lr above to 9e-05" in text
    assert "scratch grid extension: optim.lr above to 9e-05" in text


@pytest.mark.slow  # ~40 s: the driver joins the session's Ray, so neither run pays for starting one
def test_a_study_killed_during_an_extension_round_resumes_it(tmp_path, ray_instance):  # noqa: F811
    """SIGKILL while an extension trial (a value beyond the declared grid) is mid-way: `sptune resume` finishes
    that trial from its checkpoint, runs every extension round still due, and runs no point twice."""
    low = {"params": {"optim.lr": [1e-5, 3e-5], "optim.batch_size": [8]}}
    space = {"task": "listops-mini", "model": "transformer", "num_samples": 2, "max_concurrent": 1,
             "limits": {"optim.lr": [1e-6, 3e-4]},
             "stages": {"pretrain": {"params": {"optim.lr": [1e-3], "optim.batch_size": [8]}},
                        "finetune": low, "scratch": low}}
    config = yaml.safe_load(CONFIG.read_text())
    config["optim"].update(max_steps=8, eval_every=4, batch_size=8, warmup_steps=0)  # pretraining: TINY's
    long = {"optim": {"max_steps": 300, "eval_every": 10}}  # long enough to be caught mid-way
    config["stages"] = {"finetune": long, "scratch": long}
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    study_dir, address = tmp_path / "study", ray_instance.get_runtime_context().gcs_address
    procs = [sptune("study", tmp_path / "config.yaml", *TINY[:4], "task.max_val_examples=32", "--search-space",
                    tmp_path / "space.yaml", "--dir", study_dir, "--address", address, "--quiet")]
    try:
        caught, seen_step = wait_for_a_midway_extension_trial(study_dir, procs[0])
        procs[0].kill()
        procs[0].wait(timeout=30)
        procs.append(sptune("resume", study_dir, "--address", address, "--quiet"))
        output = procs[1].communicate(timeout=300)[0]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    assert procs[1].returncode == 0, output[-3000:]

    rows = results.collect(study_dir)
    assert all(r["status"] == "completed" for r in rows), rows
    for stage in ("finetune", "scratch"):
        lrs = [float(r["optim.lr"]) for r in rows if r["stage"] == stage]
        assert len(lrs) == len(set(lrs)) and max(lrs) > 3e-5, lrs  # extended, and no point run twice
        assert all(r["extension"] == (float(r["optim.lr"]) > 3e-5) for r in rows if r["stage"] == stage)
    stage, lr = caught
    row = next(r for r in rows if r["stage"] == stage and float(r["optim.lr"]) == lr)
    starts = [a["start_step"] for a in files.read_json(Path(row["run_dir"]) / "trial.json")["attempts"]]
    assert starts[0] == 0 and starts[-1] >= seen_step > 0, starts  # continued from its checkpoint
    assert f"{stage} grid extension: optim.lr above to 9e-05" in results.summary(study_dir)


def wait_for_a_midway_extension_trial(study_dir, proc, timeout=240):
    """((stage, lr), step) of a trial beyond the declared grid with a checkpoint past step 20 and no result."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        for stage in ("finetune", "scratch"):
            for run in midway(study_dir, stage):
                lr = float(files.read_json(run / files.TRIAL)["params"]["optim.lr"])
                if lr > 3e-5:
                    return (stage, lr), files.read_json(run / files.PROGRESS)["step"]
        time.sleep(0.1)
    raise AssertionError("no extension trial was ever caught mid-way")
