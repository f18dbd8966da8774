"""The SPT study: a tracked two-stage search plus the scratch baseline, each phase one Ray Tune run.

    pretrain   search the pretraining grid
    finetune   select the best pretraining trial (validation metric, ties by validation loss) and search
               the finetuning grid
               from its best checkpoint; every finetune trial records that trial and step
    scratch    search the same task from a random init: the baseline

Phases run concurrently (options.sequential_phases false, the default): the scratch search depends on
nothing, so it runs beside the pretrain -> finetune chain and the two share the cluster (Ray schedules the
trials of both; each phase keeps its own max_concurrent). The chain runs in the driver's main thread,
where Ctrl-C arrives; scratch runs in a second thread, whose Tuner Ray Tune allows (it installs no signal
handler off the main thread), and is interrupted the same way when the chain stops. `sequential_phases`
(a study from before the option: always) runs the three one after another.

A study directory holds everything, so `sptune resume <dir>` needs nothing else:

    study.json            what was asked (configs per stage, search space, options), phase states,
                          the selected pretraining trial and what selected it (selected_by)
    pretrain|finetune|scratch/<run>/   one run directory per trial (see sptune.tune.trainable)
    tune/<phase>/         Ray Tune's experiment state, for Tuner.restore
    optuna.journal        every phase's Optuna study `<study dir name>/<phase>` (optuna-dashboard reads it)
    study.log             everything Ray, Tune and the trials printed (sptune.output)
    train/                Ray Train runs (TorchTrainer path)
    results.csv           one row per trial (sptune.results)

Resume: finished phases are skipped; an interrupted phase is restored with Tuner.restore
(resume_unfinished, resume_errored): Tune keeps its finished trials and the searcher's state, and
each unfinished trial continues from its run directory's last.pt (or Tune's copy of it). The searcher
reopens the phase's Optuna study in the journal (search.UniqueOptunaSearch keeps the two in step).
`--retry-failed` also restores finished phases that have crashed trials (sptune.tune.failures).

A GPU study first checks that the cluster has, or its autoscaler can add, nodes with the GPUs a
trial worker asks for (sptune.tune.resources): otherwise no trial could ever start.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import os
import re
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from sptune import atomic, files, output, results
from sptune.config import STAGES
from sptune.config import load as load_config
from sptune.errors import UserError
from sptune.tune import failures, loggers, resources, search
from sptune.tune.trainable import LINEAGE_KEY, PATHS, TrialSpec, choose_path, stage_trainable, trial_resources

log = logging.getLogger("sptune.tune")

TAG_ENV = "SPTUNE_RAY_TAG"  # marks every process of a study's local Ray instance (for cleanup)
# A tiny study for tests and for checking an installation: every stage runs 2 trials of 8 steps.
SMOKE_OVERRIDES = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16",
                   "optim.max_steps=8", "optim.eval_every=4", "optim.warmup_steps=0", "task.max_val_examples=32"]
SMOKE_SAMPLES = 2


@dataclass
class Options:
    """How to run the searches; None = the search-space file's value (or the default)."""

    num_samples: int | None = None
    max_concurrent: int | None = None
    workers: int | None = None
    cpus_per_worker: float | None = None
    gpus_per_worker: float | None = None
    asha: bool | None = None
    sampler: str | None = None
    seed: int | None = None
    max_failures: int = 2
    train_path: str = "auto"  # "auto" | "direct" | "train"
    smoke: bool = False
    logger: str = "tensorboard"  # experiment tracker (sptune.tune.loggers)
    sequential_phases: bool = False  # True: scratch waits for finetuning instead of running beside the chain


