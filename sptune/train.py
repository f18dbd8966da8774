"""The three stages of the SPT protocol as plain functions (no Ray here; sptune.tune wraps them).

    pretrain(cfg)              masked / causal denoising on the task's own training data (§2)
    finetune(cfg, from_run)    start from the pretraining run's best checkpoint (Appendix C.1)
    scratch(cfg)               the same task training from a random init: the baseline

All three run `run_stage`, one function in labelled steps: setup, data, model, optimizer, resume,
train loop (with periodic eval + checkpoints), test at the best checkpoint, result.

The loop is written for accelerators: batches are prepared ahead (sptune.data.Prefetcher), the step's
loss stays on the device (read at eval, not per step), optim.accumulate micro-batches give the big
batch's gradient, run.compile compiles the model and AdamW is fused on CUDA.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from sptune import atomic, checkpoints, files, fingerprint, flops, selection
from sptune.build import build_pretrain_model, build_task_model, count_parameters
from sptune.config import STAGES, Config, ModelConfig, check_causal_norm, dump
from sptune.config import load as load_config
from sptune.data import (Prefetcher, batch, eval_batches, example_draw, step_draw, stage_steps, train_batch_index,
                         train_batch_size, train_fraction)
from sptune.errors import UserError
from sptune.models.backbone import SequenceModel, drop_mask_channel
from sptune.objectives import Denoising, MaskDraw, Metric, causal_denoising, denoising_loss, masked_denoising
from sptune.registry import check_names, get_task
from sptune.tasks.base import Split, Task
from sptune.train_setup import (autocast, distributed_rank, make_optimizer, make_progress, make_schedule, make_writer,
                                pick_device, wrap_model)

log = logging.getLogger("sptune.train")

# Masking of validation/test examples is fixed (per example: sptune.data.example_draw) across evals and
# batch sizes, so pretraining metrics of checkpoints and of trials are comparable.
EVAL_MASK_SEED = 1234
# Model fields a finetuning run sets itself; every other model field is the pretraining run's
# architecture, and a different value in the finetune config is a contradiction. pooling: the task
# head is new; dropout: regularization, no parameters; ssm_lr: an optimizer setting; kernel_backend:
# the same kernel computed another way (pykeops or torch).
FINETUNE_MODEL_FIELDS = ("pooling", "dropout", "ssm_lr", "kernel_backend")
# What `--restart` deletes from the run directory before training from step 0.
RESTARTED = (files.LAST, files.BEST, files.RESULT, files.TENSORBOARD)
RESTART_FIX = "pass --restart to start this run over (deletes its checkpoints), or pick a new run.name=..."
FROM_FIX = "pretrain again (`sptune pretrain ... --restart`) or pass another --from"
# TensorBoard tags: one per quantity whatever the stage (the stage is in the run's name), so the
# finetuning and scratch curves of a task overlay on one chart.
TB_TAGS = {"train_loss": "train/loss", "val_loss": "val/loss", "val_metric": "val/metric", "lr": "train/lr",
           "tokens_per_s": "train/tokens_per_s"}

OnEval = Callable[[dict[str, Any], Path], None]


# ----------------------------------------------------------------------------- public entry points
def pretrain(cfg: Config, on_eval: OnEval | None = None, restart: bool = False) -> dict[str, Any]:
    return run_stage(cfg, "pretrain", on_eval=on_eval, restart=restart)


def finetune(cfg: Config, from_run: str | Path, on_eval: OnEval | None = None,
             restart: bool = False) -> dict[str, Any]:
    return run_stage(cfg, "finetune", init_from=Path(from_run), on_eval=on_eval, restart=restart)


def scratch(cfg: Config, on_eval: OnEval | None = None, restart: bool = False) -> dict[str, Any]:
    return run_stage(cfg, "scratch", on_eval=on_eval, restart=restart)


# ----------------------------------------------------------------------------- config resolution
def resolve(cfg: Config, task: Task, stage: str, init_from: Path | None = None) -> Config:
    """Fill the task-dependent defaults (mask ratio, loss, causality) so the dumped config is complete."""
    cfg = copy.deepcopy(cfg)
    if init_from is not None:
        pre_dir = pretrain_dir(init_from)
        pre = load_config(pre_dir / files.CONFIG)
        if pre.task.name != cfg.task.name:
            raise UserError(f"--from run was pretrained on task '{pre.task.name}', not '{cfg.task.name}'; "
                            f"finetune on the same task")
        inherit_pretraining(cfg, pre, pre_dir)
    if cfg.objective.mask_ratio == -1.0:
        cfg.objective.mask_ratio = task.mask_ratio
    if cfg.objective.loss == "auto":
        cfg.objective.loss = task.pretrain_loss
    if stage == "pretrain" and cfg.objective.loss == "ce" and task.input_kind != "tokens":
        raise UserError(f"objective.loss=ce needs token inputs, task '{task.name}' is continuous; use objective.loss=l1")
    if stage == "pretrain" and cfg.objective.kind == "causal":
        cfg.model.causal = True  # causal SPT trains a unidirectional model (§2)
    if cfg.run.device == "auto":  # the device that runs is what the run records (and is fingerprinted by)
        cfg.run.device = "cuda" if torch.cuda.is_available() else "cpu"
    check_causal_norm(cfg)
    return cfg


def inherit_pretraining(cfg: Config, pre: Config, pre_dir: Path) -> None:
    """The architecture and objective are the pretraining run's; finetuning changes the head and the
    optimization (FINETUNE_MODEL_FIELDS). An architecture field the finetune config gives another value
    is a contradiction: a silent replacement would record settings that never ran."""
    mine = copy.deepcopy(cfg.model)
    if pre.objective.kind == "causal":
        mine.causal = True  # causal pretraining derived it (resolve); the finetune config need not repeat it
    architecture = [f.name for f in dataclasses.fields(ModelConfig) if f.name not in FINETUNE_MODEL_FIELDS]
    clashes = [f"model.{name}={getattr(mine, name)} contradicts the pretraining run ({getattr(pre.model, name)})"
               for name in architecture if getattr(mine, name) != getattr(pre.model, name)]
    if clashes:
        raise UserError(f"{'; '.join(clashes)}; --from {pre_dir} fixes the architecture: drop or match "
                        f"{'this setting' if len(clashes) == 1 else 'these settings'}, or pretrain again with "
                        f"{'it' if len(clashes) == 1 else 'them'}")
    cfg.model = dataclasses.replace(pre.model, **{name: getattr(cfg.model, name) for name in FINETUNE_MODEL_FIELDS})
    cfg.objective = copy.deepcopy(pre.objective)  # pretraining-only settings: finetuning records the ones that ran


def identify(cfg: Config, stage: str, init_from: Path | None = None) -> tuple[Config, fingerprint.Fingerprint]:
    """The resolved config and its fingerprint: what a run directory holds and is named after."""
    cfg = resolve(cfg, get_task(cfg.task.name), stage, init_from)
    return cfg, fingerprint.of(cfg, stage, pretrain_dir(init_from) if init_from is not None else None)


def pretrain_dir(path: Path) -> Path:
    path = Path(path)
    if path.is_file():
        path = path.parent
    if not (path / files.BEST).is_file() or not (path / files.CONFIG).is_file():
        raise UserError(f"--from {path} is not a finished pretraining run (no best.pt/config.yaml); "
                        f"run `sptune pretrain` first and pass its run directory")
    return path


def run_dir_of(cfg: Config, stage: str, fp: fingerprint.Fingerprint) -> Path:
    """run.name, else `<stage>-<task>-<model>-s<seed>-<6 hex of the fingerprint>`: one directory per config."""
    name = cfg.run.name or f"{stage}-{cfg.task.name}-{cfg.model.name}-s{cfg.run.seed}-{fp.short}"
    return Path(cfg.run.out_dir) / name


def claim(run_dir: Path, cfg: Config, fp: fingerprint.Fingerprint, restart: bool) -> None:
    """Make run_dir this config's. On --restart first delete the previous run's files (the user asked
    for it; nothing else ever deletes them). The fingerprint goes before config.yaml, so a reader that
    sees the new config also sees the fingerprint it is checked against."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if restart:
        for name in RESTARTED:
            path = run_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        log.warning("--restart: deleted the previous run's %s in %s", ", ".join(RESTARTED), run_dir)
    fingerprint.write(run_dir, fp)
    dump(cfg, run_dir / files.CONFIG)


