"""Run a paper experiment: every unfinished cell of its plan, by one of two backends:

    tune   each cell is a study (its directory a study directory: sptune.records.studies.create), and ONE
           Ray Tune run serves every cell (sptune.experiment.engine.driver): its searcher proposes every cell's
           pretraining and scratch trials from the start and a cell's finetuning trials once that cell's
           pretraining selection is final, so the cells' trials share the cluster's slots and a cell
           waiting on its own pretraining leaves no slot idle. Resume: Tuner.restore of that run.
    plain  sptune.run.train.run_stage per stage at the search space's first point (the paper's reported
           best, Tables 4-6), no search. On a cluster (--address or RAY_ADDRESS) each cell is a Ray task
           with the cells' resource flags; without one, an explicit local mode trains in this process
           (the smoke tests: on 2 CPU cores Ray costs seconds per run, against < 1 s of training for a
           smoke cell). Resume: a stage whose result.json is final is skipped, an interrupted one
           continues from its last.pt.

Layout of an experiment directory:
    plan.json                the cells and how to tabulate them (written first; a rerun must match it)
    cells/<key>/             plain: pretrain/, finetune/, scratch/ run directories
                             tune:  a study directory (study.json, <stage>/<trial>/, tune/)
    cells/<key>/error.txt    why a cell failed to run (it is retried on the next run)
    results.csv, summary.csv, table.md, *.png    written by sptune.report.tables
    tune/experiment/         the experiment's Tune run (tune backend), for Tuner.restore
    study.log                everything Ray and the runs printed (the terminal shows the cells' progress)
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable

from sptune import atomic, files, output
from sptune.config import STAGES, load as load_config
from sptune.errors import UserError
from sptune.experiment.engine import domain
from sptune.experiment.engine.session import ray_session
from sptune.experiment.plan import BACKENDS, Cell, Plan, plain_point, repo_space, save_plan, study_space
from sptune.records import results, study_state
from sptune.search.options import Options

log = logging.getLogger("sptune.experiment")


# ----------------------------------------------------------------------------- plain backend
def run_cell_plain(cell: Cell, cell_dir: Path) -> None:
    from sptune.run import train

    space = cell.space if cell.space is not None else repo_space(cell)
    train.run_protocol(lambda stage: plain_config(cell, space, stage), cell.stages, lambda stage: cell_dir / stage)


def plain_rows(cell: Cell, cell_dir: Path) -> list[dict[str, Any]]:
    rows = []
    for stage in [s for s in STAGES if s in cell.stages]:
        result = files.finished_result(cell_dir / stage)
        if result is None:
            continue
        cfg = load_config(cell_dir / stage / files.CONFIG)
        rows.append({"stage": stage, "trial_id": "plain", "selected": True, "selected_by": "no search",
                     "devices": 1, "optim.lr": cfg.optim.lr, "optim.batch_size": cfg.optim.batch_size,
                     **{k: result.get(k) for k in results.RESULT_KEYS}, "device": results.device_name(result),
                     "run_dir": str(cell_dir / stage)})
    return rows


def plain_done(cell: Cell, cell_dir: Path) -> bool:
    finished = {s: files.finished_result(cell_dir / s) for s in cell.stages}
    pretraining_failed = (finished.get("pretrain") or {}).get("status") == "failed"
    return all(r is not None or (s == "finetune" and pretraining_failed) for s, r in finished.items())


# ----------------------------------------------------------------------------- tune backend
def cell_budget(cell: Cell, backend: str, options: Options) -> list[Any]:
    """The cell's stages as sptune.experiment.budget counts them: its study's search (tune), or one run per
    stage at the plain backend's values (plain). Nothing is written."""
    from sptune.experiment import budget
    from sptune.records import studies

    stages = tuple(s for s in STAGES if s in cell.stages)
    if backend == "plain":
        space = cell.space if cell.space is not None else repo_space(cell)
        return [budget.stage_budget(plain_config(cell, space, stage).to_dict(), stage, 1, [{}], cell.key)
                for stage in stages]
    state = studies.resolve(None, list(cell.overrides), options=options, space=study_space(cell, Path(cell.key)),
                             check_rungs=False)
    return budget.study_budget(state, cell.key, stages)


def plain_config(cell: Cell, space: dict[str, Any] | None, stage: str):
    """A stage's config under the plain backend: the cell's overrides and the space's first point."""
    return load_config(None, list(cell.overrides) + plain_point(space, stage) + ["run.progress=false"], stage=stage)


def create_cell_study(cell: Cell, cell_dir: Path, options: Options, state: Any = None) -> Any:
    """The cell's study (studies.create) once, its state returned: its stages then run in the experiment's
    Tune run. `state`: the study.json this start read, if the cell has one."""
    from sptune.records import studies

    if state is not None:
        return state
    cell_dir.mkdir(parents=True, exist_ok=True)
    state = studies.create(None, list(cell.overrides), cell_dir, options=options, space=study_space(cell, cell_dir))
    for stage in STAGES:
        if stage not in cell.stages:
            state.stage_status[stage] = "skipped: not part of this experiment cell"
    study_state.save(cell_dir, state)
    return state


