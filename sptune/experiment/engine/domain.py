"""The engine's domain model, in memory: an `Experiment` is a set of `Cell`s (a study is an experiment of one
cell, a multi-seed study one cell per seed, `sptune evaluate` and the paper's experiments their plan's cells);
a cell's `Stage`s are searched by trials (pretrain -> select -> finetune, scratch beside: sptune.protocol); a
`Trial` is one grid point of one stage (sptune.trials.trainable.Trial, built on its worker from the stage's spec).

Built once per driver start: each cell's study.json is read once (or made by studies.create in this process),
with what the engine asks of it worked out once (its bounds, each stage's trial spec, grid and trial count).
Every engine part (the searcher, the per-group schedulers and callbacks, the trials' specs and placements) works
on these objects. Once they are built (a cell fitting its trials to GPU packing saves that first), the searcher
alone changes a cell's state, and writes study.json at once (for a resume and the reports): the file is an edge,
never a channel.

The open cells are kept by directory for the parts Tune pickles with its experiment state (the searcher,
GroupScheduler, GroupCallbacks), which a restore brings back without them.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

from sptune.config import STAGES
from sptune.records import studies, study_state
from sptune.records.study_state import StudyState
from sptune.search import bracketing, spaces
from sptune.trials import resources
from sptune.trials.trainable import TrialSpec, trial_resources

log = logging.getLogger("sptune.engine")

_open: dict[str, "Cell"] = {}  # str(study directory) -> its cell, for this driver start


@dataclass(frozen=True)
class Stage:
    """One stage of a cell as this start found it: what its trials run (their spec; finetuning's start travels
    in each trial's lineage), the grid its searcher searches, and how many trials that is."""

    name: str
    spec: TrialSpec
    grid: spaces.StageSpace
    trials: int  # the grid's size, capped by num_samples (grid extensions add to it while it runs)


@dataclass
class Cell:
    key: str  # the cell's name in its experiment (a study: its directory's name)
    dir: Path  # its study directory, as the engine names it in every trial's lineage
    state: StudyState  # study.json as this driver start read or made it, kept current by the searcher
    bounds: CellBounds = field(init=False)  # its resources and trial counts at this start
    stages: dict[str, Stage] = field(init=False)

    def __post_init__(self) -> None:
        fit_packing(self.dir, self.state)
        self.stages = {name: stage_of(self.dir, self.state, name) for name in STAGES}
        self.bounds = cell_bounds(self.state, self.stages)


@dataclass
class Experiment:
    """What one driver start serves: its directory (Tune's run lives in its tune/), the cells it continues
    (`todo`, in the order they are proposed) and every cell of the Tune run it makes or restores (`cells`: a
    restored run's finished cells too, since Tune asks each trial it recorded for its spec and placement);
    what Tune is given is worked out from them once."""

    dir: Path
    cells: dict[str, Cell]
    todo: tuple[str, ...]
    # Every stage's spec of every cell, keyed as a trial's lineage names it (sptune.trials.entry).
    specs: dict[tuple[str, str], TrialSpec] = field(init=False)
    placements: dict[str, dict[str, float]] = field(init=False)  # each cell's trial resources (--cpus-per-worker ...)
    # Every trial a cell to continue may run, and one more: Tune's upper bound, never reached, so Tune asks the
    # searcher until it says FINISHED (a stage is done only once its stopped trials were tested).
    total_trials: int = field(init=False)
    concurrency: int = field(init=False)  # the most trials the cells' stages may run at once (each its max_concurrent)
    max_failures: int = field(init=False)

    def __post_init__(self) -> None:
        continued = [self.cells[key].bounds for key in self.todo]  # the bounds of the cells this start continues
        self.specs = {(str(cell.dir), stage.name): stage.spec for cell in self.cells.values()
                      for stage in cell.stages.values()}
        self.placements = {key: cell.bounds.resources for key, cell in self.cells.items()}
        self.total_trials = sum(bounds.trials for bounds in continued) + 1
        self.concurrency = sum(bounds.concurrency for bounds in continued) or 1
        self.max_failures = max((bounds.max_failures for bounds in continued), default=0)


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


def cell_finished(state: StudyState) -> bool:
    """Every stage of the cell's study is done or skipped."""
    return all(study_state.stage_finished(state.stage_status.get(stage)) for stage in STAGES)


def continued(study_dir: Path, state: StudyState, retry_failed: bool = False) -> bool:
    """Whether a driver start runs this cell: it is unfinished, or (retry_failed) a finished stage of it has
    trials that crashed after their last retry (records.studies.crashed_trials), which Tune's restore reruns."""
    if not cell_finished(state):
        return True
    return retry_failed and any(studies.crashed_trials(Path(study_dir), stage) for stage in STAGES)


def open_experiment(experiment_dir: Path, todo: dict[str, Path], served: dict[str, Path],
                    states: dict[str, StudyState]) -> Experiment:
    """The experiment of this driver start: the cells `todo` ({key: study directory}) to continue and the
    other `served` cells of its Tune run, each from `states` where given, else read once. A start forgets the
    cells of an earlier Tune run in this process."""
    _open.clear()
    cells = open_cells({**served, **todo}, states)
    return Experiment(Path(experiment_dir), cells, tuple(todo))


def open_cells(cell_dirs: dict[str, Path], states: dict[str, StudyState]) -> dict[str, Cell]:
    """The cells of `cell_dirs` ({key: study directory}), each from `states` where given, else read once."""
    cells = {key: Cell(key, Path(path), states.get(key) or study_state.load(path)) for key, path in cell_dirs.items()}
    _open.update({str(cell.dir): cell for cell in cells.values()})
    return cells


def cell_at(study_dir: str | Path) -> Cell:
    """The open cell of `study_dir`; a cell this start has not opened (a searcher used alone) is read once."""
    key = str(Path(study_dir))
    if key not in _open:
        open_cells({Path(study_dir).name: Path(study_dir)}, {})
    return _open[key]


# ----------------------------------------------------------------------------- what a cell's state gives the engine
@dataclass(frozen=True)
class CellBounds:
    """What the engine's Tune run needs of a cell before it starts, read once from its study.json: plain
    numbers, so the engine sizes the run without handling the cell's configs."""

    resources: dict[str, float]  # one trial's request (every stage of a cell asks the same)
    trials: int  # the most trials its unfinished stages may run, grid extensions included
    concurrency: int  # the most of them at once (each unfinished stage at max_concurrent)
    max_failures: int


def cell_bounds(state: StudyState, stages: dict[str, Stage]) -> CellBounds:
    """The bounds of a cell whose `stages` were just made from `state` (each grid parsed once)."""
    options = state.options
    todo = [stage for stage in STAGES if stage not in state.stage_status]
    trials = sum(stages[stage].trials + stage_extra_trials(state, stage) for stage in todo)
    return CellBounds(resources=trial_resources(options.path, options.cpus_per_worker, options.gpus_per_worker),
                      trials=trials, concurrency=options.max_concurrent * len(todo),
                      max_failures=options.max_failures)


def stage_of(study_dir: Path, state: StudyState, name: str) -> Stage:
    """A stage of the cell in `study_dir` as its `state` gives it: its trials' spec, its grid (parsed once) and
    how many trials its search runs (the grid's size, capped by num_samples)."""
    grid = stage_space(state, name)
    return Stage(name, trial_spec(study_dir, state, name), grid, spaces.trial_count(grid, state.options.num_samples))


def stage_space(state: StudyState, stage: str) -> spaces.StageSpace:
    """The stage's grid as study.json keeps it, parsed."""
    return spaces.parse({"stages": {stage: state.space["stages"][stage]}}).stages[stage]


def stage_extra_trials(state: StudyState, stage: str) -> int:
    """The most trials the stage's grid extensions may add (sptune.search.bracketing)."""
    return bracketing.max_extra_trials(state.space["stages"][stage]["params"], state.options.extend_grids)


def trial_spec(study_dir: Path, state: StudyState, stage: str) -> TrialSpec:
    """What every trial of the stage runs besides its searched params (sptune.trials.entry hands it over)."""
    options, grid = state.options, state.space["stages"][stage]
    return TrialSpec(stage=stage, base=copy.deepcopy(state.stages[stage]), study_dir=str(study_dir),
                     path=options.path, workers=options.workers, cpus_per_worker=options.cpus_per_worker,
                     gpus_per_worker=options.gpus_per_worker, max_failures=options.max_failures,
                     init=state.selected.to_dict() if stage == "finetune" and state.selected else None,
                     hparam_domains={k: v for k, v in grid["params"].items() if isinstance(v, list)})
