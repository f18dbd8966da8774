"""What a run is and where it lives: its resolved config (task defaults filled in, a finetuning run's
architecture taken from its pretraining run), its fingerprint (the hash of everything that changes its
numbers), its directory, and the claim that makes a directory one config's.

A directory resumes only the config it was made for: `fingerprint.check` refuses another, `--restart`
starts it over (deleting the previous run's checkpoints), and a finetuning run's identity includes
the pretraining run it starts from. The training loop (sptune.run.train) uses these; it holds none of them.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import shutil
from pathlib import Path

import torch

from sptune import files
from sptune.config import Config, ModelConfig, ObjectiveConfig, check_causal_norm, dump, resolve_compile
from sptune.config import load as load_config
from sptune.errors import UserError
from sptune.registry import slug, task_of
from sptune.run import fingerprint
from sptune.tasks.base import Task

log = logging.getLogger("sptune.run.train")

# Model fields a finetuning run sets itself; every other model field is the pretraining run's
# architecture, and a different value in the finetune config is a contradiction. pooling: the task
# head is new; dropout: regularization, no parameters; ssm_lr: an optimizer setting; kernel_backend:
# the same kernel computed another way (pykeops or torch).
FINETUNE_MODEL_FIELDS = ("pooling", "dropout", "ssm_lr", "kernel_backend")
# What `--restart` deletes from the run directory before training from step 0.
RESTARTED = (files.LAST, files.BEST, files.RESULT, files.TENSORBOARD)


def resolve(cfg: Config, task: Task, stage: str, init_from: Path | None = None) -> Config:
    """Fill the task-dependent defaults (mask ratio, loss, causality) and the device-dependent ones (device,
    compile) so the dumped config is complete: what ran."""
    cfg = copy.deepcopy(cfg)
    if init_from is not None:
        pre_dir = pretrain_dir(init_from)
        pre = load_config(pre_dir / files.CONFIG)
        if pre.task.name != cfg.task.name:
            raise UserError(f"--from run was pretrained on task '{pre.task.name}', not '{cfg.task.name}'; "
                            f"finetune on the same task")
        cfg.model, cfg.objective = inherited(cfg.model, pre.model, pre.objective, pre_dir)
    if cfg.objective.mask_ratio == -1.0:
        cfg.objective.mask_ratio = task.mask_ratio
    if cfg.objective.loss == "auto":
        cfg.objective.loss = task.pretrain_loss
    if stage == "pretrain" and cfg.objective.loss == "ce" and task.input_kind != "tokens":
        raise UserError(f"objective.loss=ce needs token inputs, task '{task.name}' is continuous; use objective.loss=l1")
    if stage == "pretrain" and cfg.objective.kind == "causal":
        cfg.model.causal = True  # causal SPT trains a unidirectional model (§2)
    if cfg.run.device == "auto":  # the device that runs is what the run records (and is fingerprinted by)
        cfg.run.device = "cuda" if torch.cuda.is_available() else "cpu"
    check_causal_norm(cfg)
    return resolve_compile(cfg)  # run.compile=auto decided for the resolved device (dumped so)


def inherited(mine: ModelConfig, pre_model: ModelConfig, pre_objective: ObjectiveConfig,
              pre_dir: Path) -> tuple[ModelConfig, ObjectiveConfig]:
    """The finetuning run's model and objective: the pretraining run's architecture and objective
    (`pre_model`, `pre_objective`, read from `pre_dir`), with the fields finetuning may change
    (FINETUNE_MODEL_FIELDS) from its own config. An architecture field the finetune config gives another
    value is a contradiction: a silent replacement would record settings that never ran."""
    mine = copy.deepcopy(mine)
    if pre_objective.kind == "causal":
        mine.causal = True  # causal pretraining derived it (resolve); the finetune config need not repeat it
    architecture = [f.name for f in dataclasses.fields(ModelConfig) if f.name not in FINETUNE_MODEL_FIELDS]
    clashes = [f"model.{name}={getattr(mine, name)} contradicts the pretraining run ({getattr(pre_model, name)})"
               for name in architecture if getattr(mine, name) != getattr(pre_model, name)]
    if clashes:
        raise UserError(f"{'; '.join(clashes)}; --from {pre_dir} fixes the architecture: drop or match "
                        f"{'this setting' if len(clashes) == 1 else 'these settings'}, or pretrain again with "
                        f"{'it' if len(clashes) == 1 else 'them'}")
    # pretraining-only settings (the objective): finetuning records the ones that ran
    return (dataclasses.replace(pre_model, **{name: getattr(mine, name) for name in FINETUNE_MODEL_FIELDS}),
            copy.deepcopy(pre_objective))


def identify(cfg: Config, stage: str, init_from: Path | None = None) -> tuple[Config, fingerprint.Fingerprint]:
    """The resolved config and its fingerprint: what a run directory holds and is named after."""
    cfg = resolve(cfg, task_of(cfg.task), stage, init_from)
    return cfg, fingerprint.of(cfg, stage, pretrain_dir(init_from) if init_from is not None else None)


def pretrain_dir(path: Path) -> Path:
    path = Path(path)
    if path.is_file():
        path = path.parent
    if not (path / files.BEST).is_file() or not (path / files.CONFIG).is_file():
        raise UserError(f"--from {path} is not a finished pretraining run (no best.pt/config.yaml); "
                        f"run `sptune pretrain` first and pass its run directory")
    return path


def run_dir_of(cfg: Config, stage: str, fp: fingerprint.Fingerprint) -> Path:
    """run.name, else `<stage>-<task>-<model>-s<seed>-<6 hex of the fingerprint>`: one directory per config."""
    name = cfg.run.name or f"{stage}-{cfg.task.name}-{slug(cfg.model.name)}-s{cfg.run.seed}-{fp.short}"
    return Path(cfg.run.out_dir) / name


def claim(run_dir: Path, cfg: Config, fp: fingerprint.Fingerprint, restart: bool) -> None:
    """Make run_dir this config's. On --restart first delete the previous run's files (the user asked
    for it; nothing else ever deletes them). The fingerprint goes before config.yaml, so a reader that
    sees the new config also sees the fingerprint it is checked against."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if restart:
        for name in RESTARTED:
            path = run_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        log.warning("--restart: deleted the previous run's %s in %s", ", ".join(RESTARTED), run_dir)
    fingerprint.write(run_dir, fp)
    dump(cfg, run_dir / files.CONFIG)