def run_cells_tune(experiment_dir: Path, cells: list[Cell], options: Options, address: str | None,
                   on_cell: Callable[[Cell, str, float], None] | None,
                   trainable: Callable[..., None] | None = None, states: dict[str, Any] | None = None) -> list[str]:
    """Every cell's study in one Tune run (sptune.experiment.engine.driver), so the cells share the cluster's slots.
    Returns the keys of the cells that failed or did not finish. `on_cell` is called for each cell once
    the Tune run returns, still inside the Ray session (a caller may inspect what the cell left in Ray)."""
    from sptune.experiment.engine import driver

    cell_dirs, states = {}, dict(states or {})
    for cell in sorted(cells, key=seed_rank):  # seed by seed: the engine proposes cell by cell (proposal_order)
        cell_dir = experiment_dir / files.CELLS / cell.key
        try:
            states[cell.key] = create_cell_study(cell, cell_dir, options, states.get(cell.key))
            cell_dirs[cell.key] = cell_dir
        except Exception as exc:  # noqa: BLE001 - one broken cell must not stop the others
            record_error(cell, cell_dir, exc)
    with ray_session(experiment_dir, address) if cell_dirs else nullcontext():
        if cell_dirs:
            driver.run_cells(experiment_dir, cell_dirs, **({"stage_fn": trainable} if trainable else {}),
                             time_budget_s=getattr(options, "time_budget_s", None), states=states)
        return [cell.key for cell in cells
                if not _report_cell(cell, cell_dirs.get(cell.key), states.get(cell.key), on_cell)]


def seed_rank(cell: Cell) -> tuple[bool, Any]:
    """Cells of one seed together, in seed order (the plan's order within a seed; cells without a seed last).
    A comparison is paired within a seed, so a batch stopped part-way is worth its whole seeds only."""
    seed = cell.labels.get("seed")
    return seed is None, seed if seed is not None else 0


def _report_cell(cell: Cell, cell_dir: Path | None, state: Any,
                 on_cell: Callable[[Cell, str, float], None] | None) -> bool:
    """The cells share one Tune run and all end with it, so a cell's own cost is its trials' device-seconds
    (its wall time would be the whole run's). `state`: the cell's study state the engine kept current."""
    done = cell_dir is not None and domain.cell_finished(state)
    if done:
        (cell_dir / files.CELL_ERROR).unlink(missing_ok=True)
    if on_cell is not None:
        rows = results.collect(cell_dir, state) if cell_dir is not None else []
        status = "done" if done else "failed" if cell_dir is None else cell_status(cell_dir)
        on_cell(cell, status, sum(r.get("device_seconds") or 0.0 for r in rows))
    return done


def cell_status(cell_dir: Path) -> str:
    """Why a cell that is not done is not: "failed" (its error.txt says why) or "unfinished" (a time budget
    or a stop ended the run first: the same command continues it)."""
    return "failed" if (cell_dir / files.CELL_ERROR).is_file() else "unfinished"


# ----------------------------------------------------------------------------- the experiment loop
def cell_rows(cell: Cell, cell_dir: Path) -> list[dict[str, Any]]:
    """Every trial of a cell, from whichever backend ran it (a study has study.json)."""
    if not (cell_dir / files.STUDY).is_file():
        return plain_rows(cell, cell_dir)
    rows = results.collect(cell_dir)
    for row in rows:
        row.setdefault("devices", 1)
    return rows


def experiment_rows(experiment_dir: Path, plan: Plan) -> list[dict[str, Any]]:
    """Every trial of every cell, with the cell's columns (experiment, cell, labels): the long-format results."""
    rows = []
    for cell in plan.cells:
        for row in cell_rows(cell, experiment_dir / files.CELLS / cell.key):
            row = {**cell.labels, **row, "experiment": plan.experiment, "cell": cell.key}
            row["device_seconds"] = results.device_seconds(row) if row.get("train_seconds") is not None else 0.0
            rows.append(row)
    return rows


def cell_columns(plan: Plan) -> list[str]:
    """The columns an experiment's results.csv puts before a study's: experiment, cell, the cells' labels."""
    return ["experiment", "cell", *dict.fromkeys(k for cell in plan.cells for k in cell.labels)]


def on_cluster(address: str | None) -> bool:
    """--address given, or RAY_ADDRESS set (as `ray job submit` sets it inside a job)."""
    return bool(address or os.environ.get("RAY_ADDRESS"))


