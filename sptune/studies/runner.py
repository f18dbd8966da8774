"""Run a study: a list of cells, each one config taken through some of the SPT stages.

A cell is one point of the study's grid (task, model, axis value, seed). It runs the stages it names:
("pretrain", "finetune", "scratch") gives the SPT arm and its scratch baseline, ("pretrain", "finetune")
an SPT arm alone (e.g. causal SPT next to a masked cell that holds the shared baseline), ("scratch",)
and ("pretrain",) one stage. Two backends run a cell, and `run_cell` is the one place that picks:

    tune   sptune.tune.pipeline: each stage's nuisance hyper-parameters (the cell's search space) are
           searched with Ray Tune + Optuna, finetuning starts from the best pretraining trial. One Ray
           instance serves the whole study. Resume: Tuner.restore inside each unfinished cell.
    plain  sptune.train.run_stage per stage at the search space's first point (the paper's reported
           best, Tables 4-6), no search. Resume: a stage whose result.json is final is skipped, an
           interrupted one continues from its last.pt. Used by the smoke tests: on 2 CPU cores Ray
           costs ~15 s per cell (3 Tune phases), against < 1 s of training for a smoke cell.

Layout of a study directory:
    plan.json                the cells and how to tabulate them (written first; a rerun must match it)
    cells/<key>/             plain: pretrain/, finetune/, scratch/ run directories
                             tune:  a pipeline study directory (study.json, <stage>/<trial>/, tune/)
    cells/<key>/error.txt    why a cell failed to run (it is retried on the next run)
    results.csv, summary.csv, table.md, *.png    written by sptune.studies.report
    study.log                everything Ray and the runs printed (the terminal shows the cells' progress)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from sptune import atomic, files, output
from sptune.config import STAGES, load as load_config
from sptune.errors import UserError
from sptune.tune.session import ray_session

log = logging.getLogger("sptune.studies")

BACKENDS = ("tune", "plain")


@dataclass(frozen=True)
class Cell:
    key: str  # directory name under cells/
    labels: dict[str, Any]  # table coordinates (task, model, seed, axis values, display column ...)
    overrides: tuple[str, ...]  # config overrides; `pretrain.optim.max_steps=...` targets one stage
    stages: tuple[str, ...] = STAGES
    # Nuisance search space {stage: {"params": {key: [values]}, "points": [{key: value}]}}; None = the
    # project's search_spaces/<task>/<model>.yaml (tune) / the config's own values (plain).
    space: dict[str, Any] | None = None
    paper: dict[str, dict[str, Any]] = field(default_factory=dict)  # arm -> {"value", "source"}


@dataclass
class Plan:
    study: str
    title: str
    axis: str  # the scientific variable(s)
    nuisance: str  # searched (tune backend) hyper-parameters
    fixed: str  # held fixed
    layout: dict[str, Any]  # how sptune.studies.report tabulates and plots the cells
    cells: list[Cell]
    smoke: bool = False
    backend: str = "tune"
    notes: list[str] = field(default_factory=list)
    commands: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cell_from_dict(data: dict[str, Any]) -> Cell:
    return Cell(key=data["key"], labels=data["labels"], overrides=tuple(data["overrides"]),
                stages=tuple(data["stages"]), space=data.get("space"), paper=data.get("paper") or {})


def load_plan(study_dir: str | Path) -> Plan:
    path = Path(study_dir) / files.PLAN
    if not path.is_file():
        raise UserError(f"{study_dir} is not a study directory (no {files.PLAN}); run a script in studies/ first")
    data = files.read_json(path)
    data["cells"] = [cell_from_dict(c) for c in data["cells"]]
    return Plan(**data)


def save_plan(study_dir: Path, plan: Plan) -> None:
    """Write plan.json; a rerun into the same directory must ask for the same cells (that is a resume)."""
    path = study_dir / files.PLAN
    if path.is_file():
        old = load_plan(study_dir)
        if [(c.key, c.overrides, c.stages) for c in old.cells] != [(c.key, c.overrides, c.stages) for c in plan.cells]:
            raise UserError(f"{study_dir} holds a different grid of this study (flags changed?); "
                            f"rerun with the original flags to resume, or pass another --dir")
    atomic.write_json(path, plan.to_dict())


# ----------------------------------------------------------------------------- search spaces
def fixed_space(values: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A space with one point per stage: the study fixes these values (e.g. Appendix C.1.4)."""
    return {stage: {"params": {k: [v] for k, v in point.items()}, "points": [point]}
            for stage, point in values.items()}