# ----------------------------------------------------------------------------- the stage function
def run_stage(cfg: Config, stage: str, init_from: Path | None = None, on_eval: OnEval | None = None,
              run_dir: Path | None = None, restart: bool = False,
              train_device: torch.device | None = None) -> dict[str, Any]:
    if stage not in STAGES:
        raise UserError(f"unknown stage '{stage}'; choose one of: {', '.join(STAGES)}")

    # 1. Setup: resolve the config, its fingerprint and run directory (which must hold this config
    #    or nothing; it is claimed after step 5, so an unusable checkpoint leaves it as it was), seed,
    #    device. Under DDP (Ray Train with several workers) every rank trains on its shard of each
    #    batch; rank 0 writes the files.
    task = get_task(check_names(cfg).task.name)
    cfg, fp = identify(cfg, stage, init_from)
    run_dir = Path(run_dir) if run_dir else run_dir_of(cfg, stage, fp)
    if not restart:
        fingerprint.check(run_dir, fp)
    rank, world = distributed_rank()
    main_rank = rank == 0
    torch.manual_seed(cfg.run.seed)
    if cfg.run.num_threads > 0:
        torch.set_num_threads(cfg.run.num_threads)
    device = pick_device(cfg.run.device, rank, train_device)  # train_device: Ray Train's, for its workers

    # 2. Data: the task's splits, the training fraction (nested prefixes of one permutation).
    splits = task.load(cfg.task.data_dir or None, seed=cfg.run.seed)
    train_split = train_fraction(splits["train"], cfg.task.train_fraction)
    pretraining = stage == "pretrain"
    masked_continuous = pretraining and cfg.objective.kind == "masked" and task.input_kind == "continuous"

    # 3. Model: pretraining head, or the task head (finetune loads the pretrained backbone).
    if pretraining:
        model = build_pretrain_model(cfg, task, mask_channel=masked_continuous)
    else:
        model = build_task_model(cfg, task)
        if init_from is not None:
            load_pretrained_backbone(model, pretrain_dir(init_from))
    # FLOPs per example and per model call, counted once on a meta copy of the model (no compute, no RNG,
    # the model untouched; before it moves to the device, so the copy costs no device memory) from the
    # shapes of one training example (sptune.flops).
    x1, _, lengths1 = batch(train_split, torch.tensor([0]))
    if pretraining:
        d1, lengths1 = denoise(cfg, task, x1, lengths1, step_draw(cfg.run.seed, 0))
        x1 = d1.inputs
    cost = flops.measure(model, x1, lengths1, task.seq_len)
    model.to(device)
    # `model` stays the plain module (checkpoints hold its state_dict); `trained` is what the loop
    # backpropagates through (DDP all-reduces its gradients; compiled after DDP wraps it, when run.compile),
    # `run_model` what evaluation calls (compiled when run.compile, never DDP).
    trained, ddp, run_model = wrap_model(model, device, world > 1, cfg.run.compile)

    # 4. Optimizer and schedule: AdamW with parameter groups; warmup then cosine or constant, per step.
    max_steps = stage_steps(cfg.optim.max_steps, cfg.optim.epochs, cfg.optim.batch_size, len(train_split))
    optimizer = make_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, make_schedule(cfg, max_steps))

    # 5. Resume from last.pt: model, optimizer, schedule, step, RNG and eval history. The best checkpoint
    #    is the best validation metric, a tie broken by the validation loss (sptune.selection).
    state = fresh_state()
    last_path = run_dir / files.LAST
    if cfg.run.resume and not restart and last_path.is_file():
        ckpt = checkpoints.load(last_path, device, keys=("model", "optimizer", "scheduler", "rng", "state"),
                                fix=RESTART_FIX)
        checkpoints.load_into(model, ckpt["model"], last_path, RESTART_FIX)
        checkpoints.load_into(optimizer, ckpt["optimizer"], last_path, RESTART_FIX)
        scheduler.load_state_dict(ckpt["scheduler"])
        torch.set_rng_state(ckpt["rng"])
        state.update(ckpt["state"])
        log.info("resumed %s at step %d", run_dir, state["step"])
    if main_rank:  # only now: a checkpoint that cannot be used (--from, last.pt) leaves the directory as it was
        claim(run_dir, cfg, fp, restart)
    writer = make_writer(run_dir, main_rank)

    # 6. Train loop: one optimizer step per batch (of optim.accumulate micro-batches); eval, TensorBoard and
    #    checkpoints every eval_every.
    metric_name = stage_metric_name(cfg, task, stage)
    tokens_per_example = task.seq_len * (2 if task.paired else 1)
    result: dict[str, Any] = {"stage": stage, "task": task.name, "model": cfg.model.name, "run_dir": str(run_dir),
                              "metric": metric_name, "n_params": count_parameters(model),
                              "init_from": str(pretrain_dir(init_from)) if init_from else None}
    end = dict(state=state, cost=cost, world=world, accumulate=cfg.optim.accumulate, run_dir=run_dir,
               write=main_rank)  # what finish() needs
    progress = make_progress(cfg, max_steps, state["step"], f"{stage} {task.name}/{cfg.model.name}")

    def step_problem(step: int) -> Problem:  # this rank's share of step's batch, on the CPU (prefetch thread)
        index = train_batch_index(len(train_split), cfg.optim.batch_size, cfg.run.seed, step)  # the global batch
        x, y, lengths = batch(train_split, index[rank::world])
        return make_problem(cfg, task, stage, x, y, lengths, step_draw(cfg.run.seed, step))

    batches = Prefetcher(step_problem, state["step"], max_steps, pin=device.type == "cuda")
    # The loss is summed on the device and read at eval: a .item() per step would stall the accelerator
    # until the step finishes. For the same reason a non-finite loss is noted on the device (the first
    # step that had one, and its value) and acted on at the next eval boundary.
    running_loss, running_n, tick = torch.zeros((), dtype=torch.float64, device=device), 0, time.perf_counter()
    first_bad_step, first_bad_loss = torch.full((), -1, device=device), torch.zeros((), device=device)
    while state["step"] < max_steps:
        step = state["step"]
        trained.train()
        problem = batches.get(step).to(device)
        optimizer.zero_grad(set_to_none=True)
        loss = accumulate_gradients(trained, ddp, cfg, task, stage, problem, device)  # () on device
        if cfg.optim.grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip, foreach=True)
        optimizer.step()
        scheduler.step()
        new_bad = ~torch.isfinite(loss) & (first_bad_step < 0)
        first_bad_step = torch.where(new_bad, step, first_bad_step)
        first_bad_loss = torch.where(new_bad, loss.float(), first_bad_loss)
        state["step"] = step + 1
        state["examples_seen"] += train_batch_size(len(train_split), cfg.optim.batch_size, step)
        running_loss += loss
        running_n += 1
        progress.update(1)

        if state["step"] % cfg.optim.eval_every == 0 or state["step"] == max_steps:
            # The loop's one host sync per eval period; it also lets the clock below see the queued steps done.
            bad_step = int(first_bad_step)
            if bad_step >= 0:
                reason = (f"non-finite loss ({float(first_bad_loss)}) at step {bad_step} (checked at step "
                          f"{state['step']}): lower optim.lr or raise optim.warmup_steps")
                log.error("%s failed: %s", run_dir.name, reason)
                batches.close()
                writer.close()
                progress.close()
                return finish(result, status="failed", reason=reason, **end)
            elapsed = time.perf_counter() - tick
            state["train_seconds"] += elapsed
            val = evaluate(run_model, cfg, task, stage, splits["val"], device, cfg.task.max_val_examples)
            count_eval(state, val)
            record = {"step": state["step"], "train_loss": running_loss.item() / max(running_n, 1),
                      "val_loss": val["loss"], "val_metric": val["metric"], "lr": scheduler.get_last_lr()[0],
                      "tokens_per_s": running_n * cfg.optim.batch_size * tokens_per_example / max(elapsed, 1e-9)}
            state["history"].append(record)
            state["val_targets"] = val["targets"]
            incumbent, candidate = (state["best_metric"], state["best_loss"]), (val["metric"], val["loss"])
            winner, _ = selection.select([incumbent, candidate], lambda c: c,
                                         selection.tolerance(metric_name, val["targets"]))
            improved = winner is candidate
            if improved:
                state.update(best_metric=val["metric"], best_loss=val["loss"], best_step=state["step"])
            if main_rank:
                if improved:
                    atomic.write_torch(run_dir / files.BEST, {"model": model.state_dict(), "step": state["step"],
                                                              "metric": val["metric"]})
                atomic.write_torch(last_path, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                               "scheduler": scheduler.state_dict(), "rng": torch.get_rng_state(),
                                               "state": state})
                for key, tag in TB_TAGS.items():
                    writer.add_scalar(tag, record[key], state["step"])
                writer.flush()
            if world > 1:
                torch.distributed.barrier()  # every rank sees the checkpoint before anyone reports it
            if main_rank:
                progress.write(f"[{run_dir.name}] step {state['step']}/{max_steps} train_loss {record['train_loss']:.4f} "
                           f"val_loss {val['loss']:.4f} val_{metric_name} {val['metric']:.4f}"
                           + (" *" if improved else ""))
            if on_eval is not None:
                on_eval(dict(record, best_metric=state["best_metric"], best_loss=state["best_loss"],
                             best_step=state["best_step"], train_seconds=state["train_seconds"],
                             eval_seconds=state["eval_seconds"], max_steps=max_steps), run_dir)
            running_loss, running_n, tick = torch.zeros_like(running_loss), 0, time.perf_counter()
    batches.close()
    progress.close()

    # 7. Test at the best validation checkpoint (the retrospective choice, Appendix C.1).
    best_path = run_dir / files.BEST
    checkpoints.load_into(model, checkpoints.load(best_path, device, keys=("model",), fix=RESTART_FIX)["model"],
                          best_path, RESTART_FIX)
    test = evaluate(run_model, cfg, task, stage, splits["test"], device, cfg.task.max_test_examples)
    count_eval(state, test)
    if main_rank:
        writer.add_scalar("test/metric", test["metric"], state["best_step"])
        writer.close()
    result["test_metric"] = test["metric"]
    result["test_loss"] = test["loss"]
    return finish(result, status="completed", **end)


