"""The names of every file sptune writes, and how its JSON files are read and written.

One place for the layout of a run directory, a study directory and an experiment directory, so a reader
finds "what is result.json, who writes it" here, and a rename is one edit. Every write goes through
sptune.atomic: a reader (or a resume after SIGKILL) never sees half a file.

    run directory (one stage of one config; sptune.run.train)
        config.yaml  fingerprint.json  last.pt  best.pt  result.json  tb/
        + under Ray Tune (sptune.trials.trainable): trial.json  progress.json  worker.json  error.json
    study directory (`sptune study`; sptune.records.studies)
        study.json  results.csv  study.log  optuna.journal  driver.json  <stage>/<run>/  tune/  train/
    seeds directory (`--seeds`; sptune.records.seeds)
        seeds.json  summary.json  seeds.md  seeds.csv  seeds.png  seed-<n>/
    experiment directory (a paper experiment; sptune.experiment.backends)
        plan.json  cells/<cell>/  (each cell a study directory or plain run directories, error.txt on failure)
        + the report (sptune.report.tables): table.md  results.csv  summary.csv  <plots>.png
    kept record of an experiment (what outlives its cells: sptune.report.pool)
        plan.json  summary.csv
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

# ----------------------------------------------------------------------------- run directory
CONFIG = "config.yaml"  # the resolved config (sptune.config.dump)
FINGERPRINT = "fingerprint.json"  # the hash of the config this directory belongs to (sptune.run.fingerprint)
LAST = "last.pt"  # the latest checkpoint: what a resume continues from
BEST = "best.pt"  # the best-validation checkpoint: what finetuning and the test metric use
RESULT = "result.json"  # written once, when the stage finishes
TENSORBOARD = "tb"
TRIAL = "trial.json"  # a Tune trial's stage, params and lineage
PROGRESS = "progress.json"  # the last metrics a Tune trial reported
WORKER = "worker.json"  # the node and process that ran a Tune trial
TRIAL_ERROR = "error.json"  # a crashed trial's last error, as Tune reported it

# ----------------------------------------------------------------------------- study directory
STUDY = "study.json"  # what was asked, stage states, the selected pretraining trial
RESULTS_CSV = "results.csv"  # one row per trial
STUDY_LOG = "study.log"  # everything Ray, Tune and the trials printed (sptune.output)
OPTUNA_JOURNAL = "optuna.journal"  # every stage's Optuna study
DRIVER = "driver.json"  # the driver process that owns the study's Ray instance
STORAGE = "storage.json"  # where the folder is mirrored (sptune.records.storage)

# ----------------------------------------------------------------------------- seeds directory
SEEDS = "seeds.json"  # what a multi-seed study asked for
SEEDS_SUMMARY = "summary.json"
SEEDS_TABLE, SEEDS_CSV, SEEDS_PLOT = "seeds.md", "seeds.csv", "seeds.png"

# ----------------------------------------------------------------------------- experiment directory
PLAN = "plan.json"
CELLS = "cells"
SUMMARY_CSV = "summary.csv"  # one row per arm (cell x initialisation): what pooling several batches reads
CELL_ERROR = "error.txt"


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def finished_result(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The run's result.json once the run has ended (completed or failed); None while it has not."""
    path = Path(run_dir) / RESULT
    if not path.is_file():
        return None
    result = read_json(path)
    return result if result.get("status") in ("completed", "failed") else None
