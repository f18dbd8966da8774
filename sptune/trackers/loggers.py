"""Experiment trackers through Ray Tune's own logger callbacks: `--logger tensorboard | wandb | mlflow`.

Each trial becomes one run with its Tune config (the searched params and the lineage entry, see
trainable.LINEAGE_KEY: study, stage, and for finetuning the pretraining trial, step and checkpoint
it starts from) and every eval's metrics.

    tensorboard  the trials' own TensorBoard runs (<run dir>/tb, written by sptune.run.train): no callback
    wandb        WandbLoggerCallback (sptune.trackers.wandb_logging: its actors write their runs before Ray kills
                 them): project = $WANDB_PROJECT or the study's name, group = the stage,
                 files under <study>/wandb; WANDB_MODE=offline keeps the runs local (`wandb sync` later)
    mlflow       MLflowLoggerCallback: experiment = the study's name, tracking URI $MLFLOW_TRACKING_URI
                 or the file store file:<study>/mlruns (`mlflow ui --backend-store-uri file:<study>/mlruns`).
                 MLflow >= 3.x keeps file stores in maintenance mode and refuses them unless
                 MLFLOW_ALLOW_FILE_STORE=true, which is set for the default store (not over a user's
                 own setting); MLFLOW_TRACKING_URI=sqlite:///<file> is the database alternative.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from sptune.errors import UserError

LOGGERS = ("tensorboard", "wandb", "mlflow")
PACKAGES = {"wandb": "wandb", "mlflow": "mlflow"}  # logger -> the module its callback imports


def check(name: str) -> None:
    """Before any Ray work: the logger exists and its package is installed."""
    if name not in LOGGERS:
        raise UserError(f"--logger {name!r}; choose one of: {', '.join(LOGGERS)}")
    module = PACKAGES.get(name)
    if module and importlib.util.find_spec(module) is None:
        raise UserError(f"--logger {name} needs the {module} package: pip install 'sptune[{name}]'")


def mlflow_uri(study_dir: Path) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"file:{Path(study_dir).resolve() / 'mlruns'}"


def prepare(name: str) -> None:
    """Before each stage, new or restored (a restored one brings its callbacks from Tune's snapshot)."""
    check(name)
    if name == "mlflow" and "MLFLOW_TRACKING_URI" not in os.environ:
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # read when the callback opens the store


def create_experiment(name: str, study_dir: Path) -> None:
    """The study's MLflow experiment, made once before the stages start: stages running concurrently
    would each find it missing and both create it, and the second creation fails."""
    if name != "mlflow":
        return
    prepare(name)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_uri(study_dir))
    if client.get_experiment_by_name(Path(study_dir).resolve().name) is None:
        client.create_experiment(Path(study_dir).resolve().name)


def callbacks(name: str, study_dir: Path, stage: str) -> list:
    study_dir = Path(study_dir).resolve()
    if name == "wandb":
        from sptune.trackers.wandb_logging import WandbCallback

        # mode is passed on: the logging actor may run where the driver's environment is not.
        return [WandbCallback(project=os.environ.get("WANDB_PROJECT") or study_dir.name, group=stage,
                              dir=str(study_dir), mode=os.environ.get("WANDB_MODE"), tags=[stage])]
    if name == "mlflow":
        from ray.air.integrations.mlflow import MLflowLoggerCallback

        return [MLflowLoggerCallback(tracking_uri=mlflow_uri(study_dir), experiment_name=study_dir.name,
                                     tags={"stage": stage, "study_dir": str(study_dir)})]
    return []