# ----------------------------------------------------------------------------- creating / loading
def create(config_path: str, overrides: list[str], study_dir: str | Path, space_path: str | None = None,
           options: Options | None = None) -> dict[str, Any]:
    """Resolve and validate everything up front, then write study.json (before any Ray work)."""
    options = options or Options()
    study_dir = Path(study_dir).resolve()
    if (study_dir / files.STUDY).is_file():
        raise UserError(f"{study_dir} already holds a study; continue it with `sptune resume {study_dir}` "
                        f"or pass another --dir")
    # The smoke settings first: an override on the command line still wins (`--smoke optim.max_steps=40`).
    overrides = (SMOKE_OVERRIDES if options.smoke else []) + list(overrides)
    stages = {stage: load_config(config_path, overrides, stage=stage).to_dict() for stage in STAGES}
    task, model = stages["scratch"]["task"]["name"], stages["scratch"]["model"]["name"]
    space = search.load(space_path or search.default_path(task, model))
    declared = (space.task or task, space.model or model)
    if declared != (task, model):
        raise UserError(f"{space.path} is for task '{declared[0]}' / model '{declared[1]}', the config is for "
                        f"'{task}' / '{model}'; pass the matching --search-space")
    missing = [s for s in STAGES if s not in space.stages]
    if missing:
        raise UserError(f"{space.path} has no grid for stage(s) {', '.join(missing)}; a study searches all three")
    resolved = resolve_options(options, space)
    if resolved["asha"]:
        for phase in STAGES:
            search.check_rungs(resolved["asha"], step_budgets(stages[phase], space.stages[phase].params),
                               stages[phase]["optim"]["eval_every"], f"stage {phase}")
    state = {"version": 1, "dir": str(study_dir), "config": str(config_path), "overrides": overrides,
             "stages": stages, "space": space.to_dict(), "options": resolved, "phases": {}, "selected": None,
             "created": time.time()}
    study_dir.mkdir(parents=True, exist_ok=True)
    save_state(study_dir, state)
    return state


def step_budgets(stage: dict[str, Any], params: dict[str, Any]) -> dict[int, int]:
    """The optimizer steps each searched batch size trains for, resolved as run_stage resolves them
    (optim.epochs x steps per epoch when epochs are set: the task's training split is read for its size)."""
    optim = stage["optim"]
    sizes = params.get("optim.batch_size")
    sizes = sizes if isinstance(sizes, list) else [optim["batch_size"]]
    if optim["epochs"] <= 0:
        return {size: optim["max_steps"] for size in sizes}
    from sptune.data import steps_per_epoch, train_fraction
    from sptune.registry import get_task

    task = stage["task"]
    n = len(train_fraction(get_task(task["name"]).load(task["data_dir"] or None, seed=stage["run"]["seed"])["train"],
                           task["train_fraction"]))
    return {size: optim["epochs"] * steps_per_epoch(n, size) for size in sizes}


def resolve_options(options: Options, space: search.SearchSpace) -> dict[str, Any]:
    """Command-line options over the search-space file's settings over the defaults."""
    if options.train_path not in PATHS:
        raise UserError(f"--train-path {options.train_path!r}; choose one of: {', '.join(PATHS)}")
    loggers.check(options.logger)
    resources = space.resources

    def pick(value: Any, key: str, default: float) -> Any:  # the command line, else the search space
        return value if value is not None else resources.get(key, default)

    asha = None if options.asha is False else space.asha
    if options.asha and asha is None:  # --asha without settings in the file
        asha = dict(search.DEFAULT_ASHA)
    resolved = {
        "num_samples": SMOKE_SAMPLES if options.smoke else (options.num_samples or space.num_samples),
        "max_concurrent": options.max_concurrent or space.max_concurrent,
        "workers": int(pick(options.workers, "workers", 1)),
        "cpus_per_worker": float(pick(options.cpus_per_worker, "cpus_per_worker", 1)),
        "gpus_per_worker": float(pick(options.gpus_per_worker, "gpus_per_worker", 0)),
        "asha": asha, "sampler": options.sampler or space.sampler,
        "seed": space.seed if options.seed is None else options.seed,
        "max_failures": options.max_failures, "smoke": options.smoke, "logger": options.logger,
        "sequential_phases": options.sequential_phases,
    }
    if resolved["workers"] < 1 or resolved["cpus_per_worker"] <= 0 or resolved["gpus_per_worker"] < 0:
        raise UserError("--workers must be >= 1, --cpus-per-worker > 0 and --gpus-per-worker >= 0")
    if options.train_path == "direct" and (resolved["workers"] > 1 or resolved["gpus_per_worker"] > 1):
        raise UserError("--train-path direct runs each trial as one process with at most one GPU; multiple "
                        "workers or GPUs per worker need --train-path train (or auto)")
    resolved["path"] = choose_path(resolved["workers"], resolved["gpus_per_worker"], options.train_path)
    return resolved