def repo_space(cell: Cell) -> dict[str, Any] | None:
    """The project's search_spaces/<task>/<model>.yaml as a cell space, for cells that declare none."""
    from sptune.tune import search

    cfg = load_config(None, list(cell.overrides))
    try:
        loaded = search.load(search.default_path(cfg.task.name, cfg.model.name))
    except UserError:
        return None
    return {s: {"params": sp.params, "points": sp.points} for s, sp in loaded.stages.items()}


def plain_point(space: dict[str, Any] | None, stage: str) -> list[str]:
    """The plain backend's values for a stage: the first point, else the first value of each grid."""
    if not space or stage not in space:
        return []
    spec = space[stage]
    point = spec["points"][0] if spec.get("points") else {
        key: values[0] if isinstance(values, list) else next(iter(values.values()))[0]
        for key, values in spec["params"].items()}
    return [f"{key}={value}" for key, value in point.items()]


# ----------------------------------------------------------------------------- plain backend
def run_cell_plain(cell: Cell, cell_dir: Path) -> None:
    from sptune import train

    for stage in [s for s in STAGES if s in cell.stages]:
        run_dir = cell_dir / stage
        if files.finished_result(run_dir) is not None:
            continue
        init_from = None
        if stage == "finetune":
            if files.finished_result(cell_dir / "pretrain")["status"] == "failed":
                continue  # nothing to finetune; the report shows the SPT arm as failed, with the reason
            init_from = cell_dir / "pretrain"
        space = cell.space if cell.space is not None else repo_space(cell)
        cfg = load_config(None, list(cell.overrides) + plain_point(space, stage) + ["run.progress=false"],
                          stage=stage)
        train.run_stage(cfg, stage, init_from=init_from, run_dir=run_dir)


def plain_rows(cell: Cell, cell_dir: Path) -> list[dict[str, Any]]:
    from sptune import results

    rows = []
    for stage in [s for s in STAGES if s in cell.stages]:
        result = files.finished_result(cell_dir / stage)
        if result is None:
            continue
        cfg = load_config(cell_dir / stage / files.CONFIG)
        rows.append({"stage": stage, "trial_id": "plain", "selected": True, "selected_by": "no search",
                     "devices": 1, "optim.lr": cfg.optim.lr, "optim.batch_size": cfg.optim.batch_size,
                     **{k: result.get(k) for k in results.RESULT_KEYS}, "run_dir": str(cell_dir / stage)})
    return rows


# ----------------------------------------------------------------------------- tune backend
@dataclass
class TuneOptions:
    num_samples: int | None = None
    max_concurrent: int | None = None
    cpus_per_trial: float | None = None
    gpus_per_trial: float | None = None
    address: str | None = None


def _space_file(cell: Cell, cell_dir: Path) -> str:
    """The cell's search space as a pipeline search-space file (every stage present, as it requires)."""
    from sptune.tune import search

    cfg = load_config(None, list(cell.overrides))
    if cell.space is None:
        return str(search.default_path(cfg.task.name, cfg.model.name))
    stages = dict(cell.space)
    filler = next(iter(stages.values()))  # a stage the cell skips is never searched
    data = {"task": cfg.task.name, "model": cfg.model.name, "num_samples": 1000, "max_concurrent": 2,
            "resources": {"workers": 1, "cpus_per_worker": 1, "gpus_per_worker": 0},
            "stages": {s: stages.get(s, filler) for s in STAGES}}
    path = cell_dir / "space.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def run_cell_tune(cell: Cell, cell_dir: Path, options: TuneOptions) -> None:
    from sptune.tune import pipeline

    if not (cell_dir / files.STUDY).is_file():
        cell_dir.mkdir(parents=True, exist_ok=True)
        opts = pipeline.Options(num_samples=options.num_samples, max_concurrent=options.max_concurrent,
                                cpus_per_worker=options.cpus_per_trial, gpus_per_worker=options.gpus_per_trial)
        pipeline.create(None, list(cell.overrides), cell_dir, _space_file(cell, cell_dir), opts)
        state = pipeline.load_state(cell_dir)
        for phase in STAGES:
            if phase not in cell.stages:
                state["phases"][phase] = "skipped: not part of this study cell"
        pipeline.save_state(cell_dir, state)
    pipeline.run(cell_dir, verbose=0)


