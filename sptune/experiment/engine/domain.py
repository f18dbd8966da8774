"""The cells of the engine's Tune run, in memory: each cell's study.json is read once per driver start (or
made by studies.create in this process) into a `Cell`, with what the engine asks of it worked out once (its
bounds, each stage's trial spec), and every engine part (the searcher, the per-group schedulers and callbacks,
the trials' specs and placements) works on that object. The searcher alone changes its state, and writes
study.json at once (for a resume and the reports): the file is an edge, never a channel.

The open cells are kept by directory for the parts Tune pickles with its experiment state (the searcher,
GroupScheduler, GroupCallbacks), which a restore brings back without them.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

from sptune.search import spaces
from sptune.records import studies, study_state
from sptune.records.study_state import StudyState
from sptune.trials import resources
from sptune.trials.trainable import TrialSpec

log = logging.getLogger("sptune.engine")

_open: dict[str, "Cell"] = {}  # str(study directory) -> its cell, for this driver start


@dataclass
class Cell:
    key: str  # the cell's name in its experiment (a study: its directory's name)
    dir: Path  # its study directory, as the engine names it in every trial's lineage
    state: StudyState  # study.json as this driver start read or made it, kept current by the searcher
    bounds: studies.CellBounds = field(init=False)  # its resources and trial counts at this start
    specs: dict[str, TrialSpec] = field(init=False)  # each stage's trial spec (a trial's start: its lineage)
    grids: dict[str, spaces.StageSpace] = field(init=False)  # each stage's grid as this start found it

    def __post_init__(self) -> None:
        fit_packing(self.dir, self.state)
        self.bounds = studies.cell_bounds(self.state)
        self.specs = studies.trial_specs(self.dir, self.state)
        self.grids = {stage: studies.stage_space(self.state, stage) for stage in self.specs}


def fit_packing(study_dir: Path, state: StudyState) -> None:
    """Where a study's trials share GPUs (--trials-per-gpu), ask each trial for the CPUs this cluster's GPU
    nodes have per slot; study.json keeps it (a resume sizes the trials alike)."""
    options = state.options
    if not options.trials_per_gpu:
        return
    cpus = resources.packed_cpus(options.cpus_per_worker, options.trials_per_gpu)
    if cpus != options.cpus_per_worker:
        log.info("%d trials per GPU: %g CPU(s) per trial (asked %g), what the GPU nodes have per slot",
                 options.trials_per_gpu, cpus, options.cpus_per_worker)
        state.options = dataclasses.replace(options, cpus_per_worker=cpus)
        study_state.save(study_dir, state)


def open_cells(cell_dirs: dict[str, Path], states: dict[str, StudyState], fresh: bool = False) -> dict[str, Cell]:
    """The cells of `cell_dirs` ({key: study directory}), each from `states` where given, else read once;
    `fresh`: a driver start, which forgets the cells of an earlier Tune run in this process."""
    if fresh:
        _open.clear()
    cells = {key: Cell(key, Path(path), states.get(key) or study_state.load(path)) for key, path in cell_dirs.items()}
    _open.update({str(cell.dir): cell for cell in cells.values()})
    return cells


def cell_at(study_dir: str | Path) -> Cell:
    """The open cell of `study_dir`; a cell this start has not opened (a searcher used alone) is read once."""
    key = str(Path(study_dir))
    if key not in _open:
        open_cells({Path(study_dir).name: Path(study_dir)}, {})
    return _open[key]


def specs(cells: dict[str, Cell]) -> dict[tuple[str, str], TrialSpec]:
    """Every stage's spec of every cell, keyed as a trial's lineage names it (sptune.trials.entry)."""
    return {(str(cell.dir), stage): spec for cell in cells.values() for stage, spec in cell.specs.items()}
