"""The engine: the one Ray Tune run of a driver, serving every cell of an experiment. A study is an
experiment of one cell (its own directory); `--seeds` adds one cell per seed. Tune runs once per driver
process, in its main thread: several Tuners at once are not supported by Ray (Tune FAQ, "multi-tenancy").

    CellsSearcher    one searcher per (cell, stage) (search.make_searcher behind its max_concurrent limit,
                     on the cell's own Optuna journal), asked in proposal_order; a stage is proposed once
                     the protocol lets it start (sptune.protocol: finetuning after its cell's pretraining
                     has ended and its selection is written to the cell's study.json)
    GroupScheduler   ASHA per (cell, stage) where the cell's options ask for it (sptune.experiment.engine.routing);
                     of the pending trials, the first in proposal_order starts next (start_rank)
    GroupCallbacks   per (cell, stage): trial outcomes, trackers, and a stage's progress bar (one cell)
    signals          sptune.experiment.engine.interrupts: Ctrl-C / SIGTERM end the loop at a step boundary

The experiment lives in memory (sptune.experiment.engine.domain: Experiment, Cell, Stage): each study.json is
read once per start, and written when a stage ends or a selection is made, for a resume and the reports. Each
trial runs as its cell's study runs it: its spec (domain.trial_spec) reaches it through tune.with_parameters
(sptune.trials.entry), so every cell directory is a study directory: study.json with its stage states and selection,
<stage>/<trial run dir>/, results via sptune.records.results.collect. A stage is marked done when its
last trial ended and ASHA's stopped trials got their test metric in a Ray task on a trial node
(sptune.trials.stopped); never while the run is stopping.

Resume: the Tune run (<dir>/tune/experiment) is restored with Tuner.restore; the searcher is saved with
Tune's snapshots (save/restore) and each sub-searcher reopens its journal. Adding cells (more seeds) to a
finished experiment starts a second Tune run, tune/experiment-2, for the cells the first did not serve
(tune/runs.json records which run serves which cells).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import pickle
import time
import traceback
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator

from ray.tune.search import Searcher

from sptune import atomic, files, output, protocol
from sptune.config import STAGES
from sptune.experiment.engine import domain, interrupts, mirroring, preemption, stopping
from sptune.experiment.engine.routing import Group, GroupCallbacks, GroupScheduler
from sptune.experiment.engine.session import ray_session
from sptune.records import results, seeds, studies, study_state
from sptune.records.study_state import DONE, StudyState, stage_finished
from sptune.search import bracketing, journal, searcher as search, spaces
from sptune.trackers import loggers
from sptune.trials import entry, outcomes, resources, stopped
from sptune.trials.trainable import LINEAGE_KEY, stage_trainable

log = logging.getLogger("sptune.engine")

TUNE_NAME = "experiment"
RUNS_FILE = "runs.json"  # tune run name -> the cells it serves
# Which stage's trials to propose first when several of one cell are runnable: finetuning ends a cell's
# critical path, pretraining opens it, scratch depends on nothing.
PRIORITY = ("finetune", "pretrain", "scratch")
PENDING_ENV = "TUNE_MAX_PENDING_TRIALS_PG"
MAX_PENDING = 200  # Tune's own figure for fast autoscaling
UNSAVED = ("testing", "rechecked")  # the searcher's parts that live with this driver start only


class CellsSearcher(Searcher):
    """The composite searcher over `cell_dirs` ({cell key: study directory with its study.json}); `stop_key`
    names the run's stopping event (stopping), `stages` the stages this run may propose."""

    def __init__(self, cell_dirs: dict[str, Path], stop_key: str = "", stages: tuple[str, ...] = STAGES,
                 lookahead: int = 1) -> None:
        super().__init__(metric=search.METRIC, mode=search.MODE)
        self.cell_dirs = {key: str(path) for key, path in cell_dirs.items()}
        self.stop_key, self.stages, self.lookahead = stop_key, tuple(stages), lookahead
        self.subs: dict[str, Any] = {}  # "<cell>/<stage>" -> its limited Optuna searcher
        self.exhausted: set[str] = set()  # sub-searchers that proposed all their trials or said FINISHED
        self.remaining: dict[str, int] = {}  # trials a sub-searcher may still propose (the stage's count)
        self.group_of: dict[str, str] = {}  # Tune trial id -> "<cell>/<stage>", kept after the trial ends
        self.live: set[str] = set()  # trials proposed and not yet ended (an errored one rerun comes back)
        self.crashed: set[str] = set()  # trials Tune reported as errored (not tested as stopped ones)
        self.failed_cells: set[str] = set()
        self.testing: dict[str, Any] = {}  # "<cell>/<stage>" -> its stopped trials' test task (not saved)
        self.stopped: set[str] = set()  # groups with a trial that ended before its final result (ASHA's stop)

    def set_search_properties(self, metric: Any, mode: Any, config: dict, **spec: Any) -> bool:
        return True  # every sub-searcher has the metric and mode of search.make_searcher

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        self._collect_tests()
        waiting = False
        for cell, stage in proposal_order(list(self.cell_dirs), getattr(self, "lookahead", 1)):
            outcome = self._suggest_from(cell, stage, trial_id)
            if isinstance(outcome, dict):
                return outcome
            waiting = waiting or outcome == "waiting"
        return None if waiting else Searcher.FINISHED

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        group = self.group_of.get(trial_id)
        if group in self.subs:
            self.live.add(trial_id)  # an errored trial that Tune runs again (resume_errored) is live again
            self.crashed.discard(trial_id)
            self.subs[group].on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None,
                          error: bool = False) -> None:
        if stopping.is_stopping(self.stop_key):
            return  # a trial ended by the stop is not finished: Optuna and the stage states must not count it
        group = self.group_of.get(trial_id)
        self.live.discard(trial_id)
        if error:
            self.crashed.add(trial_id)
        if group not in self.subs:
            return
        self.subs[group].on_trial_complete(trial_id, result, error=error)
        if not error and "status" not in (result or {}):  # a completed trial's last report is final_metrics
            self.stopped.add(group)
        self._close_if_done(group)

    # -- one (cell, stage)
    def _suggest_from(self, cell: str, stage: str, trial_id: str) -> dict[str, Any] | str | None:
        """Params for a trial, "waiting" when the stage may still propose some later, None when it is over."""
        if cell in self.failed_cells:
            return None
        group = f"{cell}/{stage}"
        try:
            state = self._state(cell)
            if stage in state.stage_status or stage not in self.stages:
                return None
            if group in self.exhausted:
                return "waiting"  # its last trials still run
            if group not in self.subs and not self._open(cell, stage, state):
                return None if stage in state.stage_status else "waiting"
            params = self.subs[group].suggest(trial_id)
        except Exception:  # noqa: BLE001 - one broken cell must not stop the others
            self._fail(cell)
            return None
        if isinstance(params, dict):
            self.group_of[trial_id] = group
            self.live.add(trial_id)
            self.remaining[group] -= 1
            if not self.remaining[group]:
                self.exhausted.add(group)
            return {**params, LINEAGE_KEY: self._lineage(cell, stage, state)}
        if params == Searcher.FINISHED:
            self.exhausted.add(group)
            self._close_if_done(group)
            return None if stage in state.stage_status else "waiting"
        return "waiting"  # at its max_concurrent

    def _open(self, cell: str, stage: str, state: StudyState) -> bool:
        """Create the stage's searcher if it can start now (finetuning: once pretraining is over)."""
        study_dir = Path(self.cell_dirs[cell])
        if not protocol.can_start(stage, lambda before: stage_finished(state.stage_status.get(before))):
            return False
        if protocol.prerequisite(stage) and not studies.select_pretraining(study_dir, state):
            study_state.set_stage_status(study_dir, state, stage, protocol.NO_PRETRAINING)
            return False
        options = state.options
        opened = domain.cell_at(study_dir).stages[stage]
        self.remaining[f"{cell}/{stage}"] = opened.trials
        self.subs[f"{cell}/{stage}"] = search.limit(
            search.make_searcher(opened.grid, options.sampler, options.seed,
                                 journal=study_dir / files.OPTUNA_JOURNAL,
                                 study_name=journal.optuna_study_name(study_dir, stage)),
            options.max_concurrent)
        return True

    def _close_if_done(self, group: str) -> None:
        """Its last trial ended: a grid whose best sits at an edge extends (records.bracketing); else ASHA's
        stopped trials get their test metric, then the stage is done."""
        cell, stage = group.rsplit("/", 1)
        state = self._state(cell)
        running = any(self.group_of[t] == group for t in self.live)
        if group in self.exhausted and not running and stage not in state.stage_status and group not in self.testing:
            study_dir = Path(self.cell_dirs[cell])
            if state.options.extend_grids and self._extend(cell, stage, state):
                return
            if group not in getattr(self, "stopped", {group}):  # no trial to test: a new worker would cost seconds
                study_state.set_stage_status(study_dir, state, stage, DONE)
                return
            # In a Ray task on a trial node, never in the driver: the head takes no trials.
            self.testing[group] = stopped.test_on_worker(domain.cell_at(study_dir).stages[stage].spec,
                                                         frozenset(self.crashed))

    def _collect_tests(self) -> None:
        """Mark done each stage whose stopped trials' test task ended (a failed task fails its cell; a
        resume tests them again). After a restore, the stages whose last trial ended before the snapshot
        but were not marked done start their task again."""
        if not getattr(self, "rechecked", False):
            self.rechecked = True
            for group in list(self.exhausted):
                self._close_if_done(group)
        for group, error in stopped.ended(self.testing):
            cell, stage = group.rsplit("/", 1)
            del self.testing[group]
            if error is not None:
                log.error("%s %s: testing the stopped trials failed: %s", cell, stage, error)
                self._fail(cell)
                continue
            study_state.set_stage_status(self.cell_dirs[cell], self._state(cell), stage, DONE)

    def _extend(self, cell: str, stage: str, state: StudyState) -> bool:
        """Open a searcher over the stage's next points beyond its grid's edges; False when there are none.
        Each round is its own Optuna study in the journal (the points are enqueued: they are the round)."""
        study_dir, group = Path(self.cell_dirs[cell]), f"{cell}/{stage}"
        points = bracketing.extend(study_dir, state, stage, self.group_of.keys())
        if not points:
            return False
        space = domain.stage_space(state, stage)
        rounds = len(state.extensions.get(stage, ()))
        self.subs[group] = search.limit(
            search.make_searcher(dataclasses.replace(space, points=points), state.options.sampler, state.options.seed,
                                 journal=study_dir / files.OPTUNA_JOURNAL,
                                 study_name=f"{journal.optuna_study_name(study_dir, stage)}-extension-{rounds}"),
            state.options.max_concurrent)
        self.remaining[group] = len(points)
        self.exhausted.discard(group)
        log.info("%s %s: best at a grid edge, running %s", cell, stage, points)
        return True

    def _state(self, cell: str) -> StudyState:
        return domain.cell_at(self.cell_dirs[cell]).state

    def _lineage(self, cell: str, stage: str, state: StudyState) -> dict[str, Any]:
        lineage = {"name": Path(self.cell_dirs[cell]).name, "stage": stage, "cell": cell,
                   "study_dir": self.cell_dirs[cell]}
        if stage == "finetune":
            lineage.update(state.selected.lineage())
        return lineage

    def _fail(self, cell: str) -> None:
        self.failed_cells.add(cell)
        log.error("cell %s failed: %s", cell, traceback.format_exc())
        atomic.write_text(Path(self.cell_dirs[cell]) / files.CELL_ERROR, traceback.format_exc())

    # -- saved with Tune's experiment snapshots
    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as file:
            pickle.dump({k: v for k, v in self.__dict__.items() if k not in UNSAVED}, file)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as file:
            self.__dict__.update(pickle.load(file), testing={}, rechecked=False)
        for sub in self.subs.values():
            sub.searcher.reopen_journal()  # trials asked after the snapshot go back to the queue