def tune_rows(cell_dir: Path) -> list[dict[str, Any]]:
    from sptune import results

    rows = results.collect(cell_dir)
    for row in rows:
        row.setdefault("devices", 1)
    return rows


def tune_done(cell: Cell, cell_dir: Path) -> bool:

    path = cell_dir / files.STUDY
    if not path.is_file():
        return False
    phases = files.read_json(path).get("phases", {})
    return all(str(phases.get(s, "")) == "done" or str(phases.get(s, "")).startswith("skipped") for s in STAGES)


# ----------------------------------------------------------------------------- the study loop
def cell_rows(cell: Cell, cell_dir: Path) -> list[dict[str, Any]]:
    """Every trial of a cell, from whichever backend ran it (a pipeline study has study.json)."""

    return tune_rows(cell_dir) if (cell_dir / files.STUDY).is_file() else plain_rows(cell, cell_dir)


def cell_done(cell: Cell, cell_dir: Path, backend: str) -> bool:
    if backend == "tune":
        return tune_done(cell, cell_dir)
    results = {s: files.finished_result(cell_dir / s) for s in cell.stages}
    pretraining_failed = (results.get("pretrain") or {}).get("status") == "failed"
    return all(r is not None or (s == "finetune" and pretraining_failed) for s, r in results.items())


def run_cell(cell: Cell, cell_dir: Path, backend: str, options: TuneOptions) -> None:
    """The one switch between the backends."""
    if backend == "tune":
        run_cell_tune(cell, cell_dir, options)
    else:
        run_cell_plain(cell, cell_dir)


def run_study(study_dir: str | Path, plan: Plan, options: TuneOptions | None = None,
              on_cell: Callable[[Cell, str, float], None] | None = None) -> list[str]:
    """Run every unfinished cell (finished ones are skipped: rerunning is resuming). Returns the keys of
    cells that failed to run; their error is in cells/<key>/error.txt and they are retried next time.
    `on_cell(cell, "done" | "failed", seconds)` is called after each cell that ran."""
    if plan.backend not in BACKENDS:
        raise UserError(f"--backend {plan.backend!r}; choose one of: {', '.join(BACKENDS)}")
    study_dir = Path(study_dir).resolve()
    study_dir.mkdir(parents=True, exist_ok=True)
    save_plan(study_dir, plan)
    options = options or TuneOptions()
    failed = []
    todo = [c for c in plan.cells if not cell_done(c, study_dir / files.CELLS / c.key, plan.backend)]
    session = ray_session(study_dir, options.address) if plan.backend == "tune" and todo else _nothing()
    with session:
        for cell in todo:
            cell_dir = study_dir / files.CELLS / cell.key
            start = time.perf_counter()
            try:
                run_cell(cell, cell_dir, plan.backend, options)
                (cell_dir / files.CELL_ERROR).unlink(missing_ok=True)
            except Exception as exc:  # noqa: BLE001 - one broken cell must not stop the others
                cell_dir.mkdir(parents=True, exist_ok=True)
                (cell_dir / files.CELL_ERROR).write_text(f"{type(exc).__name__}: {exc}\n\n{traceback.format_exc()}")
                failed.append(cell.key)
                log.error("cell %s failed: %s", cell.key, exc)
            if on_cell is not None:
                on_cell(cell, "failed" if cell.key in failed else "done", time.perf_counter() - start)
    return failed