def load_state(study_dir: str | Path) -> dict[str, Any]:
    path = Path(study_dir) / files.STUDY
    if not path.is_file():
        raise UserError(f"{study_dir} is not a study directory (no {files.STUDY}); "
                        f"start one with `sptune study <config> --dir {study_dir}`")
    return files.read_json(path)


# Concurrent phases update one state dict from two threads: every change and write of it holds this lock.
_state_lock = threading.RLock()
_registry_lock = threading.Lock()  # Ray Tune's trainable registry (see run_phase)


def save_state(study_dir: Path, state: dict[str, Any]) -> None:
    with _state_lock:
        atomic.write_json(Path(study_dir) / files.STUDY, state)


def set_phase(study_dir: Path, state: dict[str, Any], phase: str, status: str) -> None:
    with _state_lock:
        state["phases"][phase] = status
        save_state(study_dir, state)


def sequential(options: dict[str, Any]) -> bool:
    """A study created before phases could run concurrently has no such option: it goes on as it started."""
    return options.get("sequential_phases", True)


def describe_path(options: dict[str, Any]) -> str:
    if options["path"] == "direct":
        gpus = f", {options['gpus_per_worker']:g} GPU" if options["gpus_per_worker"] else ""
        return (f"trials run directly in Ray Tune ({options['cpus_per_worker']:g} CPU{gpus} each): one worker, "
                f"so Ray Train would add only overhead")
    gpus = f", {options['gpus_per_worker']:g} GPU" if options["gpus_per_worker"] else ""
    return (f"trials run under Ray Train's TorchTrainer: {options['workers']} worker(s) x "
            f"({options['cpus_per_worker']:g} CPU{gpus}), DDP with {'nccl' if gpus else 'gloo'}")


# ----------------------------------------------------------------------------- running
def run(study_dir: str | Path, address: str | None = None, verbose: int = 1,
        trainable: Callable[..., None] = stage_trainable, retry_failed: bool = False) -> list[dict[str, Any]]:
    """Run (or continue) every phase of a study; returns the results rows (also in results.csv).

    `retry_failed` also reruns, from their last checkpoint, the crashed trials of finished phases
    (a finished phase keeps its selection: finetuning still starts from the trial chosen before).

    `trainable` is the Tune function of each trial (stage_trainable; a test may wrap it); `verbose`
    is Tune's own verbosity (its tables go wherever stdout goes: see sptune.api and sptune.output).
    """
    study_dir = Path(study_dir).resolve()
    state = load_state(study_dir)
    log.info("%s", describe_path(state["options"]))
    run_chain = partial(_run_chain, study_dir, state, trainable, verbose, retry_failed)
    with ray_session(study_dir, address):
        resources.check_cluster(state["options"]["gpus_per_worker"])
        if sequential(state["options"]):
            run_chain(STAGES, threading.Event())
        else:
            loggers.create_experiment(state["options"].get("logger", "tensorboard"), study_dir)
            run_concurrently(run_chain, [("pretrain", "finetune"), ("scratch",)])
    rows = results.collect(study_dir)
    results.write_csv(rows, study_dir / files.RESULTS_CSV)
    return rows


