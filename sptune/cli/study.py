"""`sptune study | resume | results | plan`: the Ray Tune study of scratch vs SPT from the command line.

    sptune study configs/listops_mini_transformer.yaml                  # search space from task/model
    sptune study configs/listops_mini_transformer.yaml --smoke --dir /tmp/smoke
    sptune study configs/listops_mini_transformer.yaml --logger mlflow     # or wandb; --verbose: Ray's tables
    sptune resume runs/study-listops_mini_transformer                   # after Ctrl-C / a killed driver
    sptune resume runs/study-listops_mini_transformer --retry-failed    # also rerun crashed trials
    sptune results runs/study-listops_mini_transformer                  # table + results.csv
    sptune plan configs/listops_transformer.yaml                        # trials, FLOPs, device-hours; no training
    sptune study configs/shapes_tiny_transformer.yaml --seeds 0 1 2 3 4       # one study per seed + paired CI

Exit codes: 0 when every stage has a completed trial, 1 otherwise, 2 for usage errors, 130 on Ctrl-C.
Both commands are sptune.api.run_study / resume_study: the same options from Python.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from sptune import files
from sptune.search import options


def register(subparsers) -> None:
    study = subparsers.add_parser(
        "study", help="Ray Tune study: pretraining search -> finetuning from the best, plus the scratch baseline",
        description="Search each stage's grid (search_spaces/<task>/<model>.yaml) with Ray Tune + Optuna: "
                    "pretraining, then finetuning from the best pretraining checkpoint, and training from "
                    "scratch; prints the comparison table.")
    _study_arguments(study)
    study.add_argument("--dir", metavar="DIR", help="study directory (default: runs/study-<config name>)")
    study.add_argument("--seeds", nargs="+", metavar="S",
                       help="run the study once per seed (run.seed=S, one study directory per seed under --dir, "
                            "default runs/seeds-<config name>) and report the mean paired SPT - scratch gain with "
                            "its 95%% Student-t interval")
    study.add_argument("--storage", metavar="URI",
                       help="mirror the study to object storage under URI/<directory name> (s3://bucket/prefix), "
                            "so `sptune resume` from there continues it after the cluster is gone")
    options.add_options(study)
    _output_flags(study)
    study.set_defaults(func=cmd_study)

    resume = subparsers.add_parser("resume", help="continue a study whose driver stopped (Ctrl-C, killed)",
                                   description="Finished trials are kept, unfinished ones continue from their "
                                               "latest checkpoint, the searcher keeps its state.")
    resume.add_argument("study_dir", help="the study's directory, or its storage URI (s3://...: pulled back first)")
    resume.add_argument("--address", help="Ray cluster to join (default: start a local Ray instance)")
    resume.add_argument("--time-budget", dest="time_budget_s", type=float, metavar="SECONDS",
                        help="stop cleanly after this many wall seconds (resume again to continue)")
    resume.add_argument("--retry-failed", action="store_true",
                        help="also rerun crashed trials of finished stages, from their last checkpoint "
                             "(deterministic failures - out of memory, non-finite loss - are final)")
    _output_flags(resume)
    resume.set_defaults(func=cmd_resume)

    plan = subparsers.add_parser(
        "plan", help="a study's budget before paying: trials per stage, FLOPs, device-hours here and on a GPU",
        description="Resolve the study `sptune study` would run (config, search space, options) and print "
                    "its trials per stage, training and evaluation FLOPs, and projected device-hours on "
                    "this node (measured) and on a GPU (peak x utilization). Nothing trains; no directory "
                    "is made.")
    _study_arguments(plan)
    options.add_options(plan)
    budget_flags(plan)
    plan.set_defaults(func=cmd_plan)

    res = subparsers.add_parser("results", help="a study's summary table, with <study dir>/results.csv rewritten from "
                                                "its run directories (`sptune report` also draws the plots)")
    res.add_argument("study_dir")
    res.set_defaults(func=cmd_results)


def _study_arguments(parser: argparse.ArgumentParser) -> None:
    """What a study is made of, the same for `sptune study` and `sptune plan`."""
    parser.add_argument("config", help="YAML config file (see configs/)")
    parser.add_argument("overrides", nargs="*", help="section.field=value, e.g. optim.max_steps=500")
    parser.add_argument("--search-space", metavar="FILE", help="default: search_spaces/<task>/<model>.yaml")
    parser.add_argument("--smoke", action="store_true", help="tiny model, 8 steps, 2 trials per stage")


def _output_flags(parser: argparse.ArgumentParser) -> None:
    # dest "output", not "verbose": the top-level -v/--verbose (debug logging) shares the namespace.
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--verbose", dest="output", action="store_const", const="verbose", default="progress",
                       help="also Ray Tune's tables and every trial's output on the terminal (always in "
                            "<study>/study.log)")
    group.add_argument("--quiet", dest="output", action="store_const", const="quiet",
                       help="only the final table")


def cmd_study(args: argparse.Namespace) -> int:
    from sptune import api

    study_dir = Path(args.dir) if args.dir else api.default_dir(args.config, args.smoke, bool(args.seeds))
    return _interruptible(study_dir, lambda: api.run_study(
        args.config, args.overrides, study_dir, search_space=args.search_space, options=options.from_args(args),
        address=args.address, output=args.output, seeds=args.seeds, storage=args.storage))


def budget_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of `sptune plan` and of the experiment scripts' --plan."""
    from sptune.experiment import budget

    parser.add_argument("--gpu", choices=sorted(budget.GPU_PEAK_TFLOPS),
                        help="GPU to project device-hours on, at its datasheet peak for the config's precision "
                             "(default: the GPU of cluster.yaml's worker nodes, else a100)")
    parser.add_argument("--utilization", type=float, metavar="U",
                        help="fraction of the GPU's peak a trial reaches (default: measured per model, precision "
                             "and length, sptune/utilization.py; without a measurement the ListOps Transformer's on "
                             "an H100, " + ", ".join(f"{k} {v:g}" for k, v in budget.MEASURED_UTILIZATION.items())
                             + ")")
    parser.add_argument("--seconds", type=float, default=1.0, metavar="S",
                        help="on this node, each stage's model is timed for S seconds of training steps and S of "
                             "evaluation batches, after a warm-up (default %(default)s)")


