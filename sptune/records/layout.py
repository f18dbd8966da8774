"""What kind of results folder a path is: the one test that `sptune report`, `sptune results`, `sptune resume`
and sptune.api use (sptune.files lists each kind's files).

    study        study.json: one cell, the engine's one-cell experiment (`sptune study`)
    seeds        seeds.json: one study directory per seed, each a cell (`sptune study --seeds`)
    experiment   plan.json: one directory per cell under cells/ (a experiments/*.py script)
"""

from __future__ import annotations

from pathlib import Path

from sptune import files
from sptune.errors import UserError

STUDY, SEEDS, EXPERIMENT = "study", "seeds", "experiment"
MARKERS = {STUDY: files.STUDY, SEEDS: files.SEEDS, EXPERIMENT: files.PLAN}


def kind(path: str | Path) -> str | None:
    """The folder's kind, or None when it holds none of the three."""
    return next((name for name, marker in MARKERS.items() if (Path(path) / marker).is_file()), None)


def kind_of(path: str | Path) -> str:
    """The folder's kind; a UserError naming what a results folder holds when it is none of them."""
    found = kind(path)
    if found is None:
        raise UserError(f"{path} is not a study directory, multi-seed study or experiment (no "
                        f"{', '.join(MARKERS.values())}); pass the --dir of a `sptune study` or of a experiments/*.py "
                        f"script")
    return found


def check_free(path: str | Path) -> None:
    """A new study or multi-seed study may be made in `path`: it holds no results folder yet."""
    found = kind(path)
    if found is not None:
        how = "run its script again" if found == EXPERIMENT else f"continue it with `sptune resume {path}`"
        raise UserError(f"{path} already holds a {found}; {how} or pass another --dir")