def stage_metric_name(cfg: Config, task: Task, stage: str) -> str:
    """The validation / test metric a stage reports: the task's own, or the denoising objective's in pretraining."""
    pretraining = stage == "pretrain"
    name = "masked_accuracy" if pretraining and cfg.objective.loss == "ce" else ("masked_r2" if pretraining else task.metric)
    return name.replace("masked", "next") if pretraining and cfg.objective.kind == "causal" else name


def fresh_state() -> dict[str, Any]:
    """The training state of a run at step 0 (last.pt holds it later)."""
    return {"step": 0, "best_metric": -math.inf, "best_loss": None, "best_step": -1, "val_targets": None,
            "history": [], "train_seconds": 0.0, "eval_seconds": 0.0, "examples_seen": 0, "eval_examples": 0,
            "eval_calls": 0}


def finish(result: dict[str, Any], state: dict[str, Any], cost: flops.Flops, world: int, run_dir: Path,
           status: str, reason: str | None = None, write: bool = True, accumulate: int = 1) -> dict[str, Any]:
    """Complete and write result.json. Seconds and FLOPs are of all devices: under DDP every rank trains
    its share of each batch, generates the SSM kernels and evaluates the whole split; with accumulation
    each micro-batch is a model call (the SSM kernels are generated once per call)."""
    history = state["history"]
    result.update(status=status, reason=reason, steps=state["step"], best_step=state["best_step"],
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
def denoise(cfg: Config, task: Task, x: torch.Tensor, lengths: torch.Tensor,
            draw: MaskDraw) -> tuple[Denoising, torch.Tensor]:
    """The pretraining problem of a batch (§2) and its lengths; each document of a pair is its own sequence."""
    if task.paired:
        x, lengths = x.reshape(-1, x.shape[-1]), lengths.reshape(-1)  # (2B, L)
    if cfg.objective.kind == "masked":
        return masked_denoising(x, lengths, cfg.objective.mask_ratio, draw), lengths
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
    d, lengths = denoise(cfg, task, x, lengths, draw)
    return Problem(d.inputs, lengths, d.targets, d.loss_mask, 2 if task.paired else 1)


def compute_loss(model: nn.Module, cfg: Config, task: Task, stage: str, problem: Problem,
                 metric: Metric | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean loss of the batch, number of terms it averages): masked tokens (x channels for L1) or examples."""
    if stage == "pretrain":
        d = Denoising(problem.inputs, problem.targets, problem.loss_mask)
        pred = model(d.inputs, problem.lengths)  # (R, L, V or C)
        if metric is not None:
            metric.update(pred[d.loss_mask], d.targets[d.loss_mask])
        return denoising_loss(pred, d, cfg.objective.loss)
    y = problem.targets
    out = model(problem.inputs, problem.lengths)  # (B, K)
    if task.is_regression:
        out = out.squeeze(-1)  # (B,)
        loss = nn.functional.mse_loss(out, y.to(out.dtype))
    else:
        loss = nn.functional.cross_entropy(out, y)
    if metric is not None:
        metric.update(out, y)
    return loss, torch.tensor(y.shape[0], device=y.device)


def loss_terms(problem: Problem, cfg: Config) -> torch.Tensor:
    """How many terms the batch's mean loss averages (as compute_loss counts them), without the model."""
    if problem.loss_mask is None:
        return torch.tensor(problem.targets.shape[0], device=problem.targets.device)
    channels = problem.targets.shape[-1] if cfg.objective.loss == "l1" else 1
    return problem.loss_mask.sum() * channels


def accumulate_gradients(trained: nn.Module, ddp: nn.parallel.DistributedDataParallel | None, cfg: Config,
                         task: Task, stage: str, problem: Problem, device: torch.device) -> torch.Tensor:
    """Backpropagate the batch in optim.accumulate micro-batches; return its mean loss (detached, on device).

    The batch's loss is the mean over all its terms: examples, or masked tokens of the WHOLE batch (a
    micro-batch with more masked tokens weighs more). So each micro-batch's mean loss is weighted by its
    share n_i / N of the batch's terms, and the summed gradient is the big batch's: sum_i (n_i / N) mean_i
    = (1 / N) sum over all terms. Under DDP only the last micro-batch all-reduces (no_sync before it).
    """
    chunks = [c for c in torch.arange(problem.n_examples).tensor_split(cfg.optim.accumulate) if len(c)]
    total_terms = loss_terms(problem, cfg).clamp(min=1)  # () nothing masked in the batch: zero loss
    loss = torch.zeros((), device=device)
    for i, chunk in enumerate(chunks):
        micro = problem.examples(int(chunk[0]), int(chunk[-1]) + 1)
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
             limit: int) -> dict[str, float]:
    """Loss and metric over the split's first `limit` examples (0 = all), independent of optim.batch_size:
    every example is masked by its own draw (EVAL_MASK_SEED, its index) and the loss is averaged over all
    terms of the split, not over batch means. Also: the metric's targets, examples, model calls, seconds."""
    start = time.perf_counter()
    model.eval()
    kind = "accuracy" if (task.metric == "accuracy" if stage != "pretrain" else cfg.objective.loss == "ce") else "r2"
    metric = Metric(kind)
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
    return {"loss": total.item() / max(terms.item(), 1), "metric": metric.value(), "targets": int(metric.n),
            "examples": examples, "calls": calls, "seconds": time.perf_counter() - start}


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
