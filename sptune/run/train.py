"""The three stages of the SPT protocol as plain functions (no Ray here; sptune.trials wraps them).

    pretrain(cfg)              masked / causal denoising on the task's own training data (§2)
    finetune(cfg, from_run)    start from the pretraining run's best checkpoint (Appendix C.1)
    scratch(cfg)               the same task training from a random init: the baseline

All three run `run_stage`, one function in labelled steps: setup, data, model, optimizer, resume,
train loop (with periodic eval + checkpoints), test at the best checkpoint, result.

The loop is written for accelerators: batches are prepared ahead (sptune.run.data.Prefetcher), the step's
loss stays on the device (read at eval, not per step), optim.accumulate micro-batches give the big
batch's gradient, run.compile compiles the model and AdamW is fused on CUDA.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from contextlib import closing
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

from sptune import atomic, files, flops, protocol, selection
from sptune.build import build_pretrain_model, build_task_model, count_parameters
from sptune.config import STAGES, Config, ObjectiveConfig
from sptune.errors import UserError
from sptune.folds import cross_validation
from sptune.models.backbone import SequenceModel, drop_mask_channel
from sptune.registry import check_names, task_of
from sptune.run import checkpoints, fingerprint, provenance, rng_state
from sptune.run.data import (Prefetcher, batch, eval_batches, example_draw, step_draw, stage_steps, train_batch_index,
                             train_batch_size, train_fraction)
from sptune.run.objectives import Denoising, MaskDraw, Metric, causal_denoising, denoising_loss, masked_denoising
from sptune.run.runs import claim, identify, pretrain_dir, run_dir_of
from sptune.run.train_setup import (autocast, distributed_rank, make_optimizer, make_progress, make_schedule,
                                    make_writer, pick_device, wrap_model)
from sptune.tasks.base import Split, Task

log = logging.getLogger("sptune.run.train")

# Masking of validation/test examples is fixed (per example: sptune.run.data.example_draw) across evals and
# batch sizes, so pretraining metrics of checkpoints and of trials are comparable.
EVAL_MASK_SEED = 1234
RESTART_FIX = "pass --restart to start this run over (deletes its checkpoints), or pick a new run.name=..."
FROM_FIX = "pretrain again (`sptune pretrain ... --restart`) or pass another --from"
# TensorBoard tags: one per quantity whatever the stage (the stage is in the run's name), so the
# finetuning and scratch curves of a task overlay on one chart.
TB_TAGS = {"train_loss": "train/loss", "val_loss": "val/loss", "val_metric": "val/metric", "lr": "train/lr",
           "tokens_per_s": "train/tokens_per_s"}

OnEval = Callable[[dict[str, Any], Path], None]


# ----------------------------------------------------------------------------- public entry points
# A config enters here from its caller, so its names are checked here (registry.check_names); run_stage runs
# configs already checked where they were loaded (these entry points, a study's creation for its trials).
def pretrain(cfg: Config, on_eval: OnEval | None = None, restart: bool = False) -> dict[str, Any]:
    check_names(cfg)
    return run_stage(cfg, "pretrain", on_eval=on_eval, restart=restart)


def finetune(cfg: Config, from_run: str | Path, on_eval: OnEval | None = None,
             restart: bool = False) -> dict[str, Any]:
    check_names(cfg)
    return run_stage(cfg, "finetune", init_from=Path(from_run), on_eval=on_eval, restart=restart)


def scratch(cfg: Config, on_eval: OnEval | None = None, restart: bool = False) -> dict[str, Any]:
    check_names(cfg)
    return run_stage(cfg, "scratch", on_eval=on_eval, restart=restart)


# ----------------------------------------------------------------------------- the stage function
def run_protocol(config_of: Callable[[str], Config], stages: Sequence[str] = STAGES,
                 run_dir_of: Callable[[str], Path | None] = lambda stage: None,
                 restart: bool = False) -> dict[str, dict[str, Any]]:
    """The paper's protocol as single runs, no search: pretrain, finetune from the pretraining run's best
    checkpoint (left out when pretraining failed), and scratch; {stage: result}. The one assembly of SPT
    and its baseline outside a study: `sptune compare` and the plain backend of the experiment scripts.
    With `run_dir_of`, a stage whose directory holds a finished result is not run again."""
    results: dict[str, dict[str, Any]] = {}
    for stage in protocol.ordered(stages):
        run_dir = run_dir_of(stage)
        finished = files.finished_result(run_dir) if run_dir is not None else None
        if finished is not None:
            results[stage] = finished
            continue
        init_from = None
        before = protocol.prerequisite(stage)
        if before is not None:
            if not protocol.completed(results.get(before)):
                continue  # nothing to start from; the caller shows the SPT arm as failed, with pretraining's reason
            init_from = run_dir_of(before) or Path(results[before]["run_dir"])
        cfg = config_of(stage)
        check_names(cfg)
        results[stage] = run_stage(cfg, stage, init_from=init_from, run_dir=run_dir, restart=restart)
    return results


def run_stage(cfg: Config, stage: str, init_from: Path | None = None, on_eval: OnEval | None = None,
              run_dir: Path | None = None, restart: bool = False,
              train_device: torch.device | None = None) -> dict[str, Any]:
    """One stage from its config to result.json, in labelled steps (each a short function below)."""
    if stage not in STAGES:
        raise UserError(f"unknown stage '{stage}'; choose one of: {', '.join(STAGES)}")

    # 1. Setup: the resolved config, its fingerprint and run directory (which must hold this config or
    #    nothing; it is claimed after step 5, so an unusable checkpoint leaves it as it was), seed, device.
    #    Under DDP (Ray Train with several workers) every rank trains its shard of each batch; rank 0 writes.
    run = set_up(cfg, stage, init_from, run_dir, restart, train_device)
    cfg = run.cfg

    # 2. Data: the task's splits (train / val drawn from the run seed under task.resample_splits; or a
    #    cross-validation fold of train + val: sptune.folds), the training fraction (nested prefixes of one permutation).
    splits = cross_validation(run.task.load(cfg.task.data_dir or None, seed=cfg.run.seed,
                                            resample=cfg.task.resample_splits), cfg.task.val_folds, cfg.task.val_fold)
    train_split = train_fraction(splits["train"], cfg.task.train_fraction)

    # 3. Model: pretraining head, or the task head (finetune loads the pretrained backbone); its FLOPs.
    model, cost = build_model(run, train_split, init_from)
    model.to(run.device)
    # `model` stays the plain module (checkpoints hold its state_dict); `trained` is what the loop
    # backpropagates through (DDP all-reduces its gradients; compiled after DDP wraps it, when run.compile),
    # `run_model` what evaluation calls (compiled when run.compile, never DDP).
    trained, ddp, run_model = wrap_model(model, run.device, run.world > 1, cfg.run.compile)

    # 4. Optimizer and schedule: AdamW with parameter groups; warmup then cosine or constant, per step.
    max_steps = stage_steps(cfg.optim.max_steps, cfg.optim.epochs, cfg.optim.batch_size, len(train_split))
    optimizer = make_optimizer(model, cfg.optim)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, make_schedule(cfg.optim, max_steps))

    # 5. Resume from last.pt: model, optimizer, schedule, step, RNG and eval history. The best checkpoint
    #    is the best validation metric, a tie broken by the validation loss (sptune.selection).
    state = resume(run, model, optimizer, scheduler, restart)
    if run.main_rank:  # only now: a checkpoint that cannot be used (--from, last.pt) leaves the directory as it was
        claim(run.run_dir, cfg, run.fp, restart)
    result: dict[str, Any] = {"stage": stage, "task": run.task.name, "model": cfg.model.name,
                              "run_dir": str(run.run_dir), "metric": stage_metric_name(cfg.objective, run.task, stage),
                              "n_params": count_parameters(model),
                              "init_from": str(pretrain_dir(init_from)) if init_from else None,
                              "provenance": provenance.of_run(model, run.device, cfg.run.precision,
                                                                cfg.model.name)}
    end = dict(state=state, cost=cost, world=run.world, accumulate=cfg.optim.accumulate, run_dir=run.run_dir,
               max_steps=max_steps, write=run.main_rank)  # what finish() needs

    # 6. Train loop: one optimizer step per batch (of optim.accumulate micro-batches); eval, TensorBoard and
    #    checkpoints every eval_every. 7. Test once, at the best validation checkpoint (Appendix C.1).
    loop = Loop(run, model, trained, ddp, run_model, optimizer, scheduler, state, len(train_split), splits["val"],
                result["metric"], max_steps, on_eval)
    with closing(make_writer(run.run_dir, run.main_rank)) as writer:
        bar = make_progress(cfg.run.progress, max_steps, state["step"], f"{stage} {run.task.name}/{cfg.model.name}")
        with closing(bar) as progress, closing(prefetch(run, train_split, state["step"], max_steps)) as batches:
            failure = train_loop(loop, batches, writer, progress)
        if failure is not None:
            log.error("%s failed: %s", run.run_dir.name, failure)
            return finish(result, status="failed", reason=failure, **end)
        test = test_at_best(run, model, run_model, splits["test"], state)
        if run.main_rank:
            writer.add_scalar("test/metric", test["metric"], state["best_step"])
    result.update(test_entries(test))
    return finish(result, status="completed", **end)


@dataclasses.dataclass(frozen=True)
class Run:
    """A stage run's identity and place: its resolved config, task, directory and device."""

    cfg: Config
    task: Task
    stage: str
    run_dir: Path
    fp: fingerprint.Fingerprint
    rank: int
    world: int
    device: torch.device

    @property
    def main_rank(self) -> bool:
        return self.rank == 0


