"""The SPT study: a tracked two-stage search plus the scratch baseline, each stage one Ray Tune run.

    pretrain   search the pretraining grid
    finetune   select the best pretraining trial (validation metric, ties by validation loss) and search
               the finetuning grid
               from its best checkpoint; every finetune trial records that trial and step
    scratch    search the same task from a random init: the baseline

Stages run concurrently when the cluster has room for two stages' trials (options.sequential_stages false,
the default; sptune.tune.resources.room_for_two_stages): the scratch search depends on nothing, so it runs
beside the pretrain -> finetune chain and the two share the cluster (Ray schedules the trials of both; each
stage keeps its own max_concurrent). The chain runs in the driver's main thread,
where Ctrl-C arrives; scratch runs in a second thread, whose Tuner Ray Tune allows (it installs no signal
handler off the main thread). When the chain stops, the scratch thread's Tune loop ends at its next step
boundary (StopAtStepBoundary), never inside a write. `sequential_stages`
(a study from before the option: always) runs the three one after another.

A study directory holds everything, so `sptune resume <dir>` needs nothing else:

    study.json            what was asked (configs per stage, search space, options), stage states,
                          the selected pretraining trial and what selected it (selected_by)
    pretrain|finetune|scratch/<run>/   one run directory per trial (see sptune.tune.trainable)
    tune/<stage>/         Ray Tune's experiment state, for Tuner.restore
    optuna.journal        every stage's Optuna study `<study dir name>/<stage>` (optuna-dashboard reads it)
    study.log             everything Ray, Tune and the trials printed (sptune.output)
    train/                Ray Train runs (TorchTrainer path)
    results.csv           one row per trial (sptune.tune.results)

Resume: finished stages are skipped; an interrupted stage is restored with Tuner.restore
(resume_unfinished, resume_errored): Tune keeps its finished trials and the searcher's state, and
each unfinished trial continues from its run directory's last.pt (or Tune's copy of it). The searcher
reopens the stage's Optuna study in the journal (search.UniqueOptunaSearch keeps the two in step).
`--retry-failed` also restores finished stages that have crashed trials (sptune.tune.failures).

A GPU study first checks that the cluster has, or its autoscaler can add, nodes with the GPUs a
trial worker asks for (sptune.tune.resources): otherwise no trial could ever start.
"""

from __future__ import annotations

import copy
import logging
import threading
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from sptune import files, output
from sptune.config import STAGES
from sptune.config import load as load_config
from sptune.errors import UserError
from sptune.registry import check_names
from sptune.tune import loggers, outcomes, resources, results, search, spaces, stopped, stopping_stages
from sptune.tune import study_state
from sptune.tune.options import Options, Resolved
from sptune.tune.study_state import Selection, StudyState
from sptune.tune.session import ray_session
from sptune.tune.trainable import LINEAGE_KEY, PATHS, TrialSpec, choose_path, stage_trainable, trial_resources

log = logging.getLogger("sptune.tune")

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
    if (study_dir / files.STUDY).is_file():
        raise UserError(f"{study_dir} already holds a study; continue it with `sptune resume {study_dir}` "
                        f"or pass another --dir")
    state = resolve(config_path, overrides, space_path, options, space)
    state.dir = str(study_dir)
    study_dir.mkdir(parents=True, exist_ok=True)
    study_state.save(study_dir, state)
    return study_state.load(study_dir)  # as a resume will see it (JSON has lists where configs had tuples)


def resolve(config_path: str | None, overrides: list[str], space_path: str | None = None,
            options: Options | None = None, space: spaces.SearchSpace | None = None,
            check_rungs: bool = True) -> StudyState:
    """A study's state as create() writes it, from nothing but files (no directory, no Ray): each stage's
    resolved config, the search space and the resolved options. `check_rungs=False` skips fitting ASHA's
    rungs to the evals, the one check that may read the task's data (`sptune plan` without the data)."""
    options = options or Options()
    # The smoke settings first: an override on the command line still wins (`--smoke optim.max_steps=40`).
    overrides = (SMOKE_OVERRIDES if options.smoke else []) + list(overrides)
    stages = {stage: check_names(load_config(config_path, overrides, stage=stage)).to_dict() for stage in STAGES}
    task, model = stages["scratch"]["task"]["name"], stages["scratch"]["model"]["name"]
    if space is None:
        space = spaces.load(space_path or spaces.default_path(task, model))
    declared = (space.task or task, space.model or model)
    if declared != (task, model):
        raise UserError(f"{space.path} is for task '{declared[0]}' / model '{declared[1]}', the config is for "
                        f"'{task}' / '{model}'; pass the matching --search-space")
    missing = [s for s in STAGES if s not in space.stages]
    if missing:
        raise UserError(f"{space.path} has no grid for stage(s) {', '.join(missing)}; a study searches all three")
    resolved = resolve_options(options, space)
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


