"""Where a study's Optuna searches are kept: one journal file per study directory (optuna.journal, Optuna's
JournalStorage: append-only, safe for concurrent writers), one Optuna study per stage named
`<study dir name>/<stage>`, so `optuna-dashboard <study>/optuna.journal` shows them."""

from __future__ import annotations

from pathlib import Path

from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend


def journal_storage(path: str | Path) -> JournalStorage:
    return JournalStorage(JournalFileBackend(str(Path(path).resolve())))


def optuna_study_name(study_dir: str | Path, stage: str) -> str:
    return f"{Path(study_dir).resolve().name}/{stage}"
