"""A test metric for every trial that ASHA stopped early, at its own best-validation checkpoint.

A stopped trial ends at a rung, inside Tune, without the stage's final test evaluation (sptune.train.run_stage
step 7). Once its stage has ended, `test_stopped` evaluates the test split at each such trial's best.pt
(chosen on validation, as for a completed trial) and writes its result.json with status `stopped`, so
results.csv gives it a test metric and its whole cost. Selection stays validation-only and among completed
trials (results.best_row): the test metric of a stopped trial is reported, never used to choose.

Run after the stage, not inside the trial: Tune ends a stopped trial at its report, with no place to run
more code. Robust to a killed driver: a trial without result.json is tested again at the next resume,
and result.json is written atomically, last.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sptune import checkpoints, files

log = logging.getLogger("sptune.tune")

STATUS = "stopped"


def test_stopped(study_dir: Path, stage: str, spec: Any = None, crashed: frozenset[str] = frozenset()) -> list[Path]:
    """Test every trial of an ended stage that has a best checkpoint but no result and no crash record (nor
    is among `crashed`, the Tune trial ids the engine was told crashed);
    returns their run directories. With the stage's TrialSpec, the trial's TensorBoard HParams outcome
    (written `stopped` by sptune.tune.trials.outcomes) gets the test metric too."""
    stage_dir = Path(study_dir) / stage
    if not stage_dir.is_dir():
        return []
    tested = []
    for run_dir in sorted(p.parent for p in stage_dir.glob(f"*/{files.TRIAL}")):
        if any((run_dir / name).is_file() for name in (files.RESULT, files.TRIAL_ERROR)):
            continue
        if not (run_dir / files.BEST).is_file() or not (run_dir / files.LAST).is_file():
            continue  # stopped before its first eval: nothing to test (results lists it as stopped)
        trial = files.read_json(run_dir / files.TRIAL)
        if trial.get("trial_id") in crashed:
            continue  # Tune reported it crashed; its error.json may not be written yet (callbacks run after)
        result = stopped_result(run_dir, stage, int(trial.get("workers", 1)))
        if spec is not None:
            from sptune.tune.trials import trainable

            trainable.write_hparams(run_dir, spec, trial["params"], result, result["steps"])
        log.info("%s: stopped early at step %d, test %s %.4f at its best checkpoint (step %d)", run_dir.name,
                 result["steps"], result["metric"], result["test_metric"], result["best_step"])
        tested.append(run_dir)
    return tested


def stopped_result(run_dir: Path, stage: str, world: int = 1) -> dict[str, Any]:
    """Evaluate the test split at run_dir/best.pt and write result.json (status `stopped`) from last.pt's state."""
    import torch

    from sptune import config, flops, train
    from sptune.build import build_pretrain_model, build_task_model, count_parameters
    from sptune.data import batch, stage_steps, step_draw, train_fraction
    from sptune.registry import task_of

    cfg = config.load(run_dir / files.CONFIG)
    task = task_of(cfg.task)
    torch.manual_seed(cfg.run.seed)
    if cfg.run.num_threads > 0:
        torch.set_num_threads(cfg.run.num_threads)
    device = torch.device("cuda" if cfg.run.device != "cpu" and torch.cuda.is_available() else "cpu")
    splits = task.load(cfg.task.data_dir or None, seed=cfg.run.seed, resample=cfg.task.resample_splits)
    pretraining = stage == "pretrain"
    masked_continuous = pretraining and cfg.objective.kind == "masked" and task.input_kind == "continuous"
    model = build_pretrain_model(cfg.model, cfg.objective, task, mask_channel=masked_continuous) if pretraining \
        else build_task_model(cfg.model, task)
    # The FLOPs per example as run_stage counts them (on a meta copy, from one training example).
    train_split = train_fraction(splits["train"], cfg.task.train_fraction)
    max_steps = stage_steps(cfg.optim.max_steps, cfg.optim.epochs, cfg.optim.batch_size, len(train_split))
    x1, _, lengths1 = batch(train_split, torch.tensor([0]))
    if pretraining:
        d1, lengths1 = train.denoise(cfg.objective, task, x1, lengths1, step_draw(cfg.run.seed, 0))
        x1 = d1.inputs
    cost = flops.measure(model, x1, lengths1, task.seq_len)
    model.to(device)
    best_path, last_path = run_dir / files.BEST, run_dir / files.LAST
    checkpoints.load_into(model, checkpoints.load(best_path, device, keys=("model",), fix=train.RESTART_FIX)["model"],
                          best_path, train.RESTART_FIX)
    state = checkpoints.load(last_path, keys=("state",), fix=train.RESTART_FIX)["state"]
    test = train.evaluate(model, cfg, task, stage, splits["test"], device, cfg.task.max_test_examples,
                          keep_hits=not pretraining)
    train.count_eval(state, test)  # the test pass is part of the trial's cost, as for a completed trial
    result: dict[str, Any] = {"stage": stage, "task": task.name, "model": cfg.model.name, "run_dir": str(run_dir),
                              "metric": train.stage_metric_name(cfg.objective, task, stage),
                              "n_params": count_parameters(model),
                              "init_from": None, **train.test_entries(test)}
    return train.finish(result, state, cost, world, run_dir, max_steps, status=STATUS)
