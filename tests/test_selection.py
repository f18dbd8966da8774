"""Selection by validation metric with a validation-loss tie-break, and evaluation independent of batch size."""

import math
from pathlib import Path

import pytest
import torch

from sptune import config, selection
from sptune.build import build_pretrain_model, build_task_model
from sptune.registry import get_task
from sptune.run import checkpoints, runs, train

TINY = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=32", "optim.batch_size=8",
        "optim.max_steps=16", "optim.eval_every=4", "optim.warmup_steps=0", "task.max_val_examples=16",
        "task.max_test_examples=16", "run.progress=false"]


def pick(candidates, tol):
    return selection.select(candidates, lambda c: c, tol)


def test_rule_metric_first_then_loss_then_order():
    a, b, c = (0.5, 2.0), (0.5, 1.0), (0.4, 0.1)
    assert pick([a, b, c], 0.0) == (b, selection.BY_LOSS)  # tie on the metric: the lower loss
    assert pick([a, c], 0.0) == (a, selection.BY_METRIC)  # a better metric beats a lower loss
    d = (0.5, 2.0)
    assert pick([a, d], 0.0)[0] is a and pick([a, d], 0.0)[1] == selection.BY_ORDER  # full tie: the first
    assert pick([(math.nan, 0.1), (-math.inf, None), c], 0.0) == (c, selection.BY_METRIC)
    assert pick([(0.5, None), (0.5, 3.0)], 0.0) == ((0.5, 3.0), selection.BY_LOSS)  # no loss loses a tie
    assert pick([], 0.0) == (None, selection.BY_METRIC)


def test_tie_tolerance_is_half_a_target():
    n = 537  # masked tokens of a validation set: accuracies are k / 537
    tol = selection.tolerance("masked_accuracy", n)
    assert pick([(100 / n, 2.0), ((100 / n) * (1 + 1e-15), 1.0)], tol)[1] == selection.BY_LOSS  # rounding: a tie
    assert pick([(100 / n, 2.0), (101 / n, 3.0)], tol) == ((101 / n, 3.0), selection.BY_METRIC)  # one more token
    assert selection.tolerance("r2", 1000) == 0.0 and selection.tolerance("accuracy", None) == 0.0


def test_best_checkpoint_tie_goes_to_the_lower_val_loss(tmp_path, monkeypatch):
    # (metric, loss) of the 4 validation passes over 100 targets: a tie with a lower loss, a worse metric with
    # the lowest loss, then a better metric with a higher loss.
    script = iter([(0.5, 2.0), (0.5 + 1e-12, 1.5), (0.49, 0.1), (0.52, 3.0)])
    real = train.evaluate

    def scripted(*args, **options):
        ev = real(*args, **options)
        metric, loss = next(script, (ev["metric"], ev["loss"]))  # the 5th pass is the test split
        return dict(ev, metric=metric, loss=loss, targets=100)

    monkeypatch.setattr(train, "evaluate", scripted)
    best_steps = []

    def on_eval(record, run_dir):
        best_steps.append((record["best_step"], record["best_loss"]))

    result = train.scratch(config.load(None, TINY + [f"run.out_dir={tmp_path}"]), on_eval=on_eval)
    assert best_steps == [(4, 2.0), (8, 1.5), (8, 1.5), (16, 3.0)]
    assert (result["best_step"], result["best_val"], result["best_val_loss"]) == (16, 0.52, 3.0)
    assert checkpoints.load(Path(result["run_dir"]) / "best.pt")["step"] == 16


@pytest.mark.parametrize("stage", ["pretrain", "scratch"])
def test_evaluation_does_not_depend_on_the_batch_size(stage):
    """One model, two batch sizes: the same masked positions, metric and loss (averaged over the whole split)."""
    task = get_task("listops-mini")
    cfg = runs.resolve(config.load(None, TINY + ["objective.mask_ratio=0.15"]), task, stage)
    torch.manual_seed(0)
    model = build_pretrain_model(cfg.model, cfg.objective, task, mask_channel=False) if stage == "pretrain" \
        else build_task_model(cfg.model, task)
    val = task.load(None, seed=0)["val"]
    evals = []
    for batch_size in (8, 32):
        cfg.optim.batch_size = batch_size
        evals.append(train.evaluate(model, cfg, task, stage, val, torch.device("cpu"), 40))  # 5 x 8, 2 x 32 (8)
    small, large = evals
    assert small["targets"] == large["targets"] > (300 if stage == "pretrain" else 39)
    assert small["metric"] == large["metric"]
    assert small["loss"] == pytest.approx(large["loss"], rel=1e-6)
    assert (small["calls"], large["calls"]) == (5, 2) and small["examples"] == large["examples"] == 40
