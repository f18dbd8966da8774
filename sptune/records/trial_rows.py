"""One trial of a study as a row: the type every reader of results shares (results.csv's columns, the
summary, the experiment reports, the seeds table, the learning curves).

A row is built from the trial's run directory (sptune.records.results.trial_row). It stays a dict, because it
also carries the trial's searched params under their dotted names ("optim.lr", "optim.batch_size"), which
no type can list in advance; the declared keys below are every other column, in results.csv's order.
"""

from __future__ import annotations

from typing import TypedDict


class TrialRow(TypedDict, total=False):
    # who
    stage: str  # pretrain | finetune | scratch
    trial_id: str
    # outcome (result.json when the run finished, else its latest progress.json)
    status: str  # completed | failed (after its last retry) | stopped (ASHA) | unfinished (to resume)
    reason: str | None  # why it failed or stopped
    metric: str  # the task's validation/test metric, e.g. "accuracy"
    best_val: float | None  # the best validation metric, at best_step
    best_val_loss: float | None
    val_targets: int | None  # targets the validation metric counts (ties: sptune.selection)
    best_step: int | None
    final_val: float | None
    test_metric: float | None  # at the best-validation checkpoint; measured once
    steps: int | None
    # cost
    train_seconds: float | None
    eval_seconds: float | None
    wall_seconds: float | None
    devices: int
    device_seconds: float  # (train_seconds + eval_seconds) x devices
    train_flops: float | None
    eval_flops: float | None
    n_params: int | None
    # where and how it ran
    device: str | None  # result.json's provenance.device_name, e.g. "cuda:0 NVIDIA H100 ..." (None: unfinished)
    path: str  # direct | train
    attempts: int
    start_steps: str  # each attempt's first step, ";"-joined
    node_id: str
    hostname: str
    pid: int
    # finetuning's start: the selected pretraining trial
    init_trial: str | None
    init_step: int | None
    init_checkpoint: str | None
    extension: bool  # it ran a value past its declared grid (sptune.search.bracketing)
    # selection within its stage (results.best_row): `selected` once the stage is done, `leading` before
    selected: bool
    leading: bool  # the best so far of a stage that has not finished (a time budget or a kill stopped it)
    selected_by: str
    run_dir: str


COLUMNS = list(TrialRow.__annotations__)
# What a finished run's result.json contributes to its row (sptune.run.train.finish writes them).
RESULT_KEYS = ("status", "reason", "metric", "best_val", "best_val_loss", "val_targets", "best_step", "final_val",
               "test_metric", "steps", "train_seconds", "eval_seconds", "train_flops", "eval_flops", "n_params")
