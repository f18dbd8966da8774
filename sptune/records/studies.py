"""The SPT study: its records and how to create them; the engine (sptune.experiment.engine.driver) runs it as an
experiment of one cell, in one Tune run.

    pretrain   search the pretraining grid
    finetune   select the best pretraining trial (sptune.protocol: validation metric, ties by validation
               loss) and search the finetuning grid from its best checkpoint; every finetune trial records
               that trial and step
    scratch    search the same task from a random init: the baseline, beside the pretrain -> finetune chain

A study directory holds everything, so `sptune resume <dir>` needs nothing else:

    study.json            what was asked (configs per stage, search space, options), stage states,
                          the selected pretraining trial and what selected it (selected_by)
    pretrain|finetune|scratch/<run>/   one run directory per trial (see sptune.trials.trainable)
    tune/experiment/      Ray Tune's experiment state, for Tuner.restore (tune/runs.json: which run)
    optuna.journal        every stage's Optuna study `<study dir name>/<stage>` (optuna-dashboard reads it)
    study.log             everything Ray, Tune and the trials printed (sptune.output)
    train/                Ray Train runs (TorchTrainer path)
    results.csv           one row per trial (sptune.records.results)

Resume: the Tune run is restored (resume_unfinished, resume_errored): Tune keeps its finished trials and
the searcher's state, and each unfinished trial continues from its run directory's last.pt (or Tune's copy
of it). `--retry-failed` also restores a finished study that has crashed trials (sptune.trials.failures).

A GPU study first checks that the cluster has, or its autoscaler can add, nodes with the GPUs a
trial worker asks for (sptune.trials.resources): otherwise no trial could ever start.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from sptune import files, folds, protocol, registry
from sptune.config import STAGES
from sptune.config import load_stages
from sptune.errors import UserError
from sptune.records import layout, results, study_state
from sptune.records.study_state import Selection, StudyState
from sptune.registry import check_names
from sptune.search import spaces
from sptune.search.options import Options, Resolved
from sptune.trackers import loggers
from sptune.trials.trainable import PATHS, choose_path

log = logging.getLogger("sptune.engine")

# A tiny study for tests and for checking an installation: every stage runs 2 trials of 8 steps.
SMOKE_OVERRIDES = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16",
                   "optim.max_steps=8", "optim.eval_every=4", "optim.warmup_steps=0", "task.max_val_examples=32"]
SMOKE_SAMPLES = 2


# ----------------------------------------------------------------------------- creating / loading
def create(config_path: str | None, overrides: list[str], study_dir: str | Path, space_path: str | None = None,
           options: Options | None = None, space: spaces.SearchSpace | None = None) -> StudyState:
    """Resolve and validate everything up front, then write study.json (before any Ray work).

    The search space is `space` when given (a paper-experiment cell builds its own), else the file
    `space_path`, else search_spaces/<task>/<model>.yaml."""
    study_dir = Path(study_dir).resolve()
    layout.check_free(study_dir)
    state = resolve(config_path, overrides, space_path, options, space)
    state.dir = str(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    return study_state.save_new(study_dir, state)


def resolve(config_path: str | None, overrides: list[str], space_path: str | None = None,
            options: Options | None = None, space: spaces.SearchSpace | None = None,
            check_rungs: bool = True) -> StudyState:
    """A study's state as create() writes it, from nothing but files (no directory, no Ray): each stage's
    resolved config, the search space and the resolved options. `check_rungs=False` skips fitting ASHA's
    rungs to the evals, the one check that may read the task's data (`sptune plan` without the data)."""
    options = options or Options()
    # The smoke settings first: an override on the command line still wins (`--smoke optim.max_steps=40`).
    overrides = (SMOKE_OVERRIDES if options.smoke else []) + list(overrides)
    loaded = load_stages(config_path, overrides)
    check_names(*loaded.values())  # (a files task's path made absolute: the trials run in other directories)
    stages = loaded.to_dict()
    task, model = stages["scratch"]["task"]["name"], stages["scratch"]["model"]["name"]
    if space is None:
        space = spaces.load(space_path) if space_path else default_space(stages["scratch"])
    declared = (space.task or task, space.model or model)
    if declared != (task, model):
        raise UserError(f"{space.path} is for task '{declared[0]}' / model '{declared[1]}', the config is for "
                        f"'{task}' / '{model}'; pass the matching --search-space")
    missing = [s for s in STAGES if s not in space.stages]
    if missing:
        raise UserError(f"{space.path} has no grid for stage(s) {', '.join(missing)}; a study searches all three")
    resolved = resolve_options(options, space)
    if resolved.val_folds:
        space = spaces.cross_validated(space, resolved.val_folds)
        for stage in folds.FOLDED_STAGES:
            stages[stage]["task"]["val_folds"] = resolved.val_folds
    try:
        for stage in STAGES if check_rungs else ():
            if spaces.stage_asha(resolved, spaces.trial_count(space.stages[stage], resolved.num_samples)):
                spaces.check_rungs(resolved.asha, step_budgets(stages[stage], space.stages[stage].params),
                                   stages[stage]["optim"]["eval_every"], f"stage {stage}")
    except UserError:
        if resolved.asha_min_trials == 0:
            raise  # asked for: say why it cannot run
        resolved = replace(resolved, asha=None)  # the default: off where its rungs do not fit the evals
    return StudyState(config=str(config_path), overrides=overrides, stages=stages, space=space.to_dict(),
                      options=resolved)