def run_cells_plain(experiment_dir: Path, cells: list[Cell], options: Options, address: str | None,
                    on_cell: Callable[[Cell, str, float], None] | None) -> list[str]:
    """On a cluster each cell is a Ray task with the cells' resource flags, so training runs on the workers,
    never in the driver. Without one, the explicit local mode: the cells train in this process, one after
    another (a smoke cell trains in < 1 s; a Ray session costs seconds, and CI is at its time budget)."""
    if not on_cluster(address):
        log.info("plain backend, local mode: no cluster given, the cells train in this process")
        return [cell.key for cell in cells if not _run_guarded(cell, experiment_dir, run_cell_plain, on_cell)]
    import ray

    log.info("plain backend on the cluster: one Ray task per cell")
    cpus = options.cpus_per_worker or 1
    remote = ray.remote(num_cpus=cpus, num_gpus=options.gpus_per_worker or 0)(run_cell_plain)
    with ray_session(experiment_dir, address):
        pending = {cell.key: remote.remote(cell, experiment_dir / files.CELLS / cell.key) for cell in cells}
        return [cell.key for cell in cells
                if not _run_guarded(cell, experiment_dir, lambda c, d: ray.get(pending[c.key]), on_cell)]


def _run_guarded(cell: Cell, experiment_dir: Path, run: Callable[[Cell, Path], Any],
                 on_cell: Callable[[Cell, str, float], None] | None) -> bool:
    cell_dir = experiment_dir / files.CELLS / cell.key
    start = time.perf_counter()
    try:
        run(cell, cell_dir)
        (cell_dir / files.CELL_ERROR).unlink(missing_ok=True)
        ok = True
    except Exception as exc:  # noqa: BLE001 - one broken cell must not stop the others
        record_error(cell, cell_dir, exc)
        ok = False
    if on_cell is not None:
        on_cell(cell, "done" if ok else "failed", time.perf_counter() - start)
    return ok


def record_error(cell: Cell, cell_dir: Path, exc: BaseException) -> None:
    cell_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_text(cell_dir / files.CELL_ERROR, f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}")
    log.error("cell %s failed: %s", cell.key, exc)


def run_experiment(experiment_dir: str | Path, plan: Plan, options: Options | None = None,
                   address: str | None = None, on_cell: Callable[[Cell, str, float], None] | None = None,
                   trainable: Callable[..., None] | None = None,
                   on_start: Callable[[int], None] = lambda finished: None) -> list[str]:
    """Run every unfinished cell (finished ones are skipped: rerunning is resuming; `on_start` hears how many
    were finished before any runs). Returns the keys of
    cells that failed or did not finish; a failure's error is in cells/<key>/error.txt, and they are
    retried next time. `on_cell(cell, "done" | "failed", seconds)` is called for each cell that ran (plain: its
    wall time; tune: once the experiment's Tune run returns, with the cell's device-seconds). `trainable` replaces the tune backend's
    trial function (tests, benchmarks: see sptune.trials.entry.run_trial)."""
    if plan.backend not in BACKENDS:
        raise UserError(f"--backend {plan.backend!r}; choose one of: {', '.join(BACKENDS)}")
    experiment_dir = Path(experiment_dir).resolve()
    experiment_dir.mkdir(parents=True, exist_ok=True)
    save_plan(experiment_dir, plan)
    options = options or Options()
    if plan.backend == "plain":
        todo = [c for c in plan.cells if not plain_done(c, experiment_dir / files.CELLS / c.key)]
        on_start(len(plan.cells) - len(todo))
        return run_cells_plain(experiment_dir, todo, options, address, on_cell) if todo else []
    # Each cell's study.json read once for this start; the engine keeps these states current.
    states = {c.key: study_state.read(experiment_dir / files.CELLS / c.key) for c in plan.cells}
    todo = [c for c in plan.cells if states[c.key] is None or not domain.cell_finished(states[c.key])]
    on_start(len(plan.cells) - len(todo))
    return run_cells_tune(experiment_dir, todo, options, address, on_cell, trainable, states) if todo else []


class CellProgress:
    """Cells done / total on the experiment's console: a bar on a terminal, and one line per finished cell.
    `live` (the plain backend, cells one after another): each line gives the cell's wall time and an ETA.
    Otherwise (the tune backend) every cell ends with the one Tune run, so a line gives the cell's
    device-seconds and no ETA."""

    def __init__(self, console: output.Console, total: int, live: bool = True):
        self.console, self.total, self.done, self.ran, self.live = console, total, 0, 0, live
        self.started, self.bar = time.monotonic(), None

    def start(self, finished: int) -> None:
        """The cells finished before this run (a resume skips them)."""
        if finished:
            self.console.line(f"resuming: {finished} of {self.total} cells already finished, skipped")
        self.done, self.started = finished, time.monotonic()
        self.bar = self.console.bar(self.total, f"cells {finished}/{self.total}", initial=finished)

    def __call__(self, cell: Cell, status: str, seconds: float) -> None:
        self.done, self.ran = self.done + 1, self.ran + 1
        head = f"[{self.done}/{self.total}] {cell.key}: {status}"
        if not self.live:
            self.console.line(f"{head}, {seconds:.0f} device-s")
        else:
            eta = output.eta(time.monotonic() - self.started, self.ran, self.total - self.done)
            self.console.line(f"{head} in {seconds:.0f} s" + (f"  (ETA {eta})" if self.done < self.total else ""))
        if self.bar is not None:
            self.bar.set_description_str(f"cells {self.done}/{self.total}", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
