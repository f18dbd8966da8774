"""A study's study.json as one typed object, `StudyState`: what was asked (each stage's resolved config, the
search space, the resolved options) and what has happened (each stage's status, the pretraining checkpoint
that finetuning starts from). Every module that reads or changes a study's state goes through here.

Only the engine's searcher changes it, in the driver's main thread (sptune.experiment.engine.driver); the file is
written atomically. This module reads files only; it imports no Ray.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from sptune import atomic, files, selection
from sptune.errors import UserError
from sptune.search.options import Resolved

VERSION = 1
DONE = "done"  # a stage status; the others are "skipped: <why>"


@dataclass(kw_only=True)
class Selection:
    """The pretraining checkpoint finetuning starts from, chosen on validation (studies.select_pretraining)."""

    trial: str  # the pretraining trial's id
    run_dir: str
    step: int  # its best-validation step
    checkpoint: str  # best.pt of that run
    best_val: float  # its validation metric there
    best_val_loss: float | None = None
    selected_by: str = selection.BY_METRIC  # what decided (results.best_row); studies from before tie-breaks: this

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def lineage(self) -> dict[str, Any]:
        """What every finetuning trial's config records of its start (trackers log it as the lineage)."""
        return {"init_trial": self.trial, "init_step": self.step, "init_checkpoint": self.checkpoint,
                "init_run_dir": self.run_dir}


@dataclass(kw_only=True)
class StudyState:
    stages: dict[str, dict[str, Any]]  # stage -> its resolved config (config.Config.to_dict())
    space: dict[str, Any]  # the search space (spaces.SearchSpace.to_dict())
    options: Resolved
    config: str  # the config file as given ("None": overrides only)
    overrides: list[str]
    dir: str | None = None  # the study directory, absolute
    stage_status: dict[str, str] = field(default_factory=dict)  # stage -> "done" | "skipped: <why>"; absent: to run
    selected: Selection | None = None
    # stage -> the grid extensions' steps: {param, side, value} run, {param, side, stopped} where a limit held
    extensions: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    version: int = VERSION
    created: float = field(default_factory=time.time)

    def stage_done(self, stage: str) -> bool:
        return self.stage_status.get(stage) == DONE

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)} | {
            "options": self.options.to_dict(), "selected": self.selected.to_dict() if self.selected else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudyState:
        known = {f.name for f in fields(cls)}
        selected = data.get("selected")
        return cls(**{k: v for k, v in data.items() if k in known} | {
            "options": Resolved.from_dict(data["options"]),
            "selected": Selection(**selected) if selected else None})


def path_of(study_dir: str | Path) -> Path:
    return Path(study_dir) / files.STUDY


def load(study_dir: str | Path) -> StudyState:
    path = path_of(study_dir)
    if not path.is_file():
        raise UserError(f"{study_dir} is not a study directory (no {files.STUDY}); "
                        f"start one with `sptune study <config> --dir {study_dir}`")
    return StudyState.from_dict(files.read_json(path))


def read(study_dir: str | Path) -> StudyState | None:
    """The state, or None where there is no study (yet): for readers that report what exists."""
    return load(study_dir) if path_of(study_dir).is_file() else None


def save(study_dir: str | Path, state: StudyState) -> None:
    atomic.write_json(path_of(study_dir), state.to_dict())


def save_new(study_dir: str | Path, state: StudyState) -> StudyState:
    """Write a new study's state; returns it as a resume will read it (lists where configs had tuples, keys in
    study.json's sorted order)."""
    data = json.loads(json.dumps(state.to_dict(), sort_keys=True))
    saved = StudyState.from_dict(data)
    atomic.write_json(path_of(study_dir), data)
    return saved


def set_stage_status(study_dir: str | Path, state: StudyState, stage: str, status: str) -> None:
    state.stage_status[stage] = status
    save(study_dir, state)


def set_selected(study_dir: str | Path, state: StudyState, selected: Selection) -> None:
    state.selected = selected
    save(study_dir, state)


def stage_finished(status: Any) -> bool:
    return str(status) == DONE or str(status).startswith("skipped")

