"""The command lines of the paper experiments: every script in experiments/ (`main`) and `sptune report`.

    python experiments/lra_table.py --smoke-test             # an experiment script (see its header)
    sptune report runs/experiments/lra_table                # a paper experiment (plan.json): table.md, CSVs, plots
    sptune report runs/study-listops_mini_transformer      # a `sptune study` (study.json): table, results.csv,
                                                           # Optuna's plots of each stage's search (plots/)
    sptune report runs/seeds-shapes_tiny_transformer --plot docs/seeds-shapes-tiny.png   # a `study --seeds` dir

The scripts take the search and resource flags of `sptune study` (sptune.search.options); `sptune report`
trains nothing: it reads plan.json and every cell's result files (a script writes the same report at
its end; this regenerates it, e.g. after a resume or a change of layout), or a `sptune study`
directory's run directories and Optuna journal.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shlex
import sys
from pathlib import Path
from typing import Callable

from sptune import files, output
from sptune.cli import study as study_cli
from sptune.errors import UserError
from sptune.experiment.backends import CellProgress, run_experiment
from sptune.experiment.engine import interrupts
from sptune.experiment.plan import BACKENDS, Plan
from sptune.experiment.settings import FIRST_SELECTION_SEEDS
from sptune.search import options as search_options


# ----------------------------------------------------------------------------- the scripts in experiments/
def build_parser(description: str, extra: Callable[[argparse.ArgumentParser], None] | None = None,
                 selection_seeds: tuple[int, ...] = FIRST_SELECTION_SEEDS, prog: str | None = None,
                 add_help: bool = True) -> argparse.ArgumentParser:
    """The command line of an experiment: its flags, the search and resource flags of `sptune study`, `extra`'s."""
    parser = argparse.ArgumentParser(prog=prog, description=description, add_help=add_help,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke-test", action="store_true",
                        help="the whole experiment on the embedded tasks with tiny models (minutes on 2 CPU cores)")
    parser.add_argument("--dir", help="experiment directory (default: runs/experiments/<experiment>[-smoke])")
    parser.add_argument("--backend", choices=BACKENDS,
                        help="tune: each cell a study, Ray Tune + Optuna search per stage (default); plain: the "
                             "paper's values, no search (default with --smoke-test)")
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", nargs="+", help="training seeds (an axis of every experiment)")
    seeds.add_argument("--fresh-seeds", type=int, metavar="N",
                       help="N seeds that chose nothing: the N seeds after every seed this experiment's settings "
                            f"were chosen on (selection seeds {', '.join(map(str, selection_seeds))}), to confirm")
    parser.add_argument("--storage", metavar="URI",
                        help="mirror the experiment to object storage under URI/<directory name> (s3://bucket/prefix) "
                             "so it outlives the cluster; the same command with the same --storage continues it, "
                             "pulling the folder back when it is gone")
    parser.add_argument("--resample-splits", action="store_true",
                        help="each seed draws its own train / val split from its seed (task.resample_splits=true "
                             "on every cell; the test set stays fixed), so the seed intervals also cover "
                             "split-to-split variation; for tasks whose val split comes from train (ucr-*, files "
                             "without val); its own default directory (<experiment>-resampled)")
    parser.add_argument("--plan", action="store_true",
                        help="print the budget instead of running: trials per cell and stage, FLOPs, device-hours "
                             "here and on --gpu (nothing trains, no directory is made)")
    study_cli.budget_flags(parser)
    group = parser.add_argument_group("tune backend (the options of `sptune study`)")
    search_options.add_options(group)
    if extra is not None:
        extra(parser)
    return parser


def parse_args(description: str, argv: list[str] | None = None,
               extra: Callable[[argparse.ArgumentParser], None] | None = None,
               selection_seeds: tuple[int, ...] = FIRST_SELECTION_SEEDS, prog: str | None = None) -> argparse.Namespace:
    parser = build_parser(description, extra, selection_seeds, prog)
    args = parser.parse_args(argv)
    if args.seeds:
        args.seeds = seed_list(parser, args)
    args.backend = args.backend or ("plain" if args.smoke_test else "tune")
    if args.fresh_seeds is not None:
        args.seeds = fresh_seeds(args.fresh_seeds, selection_seeds)
    return args


