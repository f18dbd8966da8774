"""How a study's searches run: one option set and one set of flag names for every entry point
(`sptune study`, sptune.api.run_study, the paper-experiment scripts in experiments/).

None means "the search-space file's value, else the default" (sptune.records.studies.resolve_options).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from sptune.errors import UserError
from sptune.search.spaces import SAMPLERS
from sptune.trackers.loggers import LOGGERS
from sptune.trials.trainable import PATHS


@dataclass
class Options:
    num_samples: int | None = None
    max_concurrent: int | None = None
    workers: int | None = None
    cpus_per_worker: float | None = None
    gpus_per_worker: float | None = None
    trials_per_gpu: int | None = None  # pack N one-worker trials on each GPU (sets gpus_per_worker = 1/N)
    asha: bool | None = None
    # a stage's best at a grid edge runs the next value out (records.bracketing); None: the search-space
    # file's extend_grids, else on (off under --smoke, a plumbing check). A grid that does not bracket its best
    # decides nothing.
    extend_grids: bool | None = None
    sampler: str | None = None
    seed: int | None = None
    # k >= 2: finetuning and scratch select by the mean over k validation folds of train + val (sptune.folds)
    val_folds: int | None = None
    max_failures: int = 2
    train_path: str = "auto"  # "auto" | "direct" | "train"
    smoke: bool = False  # `sptune study --smoke`: tiny model, 8 steps, 2 trials per stage
    logger: str = "tensorboard"  # experiment tracker (sptune.trackers.loggers)
    time_budget_s: float | None = None  # wall seconds for one driver run (a study, a resume, an experiment)


@dataclass(frozen=True, kw_only=True)
class Resolved:
    """What a study runs with: its Options resolved against its search-space file and the defaults
    (sptune.records.studies.resolve_options). study.json keeps it; every stage and cell reads it from there."""

    num_samples: int  # trials per stage (capped at each grid's size)
    max_concurrent: int  # trials of one stage at once
    workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    trials_per_gpu: int = 0  # > 0: trials share GPUs; their CPUs are sized to the node (resources.fit_to_nodes)
    asha: dict[str, Any] | None  # ASHA's settings, None: FIFO
    asha_min_trials: int  # ASHA only for stages of at least this many trials (0: asked for, every stage)
    extend_grids: bool = False  # grids extend past an edge the best sits at (sptune.search.bracketing)
    sampler: str
    seed: int
    val_folds: int = 0  # 0: the task's validation split; k: every finetuning / scratch setting on k folds
    max_failures: int
    smoke: bool
    logger: str = "tensorboard"
    path: str  # "direct" | "train": how a trial trains (sptune.trials.trainable)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Resolved":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def add_options(parser: argparse.ArgumentParser) -> None:
    """The search and resource flags (every field of Options but `smoke`) and --address."""
    defaults = Options()
    parser.add_argument("--num-samples", type=int, metavar="N", help="trials per stage (capped at a grid's size)")
    parser.add_argument("--max-concurrent", type=int, metavar="N", help="trials running at once")
    parser.add_argument("--workers", type=int, metavar="N", help="Ray Train workers per trial (DDP when > 1)")
    parser.add_argument("--cpus-per-worker", type=float, metavar="C", help="CPUs per trial worker")
    parser.add_argument("--gpus-per-worker", type=float, metavar="G", help="GPUs per trial worker")
    parser.add_argument("--trials-per-gpu", type=int, metavar="N",
                        help="pack N trials on each GPU: each holds 1/N of it, its memory capped to that share, "
                             "and CPUs sized to the node (small models: a GPU node runs N trials at once)")
    parser.add_argument("--asha", action=argparse.BooleanOptionalAction, default=None,
                        help="ASHA early stopping on our own step counter (default: the search space's asha block, "
                             "else on for stages of >= 8 trials whose evals meet its rungs)")
    parser.add_argument("--extend-grids", action=argparse.BooleanOptionalAction, default=None,
                        help="when a stage's best trial sits at an edge of an ordered grid (lr, batch size), run "
                             "the next value beyond it, one grid step at a time, until the best is interior or "
                             "the search space's limits stop it (default: the search-space file's extend_grids, "
                             "else on; off under --smoke)")
    parser.add_argument("--sampler", choices=SAMPLERS,
                        help="Optuna sampler (auto: brute force for categorical grids, TPE otherwise)")
    parser.add_argument("--seed", type=int, help="sampler seed")
    parser.add_argument("--val-folds", type=int, metavar="K",
                        help="select finetuning and scratch settings by their mean validation metric over K "
                             "stratified folds of train + val (each setting trains K times; ASHA off), not on "
                             "the task's one validation split")
    parser.add_argument("--max-failures", type=int, default=defaults.max_failures,
                        help="retries of a crashed trial (from its checkpoint)")
    parser.add_argument("--train-path", choices=PATHS, default=defaults.train_path,
                        help="direct: run in the Tune trial; train: Ray Train TorchTrainer (auto: direct for one "
                             "CPU worker)")
    parser.add_argument("--time-budget", dest="time_budget_s", type=float, metavar="SECONDS",
                        help="stop cleanly after this many wall seconds of this driver run (trials keep their "
                             "checkpoints; `sptune resume` or rerunning continues)")
    parser.add_argument("--address", help="Ray cluster to join (default: start a local Ray instance)")
    parser.add_argument("--logger", choices=LOGGERS, default=defaults.logger,
                        help="experiment tracker: every trial a run with its config, lineage and evals "
                             "(wandb, mlflow: pip install 'sptune[wandb]' / 'sptune[mlflow]')")


def from_args(args: argparse.Namespace) -> Options:
    """The Options of parsed flags (`smoke` from --smoke where the command has it)."""
    return Options(**{f.name: getattr(args, f.name) for f in fields(Options) if hasattr(args, f.name)})


def with_values(options: Options | None, values: dict[str, Any]) -> Options:
    """`options` (default: Options()) with fields replaced by name, checked: what sptune.api takes."""
    unknown = set(values) - {f.name for f in fields(Options)}
    if unknown:
        raise UserError(f"unknown study option(s) {', '.join(sorted(unknown))}; the options are the fields of "
                        f"sptune.search.options.Options: {', '.join(f.name for f in fields(Options))}")
    options = replace(options or Options(), **values)
    if options.num_samples is not None and options.num_samples < 1:
        raise UserError("--num-samples must be >= 1")
    if options.time_budget_s is not None and options.time_budget_s <= 0:
        raise UserError("--time-budget must be > 0 seconds")
    return options
