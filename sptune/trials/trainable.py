"""One trial = one stage run (`sptune.run.train.run_stage`) inside Ray Tune, by one of two paths:

    direct  one worker, at most one GPU: the stage function runs in the Tune trial process itself; each eval is
            reported with `ray.tune.report`, without a Tune checkpoint: the run directory is the checkpoint.
            Ray Train would add a controller and a worker actor (~12 s a trial here) and nothing else.
    train   N workers or several GPUs: the trial launches a `TorchTrainer` (DDP: gloo on CPU, nccl on
            GPU) under a deterministic run name, so a retried trial resumes that Train run from its
            latest checkpoint; workers report with `ray.train.report`, and `TuneReportCallback`
            forwards the metrics to Tune (`ray.train.report` may not be called in a Tune function).

Files of a trial live in its run directory `<study>/<stage>/<stage>-<trial id>-<params>`: the
trainer's own (config.yaml, last.pt, best.pt, result.json, tb/) plus trial.json (what ran where,
every attempt with the step it started from) and progress.json (the latest eval, wall time).
The run directory is the truth the results table is built from, and what a retried or resumed trial
continues from (its last.pt). It lives in the study directory, beside Tune's own storage (tune/), so on a
cluster it is on the shared filesystem every node mounts. A Tune checkpoint would only copy last.pt into
that same storage, and Tune's experiment snapshot, which lags the trials by seconds, can name a checkpoint
that `num_to_keep` has already deleted: the restored trial then fails "Could not recover from checkpoint"
on every retry. The train path keeps Ray Train's checkpoints (its workers restore from them).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from sptune import atomic, files
from sptune.config import Config, from_dict, with_params
from sptune.run import checkpoints

log = logging.getLogger("sptune.engine")

PATHS = ("auto", "direct", "train")
# The trial process of the train path only waits on its TorchTrainer, so it reserves no CPU (the
# workers get every core: 2 workers on 2 cores must fit). A placement group needs some resource in
# its bundle, and "memory" is one every Ray node has, unlike a custom resource.
DRIVER_RESOURCES = {"CPU": 0, "memory": 64 * 2**20}
CARRIED = (files.LAST, files.BEST, files.PROGRESS)  # what a Tune / Train checkpoint holds
# A constant entry of every trial's Tune config: the study, stage and (finetune) the pretraining trial it
# starts from, so experiment trackers log each trial's lineage with its config. Not a searched param.
LINEAGE_KEY = "study"


@dataclass(frozen=True)
class TrialSpec:
    """Everything a trial needs besides its searched params; identical across retries and resumes."""

    stage: str
    base: dict[str, Any]  # the stage's resolved config (file + overrides) as Config.to_dict()
    study_dir: str
    path: str  # "direct" | "train"
    workers: int = 1
    cpus_per_worker: float = 1.0
    gpus_per_worker: float = 0.0
    max_failures: int = 2  # Ray Train's own retries of a worker group (train path)
    init: dict[str, Any] | None = None  # finetune: the selected pretraining trial (studies.select_pretraining)
    hparam_domains: dict[str, list[Any]] = field(default_factory=dict)  # grids, for TensorBoard HParams

    @property
    def devices(self) -> int:
        """Devices a trial occupies: GPUs when it has them, else one per CPU worker."""
        return max(1, math.ceil(self.workers * (self.gpus_per_worker or 1)))


@dataclass(frozen=True)
class Trial:
    """One grid point of one stage, as its worker runs it: the stage's spec (finetuning: with the pretraining
    trial it starts from), the searched params and Tune's id, which together name its run directory."""

    spec: TrialSpec
    params: dict[str, Any]
    trial_id: str

    @property
    def run_dir(self) -> Path:
        return run_dir_of(self.spec.study_dir, self.spec.stage, self.trial_id, self.params)


def choose_path(workers: int, gpus_per_worker: float, forced: str = "auto") -> str:
    """direct for one worker with at most one GPU (Train adds nothing there: Ray already gives the
    trial process its GPU in CUDA_VISIBLE_DEVICES), the TorchTrainer otherwise."""
    if forced != "auto":
        return forced
    return "direct" if workers == 1 and gpus_per_worker <= 1 else "train"


def trial_resources(path: str, cpus_per_worker: float, gpus_per_worker: float) -> dict[str, float]:
    """What one trial asks Tune for on the training path `path` (PATHS)."""
    if path == "direct":
        return {"CPU": cpus_per_worker, **({"GPU": gpus_per_worker} if gpus_per_worker else {})}
    return dict(DRIVER_RESOURCES)  # the TorchTrainer reserves the workers' CPUs/GPUs itself