def default_space(stage: dict[str, Any]) -> spaces.SearchSpace:
    """search_spaces/<task>/<model>.yaml, else (a task or layer the project has no grid for) the paper's grid
    scaled to the task's training split (spaces.paper_space)."""
    task, model = stage["task"], stage["model"]["name"]
    try:
        return spaces.load(spaces.default_path(task["name"], model))
    except UserError:
        if registry.is_builtin_model(model) and task["name"] in registry.TASKS:
            raise
    n_train = registry.get_task(task["name"], task.get("path", "")).split_sizes(seed=stage["run"]["seed"])["train"]
    return spaces.paper_space(task["name"], model, n_train)


def step_budgets(stage: dict[str, Any], params: dict[str, Any]) -> dict[int, int]:
    """The optimizer steps each searched batch size trains for (data.stage_steps, as run_stage resolves
    them; with optim.epochs the training split's size comes from Task.split_sizes)."""
    from sptune.registry import get_task
    from sptune.run.data import fraction_size, stage_steps

    optim, task = stage["optim"], stage["task"]
    sizes = params.get("optim.batch_size")
    sizes = sizes if isinstance(sizes, list) else [optim["batch_size"]]
    n = 0
    if optim["epochs"] > 0:
        n_train = get_task(task["name"], task.get("path", "")).split_sizes(task["data_dir"] or None, stage["run"]["seed"])["train"]
        n = fraction_size(n_train, task["train_fraction"])
    return {size: stage_steps(optim["max_steps"], optim["epochs"], size, n) for size in sizes}


