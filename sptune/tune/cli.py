"""`sptune study | resume | results`: the Ray Tune study of scratch vs SPT from the command line.

    sptune study configs/listops_mini_transformer.yaml                  # search space from task/model
    sptune study configs/listops_mini_transformer.yaml --smoke --dir /tmp/smoke
    sptune resume runs/study-listops_mini_transformer                   # after Ctrl-C / a killed driver
    sptune resume runs/study-listops_mini_transformer --retry-failed    # also rerun crashed trials
    sptune results runs/study-listops_mini_transformer                  # table + results.csv
    sptune study configs/pathfinder_tiny_transformer.yaml --seeds 0 1 2 3 4   # one study per seed + paired CI

Exit codes: 0 when every stage has a completed trial, 1 otherwise, 2 for usage errors, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sptune.errors import UserError


def register(subparsers) -> None:
    study = subparsers.add_parser(
        "study", help="Ray Tune study: pretraining search -> finetuning from the best, plus the scratch baseline",
        description="Search each stage's grid (search_spaces/<task>/<model>.yaml) with Ray Tune + Optuna: "
                    "pretraining, then finetuning from the best pretraining checkpoint, and training from "
                    "scratch; prints the comparison table.")
    study.add_argument("config", help="YAML config file (see configs/)")
    study.add_argument("overrides", nargs="*", help="section.field=value, e.g. optim.max_steps=500")
    study.add_argument("--search-space", metavar="FILE", help="default: search_spaces/<task>/<model>.yaml")
    study.add_argument("--dir", metavar="DIR", help="study directory (default: runs/study-<config name>)")
    study.add_argument("--smoke", action="store_true", help="tiny model, 8 steps, 2 trials per stage")
    study.add_argument("--num-samples", type=int, metavar="N", help="trials per stage (capped at a grid's size)")
    study.add_argument("--max-concurrent", type=int, metavar="N", help="trials running at once")
    study.add_argument("--workers", type=int, metavar="N", help="Ray Train workers per trial (DDP when > 1)")
    study.add_argument("--cpus-per-worker", type=float, metavar="C")
    study.add_argument("--gpus-per-worker", type=float, metavar="G")
    study.add_argument("--asha", action=argparse.BooleanOptionalAction, default=None,
                       help="ASHA early stopping on our own step counter (default: the search space's setting)")
    study.add_argument("--sampler", choices=("auto", "brute", "tpe"),
                       help="Optuna sampler (auto: brute force for categorical grids, TPE otherwise)")
    study.add_argument("--seed", type=int, help="sampler seed")
    study.add_argument("--seeds", nargs="+", metavar="S",
                       help="run the study once per seed (run.seed=S, one study directory per seed under --dir, "
                            "default runs/seeds-<config name>) and report the mean paired SPT - scratch gain with "
                            "its 95%% Student-t interval")
    study.add_argument("--max-failures", type=int, default=2, help="retries of a crashed trial (from its checkpoint)")
    study.add_argument("--train-path", choices=("auto", "direct", "train"), default="auto",
                       help="direct: run in the Tune trial; train: Ray Train TorchTrainer (auto: direct for one "
                            "CPU worker)")
    study.add_argument("--address", help="Ray cluster to join (default: start a local Ray instance)")
    study.add_argument("--quiet", action="store_true", help="no Tune progress tables")
    study.set_defaults(func=cmd_study)

    resume = subparsers.add_parser("resume", help="continue a study whose driver stopped (Ctrl-C, killed)",
                                   description="Finished trials are kept, unfinished ones continue from their "
                                               "latest checkpoint, the searcher keeps its state.")
    resume.add_argument("study_dir")
    resume.add_argument("--address", help="Ray cluster to join (default: start a local Ray instance)")
    resume.add_argument("--quiet", action="store_true", help="no Tune progress tables")
    resume.add_argument("--retry-failed", action="store_true",
                        help="also rerun crashed trials of finished phases, from their last checkpoint "
                             "(deterministic failures - out of memory, non-finite loss - are final)")
    resume.set_defaults(func=cmd_resume)

    res = subparsers.add_parser("results", help="a study's summary table; rewrites <study dir>/results.csv")
    res.add_argument("study_dir")
    res.set_defaults(func=cmd_results)


def cmd_study(args: argparse.Namespace) -> int:
    from sptune.tune import pipeline

    prefix = "seeds" if args.seeds else "study"
    study_dir = Path(args.dir or Path("runs") / f"{prefix}-{Path(args.config).stem}{'-smoke' if args.smoke else ''}")
    options = pipeline.Options(
        num_samples=args.num_samples, max_concurrent=args.max_concurrent, workers=args.workers,
        cpus_per_worker=args.cpus_per_worker, gpus_per_worker=args.gpus_per_worker, asha=args.asha,
        sampler=args.sampler, seed=args.seed, max_failures=args.max_failures, train_path=args.train_path,
        smoke=args.smoke)
    if args.num_samples is not None and args.num_samples < 1:
        raise UserError("--num-samples must be >= 1")
    if args.seeds:
        from sptune.tune import seeds as multi

        spec = multi.create(args.config, args.overrides, study_dir, args.seeds, args.search_space, options)
        print(f"multi-seed study {study_dir.resolve()}: seeds {' '.join(map(str, spec['seeds']))}, one study "
              f"directory per seed (seed-<s>/)")
        return _run_seeds(study_dir, args.address, args.quiet)
    state = pipeline.create(args.config, args.overrides, study_dir, args.search_space, options)
    print(f"study {state['dir']}: search space {state['space']['path']}, up to {state['options']['num_samples']} "
          f"trials per stage, {state['options']['max_concurrent']} at once")
    print(pipeline.describe_path(state["options"]))
    return _run(pipeline, Path(state["dir"]), args.address, args.quiet)


def cmd_resume(args: argparse.Namespace) -> int:
    from sptune import seeds
    from sptune.tune import pipeline

    if seeds.is_seeds_dir(args.study_dir):
        print(f"resuming the multi-seed study {Path(args.study_dir).resolve()}")
        return _run_seeds(Path(args.study_dir), args.address, args.quiet)
    state = pipeline.load_state(args.study_dir)
    done = [p for p, s in state["phases"].items() if s == "done"]
    print(f"resuming {state['dir']}" + (f" (done: {', '.join(done)})" if done else ""))
    return _run(pipeline, Path(state["dir"]), args.address, args.quiet, args.retry_failed)


def _run(pipeline, study_dir: Path, address: str | None, quiet: bool, retry_failed: bool = False) -> int:
    from sptune import results

    try:
        rows = pipeline.run(study_dir, address=address, verbose=0 if quiet else 1, retry_failed=retry_failed,
                            on_phase=lambda phase: print(f"--- {phase} search", flush=True))
    except KeyboardInterrupt:
        print(f"sptune: interrupted; continue with `sptune resume {study_dir}`", file=sys.stderr)
        return 130
    print()
    print(results.summary(study_dir, rows))
    return 0 if all(results.best_row(rows, s)[0] for s in results.STAGES) else 1


def _run_seeds(parent: Path, address: str | None, quiet: bool) -> int:
    from sptune.tune import seeds as multi

    try:
        out = multi.run(parent, address=address, verbose=0 if quiet else 1,
                        on_phase=lambda seed, phase: print(f"--- seed {seed}: {phase} search", flush=True))
    except KeyboardInterrupt:
        print(f"sptune: interrupted; continue with `sptune resume {parent}`", file=sys.stderr)
        return 130
    print()
    print(out["text"])
    print(f"table {out['table']}, per seed {out['csv']}, plot {out['plot']}")
    return 0 if out["paired"] is not None and out["paired"].n == len(out_seeds(parent)) else 1


def out_seeds(parent: Path) -> list[int]:
    from sptune import checkpoints, seeds

    return checkpoints.read_json(parent / seeds.SEEDS_FILE)["seeds"]


def cmd_results(args: argparse.Namespace) -> int:
    from sptune import results, seeds

    study_dir = Path(args.study_dir)
    if seeds.is_seeds_dir(study_dir):
        print(seeds.report(study_dir)["text"])
        return 0
    if not (study_dir / results.STUDY_FILE).is_file():
        raise UserError(f"{study_dir} is not a study directory (no {results.STUDY_FILE})")
    rows = results.collect(study_dir)
    results.write_csv(rows, study_dir / results.CSV_NAME)
    print(results.summary(study_dir, rows))
    return 0