def step_budgets(stage: dict[str, Any], params: dict[str, Any]) -> dict[int, int]:
    """The optimizer steps each searched batch size trains for (data.stage_steps, as run_stage resolves
    them; with optim.epochs the training split's size comes from Task.split_sizes)."""
    from sptune.data import fraction_size, stage_steps
    from sptune.registry import get_task

    optim, task = stage["optim"], stage["task"]
    sizes = params.get("optim.batch_size")
    sizes = sizes if isinstance(sizes, list) else [optim["batch_size"]]
    n = 0
    if optim["epochs"] > 0:
        n_train = get_task(task["name"]).split_sizes(task["data_dir"] or None, stage["run"]["seed"])["train"]
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

    asha = None if options.asha is False else space.asha
    asked = options.asha is not None or space.asha is not None
    if asha is None and options.asha is not False:  # --asha without settings in the file, or the default
        asha = dict(spaces.DEFAULT_ASHA)
    workers = int(pick(options.workers, "workers", 1))
    cpus, gpus = float(pick(options.cpus_per_worker, "cpus_per_worker", 1)), float(pick(options.gpus_per_worker,
                                                                                        "gpus_per_worker", 0))
    if workers < 1 or cpus <= 0 or gpus < 0:
        raise UserError("--workers must be >= 1, --cpus-per-worker > 0 and --gpus-per-worker >= 0")
    if options.train_path == "direct" and (workers > 1 or gpus > 1):
        raise UserError("--train-path direct runs each trial as one process with at most one GPU; multiple "
                        "workers or GPUs per worker need --train-path train (or auto)")
    return Resolved(
        num_samples=SMOKE_SAMPLES if options.smoke else (options.num_samples or space.num_samples),
        max_concurrent=options.max_concurrent or space.max_concurrent, workers=workers, cpus_per_worker=cpus,
        gpus_per_worker=gpus, asha=asha, asha_min_trials=0 if asked else spaces.ASHA_MIN_TRIALS,
        sampler=options.sampler or space.sampler, seed=space.seed if options.seed is None else options.seed,
        max_failures=options.max_failures, smoke=options.smoke, logger=options.logger,
        sequential_stages=options.sequential_stages, path=choose_path(workers, gpus, options.train_path))


_registry_lock = threading.Lock()  # Ray Tune's trainable registry (see run_stage_search)


def describe_path(options: Resolved) -> str:
    if options.path == "direct":
        gpus = f", {options.gpus_per_worker:g} GPU" if options.gpus_per_worker else ""
        return (f"trials run directly in Ray Tune ({options.cpus_per_worker:g} CPU{gpus} each): one worker, "
                f"so Ray Train would add only overhead")
    gpus = f", {options.gpus_per_worker:g} GPU" if options.gpus_per_worker else ""
    return (f"trials run under Ray Train's TorchTrainer: {options.workers} worker(s) x "
            f"({options.cpus_per_worker:g} CPU{gpus}), DDP with {'nccl' if gpus else 'gloo'}")


# ----------------------------------------------------------------------------- running
def run(study_dir: str | Path, address: str | None = None, verbose: int = 1,
        trainable: Callable[..., None] = stage_trainable, retry_failed: bool = False,
        time_budget_s: float | None = None) -> list[dict[str, Any]]:
    """Run (or continue) every stage of a study; returns the results rows (also in results.csv).

    `time_budget_s` bounds this driver run's wall time: the stages then stop at a Tune step boundary,
    unfinished, and a resume continues them (a budget belongs to a run, not to the study).

    `retry_failed` also reruns, from their last checkpoint, the crashed trials of finished stages
    (a finished stage keeps its selection: finetuning still starts from the trial chosen before).

    `trainable` is the Tune function of each trial (stage_trainable; a test may wrap it); `verbose`
    is Tune's own verbosity (its tables go wherever stdout goes: see sptune.api and sptune.output).
    """
    study_dir = Path(study_dir).resolve()
    state = study_state.load(study_dir)
    log.info("%s", describe_path(state.options))
    run_chain = partial(_run_chain, study_dir, state, trainable, verbose, retry_failed)
    stopping = threading.Event()
    with ray_session(study_dir, address), time_budget(time_budget_s, stopping) as budget:
        resources.check_cluster(state.options.gpus_per_worker)
        together, why = (False, "") if state.options.sequential_stages else resources.room_for_two_stages(state.options)
        try:
            if not together:
                if why:
                    log.info("%s", why)
                    output.say(why)
                run_chain(STAGES, stopping)
            else:
                loggers.create_experiment(state.options.logger, study_dir)
                run_concurrently(run_chain, [("pretrain", "finetune"), ("scratch",)], stopping)
        except Exception:
            if not budget.is_set():
                raise
        if budget.is_set():
            done = [p for p in STAGES if state.stage_done(p)]
            output.say(f"time budget of {time_budget_s:g} s reached: stopped cleanly with "
                       f"{', '.join(done) or 'no stage'} finished; continue with `sptune resume {study_dir}`")
    rows = results.collect(study_dir)
    results.write_csv(rows, study_dir / files.RESULTS_CSV)
    return rows