def set_up(cfg: Config, stage: str, init_from: Path | None, run_dir: Path | None, restart: bool,
           train_device: torch.device | None) -> Run:
    task = task_of(cfg.task)
    cfg, fp = identify(cfg, stage, init_from)
    run_dir = Path(run_dir) if run_dir else run_dir_of(cfg, stage, fp)
    if not restart:
        fingerprint.check(run_dir, fp)
    rank, world = distributed_rank()
    torch.manual_seed(cfg.run.seed)
    if cfg.run.num_threads > 0:
        torch.set_num_threads(cfg.run.num_threads)
    device = pick_device(cfg.run.device, rank, train_device)  # train_device: Ray Train's, for its workers
    return Run(cfg, task, stage, run_dir, fp, rank, world, device)


def build_model(run: Run, train_split: Split, init_from: Path | None) -> tuple[SequenceModel, flops.Flops]:
    """The stage's model on the CPU (finetuning: from init_from's pretrained backbone) and its FLOPs
    (stage_model)."""
    return stage_model(run.cfg, run.task, run.stage, train_split, init_from)


def stage_model(cfg: Config, task: Task, stage: str, example: Split, init_from: Path | None = None
                ) -> tuple[SequenceModel, flops.Flops]:
    """A stage's model on the CPU (pretraining: the denoising model, with the encoder's mask-indicator channel
    for masked SPT of continuous inputs; else the task model, whose backbone init_from's pretraining run gives
    where named), and its FLOPs per example and per call: counted once on a meta copy (no compute, no RNG,
    the model untouched; before it moves to the device, so the copy costs no device memory) from the shapes
    of `example`'s first example, as the stage's first step sees it (sptune.flops). The trainer, a stopped
    trial's result (sptune.trials.stopped) and the budget (sptune.experiment.budget) all count it here."""
    if stage == "pretrain":
        masked_continuous = cfg.objective.kind == "masked" and task.input_kind == "continuous"
        model = build_pretrain_model(cfg.model, cfg.objective, task, mask_channel=masked_continuous)
    else:
        model = build_task_model(cfg.model, task)
        if init_from is not None:
            load_pretrained_backbone(model, pretrain_dir(init_from))
    x1, _, lengths1 = batch(example, torch.tensor([0]))
    if stage == "pretrain":
        d1, lengths1 = denoise(cfg.objective, task, x1, lengths1, step_draw(cfg.run.seed, 0))
        x1 = d1.inputs
    return model, flops.measure(model, x1, lengths1, task.seq_len)