def trial_config(spec: TrialSpec, params: dict[str, Any]) -> Config:
    """The stage config with the trial's flattened params (`optim.lr`) applied."""
    cfg = with_params(spec.base, params)
    cfg.run.progress = False  # no tty in a trial; evals are printed as lines
    if cfg.run.num_threads == 0:
        cfg.run.num_threads = max(1, int(spec.cpus_per_worker))  # one torch thread per reserved core
    return cfg


def run_dir_of(study_dir: str | Path, stage: str, trial_id: str, params: dict[str, Any]) -> Path:
    """`<study>/<stage>/<run name>`: the one place a trial's run directory is named."""
    return Path(study_dir) / stage / run_name(stage, trial_id, params)


def trial_run_dir(config: dict[str, Any], trial_id: str) -> Path:
    """The run directory of the trial whose Tune config is `config` (its lineage and searched params)."""
    lineage = config[LINEAGE_KEY]
    return run_dir_of(lineage["study_dir"], lineage["stage"], trial_id, searched(config))


def searched(config: dict[str, Any]) -> dict[str, Any]:
    """A Tune trial's config without the lineage entry every trial shares: the searched params alone."""
    return {key: value for key, value in config.items() if key != LINEAGE_KEY}


def run_name(stage: str, trial_id: str, params: dict[str, Any]) -> str:
    """`pretrain-<trial id>-lr=0.001-batch_size=32`: the stage first, so TensorBoard tells runs apart."""
    return f"{stage}-{trial_id}{params_suffix(params)}"


def params_suffix(params: dict[str, Any]) -> str:
    short = "-".join(f"{key.rsplit('.', 1)[-1]}={value:g}" if isinstance(value, float)
                     else f"{key.rsplit('.', 1)[-1]}={value}" for key, value in sorted(params.items()))
    return f"-{short}" if short else ""


def adopt_orphan(run_dir: Path, trial_id: str, params: dict[str, Any]) -> None:
    """Give a new trial the unfinished run directory of an earlier trial of the same point, if one exists.

    Tune snapshots its trials and searcher every few seconds, so a trial that started after the last
    snapshot before the driver died is unknown to the restored Tune: the searcher queues its point again
    (UniqueOptunaSearch.reopen_journal) and Tune runs it under a new trial id. The searcher hands out no
    point twice otherwise, so an unfinished directory of this stage with the same params belongs to that
    lost trial: renamed to the new trial's name, the run continues from its last checkpoint (or, finished,
    is not run again), and no orphan row is left behind. The record is updated before the rename, so a
    driver dying in between leaves a directory the next resume adopts again."""
    if run_dir.exists() or not run_dir.parent.is_dir():
        return
    wanted = json.loads(json.dumps(params))  # as trial.json stores them
    # Only the directories named for these params are read: a trial's start reads no sibling's record.
    prefix, suffix = f"{run_dir.parent.name}-", params_suffix(params)
    for other in sorted(p for p in run_dir.parent.iterdir() if p.name.startswith(prefix) and p.name.endswith(suffix)):
        record = files.read_json(other / files.TRIAL) if (other / files.TRIAL).is_file() else {}
        if record.get("params") != wanted or other == run_dir:
            continue
        if record["trial_id"] != trial_id:
            record["previous_trial_ids"] = [*record.get("previous_trial_ids", []), record["trial_id"]]
            record["trial_id"] = trial_id
            atomic.write_json(other / files.TRIAL, record)
        os.rename(other, run_dir)  # atomic
        log.info("trial %s continues in %s (its first trial was lost with the driver)", trial_id, other.name)
        return


def stage_trainable(trial: Trial) -> None:
    """One trial of its stage (sptune.trials.entry.run_trial makes it from the stage's spec)."""
    from ray import tune as ray_tune

    spec, params, run_dir = trial.spec, trial.params, trial.run_dir
    adopt_orphan(run_dir, trial.trial_id, params)
    done = files.finished_result(run_dir)
    if done is not None:
        # Finished before the study driver died but after Tune's last snapshot: never run it again.
        ray_tune.report(final_metrics(done, files.read_json(run_dir / files.TRIAL).get("wall_seconds")))
        return
    cfg = trial_config(spec, params)
    init_from = Path(spec.init["run_dir"]) if spec.init else None
    with attempt(trial) as clock:
        write_hparams(run_dir, spec, params)  # listed in TensorBoard however it ends
        if spec.path == "direct":
            result = run_guarded(cfg, spec.stage, init_from, report_to_tune(clock), run_dir,
                                 gpu_share=spec.gpus_per_worker)
        else:
            result = run_under_torch_trainer(cfg, spec, run_dir, trial.trial_id, init_from)
    write_outcome(run_dir, result, result.get("steps"))
    ray_tune.report(final_metrics(result, clock.total()))


