"""Checkpoints: `last.pt` (resume) and `best.pt` (the checkpoint later stages start from), loaded safely.

A checkpoint holds the model, optimizer, schedule, step, RNG state and the eval history, so a
resumed run continues exactly where it stopped. Files are written with sptune.atomic.write_torch (a temp
name, then a rename), so a killed run never leaves half a checkpoint, and loaded with weights_only=True. A checkpoint that
cannot be used (empty, truncated, not a checkpoint, another model's) is a one-line UserError that
names the file and what to do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from sptune.errors import UserError

# What to do about an unusable checkpoint when the caller knows no better.
REDO = "rerun the stage that wrote it"


class UnusableCheckpoint(UserError):
    """A checkpoint file that is missing, empty, truncated, not a checkpoint, or another model's."""


def load(path: Path, map_location: str | torch.device = "cpu", keys: tuple[str, ...] = (),
         fix: str = REDO) -> dict[str, Any]:
    """torch.load(weights_only=True) of a checkpoint that must hold `keys`; `fix` ends the error line."""
    path = Path(path)
    if not path.is_file():
        raise UnusableCheckpoint(f"checkpoint {path} does not exist; {fix}")
    if path.stat().st_size == 0:
        raise UnusableCheckpoint(f"checkpoint {path} is an empty file; {fix}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # noqa: BLE001
        # A damaged file trips whichever reader meets the bad bytes first: EOFError (cut short), RuntimeError
        # (the zip reader: truncated), UnpicklingError (not a checkpoint), UnicodeDecodeError, IndexError,
        # struct.error, KeyError... (measured on random and truncated files). To the user they mean one thing.
        raise UnusableCheckpoint(f"checkpoint {path} is damaged or not a checkpoint ({describe(exc)}); {fix}") from None
    missing = [key for key in keys if not isinstance(ckpt, dict) or key not in ckpt]
    if missing:
        raise UnusableCheckpoint(f"checkpoint {path} is not one sptune wrote (no {', '.join(missing)}); {fix}")
    return ckpt


def load_into(target: torch.nn.Module | torch.optim.Optimizer, state: dict[str, Any], path: Path,
              fix: str = REDO) -> None:
    """target.load_state_dict(state); state of another model (shapes, names, parameter groups) is a UserError."""
    try:
        target.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise UnusableCheckpoint(f"checkpoint {path} was written by another model ({describe(exc)}); {fix}") from None


# Lines of torch's load errors that name no problem: headers and advice that does not apply here
# (weights_only=False is never an option for a file sptune loads).
BOILERPLATE = ("Weights only load failed", "Please file an issue", "Check the documentation",
               "Error(s) in loading state_dict")


def describe(exc: Exception) -> str:
    """One line about a load error: its type and the first sentence of torch's message that names the problem."""
    lines = [line.strip() for line in str(exc).splitlines()
             if line.strip() and not line.strip().startswith(BOILERPLATE)]
    return f"{type(exc).__name__}: {lines[0].split('. ')[0]}" if lines else type(exc).__name__