def _run_chain(study_dir: Path, state: dict[str, Any], trainable: Callable[..., None], verbose: int,
               retry_failed: bool, phases: Iterable[str], stopping: threading.Event) -> None:
    """Run the phases one after another; once `stopping` is set (the study was interrupted), a phase whose
    Tuner returns is not marked done: its trials may have been cut short, and a resume continues them."""
    for phase in phases:
        if phase in state["phases"] and not (  # "done", or "skipped: <why>"
                retry_failed and state["phases"][phase] == "done" and crashed_trials(study_dir, phase)):
            continue
        if phase == "finetune" and not select_pretraining(study_dir, state):
            set_phase(study_dir, state, "finetune", "skipped: no pretraining trial completed")
            output.say("finetune: skipped, no pretraining trial completed")
            continue
        run_phase(study_dir, state, phase, trainable, verbose)
        if stopping.is_set():
            return
        set_phase(study_dir, state, phase, "done")


def run_concurrently(run_chain: Callable[[Iterable[str], threading.Event], None],
                     chains: list[tuple[str, ...]]) -> None:
    """The first chain in this (the main) thread, each other in a thread of its own; all finish, or all stop.

    Ctrl-C reaches only the main thread. There, or on any error, the other chains get a KeyboardInterrupt
    raised in their threads (CPython's PyThreadState_SetAsyncExc), which stops their Tuners just as Ctrl-C
    stops a Tuner in the main thread; their phases stay unfinished for a resume. An error in another chain
    is raised here once the main chain is done."""
    stopping = threading.Event()
    errors: list[BaseException] = []

    def guarded(phases: tuple[str, ...]) -> None:
        try:
            run_chain(phases, stopping)
        except BaseException as error:  # noqa: BLE001 (handed to the main thread, which raises it)
            if not stopping.is_set():
                errors.append(error)

    threads = [threading.Thread(target=guarded, args=(phases,), name=f"sptune-{'-'.join(phases)}", daemon=True)
               for phases in chains[1:]]
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
            _interrupt(thread)
        for thread in threads:
            thread.join(60)
        raise
    if errors:
        raise errors[0]


def _interrupt(thread: threading.Thread) -> None:
    import ctypes

    if thread.ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt))


def crashed_trials(study_dir: Path, phase: str) -> list[Path]:
    """Run directories of the phase's trials that crashed after their last retry (error.json)."""
    stage_dir = study_dir / phase
    return sorted(p.parent for p in stage_dir.glob(f"*/{files.TRIAL_ERROR}")) if stage_dir.is_dir() else []


def select_pretraining(study_dir: Path, state: dict[str, Any]) -> dict[str, Any] | None:
    """The best pretraining trial by validation metric, a tie broken by validation loss (results.best_row);
    kept in study.json with what selected it, so a resume reuses it."""
    if state.get("selected") is None:
        # Only pretraining rows: scratch trials may be writing their results meanwhile.
        best, how = results.best_row(results.collect(study_dir), "pretrain")
        if best is None:
            return None
        with _state_lock:
            state["selected"] = {"trial": best["trial_id"], "run_dir": best["run_dir"], "step": best["best_step"],
                                 "best_val": best["best_val"], "best_val_loss": best.get("best_val_loss"),
                                 "selected_by": how, "checkpoint": str(Path(best["run_dir"]) / files.BEST)}
            save_state(study_dir, state)
    return state["selected"]


def trial_spec(study_dir: Path, state: dict[str, Any], phase: str) -> TrialSpec:
    options, stage_space = state["options"], state["space"]["stages"][phase]
    return TrialSpec(stage=phase, base=copy.deepcopy(state["stages"][phase]), study_dir=str(study_dir),
                     path=options["path"], workers=options["workers"], cpus_per_worker=options["cpus_per_worker"],
                     gpus_per_worker=options["gpus_per_worker"], max_failures=options["max_failures"],
                     init=state["selected"] if phase == "finetune" else None,
                     hparam_domains={k: v for k, v in stage_space["params"].items() if isinstance(v, list)})


