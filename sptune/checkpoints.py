"""Atomic checkpoints: `last.pt` (resume) and `best.pt` (the checkpoint later stages start from).

A checkpoint holds the model, optimizer, schedule, step, RNG state and the eval history, so a
resumed run continues exactly where it stopped. Files are written to a temp name and renamed, so
a killed run never leaves half a checkpoint, and loaded with weights_only=True.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from sptune import atomic

LAST = "last.pt"
BEST = "best.pt"
RESULT = "result.json"


def save_atomic(obj: Any, path: Path) -> None:
    with atomic.replacing(path) as tmp:
        torch.save(obj, tmp)


def load(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    return torch.load(path, map_location=map_location, weights_only=True)


def write_json_atomic(obj: Any, path: Path) -> None:
    atomic.write_json(path, obj)


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def finished_result(run_dir: Path) -> dict[str, Any] | None:
    """The run's result.json once the run has ended (completed or failed); None while it has not."""
    path = Path(run_dir) / RESULT
    if not path.is_file():
        return None
    result = read_json(path)
    return result if result.get("status") in ("completed", "failed") else None