def resume(run: Run, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
           restart: bool) -> dict[str, Any]:
    """The training state to continue from: last.pt's (restored into model, optimizer, schedule and the
    RNG), or a fresh one."""
    state = fresh_state()
    last_path = run.run_dir / files.LAST
    if run.cfg.run.resume and not restart and last_path.is_file():
        # Loaded to the CPU: load_state_dict copies onto the model's device, and the RNG state must stay a
        # CPU ByteTensor (sptune.run.rng_state).
        ckpt = checkpoints.load(last_path, "cpu", keys=("model", "optimizer", "scheduler", "rng", "state"),
                                fix=RESTART_FIX)
        checkpoints.load_into(model, ckpt["model"], last_path, RESTART_FIX)
        checkpoints.load_into(optimizer, ckpt["optimizer"], last_path, RESTART_FIX)
        scheduler.load_state_dict(ckpt["scheduler"])
        rng_state.restore(ckpt["rng"], run.device)
        state.update(ckpt["state"])
        log.info("resumed %s at step %d", run.run_dir, state["step"])
    return state


def prefetch(run: Run, train_split: Split, start: int, stop: int) -> Prefetcher:
    """The batches of steps start..stop-1, prepared ahead on a thread: this rank's share of each step's
    batch, as a pure function of (seed, step) (sptune.run.data)."""
    cfg = run.cfg

    def step_problem(step: int) -> Problem:  # on the CPU, in the prefetch thread
        index = train_batch_index(len(train_split), cfg.optim.batch_size, cfg.run.seed, step)  # the global batch
        x, y, lengths = batch(train_split, index[run.rank::run.world])
        return make_problem(cfg, run.task, run.stage, x, y, lengths, step_draw(cfg.run.seed, step))

    return Prefetcher(step_problem, start, stop, pin=run.device.type == "cuda")