@contextmanager
def time_budget(seconds: float | None, stopping: threading.Event) -> Iterator[threading.Event]:
    """Set `stopping` after `seconds` of wall time (each driver run gets the budget anew); yields an event
    that says whether the budget, rather than Ctrl-C or an error, stopped the study. The stages' Tune
    loops then end at a step boundary (stopping_stages), unfinished, so a resume continues them."""
    reached = threading.Event()

    def expire() -> None:
        reached.set()
        stopping.set()

    timer = threading.Timer(seconds, expire) if seconds else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        yield reached
    finally:
        if timer is not None:
            timer.cancel()


def _run_chain(study_dir: Path, state: StudyState, trainable: Callable[..., None], verbose: int,
               retry_failed: bool, stages: Iterable[str], stopping: threading.Event) -> None:
    """Run the stages one after another; once `stopping` is set (the study was interrupted), a stage whose
    Tuner returns is not marked done: its trials may have been cut short, and a resume continues them."""
    for stage in stages:
        if stage in state.stage_status and not (  # "done", or "skipped: <why>"
                retry_failed and state.stage_done(stage) and crashed_trials(study_dir, stage)):
            continue
        if stage == "finetune" and not select_pretraining(study_dir, state):
            study_state.set_stage_status(study_dir, state, "finetune", "skipped: no pretraining trial completed")
            output.say("finetune: skipped, no pretraining trial completed")
            continue
        stopping_stages.register(stopping_stages.key(study_dir, stage), stopping)
        run_stage_search(study_dir, state, stage, trainable, verbose)
        if stopping.is_set():
            return
        study_state.set_stage_status(study_dir, state, stage, "done")


def run_concurrently(run_chain: Callable[[Iterable[str], threading.Event], None],
                     chains: list[tuple[str, ...]], stopping: threading.Event | None = None) -> None:
    """The first chain in this (the main) thread, each other in a thread of its own; all finish, or all stop.

    Ctrl-C reaches only the main thread. There, or on any error, `stopping` is set: each other chain's Tune
    loop then raises StageInterrupted at the start of its next step (stopping_stages.StopAtStepBoundary),
    between two writes of Tune's state, and its stage stays unfinished for a resume. An error in another
    chain is raised here once the main chain is done."""
    stopping = stopping or threading.Event()
    errors: list[BaseException] = []

    def guarded(stages: tuple[str, ...]) -> None:
        try:
            run_chain(stages, stopping)
        except BaseException as error:  # noqa: BLE001 (handed to the main thread, which raises it)
            if not stopping.is_set():
                errors.append(error)

    threads = [threading.Thread(target=guarded, args=(stages,), name=f"sptune-{'-'.join(stages)}", daemon=True)
               for stages in chains[1:]]
    for thread in threads:
        thread.start()
    try:
        run_chain(chains[0], stopping)
        for thread in threads:
            while thread.is_alive():  # join with a timeout: Ctrl-C stays deliverable while waiting
                thread.join(0.5)
    except BaseException:
        stopping.set()
        for thread in threads:
            thread.join(60)
        raise
    if errors:
        raise errors[0]


def crashed_trials(study_dir: Path, stage: str) -> list[Path]:
    """Run directories of the stage's trials that crashed after their last retry (error.json)."""
    stage_dir = study_dir / stage
    return sorted(p.parent for p in stage_dir.glob(f"*/{files.TRIAL_ERROR}")) if stage_dir.is_dir() else []