def resolve_options(options: Options, space: spaces.SearchSpace) -> Resolved:
    """Command-line options over the search-space file's settings over the defaults."""
    if options.train_path not in PATHS:
        raise UserError(f"--train-path {options.train_path!r}; choose one of: {', '.join(PATHS)}")
    loggers.check(options.logger)
    resources = space.resources

    def pick(value: Any, key: str, default: float) -> Any:  # the command line, else the search space
        return value if value is not None else resources.get(key, default)

    k = options.val_folds or 0
    if k < 0 or k == 1:
        raise UserError(f"--val-folds {k}: give K >= 2 folds (or leave it out: the task's validation split)")
    if k and options.asha:
        raise UserError("--asha compares trials at its rungs, and with --val-folds they validate on different "
                        "folds: drop one of them")
    asha = None if options.asha is False or k else space.asha
    asked = options.asha is not None or space.asha is not None
    if asha is None and options.asha is not False and not k:  # --asha without settings, or the default
        asha = dict(spaces.DEFAULT_ASHA)
    workers = int(pick(options.workers, "workers", 1))
    cpus, gpus = float(pick(options.cpus_per_worker, "cpus_per_worker", 1)), float(pick(options.gpus_per_worker,
                                                                                        "gpus_per_worker", 0))
    if options.trials_per_gpu is not None:
        if options.trials_per_gpu < 1 or options.gpus_per_worker is not None or workers > 1:
            raise UserError("--trials-per-gpu N packs N one-worker trials on each GPU (N >= 1, its share 1/N); "
                            "drop --gpus-per-worker and --workers, which it sets")
        gpus = 1.0 / options.trials_per_gpu
    if workers < 1 or cpus <= 0 or gpus < 0:
        raise UserError("--workers must be >= 1, --cpus-per-worker > 0 and --gpus-per-worker >= 0")
    if options.train_path == "direct" and (workers > 1 or gpus > 1):
        raise UserError("--train-path direct runs each trial as one process with at most one GPU; multiple "
                        "workers or GPUs per worker need --train-path train (or auto)")
    return Resolved(
        num_samples=SMOKE_SAMPLES if options.smoke else (options.num_samples or space.num_samples),
        max_concurrent=options.max_concurrent or space.max_concurrent, workers=workers, cpus_per_worker=cpus,
        gpus_per_worker=gpus, trials_per_gpu=options.trials_per_gpu or 0, asha=asha,
        asha_min_trials=0 if asked else spaces.ASHA_MIN_TRIALS,
        extend_grids=extend_grids(options, space),
        sampler=options.sampler or space.sampler, seed=space.seed if options.seed is None else options.seed,
        val_folds=k,
        max_failures=options.max_failures, smoke=options.smoke, logger=options.logger,
        path=choose_path(workers, gpus, options.train_path))


def extend_grids(options: Options, space: spaces.SearchSpace) -> bool:
    """The command line's choice, else the search-space file's, else on; never under --smoke (a plumbing check)."""
    asked = options.extend_grids if options.extend_grids is not None else space.extend_grids
    return (asked is not False) and not options.smoke


def describe_path(options: Resolved) -> str:
    if options.path == "direct":
        gpus = f", {options.gpus_per_worker:g} GPU" if options.gpus_per_worker else ""
        return (f"trials run directly in Ray Tune ({options.cpus_per_worker:g} CPU{gpus} each): one worker, "
                f"so Ray Train would add only overhead")
    gpus = f", {options.gpus_per_worker:g} GPU" if options.gpus_per_worker else ""
    return (f"trials run under Ray Train's TorchTrainer: {options.workers} worker(s) x "
            f"({options.cpus_per_worker:g} CPU{gpus}), DDP with {'nccl' if gpus else 'gloo'}")


def crashed_trials(study_dir: Path, stage: str) -> list[Path]:
    """Run directories of the stage's trials that crashed after their last retry (error.json)."""
    stage_dir = study_dir / stage
    return sorted(p.parent for p in stage_dir.glob(f"*/{files.TRIAL_ERROR}")) if stage_dir.is_dir() else []


def select_pretraining(study_dir: Path, state: StudyState) -> Selection | None:
    """The best pretraining trial by validation metric, a tie broken by validation loss (results.best_row);
    kept in study.json with what selected it, so a resume reuses it."""
    if state.selected is None:
        # Only pretraining rows: scratch trials may be writing their results meanwhile.
        best, how = results.best_row(results.collect(study_dir, state), "pretrain")
        if best is None:
            return None
        study_state.set_selected(study_dir, state, Selection(
            trial=best["trial_id"], run_dir=best["run_dir"], step=best["best_step"], best_val=best["best_val"],
            best_val_loss=best.get("best_val_loss"), selected_by=how,
            checkpoint=str(protocol.init_checkpoint(best["run_dir"]))))
    return state.selected