@dataclasses.dataclass
class Loop:
    """What the train loop updates and reads besides the batches."""

    run: Run
    model: nn.Module
    trained: nn.Module
    ddp: nn.parallel.DistributedDataParallel | None
    run_model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    state: dict[str, Any]
    train_size: int
    val_split: Split
    metric_name: str
    max_steps: int
    on_eval: OnEval | None


def train_loop(loop: Loop, batches: Prefetcher, writer: Any, progress: Any) -> str | None:
    """Train to max_steps (or until validation plateaus, optim.patience), evaluating and checkpointing every
    eval_every; None, or why the run failed."""
    run, state, cfg = loop.run, loop.state, loop.run.cfg
    period = Period(run.device)
    while state["step"] < loop.max_steps and not plateaued(state, cfg.optim.patience, run.run_dir.name):
        step = state["step"]
        loop.trained.train()
        problem = batches.get(step).to(run.device)
        loop.optimizer.zero_grad(set_to_none=True)
        loss = accumulate_gradients(loop.trained, loop.ddp, cfg, run.task, run.stage, problem, run.device)  # ()
        if cfg.optim.grad_clip > 0:
            nn.utils.clip_grad_norm_(loop.model.parameters(), cfg.optim.grad_clip, foreach=True)
        loop.optimizer.step()
        loop.scheduler.step()
        period.add(step, loss)
        state["step"] = step + 1
        state["examples_seen"] += train_batch_size(loop.train_size, cfg.optim.batch_size, step)
        progress.update(1)
        if state["step"] % cfg.optim.eval_every == 0 or state["step"] == loop.max_steps:
            failure = period.failure(state["step"])  # the loop's one host sync per eval period
            if failure is not None:
                return failure
            evaluate_and_checkpoint(loop, period, writer, progress)
            period = Period(run.device)
    return None


def plateaued(state: dict[str, Any], patience: int, name: str) -> bool:
    """Early stopping: validation has not improved for `patience` steps (0 = never). The state is at an eval
    step here (patience is a multiple of eval_every, and last.pt is written at evals), so a resumed run that
    had stopped stops again at once."""
    if patience <= 0 or state["best_step"] < 0 or state["step"] - state["best_step"] < patience:
        return False
    log.info("%s: stopped early at step %d, no validation gain since step %d (optim.patience=%d)", name,
             state["step"], state["best_step"], patience)
    return True