def select_pretraining(study_dir: Path, state: StudyState) -> Selection | None:
    """The best pretraining trial by validation metric, a tie broken by validation loss (results.best_row);
    kept in study.json with what selected it, so a resume reuses it."""
    if state.selected is None:
        # Only pretraining rows: scratch trials may be writing their results meanwhile.
        best, how = results.best_row(results.collect(study_dir), "pretrain")
        if best is None:
            return None
        study_state.set_selected(study_dir, state, Selection(
            trial=best["trial_id"], run_dir=best["run_dir"], step=best["best_step"], best_val=best["best_val"],
            best_val_loss=best.get("best_val_loss"), selected_by=how,
            checkpoint=str(Path(best["run_dir"]) / files.BEST)))
    return state.selected


def trial_spec(study_dir: Path, state: StudyState, stage: str) -> TrialSpec:
    options, stage_space = state.options, state.space["stages"][stage]
    return TrialSpec(stage=stage, base=copy.deepcopy(state.stages[stage]), study_dir=str(study_dir),
                     path=options.path, workers=options.workers, cpus_per_worker=options.cpus_per_worker,
                     gpus_per_worker=options.gpus_per_worker, max_failures=options.max_failures,
                     init=state.selected.to_dict() if stage == "finetune" and state.selected else None,
                     hparam_domains={k: v for k, v in stage_space["params"].items() if isinstance(v, list)})


def run_stage_search(study_dir: Path, state: StudyState, stage: str, trainable: Callable[..., None],
              verbose: int) -> None:
    from ray import tune as ray_tune
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    from sptune.tune.progress import StageProgress

    spec = trial_spec(study_dir, state, stage)
    fn = ray_tune.with_resources(ray_tune.with_parameters(trainable, spec=spec), trial_resources(spec))
    if not state.options.sequential_stages:
        # Tune registers a trainable under its name, one registry per Ray job: two stages running at once
        # under one name would start each other's trials, and the registry is a plain dict that two
        # threads must not write at once. So each stage registers its own name here, one at a time, and
        # hands Tune the name. (A study from before concurrent stages keeps the function: Tuner.restore
        # checks the name.)
        name = f"{stage}_{fn.__name__}"
        with _registry_lock:
            ray_tune.register_trainable(name, fn)
        fn = name
    experiment = study_dir / "tune" / stage
    # Not searched, the same in every trial's config: what trackers log as the trial's lineage.
    lineage = {"name": study_dir.name, "stage": stage}
    if stage == "finetune":
        lineage.update(state.selected.lineage())
    param_space = {LINEAGE_KEY: lineage}
    logger = state.options.logger
    loggers.prepare(logger)
    if ray_tune.Tuner.can_restore(str(experiment)):
        # The callbacks and the searcher come back from the experiment (the searcher reopens the journal).
        log.info("restoring the %s search from %s", stage, experiment)
        tuner = ray_tune.Tuner.restore(str(experiment), fn, resume_unfinished=True, resume_errored=True,
                                   param_space=param_space)
    else:
        options = state.options
        stage_space = spaces.parse({"stages": {stage: state.space["stages"][stage]}}).stages[stage]
        trials = spaces.trial_count(stage_space, options.num_samples)
        tuner = ray_tune.Tuner(fn, param_space=param_space, tune_config=ray_tune.TuneConfig(
            search_alg=search.limit(search.make_searcher(stage_space, options.sampler, options.seed,
                                                         journal=study_dir / files.OPTUNA_JOURNAL,
                                                         study_name=search.optuna_study_name(study_dir, stage)),
                                    options.max_concurrent),
            scheduler=search.make_scheduler(spaces.stage_asha(options, trials)),
            num_samples=trials, reuse_actors=True,
            trial_name_creator=partial(_trial_name, stage),
            trial_dirname_creator=partial(_trial_name, stage)),
            run_config=ray_tune.RunConfig(
                name=stage, storage_path=str(study_dir / "tune"), verbose=verbose,
                failure_config=ray_tune.FailureConfig(max_failures=options.max_failures),
                checkpoint_config=ray_tune.CheckpointConfig(num_to_keep=1),
                # Tune's own TensorBoard logger is left out: the study's TensorBoard runs are the trials'.
                callbacks=[stopping_stages.StopAtStepBoundary(stopping_stages.key(study_dir, stage)),
                           JsonLoggerCallback(), CSVLoggerCallback(), outcomes.make_outcomes_callback(spec),
                           *loggers.callbacks(logger, study_dir, stage),
                           StageProgress(stage, trials)]))
    tuner.fit()
    stopped.test_stopped(study_dir, stage, spec)  # ASHA's stopped trials: a test metric at their best checkpoint


def _trial_name(stage: str, trial: Any) -> str:
    return f"{stage}_{trial.trial_id}"
