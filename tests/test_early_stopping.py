"""Early stopping (ASHA): on by default for large grids where its rungs fit, and a test metric for stopped trials."""

import math
from pathlib import Path

import pytest
import yaml
from ray_fixtures import CONFIG, TINY, bare_study

from sptune import atomic, files
from sptune.config import load as load_config
from sptune.errors import UserError
from sptune.records import studies, results
from sptune.run import train
from sptune.search import spaces
from sptune.trials import stopped, trainable

ONE = {"params": {"optim.lr": [1.0e-3], "optim.batch_size": [8]}}
EIGHT = {"params": {"optim.lr": [3e-3, 1e-3, 3e-4, 1e-4], "optim.batch_size": [8, 16]}}  # 8 points


def create(tmp_path, overrides=(), options=None, scratch=EIGHT, **top):
    space = {"task": "listops-mini", "model": "transformer", "num_samples": 8, "extend_grids": False,
             "stages": {"pretrain": ONE, "finetune": ONE, "scratch": scratch}, **top}
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(space))
    return studies.create(str(CONFIG), TINY + list(overrides), tmp_path / "study", str(tmp_path / "space.yaml"),
                           options or studies.Options())


FITS = ["optim.max_steps=64", "optim.eval_every=8"]  # an eval every 1/8 of the budget: every rung met


def test_asha_is_on_by_default_only_for_stages_of_a_large_grid(tmp_path):
    options = create(tmp_path, FITS).options
    assert options.asha == spaces.DEFAULT_ASHA and options.asha_min_trials == spaces.ASHA_MIN_TRIALS
    assert spaces.stage_asha(options, 8) == spaces.DEFAULT_ASHA  # the 8-point scratch grid
    assert spaces.stage_asha(options, 1) is None  # pretrain / finetune: one point each, FIFO


def test_default_asha_stays_off_where_its_rungs_miss_the_evals(tmp_path):
    options = create(tmp_path, ["optim.max_steps=64", "optim.eval_every=32"]).options  # no eval at 1/8..1/4
    assert options.asha is None and spaces.stage_asha(options, 8) is None


def test_asking_for_asha_keeps_the_error_and_applies_to_every_stage(tmp_path):
    with pytest.raises(UserError, match="rung"):
        create(tmp_path, ["optim.max_steps=64", "optim.eval_every=32"], studies.Options(asha=True))
    options = create(tmp_path / "asked", FITS, studies.Options(asha=True)).options
    assert options.asha_min_trials == 0 and spaces.stage_asha(options, 1) == spaces.DEFAULT_ASHA


def test_no_asha_overrides_the_default(tmp_path):
    options = create(tmp_path, FITS, studies.Options(asha=False)).options
    assert options.asha is None and spaces.stage_asha(options, 8) is None


def test_a_small_grid_keeps_fifo(tmp_path):
    small = {"params": {"optim.lr": [1e-3, 1e-4], "optim.batch_size": [8]}}
    options = create(tmp_path, FITS, scratch=small).options
    assert spaces.stage_asha(options, spaces.trial_count(spaces.parse(
        {"stages": {"scratch": small}}).stages["scratch"], options.num_samples)) is None


class Stop(Exception):
    """What ASHA does to a trial, as seen from the trainer: it never returns from its report."""


def stopped_trial(tmp_path, stage="scratch", stop_at=8):
    """A trial that trained to `stop_at` of 16 steps and was then stopped (no result.json), as a stage leaves it."""
    run_dir = tmp_path / "study" / stage / f"{stage}-t1-lr=0.001"
    cfg = load_config(str(CONFIG), TINY + ["optim.max_steps=16", "optim.eval_every=4"], stage=stage)

    def on_eval(record, run_dir):
        if record["step"] >= stop_at:
            raise Stop

    with pytest.raises(Stop):
        train.run_stage(cfg, stage, None, on_eval, run_dir)
    atomic.write_json(run_dir / files.TRIAL, {"trial_id": "t1", "stage": stage, "params": {"optim.lr": 1e-3},
                                              "path": "direct", "workers": 1, "devices": 1, "init": None,
                                              "attempts": [{"start_step": 0, "node_id": "n", "hostname": "h",
                                                            "pid": 1}]})
    bare_study(tmp_path / "study", stage_status={stage: "done"})
    return run_dir


@pytest.mark.parametrize("stage", ["scratch", "pretrain"])
def test_a_stopped_trial_gets_a_test_metric_at_its_best_checkpoint(tmp_path, stage):
    run_dir = stopped_trial(tmp_path, stage)
    assert not (run_dir / files.RESULT).exists()
    assert stopped.test_stopped(tmp_path / "study", stage) == [run_dir]
    assert list((run_dir / "tb").glob(f"*{trainable.HPARAMS_END}"))  # TensorBoard's HParams outcome, test included
    result = files.read_json(run_dir / files.RESULT)
    assert result["status"] == "stopped" and result["steps"] == 8 and math.isfinite(result["test_metric"])
    assert result["best_step"] in (4, 8) and result["eval_flops"] > 0 and result["train_flops"] > 0
    assert ("test_hits" in result) == (stage == "scratch")  # per test example: a task's accuracy only
    (row,) = results.collect(tmp_path / "study")
    assert row["status"] == "stopped" and row["test_metric"] == result["test_metric"]
    assert not row["selected"]  # selection stays among completed trials, on validation
    assert stopped.test_stopped(tmp_path / "study", stage) == []  # tested once: a resume does not redo it


def test_the_test_metric_is_that_of_the_best_checkpoint(tmp_path):
    """The same number a completed run measures at its best.pt: the stopped trial's best.pt tested again."""
    run_dir = stopped_trial(tmp_path)
    result = stopped.stopped_result(run_dir, "scratch")
    again = stopped.stopped_result(run_dir, "scratch")
    assert result["test_metric"] == again["test_metric"]
    atomic.write_json(run_dir / files.TRIAL_ERROR, {"error": "boom"})  # a crashed trial is not "stopped"
    (run_dir / files.RESULT).unlink()
    assert stopped.test_stopped(tmp_path / "study", "scratch") == []


def test_a_trial_stopped_before_its_first_eval_is_left_alone(tmp_path):
    run_dir = stopped_trial(tmp_path)
    for name in (files.BEST, files.LAST):
        (run_dir / name).unlink()
    assert stopped.test_stopped(Path(tmp_path / "study"), "scratch") == []