def proposal_order(cells: list[str], lookahead: int = 1) -> Iterator[tuple[str, str]]:
    """Every cell's finetuning first (it ends a cell), then cell by cell in the given order (run_cells: seed
    by seed), each cell's pretraining `lookahead` cells early (cells_ahead). So the cells finish one after
    another, and a batch stopped part-way (a time budget, a Ctrl-C, a killed driver) keeps whole cells, and whole
    seeds, but for the pretraining of the next `lookahead` cells, rather than every cell part-way."""
    yield from ((cell, PRIORITY[0]) for cell in cells)
    places = {(cell, stage): (index - lookahead if stage == "pretrain" else index, PRIORITY.index(stage))
              for index, cell in enumerate(cells) for stage in PRIORITY[1:]}
    yield from sorted(places, key=places.get)


def cells_ahead(cluster: dict[str, float], request: dict[str, float], max_concurrent: int) -> int:
    """How many cells early a cell's pretraining is proposed: as many cells as one wave of the cluster's trial
    slots holds pretraining trials (at least 1). The SPT arm is a cell's longer chain (pretraining, then
    finetuning); proposed strictly cell by cell, the last cells' finetuning ran alone at the end of a run while
    the other slots sat idle, and a one-cell lead still left it there whenever Tune started a trial out of
    order (docs/benchmarks.md, "The engine: driver scale and slot utilization"). `cluster`:
    ray.cluster_resources() when the run starts (an autoscaler's later nodes are not counted); `request`: one
    trial's resources."""
    slots = min((int(cluster.get(kind, 0) // amount) for kind, amount in request.items() if amount > 0), default=0)
    return max(1, math.ceil(slots / max(1, max_concurrent)))


def start_rank(order: dict[tuple[str, str], int], trial: Any) -> int:
    """A pending trial's place in proposal_order (`order`: its pairs numbered), so that trials start in the
    order they would have been proposed had they all been runnable at once (GroupScheduler)."""
    lineage = trial.config[LINEAGE_KEY]
    return order.get((lineage["cell"], lineage["stage"]), len(order))


def served_dirs(cell_dirs: dict[str, Path], served: list[str]) -> dict[str, Path]:
    """The cells this run continues, and the other cells of the Tune run it restores. Tune's restore re-adds
    every trial it recorded and asks each for its resources and its spec, those of cells that finished after
    the run began included (they stay TERMINATED, or a resume's resume_errored runs a crashed one again)."""
    siblings = Path(next(iter(cell_dirs.values()))).parent
    return {**{key: siblings / key for key in served if (siblings / key / files.STUDY).is_file()}, **cell_dirs}


def served_cells(storage: Path, name: str) -> list[str]:
    """The cells the Tune run `name` was created for (runs.json)."""
    path = storage / RUNS_FILE
    return files.read_json(path).get(name, []) if path.is_file() else []


def trial_placement(resources: dict[str, dict[str, float]], config: dict[str, Any]):
    """The cell's own resource request (--cpus-per-worker, --gpus-per-worker ...), per trial."""
    from ray.tune import PlacementGroupFactory

    return PlacementGroupFactory([resources[config[LINEAGE_KEY]["cell"]]])


def group_scheduler(group: Group) -> Any:
    """ASHA for a (cell, stage) whose options ask for it at its trial count, else None (FIFO)."""
    study_dir, stage = group
    cell = domain.cell_at(study_dir)
    return search.make_scheduler(spaces.stage_asha(cell.state.options, cell.stages[stage].trials))


def group_callbacks(progress: bool, group: Group) -> list:
    """A (cell, stage)'s callbacks: the cell's tracker and (`progress`) its stage's bar."""
    from sptune.experiment.engine.progress import StageProgress

    study_dir, stage = Path(group[0]), group[1]
    cell = domain.cell_at(study_dir)
    made = loggers.callbacks(cell.state.options.logger, study_dir, stage)
    if progress:
        made.append(StageProgress(stage, cell.stages[stage].trials))
    return made


def run_cells(experiment_dir: Path, cell_dirs: dict[str, Path], stage_fn: Callable[..., None] = stage_trainable,
              verbose: int = 0, time_budget_s: float | None = None, stages: tuple[str, ...] = STAGES,
              states: dict[str, StudyState] | None = None, retry_failed: bool = False) -> None:
    """Run (or continue, from experiment_dir/tune/<run>) every stage of every unfinished cell in one Tune run, in
    this (the main) thread; finished cells are skipped (domain.continued: with `retry_failed`, not those with
    crashed trials). Every cell directory must already hold its study.json (studies.create); `states` are
    the cells' states this process already holds (the rest are read here, once). `stages` limits what this
    run proposes (a test running one stage's search). Raises interrupts.Interrupted when a signal stopped
    the run (its trials continue on a resume); a time budget ends it cleanly."""
    import ray
    from ray import tune as ray_tune
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    states = {key: (states or {}).get(key) or study_state.load(path) for key, path in cell_dirs.items()}
    cell_dirs = {key: path for key, path in cell_dirs.items() if domain.continued(path, states[key], retry_failed)}
    if not cell_dirs:
        return
    storage = experiment_dir / "tune"
    name = tune_run_name(storage, sorted(cell_dirs))
    experiment = domain.open_experiment(experiment_dir, cell_dirs, served_dirs(cell_dirs, served_cells(storage, name)),
                                        states)
    todo = [experiment.cells[key] for key in experiment.todo]
    resources.check_cluster(max(cell.state.options.gpus_per_worker for cell in todo))
    for cell in todo:
        loggers.prepare(cell.state.options.logger)
        loggers.create_experiment(cell.state.options.logger, cell.dir)
    placement = experiment.placements
    fn = ray_tune.with_resources(ray_tune.with_parameters(entry.run_trial, specs=experiment.specs, stage_fn=stage_fn),
                                 partial(trial_placement, placement))
    stop_key = stopping.key(experiment_dir, name)  # signals and --time-budget end the run at a step boundary
    if ray_tune.Tuner.can_restore(str(storage / name)):
        log.info("restoring the Tune run from %s", storage / name)
        tuner = ray_tune.Tuner.restore(str(storage / name), fn, resume_unfinished=True, resume_errored=True)
    else:
        groups = [(str(Path(path)), stage) for path in cell_dirs.values() for stage in stages]
        lookahead = cells_ahead(ray.cluster_resources(), placement[experiment.todo[0]],
                                todo[0].state.options.max_concurrent)
        order = {pair: index for index, pair in enumerate(proposal_order(list(cell_dirs), lookahead))}
        tuner = ray_tune.Tuner(fn, tune_config=ray_tune.TuneConfig(
            search_alg=CellsSearcher(cell_dirs, stop_key, stages, lookahead), num_samples=experiment.total_trials,
            scheduler=GroupScheduler(group_scheduler, partial(start_rank, order)), reuse_actors=True,
            trial_dirname_creator=_trial_name, trial_name_creator=_trial_name),
            run_config=ray_tune.RunConfig(
                name=name, storage_path=str(storage), verbose=verbose,
                # Node losses are retried without limit, other crashes max_failures times (preemption).
                failure_config=ray_tune.FailureConfig(max_failures=preemption.tune_limit(experiment.max_failures)),
                checkpoint_config=ray_tune.CheckpointConfig(num_to_keep=1),
                # Tune's own TensorBoard logger is left out: a study's TensorBoard runs are its trials'.
                callbacks=[stopping.StopAtStepBoundary(stop_key), mirroring.PushMirror(), JsonLoggerCallback(),
                           CSVLoggerCallback(), preemption.NodeLossRetries(experiment.max_failures),
                           outcomes.make_outcomes_callback(),
                           GroupCallbacks(partial(group_callbacks, len(cell_dirs) == 1),
                                          groups if len(cell_dirs) == 1 else [])]))
    fit(tuner, stop_key, experiment.concurrency, time_budget_s)


def fit(tuner: Any, stop_key: str, concurrency: int, time_budget_s: float | None) -> None:
    """tuner.fit() with the run's stop shared by the signal handler and the time budget."""
    stop = stopping.register(stop_key, time_budget_s)
    # Tune keeps one trial pending at a time behind a custom searcher (tune_controller.get_max_pending_trials):
    # a slot freed while another trial's actor starts would wait for it. The cells' own limits bound the
    # pending trials instead (queued trials are also what makes an autoscaler add nodes).
    try:
        with pending_trials(min(MAX_PENDING, concurrency)), interrupts.deferred_to(stop.event), \
                stopping.quiet_tune_stop_notes(stop_key):
            try:
                tuner.fit()
            except Exception:
                if not stop.event.is_set():
                    raise
    finally:
        stopping.unregister(stop_key)
    interrupts.raise_if_received()  # the loop ended at a step boundary because of a signal
    if stop.failure:
        raise interrupts.StorageStopped(stop.failure)
    if stop.budget_reached:
        output.say(f"time budget of {time_budget_s:g} s reached: stopped cleanly; resume to continue")


def tune_run_name(storage: Path, cells: list[str]) -> str:
    """The Tune run that serves these (unfinished) cells: the newest run if it served all of them (a resume
    after a kill or a stop: Tuner.restore), else a new run (cells added to the experiment). A finished cell
    is never passed here, so a new run never competes with an old one for a cell."""
    path = storage / RUNS_FILE
    runs: dict[str, list[str]] = files.read_json(path) if path.is_file() else {}
    if runs and set(cells) <= set(runs[list(runs)[-1]]):
        return list(runs)[-1]
    name = TUNE_NAME if not runs else f"{TUNE_NAME}-{len(runs) + 1}"
    storage.mkdir(parents=True, exist_ok=True)
    atomic.write_json(path, {**runs, name: cells})
    return name


@contextmanager
def pending_trials(count: int) -> Iterator[None]:
    """TUNE_MAX_PENDING_TRIALS_PG for this run only (a later run in the process has other cells); a value
    the user set wins."""
    if PENDING_ENV in os.environ:
        yield
        return
    os.environ[PENDING_ENV] = str(count)
    try:
        yield
    finally:
        os.environ.pop(PENDING_ENV, None)


def _trial_name(trial: Any) -> str:
    lineage = trial.config[LINEAGE_KEY]
    return f"{Path(lineage['study_dir']).name}_{lineage['stage']}_{trial.trial_id}"


# ----------------------------------------------------------------------------- a study, a multi-seed study
def run_study(study_dir: str | Path, address: str | None = None, verbose: int = 1,
              trainable: Callable[..., None] = stage_trainable, retry_failed: bool = False,
              time_budget_s: float | None = None, state: StudyState | None = None) -> list[dict[str, Any]]:
    """Run (or continue) every stage of a study, as the engine's one cell; returns the results rows (also
    in results.csv).

    `time_budget_s` bounds this driver run's wall time: the Tune loop then stops at a step boundary, its
    stages unfinished, and a resume continues them (a budget belongs to a run, not to the study).
    `retry_failed` also reruns, from their last checkpoint, the crashed trials of finished stages (a
    finished stage keeps its selection: finetuning still starts from the trial chosen before).
    `trainable` is the Tune function of each trial (stage_trainable; a test may wrap it); `verbose` is
    Tune's own verbosity (its tables go wherever stdout goes: see sptune.api and sptune.output). `state`: the
    study's state where the caller holds it (sptune.api: just created, or read to resume), else read here.
    """
    study_dir = Path(study_dir).resolve()
    state = state or study_state.load(study_dir)  # study.json read once a start
    log.info("%s", studies.describe_path(state.options))
    with ray_session(study_dir, address):
        run_cells(study_dir, {study_dir.name: study_dir}, stage_fn=trainable, verbose=verbose,
                  time_budget_s=time_budget_s, states={study_dir.name: state}, retry_failed=retry_failed)
    rows = results.collect(study_dir, state)
    results.write_csv(rows, study_dir / files.RESULTS_CSV)
    return rows


def run_stage_search(study_dir: Path, state: StudyState, stage: str, trainable: Callable[..., None],
                     verbose: int = 0) -> None:
    """One stage's search alone, inside a running Ray session (tests, benchmarks): the engine proposing
    only `stage`."""
    run_cells(Path(study_dir), {Path(study_dir).name: Path(study_dir)}, stage_fn=trainable, verbose=verbose,
              stages=(stage,), states={Path(study_dir).name: state})


def run_seeds(parent: str | Path, address: str | None = None, verbose: int = 1,
              time_budget_s: float | None = None) -> None:
    """Run (or continue) every seed's study as a cell of the engine's one Tune run, then write each seed's
    results.csv and add the run's wall time to seeds.json (the report: sptune.report.writer)."""
    parent = Path(parent).resolve()
    spec = files.read_json(parent / files.SEEDS)
    seed_dirs = {seeds.seed_dir_name(seed): parent / seeds.seed_dir_name(seed) for seed in spec["seeds"]}
    start = time.perf_counter()
    with ray_session(parent, address):
        states = {key: study_state.load(path) for key, path in seed_dirs.items()}  # once each, this start
        try:
            run_cells(parent, seed_dirs, verbose=verbose, time_budget_s=time_budget_s, states=states)
        finally:
            for key, path in seed_dirs.items():
                results.write_csv(results.collect(path, states[key]), path / files.RESULTS_CSV)
    seeds.add_wall_seconds(parent, time.perf_counter() - start)