def run_guarded(cfg: Config, stage: str, init_from: Path | None, on_eval: Any, run_dir: Path,
                train_device: Callable[[], Any] | None = None, gpu_share: float = 1.0) -> dict[str, Any]:
    """run_stage on the device this Ray process was given (on a Ray Train worker, `train_device()`:
    Train's GPU for it); a deterministic failure (GPUs torch cannot use, CUDA out of memory, a damaged
    or another model's checkpoint) ends the trial as `failed` with its reason instead of raising, since a
    retry would fail the same way (sptune.trials.failures). A trial holding a share of a GPU
    (gpu_share < 1) may use that share of its memory, its CUDA context included, and no more."""
    from sptune.trials import failures, resources

    device, reason = resources.trial_device(cfg.run.device)
    if reason is None:
        cfg.run.device = device
        if device == "cuda":
            resources.start_gpu_trial(gpu_share)
        try:
            chosen = train_device() if train_device and device == "cuda" else None
            return run_stage(cfg, stage, init_from, on_eval, run_dir, train_device=chosen)
        except Exception as exc:
            reason = failures.deterministic_reason(exc, gpu_share)
            if reason is None:
                raise
    log.error("%s failed: %s", run_dir.name, reason)
    return failures.failed_result(run_dir, stage, reason)


def run_stage(*args: Any, **kwargs: Any) -> dict[str, Any]:
    from sptune.run import train  # imported in the trial process: torch and the models load there

    return train.run_stage(*args, **kwargs)


# ----------------------------------------------------------------------------- reporting
def eval_metrics(record: dict[str, Any], wall_seconds: float) -> dict[str, Any]:
    """What Tune sees after each eval; `step` and `budget` (the fraction of the resolved budget done,
    ASHA's clock) are ours: monotonic across restores."""
    return {"step": record["step"], "budget": record["step"] / record["max_steps"], "best_val": record["best_metric"],
            "best_val_loss": record["best_loss"], "best_step": record["best_step"], "val_metric": record["val_metric"],
            "val_loss": record["val_loss"], "train_loss": record["train_loss"], "lr": record["lr"],
            "tokens_per_s": record["tokens_per_s"], "train_seconds": record["train_seconds"],
            "eval_seconds": record["eval_seconds"], "wall_seconds": wall_seconds}


def final_metrics(result: dict[str, Any], wall_seconds: float | None = None) -> dict[str, Any]:
    best = result.get("best_val")
    return {"step": result.get("steps", 0), "best_val": float("nan") if best is None else best,
            "best_step": result.get("best_step", -1), "status": result["status"],
            "test_metric": result.get("test_metric", float("nan")),
            "wall_seconds": wall_seconds if wall_seconds is not None else result.get("wall_seconds", 0.0)}


def report_to_tune(clock: "Clock"):
    from ray import tune as ray_tune

    def on_eval(record: dict[str, Any], run_dir: Path) -> None:
        metrics = eval_metrics(record, clock.total())
        atomic.write_json(run_dir / files.PROGRESS, metrics)
        ray_tune.report(metrics)  # no checkpoint: the run directory is one (module docstring)

    return on_eval


@contextmanager
def checkpoint_dir(run_dir: Path) -> Iterator[str]:
    """A directory of hard links to the current last.pt/best.pt/progress.json: Ray copies it to
    storage without us writing the checkpoint twice (the files are replaced, never rewritten)."""
    path = tempfile.mkdtemp(dir=run_dir, prefix=".ckpt-")
    try:
        for name in CARRIED:
            if (run_dir / name).is_file():
                os.link(run_dir / name, Path(path) / name)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def restore_files(checkpoint: Any, run_dir: Path) -> None:
    """Bring last.pt/best.pt back from a Ray checkpoint when the run directory lacks them or is older
    (a retry on another node, a lost disk); the trainer then resumes from last.pt as usual."""
    if checkpoint is None:
        return
    with checkpoint.as_directory() as path:
        saved = _step(Path(path) / files.PROGRESS)
        if (run_dir / files.LAST).is_file() and saved <= _step(run_dir / files.PROGRESS):
            return
        run_dir.mkdir(parents=True, exist_ok=True)
        for name in CARRIED:
            if (Path(path) / name).is_file():
                tmp = run_dir / f".{name}.restore"
                shutil.copyfile(Path(path) / name, tmp)
                os.replace(tmp, run_dir / name)
        log.info("restored %s from the Ray checkpoint at step %d", run_dir.name, saved)