class Period:
    """The steps since the last eval: their loss summed on the device, and the first non-finite one.

    The loss is read only at eval: a .item() per step would stall the accelerator until the step
    finishes. For the same reason a non-finite loss is noted on the device (the first step that had one,
    and its value) and acted on at the next eval boundary."""

    def __init__(self, device: torch.device):
        self.loss, self.steps, self.start = torch.zeros((), dtype=torch.float64, device=device), 0, time.perf_counter()
        self.bad_step, self.bad_loss = torch.full((), -1, device=device), torch.zeros((), device=device)

    def add(self, step: int, loss: torch.Tensor) -> None:
        new_bad = ~torch.isfinite(loss) & (self.bad_step < 0)
        self.bad_step = torch.where(new_bad, step, self.bad_step)
        self.bad_loss = torch.where(new_bad, loss.float(), self.bad_loss)
        self.loss += loss
        self.steps += 1

    def failure(self, step: int) -> str | None:
        bad_step = int(self.bad_step)  # a host sync: it also lets the clock see the queued steps done
        if bad_step < 0:
            return None
        return (f"non-finite loss ({float(self.bad_loss)}) at step {bad_step} (checked at step {step}): lower "
                f"optim.lr or raise optim.warmup_steps")


def evaluate_and_checkpoint(loop: Loop, period: Period, writer: Any, progress: Any) -> None:
    """Validate; keep best.pt (the best validation metric, ties by loss: sptune.selection) and last.pt;
    log to TensorBoard and the terminal; hand the eval to `on_eval` (Ray Tune's report)."""
    run, state, cfg = loop.run, loop.state, loop.run.cfg
    elapsed = time.perf_counter() - period.start
    state["train_seconds"] += elapsed
    val = evaluate(loop.run_model, cfg, run.task, run.stage, loop.val_split, run.device, cfg.task.max_val_examples)
    count_eval(state, val)
    tokens_per_example = run.task.seq_len * (2 if run.task.paired else 1)
    record = {"step": state["step"], "train_loss": period.loss.item() / max(period.steps, 1),
              "val_loss": val["loss"], "val_metric": val["metric"], "lr": loop.scheduler.get_last_lr()[0],
              "tokens_per_s": period.steps * cfg.optim.batch_size * tokens_per_example / max(elapsed, 1e-9)}
    state["history"].append(record)
    state["val_targets"] = val["targets"]
    incumbent, candidate = (state["best_metric"], state["best_loss"]), (val["metric"], val["loss"])
    winner, _ = selection.select([incumbent, candidate], lambda c: c,
                                 selection.tolerance(loop.metric_name, val["targets"]))
    improved = winner is candidate
    if improved:
        state.update(best_metric=val["metric"], best_loss=val["loss"], best_step=state["step"])
    if run.main_rank:
        save_checkpoints(loop, improved, val["metric"])
        for key, tag in TB_TAGS.items():
            writer.add_scalar(tag, record[key], state["step"])
        writer.flush()
    if run.world > 1:
        torch.distributed.barrier()  # every rank sees the checkpoint before anyone reports it
    if run.main_rank:
        progress.write(f"[{run.run_dir.name}] step {state['step']}/{loop.max_steps} train_loss "
                       f"{record['train_loss']:.4f} val_loss {val['loss']:.4f} val_{loop.metric_name} "
                       f"{val['metric']:.4f}" + (" *" if improved else ""))
    if loop.on_eval is not None:
        loop.on_eval(dict(record, best_metric=state["best_metric"], best_loss=state["best_loss"],
                          best_step=state["best_step"], train_seconds=state["train_seconds"],
                          eval_seconds=state["eval_seconds"], max_steps=loop.max_steps), run.run_dir)


def save_checkpoints(loop: Loop, improved: bool, metric: float) -> None:
    """best.pt when the eval improved; last.pt always (everything a resume needs)."""
    state, run_dir = loop.state, loop.run.run_dir
    if improved:
        atomic.write_torch(run_dir / files.BEST, {"model": loop.model.state_dict(), "step": state["step"],
                                                  "metric": metric})
    atomic.write_torch(run_dir / files.LAST, {"model": loop.model.state_dict(), "optimizer": loop.optimizer.state_dict(),
                                              "scheduler": loop.scheduler.state_dict(),
                                              "rng": rng_state.capture(loop.run.device), "state": state})


def test_at_best(run: Run, model: nn.Module, run_model: nn.Module, test_split: Split,
                 state: dict[str, Any]) -> dict[str, Any]:
    """The test metric, measured once, at the best validation checkpoint (the retrospective choice); with a
    task's accuracy, each test example's outcome too (pretraining's accuracy counts masked tokens instead)."""
    best_path = run.run_dir / files.BEST
    checkpoints.load_into(model, checkpoints.load(best_path, run.device, keys=("model",), fix=RESTART_FIX)["model"],
                          best_path, RESTART_FIX)
    test = evaluate(run_model, run.cfg, run.task, run.stage, test_split, run.device, run.cfg.task.max_test_examples,
                    keep_hits=run.stage != "pretrain")
    count_eval(state, test)
    return test