def cmd_plan(args: argparse.Namespace) -> int:
    from sptune.experiment import budget
    from sptune.records import studies

    state = studies.resolve(args.config, args.overrides, args.search_space, options.from_args(args),
                             check_rungs=False)
    stages = budget.study_budget(state)
    title = f"plan of `sptune study {args.config}` (search space {state.space['path']}); nothing trains"
    for line in budget.plan_lines(title, stages, args.seconds, args.gpu, args.utilization):
        print(line)
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from sptune import api

    return _interruptible(args.study_dir, lambda: api.resume_study(args.study_dir, address=args.address,
                                                                         output=args.output,
                                                                         retry_failed=args.retry_failed,
                                                                         time_budget_s=args.time_budget_s))


def _interruptible(study_dir: str | Path, run: Callable[[], Path]) -> int:
    """Run the study; exit 0 when every stage has a completed trial (every seed paired, for a multi-seed
    study), 1 otherwise, 130 on Ctrl-C and 143 on SIGTERM (sptune.experiment.engine.interrupts), after printing the
    command that continues it. `study_dir` may be a storage URI (`sptune resume s3://...`)."""
    from sptune import api
    from sptune.experiment.engine import interrupts
    from sptune.records import storage

    remote = storage.is_remote(study_dir)
    interrupts.install(f"sptune resume {study_dir if remote else Path(study_dir).resolve()}")
    try:
        study_dir = run()
    except KeyboardInterrupt as stop:
        return interrupts.stopped(stop, "" if remote else f"log: {Path(study_dir).resolve() / files.STUDY_LOG}")
    return 0 if api.succeeded(study_dir) else 1


def cmd_results(args: argparse.Namespace) -> int:
    """`sptune report` without the plots: the same code path (sptune.api.report)."""
    from sptune import api

    print(api.report(args.study_dir, plots=False)[0])
    return 0