def seed_list(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[int]:
    """--seeds as integers; `--seeds 0 1 optim.lr=1e-3` ends where the section.field=value overrides begin
    (for a command line that takes them)."""
    overrides = [item for item in args.seeds if "=" in item]
    if overrides and not hasattr(args, "overrides"):
        parser.error(f"unrecognized arguments: {' '.join(overrides)}")
    if overrides:
        args.overrides = [*args.overrides, *overrides]
    values = [item for item in args.seeds if "=" not in item]
    if not values or any(not v.lstrip("-").isdigit() for v in values):
        parser.error(f"argument --seeds: takes integers, got {' '.join(values) or 'none'}")
    return [int(v) for v in values]


def fresh_seeds(count: int, selection_seeds: tuple[int, ...]) -> list[int]:
    """`count` confirmation seeds: those after the last seed that chose a setting (grids, budgets), so a
    confirmation never reuses a seed whose validation numbers shaped what it tests."""
    if count < 1:
        raise UserError(f"--fresh-seeds needs N >= 1, got {count}")
    first = max(selection_seeds) + 1
    return list(range(first, first + count))


def default_dir(experiment: str, args: argparse.Namespace, root: Path = Path("runs") / "experiments") -> Path:
    """<root>/<experiment>[-smoke|-cpu[-first-budget]] (root runs/experiments): a variant's grid is another
    experiment, in its own directory (so a rerun of one never meets the other's plan)."""
    variant = "-smoke" if args.smoke_test else "-cpu" if getattr(args, "cpu", False) else ""
    variant += "-first-budget" if variant == "-cpu" and getattr(args, "first_budget", False) else ""
    variant += "-resampled" if getattr(args, "resample_splits", False) else ""
    return root / (experiment + variant)


RESAMPLE = "task.resample_splits=true"


def resampled(plan: Plan) -> Plan:
    """The plan with every cell's train / val split drawn from its seed (--resample-splits); a one-line UserError
    when a cell's task has splits fixed by its source."""
    from sptune.config import load as load_config
    from sptune.registry import task_of
    from sptune.tasks.base import check_resample

    cells = [dataclasses.replace(c, overrides=(*c.overrides, RESAMPLE)) for c in plan.cells]
    for task in {(cfg.name, cfg.path): cfg for cfg in (load_config(None, list(c.overrides)).task for c in cells)}.values():
        check_resample(task_of(task))
    note = (f"--resample-splits ({RESAMPLE}): each seed trains and selects on its own train / val split (the test "
            f"set is fixed), so the seed intervals include split-to-split variation")
    return dataclasses.replace(plan, cells=cells, notes=[*plan.notes, note])


def main(experiment: str, build_plan: Callable[[argparse.Namespace], Plan], description: str,
         argv: list[str] | None = None, extra: Callable[[argparse.ArgumentParser], None] | None = None,
         selection_seeds: tuple[int, ...] = FIRST_SELECTION_SEEDS, root: Path = Path("runs") / "experiments",
         prog: str | None = None) -> int:
    """Entry point of every experiments/*.py script and of `sptune evaluate`: build the plan, run it, write the
    report. `selection_seeds`: the seeds whose validation numbers chose the experiment's settings (--fresh-seeds
    starts after them); `root`: where the default directory lies."""
    from sptune.report import writer

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    interrupts.install("python " + shlex.join(sys.argv))
    try:
        args = parse_args(description, argv, extra, selection_seeds, prog)
        plan = build_plan(args)
        if args.resample_splits:
            plan = resampled(plan)
        plan.backend, plan.smoke = args.backend, args.smoke_test
        if args.plan:
            print_budget(plan, search_options.from_args(args), args)
            return 0
        experiment_dir = Path(args.dir or default_dir(experiment, args, root))
        if args.storage:
            from sptune.records import storage

            mirrored_to = storage.attach_or_pull(experiment_dir, args.storage)
        log_path = experiment_dir.resolve() / files.STUDY_LOG
        # Ray, Tune and the trials print into the log; the terminal gets the cells' progress.
        with output.captured(log_path, show_trials=False) as console:
            console.line(f"{plan.title}: {len(plan.cells)} cells, backend {plan.backend} -> {experiment_dir}")
            console.line(f"log: {log_path}")
            if args.storage:
                console.line(f"mirrored to {mirrored_to}")
            for line in plan.preamble:
                console.line(line)
            if args.fresh_seeds:
                console.line(f"--fresh-seeds {args.fresh_seeds}: seeds {args.seeds[0]}-{args.seeds[-1]}, after the "
                             f"selection seeds {', '.join(map(str, selection_seeds))}")
            progress = CellProgress(console, len(plan.cells), live=plan.backend == "plain")
            from sptune.experiment.engine import mirroring  # imports Ray Tune: only once an experiment runs

            with mirroring.mirrored(experiment_dir.resolve()):  # pushed as trials finish and once at the end
                try:
                    not_done = run_experiment(experiment_dir, plan, search_options.from_args(args), args.address,
                                              on_cell=progress, on_start=progress.start)
                finally:
                    progress.close()
                written = writer.write(experiment_dir)
    except UserError as exc:
        print(f"sptune: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        return interrupts.stopped(stop, "the same command")
    if written.text:
        print(written.text)
    print(f"table: {written.table}")
    for png in written.plots:
        print(f"plot:  {png}")
    print(f"log:   {log_path}")
    return not_done_exit(experiment_dir, not_done)


def not_done_exit(experiment_dir: Path, not_done: list[str]) -> int:
    """0 when every cell is done; else 1, with a line for the cells that failed (their error.txt says why)
    and one for those a time budget or a stop left unfinished (the same command continues them)."""
    from sptune.experiment.backends import cell_status

    failed = [key for key in not_done if cell_status(experiment_dir.resolve() / files.CELLS / key) == "failed"]
    unfinished = [key for key in not_done if key not in failed]
    if unfinished:
        print(f"{len(unfinished)} cell(s) unfinished, not failed: the same command continues them: "
              f"{', '.join(unfinished)}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} cell(s) failed (see cells/<key>/{files.CELL_ERROR}): {', '.join(failed)}", file=sys.stderr)
    return 1 if not_done else 0


# ----------------------------------------------------------------------------- sptune report
def print_budget(plan: Plan, options: search_options.Options, args: argparse.Namespace) -> None:
    """The experiment's budget (sptune.experiment.budget), cell by cell, before anything trains."""
    from sptune.experiment import budget
    from sptune.experiment.backends import cell_budget

    stages = [stage for cell in plan.cells for stage in cell_budget(cell, plan.backend, options)]
    title = f"plan of {plan.experiment}: {len(plan.cells)} cells, backend {plan.backend}; nothing trains"
    for line in budget.plan_lines(title, stages, args.seconds, args.gpu, args.utilization):
        print(line)


def register(subparsers) -> None:
    report = subparsers.add_parser(
        "report", help="rebuild the table.md, results.csv and PNG plots of an experiment or a study (no training)",
        description="Rebuild table.md, results.csv, summary.csv and the PNG plots of an experiment directory "
                    "written by a script in experiments/; for a `sptune study` directory: its table, results.csv "
                    "and Optuna's plots of each stage (optimization history, parameter importances, slice); for "
                    "a `sptune study --seeds` directory: the paired SPT - scratch table and its plot.")
    report.add_argument("study_dirs", metavar="dir", nargs="+",
                        help="an experiment, study or multi-seed study directory (holds plan.json, study.json, "
                             "or seeds.json); several experiment directories, or their kept records (plan.json + "
                             "summary.csv), of one script run with other --seeds: one report over all their seeds")
    report.add_argument("--plot", metavar="PNG", help="seeds study: also write its plot here (e.g. the README's "
                                                      "docs/seeds-shapes-tiny.png)")
    report.add_argument("--out", metavar="MD", help="several directories: also write the pooled report here")
    report.add_argument("--design", metavar="JSON",  # group-sequential looks (sptune.experiment.looks)
                        help="apply this group-sequential design (written by `sptune design`) at the current look, "
                             "in the pooled report (one directory too: its files are not rewritten); default: the "
                             "design.json of the directories or records, if any")
    report.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    """`sptune report DIR`: any results folder's table and files, rebuilt (sptune.api.report)."""
    from sptune import api

    if len(args.study_dirs) > 1 or args.out or args.design:
        if args.plot:
            raise UserError("--plot draws one multi-seed study's plot; pass one directory with it")
        text, paths = api.pooled_report(args.study_dirs, out=args.out, design=args.design)
    else:
        from sptune.experiment import pilots

        text, paths = api.report(args.study_dirs[0], plot_path=args.plot)
        text = "\n".join([text, *pilots.design_lines(args.study_dirs)])  # the looks of a declared design.json
    print(text)
    for path in paths:
        print(f"{'plot:' if str(path).endswith('.png') else 'file:'}  {path}")
    return 0