def test_entries(test: dict[str, Any]) -> dict[str, Any]:
    """result.json's test entries: metric and loss, and for an accuracy `test_hits`, each test example's
    outcome ('0'/'1', in the split's order): what sptune.report.stats.paired_with_test_sampling resamples. Under DDP
    every rank evaluates the whole test split (evaluate is not sharded), so rank 0's string is complete."""
    entries = {"test_metric": test["metric"], "test_loss": test["loss"]}
    if "hits" in test:
        entries["test_hits"] = test["hits"]
    return entries


def stage_metric_name(objective: ObjectiveConfig, task: Task, stage: str) -> str:
    """The validation / test metric a stage reports: the task's own, or the denoising objective's in pretraining."""
    pretraining = stage == "pretrain"
    name = "masked_accuracy" if pretraining and objective.loss == "ce" else ("masked_r2" if pretraining else task.metric)
    return name.replace("masked", "next") if pretraining and objective.kind == "causal" else name


def fresh_state() -> dict[str, Any]:
    """The training state of a run at step 0 (last.pt holds it later)."""
    return {"step": 0, "best_metric": -math.inf, "best_loss": None, "best_step": -1, "val_targets": None,
            "history": [], "train_seconds": 0.0, "eval_seconds": 0.0, "examples_seen": 0, "eval_examples": 0,
            "eval_calls": 0}


def finish(result: dict[str, Any], state: dict[str, Any], cost: flops.Flops, world: int, run_dir: Path,
           max_steps: int, status: str, reason: str | None = None, write: bool = True,
           accumulate: int = 1) -> dict[str, Any]:
    """Complete and write result.json. Seconds and FLOPs are of all devices: under DDP every rank trains
    its share of each batch, generates the SSM kernels and evaluates the whole split; with accumulation
    each micro-batch is a model call (the SSM kernels are generated once per call)."""
    history = state["history"]
    result.update(status=status, reason=reason, steps=state["step"], max_steps=max_steps,
                  best_step=state["best_step"],
                  best_val=state["best_metric"] if history else None, best_val_loss=state["best_loss"],
                  val_targets=state["val_targets"], final_val=history[-1]["val_metric"] if history else None,
                  examples_seen=state["examples_seen"], train_seconds=state["train_seconds"],
                  eval_seconds=state["eval_seconds"],
                  device_seconds=(state["train_seconds"] + state["eval_seconds"]) * world,
                  train_flops=cost.train(state["examples_seen"], state["step"] * world * accumulate),
                  eval_flops=cost.forward(state["eval_examples"], state["eval_calls"]) * world, history=history)
    if write:
        atomic.write_json(run_dir / files.RESULT, result)
    return result


# ----------------------------------------------------------------------------- pieces of the loop
def denoise(objective: ObjectiveConfig, task: Task, x: torch.Tensor, lengths: torch.Tensor,
            draw: MaskDraw) -> tuple[Denoising, torch.Tensor]:
    """The pretraining problem of a batch (§2) and its lengths; each document of a pair is its own sequence."""
    if task.paired:
        x, lengths = x.reshape(-1, x.shape[-1]), lengths.reshape(-1)  # (2B, L)
    if objective.kind == "masked":
        return masked_denoising(x, lengths, objective.mask_ratio, draw), lengths
    return causal_denoising(x, lengths), lengths