def _step(progress: Path) -> int:
    return files.read_json(progress)["step"] if progress.is_file() else -1


# ----------------------------------------------------------------------------- trial record
class Clock:
    """Wall seconds of a trial summed over its attempts (a killed attempt counts up to its last eval)."""

    def __init__(self, before: float):
        self.before, self.start = before, time.monotonic()

    def total(self) -> float:
        return self.before + time.monotonic() - self.start


@contextmanager
def attempt(trial: Trial) -> Iterator[Clock]:
    """Record in trial.json who ran this attempt, where, and from which step it starts."""
    import ray

    spec, trial_id, run_dir = trial.spec, trial.trial_id, trial.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / files.TRIAL
    record = files.read_json(path) if path.is_file() else {
        "trial_id": trial_id, "stage": spec.stage, "params": trial.params, "path": spec.path, "workers": spec.workers,
        "cpus_per_worker": spec.cpus_per_worker, "gpus_per_worker": spec.gpus_per_worker, "devices": spec.devices,
        "init": spec.init, "attempts": []}
    progress = files.read_json(run_dir / files.PROGRESS) if (run_dir / files.PROGRESS).is_file() else {}
    clock = Clock(progress.get("wall_seconds", 0.0))
    # A new attempt: the last crash is no longer the trial's outcome.
    (run_dir / files.TRIAL_ERROR).unlink(missing_ok=True)
    for old in (run_dir / "tb").glob(f"*{HPARAMS_END}"):
        old.unlink()
    record["attempts"].append({"start_step": _resume_step(run_dir), "started": time.time(),
                               "node_id": ray.get_runtime_context().get_node_id(),
                               "hostname": socket.gethostname(), "pid": os.getpid()})
    atomic.write_json(path, record)
    log.info("trial %s (%s path) starts at step %d in %s", trial_id, spec.path,
             record["attempts"][-1]["start_step"], run_dir)
    yield clock
    # `ended` is written before the trial's final report, so anything Tune starts on that report (the next
    # stage's trials) starts after it: a causal order on one clock, which start + wall_seconds is not.
    record["attempts"][-1]["ended"] = time.time()
    record["wall_seconds"] = clock.total()
    atomic.write_json(path, record)


def _resume_step(run_dir: Path) -> int:
    last = run_dir / files.LAST
    if not last.is_file():
        return 0
    try:
        return int(checkpoints.load(last, keys=("state",))["state"]["step"])
    except checkpoints.UnusableCheckpoint:
        return 0  # only a record here; run_stage fails the trial on this file, with the reason


HPARAMS_END = ".sptune-end"  # suffix of the event file holding a trial's outcome; a new attempt deletes it
# A trial's outcome as TensorBoard's HParams session status (ASHA's stop is no failure).
SESSION_STATUS = {"completed": "STATUS_SUCCESS", "stopped": "STATUS_SUCCESS", "failed": "STATUS_FAILURE"}


def write_hparams(run_dir: Path, spec: TrialSpec, params: dict[str, Any]) -> None:
    """One HParams session per trial in its tb/ directory, next to the stage's scalars, written when the trial
    starts. TensorBoard keeps the first session record of a run and the latest value of each metric: every trial
    is listed, however it ends (its outcome: write_outcome)."""
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams as hparams_summaries

    # model, task, seed and cell as columns: trials of one experiment told apart in HParams' table
    hparams = dict(params, stage=spec.stage, path=spec.path, model=spec.base["model"]["name"],
                   task=spec.base["task"]["name"], seed=spec.base["run"]["seed"], cell=Path(spec.study_dir).name)
    if spec.init:
        hparams["init_trial"] = spec.init["trial"]
    domains = {k: v for k, v in spec.hparam_domains.items() if k in params}
    experiment, session_start, _ = hparams_summaries(hparams, session_metrics({}), domains or None)
    with SummaryWriter(str(run_dir / "tb")) as writer:
        for summary in (experiment, session_start):
            writer.file_writer.add_summary(summary)