def run_phase(study_dir: Path, state: dict[str, Any], phase: str, trainable: Callable[..., None],
              verbose: int) -> None:
    from ray import tune
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    from sptune.tune.progress import PhaseProgress

    spec = trial_spec(study_dir, state, phase)
    fn = tune.with_resources(tune.with_parameters(trainable, spec=spec), trial_resources(spec))
    if not sequential(state["options"]):
        # Tune registers a trainable under its name, one registry per Ray job: two phases running at once
        # under one name would start each other's trials, and the registry is a plain dict that two
        # threads must not write at once. So each phase registers its own name here, one at a time, and
        # hands Tune the name. (A study from before concurrent phases keeps the function: Tuner.restore
        # checks the name.)
        name = f"{phase}_{fn.__name__}"
        with _registry_lock:
            tune.register_trainable(name, fn)
        fn = name
    experiment = study_dir / "tune" / phase
    # Not searched, the same in every trial's config: what trackers log as the trial's lineage.
    lineage = {"name": study_dir.name, "stage": phase}
    if phase == "finetune":
        lineage.update(init_trial=spec.init["trial"], init_step=spec.init["step"],
                       init_checkpoint=spec.init["checkpoint"])
    param_space = {LINEAGE_KEY: lineage}
    logger = state["options"].get("logger", "tensorboard")
    loggers.prepare(logger)
    if tune.Tuner.can_restore(str(experiment)):
        # The callbacks and the searcher come back from the experiment (the searcher reopens the journal).
        log.info("restoring the %s search from %s", phase, experiment)
        tuner = tune.Tuner.restore(str(experiment), fn, resume_unfinished=True, resume_errored=True,
                                   param_space=param_space)
    else:
        options = state["options"]
        stage_space = search.parse({"stages": {phase: state["space"]["stages"][phase]}}).stages[phase]
        trials = search.trial_count(stage_space, options["num_samples"])
        tuner = tune.Tuner(fn, param_space=param_space, tune_config=tune.TuneConfig(
            search_alg=search.limit(search.make_searcher(stage_space, options["sampler"], options["seed"],
                                                         journal=study_dir / files.OPTUNA_JOURNAL,
                                                         study_name=search.optuna_study_name(study_dir, phase)),
                                    options["max_concurrent"]),
            scheduler=search.make_scheduler(options["asha"]),
            num_samples=trials, reuse_actors=True,
            trial_name_creator=partial(_trial_name, phase),
            trial_dirname_creator=partial(_trial_name, phase)),
            run_config=tune.RunConfig(
                name=phase, storage_path=str(study_dir / "tune"), verbose=verbose,
                failure_config=tune.FailureConfig(max_failures=options["max_failures"]),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                # Tune's own TensorBoard logger is left out: the study's TensorBoard runs are the trials'.
                callbacks=[JsonLoggerCallback(), CSVLoggerCallback(), failures.make_outcomes_callback(spec),
                           *loggers.callbacks(logger, study_dir, phase),
                           PhaseProgress(phase, trials)]))
    tuner.fit()


def _trial_name(phase: str, trial: Any) -> str:
    return f"{phase}_{trial.trial_id}"