@dataclasses.dataclass
class Problem:
    """What the model sees and must predict for a batch: the task's inputs and targets, or the pretraining
    (denoising, §2) problem, whose rows are sequences: 2 per example for paired tasks."""

    inputs: torch.Tensor  # (R, L) ids, (R, L, C) values, or (B, 2, L) ids of a paired task
    lengths: torch.Tensor  # (R,) or (B, 2)
    targets: torch.Tensor  # (B,) task targets, or (R, L[, C]) denoising targets
    loss_mask: torch.Tensor | None  # (R, L) bool positions the denoising loss counts; None for the task
    rows_per_example: int

    def examples(self, start: int, stop: int) -> Problem:
        """The problem of examples start..stop-1 (a micro-batch)."""
        rows = slice(start * self.rows_per_example, stop * self.rows_per_example)
        return Problem(self.inputs[rows], self.lengths[rows], self.targets[rows],
                       None if self.loss_mask is None else self.loss_mask[rows], self.rows_per_example)

    def tensors(self) -> list[torch.Tensor | None]:
        return [self.inputs, self.lengths, self.targets, self.loss_mask]

    def apply(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> Problem:
        return Problem(*(None if t is None else fn(t) for t in self.tensors()), self.rows_per_example)

    def pin_memory(self) -> Problem:
        return self.apply(lambda t: t.pin_memory())

    def to(self, device: torch.device) -> Problem:
        # non_blocking only from pinned memory to CUDA: the copy then overlaps compute already queued
        return self.apply(lambda t: t.to(device, non_blocking=device.type == "cuda"))

    @property
    def n_examples(self) -> int:
        return self.inputs.shape[0] // self.rows_per_example


def make_problem(cfg: Config, task: Task, stage: str, x: torch.Tensor, y: torch.Tensor, lengths: torch.Tensor,
                 draw: MaskDraw) -> Problem:
    if stage != "pretrain":
        return Problem(x, lengths, y, None, 1)
    d, lengths = denoise(cfg.objective, task, x, lengths, draw)
    return Problem(d.inputs, lengths, d.targets, d.loss_mask, 2 if task.paired else 1)


def compute_loss(model: nn.Module, cfg: Config, task: Task, stage: str, problem: Problem,
                 metric: Metric | None = None) -> tuple[torch.Tensor, torch.Tensor | int]:
    """(mean loss of the batch, number of terms it averages): masked tokens (x channels for L1), a count on the
    device (summed without a host sync), or examples, a Python int (known on the host)."""
    if stage == "pretrain":
        d = Denoising(problem.inputs, problem.targets, problem.loss_mask)
        pred = model(d.inputs, problem.lengths)  # (R, L, V or C)
        if metric is not None:  # evaluation only: its boolean indexing syncs, once per eval batch
            metric.update(pred[d.loss_mask], d.targets[d.loss_mask])
        return denoising_loss(pred, d, cfg.objective.loss)
    y = problem.targets
    out = model(problem.inputs, problem.lengths)  # (B, K)
    if task.is_regression:
        out = out.squeeze(-1)  # (B,)
        work = torch.promote_types(out.dtype, torch.float32)  # fp32 targets stay fp32 under bf16 autocast
        loss = nn.functional.mse_loss(out.to(work), y.to(work))
    else:
        loss = nn.functional.cross_entropy(out, y)
    if metric is not None:
        metric.update(out, y)
    return loss, y.shape[0]


def loss_terms(problem: Problem, cfg: Config) -> torch.Tensor | int:
    """How many terms the batch's mean loss averages (as compute_loss counts them), without the model."""
    if problem.loss_mask is None:
        return problem.targets.shape[0]
    channels = problem.targets.shape[-1] if cfg.objective.loss == "l1" else 1
    return problem.loss_mask.sum() * channels  # () on the device


def micro_batches(n: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) of each non-empty micro-batch: n examples in `parts` near-equal slices, the first n % parts
    one longer (torch.tensor_split's split), as Python ints: no tensor, so nothing to sync."""
    sizes = [n // parts + (i < n % parts) for i in range(parts)]
    bounds = [sum(sizes[:i]) for i in range(parts + 1)]
    return [(start, stop) for start, stop in zip(bounds, bounds[1:]) if stop > start]


def accumulate_gradients(trained: nn.Module, ddp: nn.parallel.DistributedDataParallel | None, cfg: Config,
                         task: Task, stage: str, problem: Problem, device: torch.device) -> torch.Tensor:
    """Backpropagate the batch in optim.accumulate micro-batches; return its mean loss (detached, on device).

    The batch's loss is the mean over all its terms: examples, or masked tokens of the WHOLE batch (a
    micro-batch with more masked tokens weighs more). So each micro-batch's mean loss is weighted by its
    share n_i / N of the batch's terms, and the summed gradient is the big batch's: sum_i (n_i / N) mean_i
    = (1 / N) sum over all terms. Under DDP only the last micro-batch all-reduces (no_sync before it).
    No host-device sync: token counts stay on the device, example counts are Python ints.
    """
    chunks = micro_batches(problem.n_examples, cfg.optim.accumulate)
    total_terms = loss_terms(problem, cfg)
    # nothing masked in the batch: every micro-batch's loss is 0, so any positive divisor gives the zero loss
    total_terms = total_terms.clamp(min=1) if isinstance(total_terms, torch.Tensor) else max(total_terms, 1)
    loss = torch.zeros((), device=device)
    for i, (start, stop) in enumerate(chunks):
        micro = problem.examples(start, stop)
        sync = ddp is None or i == len(chunks) - 1
        with contextlib.nullcontext() if sync else ddp.no_sync():
            with autocast(device, cfg.run.precision):
                micro_loss, terms = compute_loss(trained, cfg, task, stage, micro)
            weighted = micro_loss * (terms / total_terms)  # exactly micro_loss when accumulate == 1
            weighted.backward()
        loss += weighted.detach().float()
    return loss


@torch.no_grad()
def evaluate(model: SequenceModel, cfg: Config, task: Task, stage: str, split: Split, device: torch.device,
             limit: int, keep_hits: bool = False) -> dict[str, Any]:
    """Loss and metric over the split's first `limit` examples (0 = all), independent of optim.batch_size:
    every example is masked by its own draw (EVAL_MASK_SEED, its index) and the loss is averaged over all
    terms of the split, not over batch means. Also: the metric's targets, examples, model calls, seconds;
    with `keep_hits` and an accuracy, "hits": each target's correctness as '0'/'1', in the split's index
    order (eval_batches walks it in order, every rank all of it)."""
    start = time.perf_counter()
    model.eval()
    kind = "accuracy" if (task.metric == "accuracy" if stage != "pretrain" else cfg.objective.loss == "ce") else "r2"
    metric = Metric(kind, keep_hits)
    # float64 sums of per-term losses, on the device: read once at the end
    total, terms = torch.zeros((), dtype=torch.float64, device=device), torch.zeros((), dtype=torch.float64,
                                                                                    device=device)
    examples, calls = 0, 0
    for index, (x, y, lengths) in eval_batches(split, cfg.optim.batch_size, limit):
        problem = make_problem(cfg, task, stage, x, y, lengths, example_draw(EVAL_MASK_SEED, index)).to(device)
        with autocast(device, cfg.run.precision):
            loss, n = compute_loss(model, cfg, task, stage, problem, metric)
        total += loss.double() * n
        terms += n
        examples, calls = examples + len(index), calls + 1
    out = {"loss": total.item() / max(terms.item(), 1), "metric": metric.value(), "targets": int(metric.n),
           "examples": examples, "calls": calls, "seconds": time.perf_counter() - start}
    hits = metric.hit_string()
    return out if hits is None else {**out, "hits": hits}


def count_eval(state: dict[str, Any], ev: dict[str, float]) -> None:
    """Add an eval pass to the run's eval cost (device-seconds and FLOPs of result.json)."""
    state["eval_seconds"] += ev["seconds"]
    state["eval_examples"] += ev["examples"]
    state["eval_calls"] += ev["calls"]


def load_pretrained_backbone(model: SequenceModel, pre_dir: Path) -> None:
    """Carry the backbone over; drop the pretraining head and the encoder's mask-indicator column."""
    path = pre_dir / files.BEST
    state = checkpoints.load(path, keys=("model",), fix=FROM_FIX)["model"]
    state = {k: v for k, v in state.items() if k.startswith("backbone.")}
    own = model.state_dict()
    key = "backbone.encoder.embed.weight"
    if key in state and state[key].dim() == 2 and isinstance(model.backbone.encoder.embed, nn.Linear) \
            and state[key].shape[1] == own[key].shape[1] + 1:
        state = drop_mask_channel(state)
    missing = [k for k in own if k.startswith("backbone.") and k not in state]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        raise checkpoints.UnusableCheckpoint(f"checkpoint {path} was written by another model (missing {missing[:3]}, "
                                             f"unexpected {unexpected[:3]}); {FROM_FIX}")
    checkpoints.load_into(model, {**own, **state}, path, FROM_FIX)  # the new head keeps its fresh init