def write_outcome(run_dir: Path, result: dict[str, Any], step: int | None = None) -> None:
    """A trial's HParams outcome (status, final metrics at its last step) when it ends, in an event file of its
    own (HPARAMS_END) that a later attempt (a retry, --retry-failed) deletes before writing its own."""
    from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
    from tensorboard.plugins.hparams.api_pb2 import Status
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData, SessionEndInfo
    from torch.utils.tensorboard import SummaryWriter

    content = HParamsPluginData(version=0, session_end_info=SessionEndInfo(
        status=Status.Value(SESSION_STATUS[result["status"]])))
    session_end = Summary(value=[Summary.Value(tag="_hparams_/session_end_info", metadata=SummaryMetadata(
        plugin_data=SummaryMetadata.PluginData(plugin_name="hparams", content=content.SerializeToString())))])
    for old in (run_dir / "tb").glob(f"*{HPARAMS_END}"):
        old.unlink()
    with SummaryWriter(str(run_dir / "tb"), filename_suffix=HPARAMS_END) as writer:
        writer.file_writer.add_summary(session_end)
        for tag, value in session_metrics(result).items():
            writer.add_scalar(tag, value, step or 0)


def session_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The HParams metrics of a result (NaN, or -1 for the step, where it has none yet)."""
    nan = float("nan")
    return {"hparams/best_val": result.get("best_val") if result.get("best_val") is not None else nan,
            "hparams/final_val": result.get("final_val") if result.get("final_val") is not None else nan,
            "hparams/test_metric": result.get("test_metric", nan), "hparams/best_step": result.get("best_step", -1)}


# ----------------------------------------------------------------------------- the TorchTrainer path
def run_under_torch_trainer(cfg: Config, spec: TrialSpec, run_dir: Path, trial_id: str,
                            init_from: Path | None) -> dict[str, Any]:
    from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    resources = {"CPU": spec.cpus_per_worker, **({"GPU": spec.gpus_per_worker} if spec.gpus_per_worker else {})}
    trainer = TorchTrainer(
        train_worker,
        train_loop_config={"cfg": cfg.to_dict(), "stage": spec.stage, "run_dir": str(run_dir),
                           "init_from": str(init_from) if init_from else None},
        scaling_config=ScalingConfig(num_workers=spec.workers, use_gpu=spec.gpus_per_worker > 0,
                                     resources_per_worker=resources),
        run_config=RunConfig(
            # Deterministic: a retried or resumed trial finds this Train run and its checkpoints.
            name=f"{spec.stage}-{trial_id}", storage_path=str(Path(spec.study_dir).resolve() / "train"),
            failure_config=FailureConfig(max_failures=spec.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=1), callbacks=[TuneReportCallback()],
            logging_config=LoggingConfig(log_level="WARNING")))  # each eval is already printed once
    trainer.fit()
    return files.read_json(run_dir / files.RESULT)


def train_worker(loop_config: dict[str, Any]) -> None:
    """Runs on every Ray Train worker; run_stage does the DDP itself when torch.distributed is up."""
    import ray
    import ray.train
    import torch.distributed as dist

    run_dir = Path(loop_config["run_dir"])
    rank = ray.train.get_context().get_world_rank()
    if rank == 0:
        restore_files(ray.train.get_checkpoint(), run_dir)
        atomic.write_json(run_dir / files.WORKER, {"node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                                       "hostname": socket.gethostname(), "start_step": _resume_step(run_dir),
                                       "world_size": ray.train.get_context().get_world_size()})
    if dist.is_available() and dist.is_initialized():
        dist.barrier()  # the other ranks read last.pt only after rank 0 restored it
    clock = Clock(_step_wall(run_dir))

    def on_eval(record: dict[str, Any], run_dir: Path) -> None:
        # Every rank calls ray.train.report (it synchronizes the workers); rank 0 brings the checkpoint.
        metrics = eval_metrics(record, clock.total())
        if rank != 0:
            ray.train.report(metrics)
            return
        atomic.write_json(run_dir / files.PROGRESS, metrics)
        with checkpoint_dir(run_dir) as path:
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(path))

    init_from = Path(loop_config["init_from"]) if loop_config["init_from"] else None
    # A deterministic failure returns normally (after rank 0 wrote result.json): raising would make
    # Train restart the worker group max_failures times, to fail the same way.
    run_guarded(from_dict(loop_config["cfg"]), loop_config["stage"], init_from, on_eval, run_dir,
                train_device=ray_train_device)


def ray_train_device() -> Any:
    """This Train worker's device by Ray Train's contract (its GPU among those Ray assigned the worker)."""
    import ray.train.torch

    return ray.train.torch.get_device()


def _step_wall(run_dir: Path) -> float:
    progress = run_dir / files.PROGRESS
    return files.read_json(progress).get("wall_seconds", 0.0) if progress.is_file() else 0.0