class CellProgress:
    """Cells done / total on the study's console, with an ETA from the cells finished in this run:
    a bar on a terminal, and one line per finished cell."""

    def __init__(self, console: output.Console, total: int, finished: int):
        self.console, self.total, self.done, self.ran = console, total, finished, 0
        self.start = time.monotonic()
        self.bar = console.bar(total, f"cells {finished}/{total}", initial=finished)

    def __call__(self, cell: Cell, status: str, seconds: float) -> None:
        self.done, self.ran = self.done + 1, self.ran + 1
        eta = output.eta(time.monotonic() - self.start, self.ran, self.total - self.done)
        self.console.line(f"[{self.done}/{self.total}] {cell.key}: {status} in {seconds:.0f} s"
                          + (f"  (ETA {eta})" if self.done < self.total else ""))
        if self.bar is not None:
            self.bar.set_description_str(f"cells {self.done}/{self.total}", refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# ----------------------------------------------------------------------------- the scripts' command line
def parse_args(description: str, argv: list[str] | None = None,
               extra: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke-test", action="store_true",
                        help="the whole study on the embedded tasks with tiny models (minutes on 2 CPU cores)")
    parser.add_argument("--dir", help="study directory (default: runs/studies/<study>[-smoke])")
    parser.add_argument("--backend", choices=BACKENDS,
                        help="tune: Ray Tune + Optuna search per stage (default); plain: the paper's values, "
                             "no search (default with --smoke-test)")
    parser.add_argument("--seeds", type=int, nargs="+", help="training seeds (an axis of every study)")
    parser.add_argument("--num-samples", type=int, help="tune: trials per stage (default: the whole grid)")
    parser.add_argument("--max-concurrent", type=int, help="tune: trials at once")
    parser.add_argument("--cpus-per-trial", type=float, help="tune: CPUs per trial")
    parser.add_argument("--gpus-per-trial", type=float, help="tune: GPUs per trial")
    parser.add_argument("--address", help="tune: Ray cluster to join (default: a local Ray instance)")
    if extra is not None:
        extra(parser)
    args = parser.parse_args(argv)
    args.backend = args.backend or ("plain" if args.smoke_test else "tune")
    return args


def main(study: str, build_plan: Callable[[argparse.Namespace], Plan], description: str,
         argv: list[str] | None = None, extra: Callable[[argparse.ArgumentParser], None] | None = None) -> int:
    """Entry point of every studies/*.py script: build the plan, run it, write the report."""
    from sptune.studies import report

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        args = parse_args(description, argv, extra)
        plan = build_plan(args)
        plan.backend, plan.smoke = args.backend, args.smoke_test
        study_dir = Path(args.dir or Path("runs") / "studies" / (study + ("-smoke" if args.smoke_test else "")))
        log_path = study_dir.resolve() / files.STUDY_LOG
        # Ray, Tune and the trials print into the log; the terminal gets the cells' progress.
        with output.captured(log_path, show_trials=False) as console:
            console.line(f"{plan.title}: {len(plan.cells)} cells, backend {plan.backend} -> {study_dir}")
            console.line(f"log: {log_path}")
            finished = [c for c in plan.cells if cell_done(c, study_dir.resolve() / files.CELLS / c.key, plan.backend)]
            if finished:
                console.line(f"resuming: {len(finished)} of {len(plan.cells)} cells already finished, skipped")
            options = TuneOptions(args.num_samples, args.max_concurrent, args.cpus_per_trial, args.gpus_per_trial,
                                  args.address)
            progress = CellProgress(console, len(plan.cells), len(finished))
            try:
                failed = run_study(study_dir, plan, options, on_cell=progress)
            finally:
                progress.close()
            paths = report.write(study_dir)
    except UserError as exc:
        print(f"sptune: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    print(f"table: {paths['table']}")
    for png in paths["plots"]:
        print(f"plot:  {png}")
    print(f"log:   {log_path}")
    if failed:
        print(f"{len(failed)} cell(s) failed (see cells/<key>/{files.CELL_ERROR}): {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