# ----------------------------------------------------------------------------- Ray instance
@contextmanager
def ray_session(study_dir: Path, address: str | None = None) -> Iterator[None]:
    """Use the Ray instance already initialized (tests, notebooks), else join `address`, else start
    a local one whose processes carry this study's tag, so a later resume can find and stop what a
    killed driver left behind (and only that: other Ray instances on the machine are untouched)."""
    import ray

    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    # A snapshot of the experiment is forced at every checkpoint (num_to_keep=1): wanted, not a warning.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # Ctrl-C must raise, not end Tune's loop "normally": a phase that returns is marked done.
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    if ray.is_initialized():
        yield
        return
    address = address or os.environ.get("RAY_ADDRESS")  # set inside `ray job submit` jobs
    check_driver(study_dir)
    stop_processes(leftover_processes(study_dir))  # a killed driver's Ray instance, if it left anything
    tag = ray_tag(study_dir)
    driver = {"pid": os.getpid(), "tag": tag, "address": address, "started": time.time(), "raylet_pids": []}
    atomic.write_json(study_dir / files.DRIVER, driver)
    os.environ[TAG_ENV] = tag
    try:
        # The dashboard stays on: Ray Train's PlacementGroupCleaner asks its state API whether a
        # trial's controller is gone; without it stopped trials leak placement groups (ray#54305).
        # Trials print one line per eval; Ray's INFO lines (a checkpoint saved, ...) would double them.
        ray.init(address=address or "local", logging_level=logging.WARNING,
                 logging_config=ray.LoggingConfig(log_level="WARNING"))
        # Recorded for a later cleanup: if this driver is killed, the raylet's agents outlive it.
        driver["raylet_pids"] = [pid for pid in ray_processes(tag) if _cmdline(pid).split(" ")[0].endswith("/raylet")]
        atomic.write_json(study_dir / files.DRIVER, driver)
        yield
    finally:
        ray.shutdown()
        os.environ.pop(TAG_ENV, None)


def check_driver(study_dir: Path) -> None:
    path = study_dir / files.DRIVER
    if not path.is_file():
        return
    pid = files.read_json(path)["pid"]
    if pid != os.getpid() and _cmdline(pid) and "sptune" in _cmdline(pid):
        raise UserError(f"the study in {study_dir} is still running (driver pid {pid}); stop it first "
                        f"(Ctrl-C or kill {pid}), then resume")


def ray_tag(study_dir: str | Path) -> str:
    return "sptune-" + hashlib.sha1(str(Path(study_dir).resolve()).encode()).hexdigest()[:12]


def ray_processes(tag: str, raylet_pids: Iterable[int] = ()) -> list[int]:
    """PIDs of one Ray instance: the processes whose environment carries `SPTUNE_RAY_TAG=<tag>`, and
    the agents of its raylets, which start with an environment of their own naming their raylet in
    RAY_RAYLET_PID (`raylet_pids`: raylets recorded earlier, now dead, whose agents may be left).
    Linux /proc; elsewhere none are found."""
    needle = f"\0{TAG_ENV}={tag}\0".encode()
    tagged, raylet_of = [], {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            env = b"\0" + (proc / "environ").read_bytes()
        except OSError:
            continue  # exited meanwhile, or not ours to read
        pid = int(proc.name)
        if pid == os.getpid():
            continue
        if needle in env:
            tagged.append(pid)
        match = re.search(rb"\0RAY_RAYLET_PID=(\d+)\0", env)
        if match:
            raylet_of[pid] = int(match.group(1))
    raylets = set(tagged) | {pid for pid in raylet_pids if not _alive(pid)}  # a live raylet must be tagged
    return tagged + [pid for pid, raylet in raylet_of.items() if raylet in raylets and pid not in tagged]


def leftover_processes(study_dir: str | Path) -> list[int]:
    """What the local Ray instance of a study's last driver left running (none if it joined a cluster)."""
    path = Path(study_dir) / files.DRIVER
    if not path.is_file():
        return []
    driver = files.read_json(path)
    return ray_processes(driver["tag"], driver.get("raylet_pids", []))


def stop_processes(pids: list[int], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL what is still alive after `timeout` seconds."""
    if not pids:
        return
    log.warning("stopping %d leftover Ray process(es) of this study: %s", len(pids), pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.2)
        pids = [pid for pid in pids if _alive(pid)]
        if not pids:
            return


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"  # a zombie is dead, only not yet reaped by its parent
    except (OSError, IndexError):
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
