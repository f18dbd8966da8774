"""The three stages of the SPT protocol as plain functions (no Ray here; sptune.tune wraps them).

    pretrain(cfg)              masked / causal denoising on the task's own training data (§2)
    finetune(cfg, from_run)    start from the pretraining run's best checkpoint (Appendix C.1)
    scratch(cfg)               the same task training from a random init: the baseline

All three run `run_stage`, one function in labelled steps: setup, data, model, optimizer, resume,
train loop (with periodic eval + checkpoints), test at the best checkpoint, result.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from sptune import checkpoints
from sptune.build import build_pretrain_model, build_task_model, count_parameters
from sptune.config import Config, dump
from sptune.config import load as load_config
from sptune.data import batch, eval_batches, step_generator, steps_per_epoch, train_batch_index, train_fraction
from sptune.errors import UserError
from sptune.models.backbone import SequenceModel, drop_mask_channel
from sptune.objectives import Denoising, Metric, causal_denoising, denoising_loss, masked_denoising
from sptune.registry import get_task
from sptune.tasks.base import Split, Task

log = logging.getLogger("sptune.train")

STAGES = ("pretrain", "finetune", "scratch")
# Masking of validation/test batches is fixed across evals so pretraining metrics are comparable.
EVAL_MASK_SEED = 1234
# TensorBoard tags: one per quantity whatever the stage (the stage is in the run's name), so the
# finetuning and scratch curves of a task overlay on one chart.
TB_TAGS = {"train_loss": "train/loss", "val_loss": "val/loss", "val_metric": "val/metric", "lr": "train/lr",
           "tokens_per_s": "train/tokens_per_s"}

OnEval = Callable[[dict[str, Any], Path], None]


# ----------------------------------------------------------------------------- public entry points
def pretrain(cfg: Config, on_eval: OnEval | None = None) -> dict[str, Any]:
    return run_stage(cfg, "pretrain", on_eval=on_eval)


def finetune(cfg: Config, from_run: str | Path, on_eval: OnEval | None = None) -> dict[str, Any]:
    return run_stage(cfg, "finetune", init_from=Path(from_run), on_eval=on_eval)


def scratch(cfg: Config, on_eval: OnEval | None = None) -> dict[str, Any]:
    return run_stage(cfg, "scratch", on_eval=on_eval)


# ----------------------------------------------------------------------------- config resolution
def resolve(cfg: Config, task: Task, stage: str, init_from: Path | None = None) -> Config:
    """Fill the task-dependent defaults (mask ratio, loss, causality) so the dumped config is complete."""
    cfg = copy.deepcopy(cfg)
    if init_from is not None:
        # The architecture is the pretraining run's: finetuning only changes the head and the optimization.
        pre = load_config(pretrain_dir(init_from) / "config.yaml")
        if pre.task.name != cfg.task.name:
            raise UserError(f"--from run was pretrained on task '{pre.task.name}', not '{cfg.task.name}'; "
                            f"finetune on the same task")
        cfg.model, cfg.objective = pre.model, pre.objective
    if cfg.objective.mask_ratio == -1.0:
        cfg.objective.mask_ratio = task.mask_ratio
    if cfg.objective.loss == "auto":
        cfg.objective.loss = task.pretrain_loss
    if stage == "pretrain" and cfg.objective.loss == "ce" and task.input_kind != "tokens":
        raise UserError(f"objective.loss=ce needs token inputs, task '{task.name}' is continuous; use objective.loss=l1")
    if stage == "pretrain" and cfg.objective.kind == "causal":
        cfg.model.causal = True  # causal SPT trains a unidirectional model (§2)
    return cfg


def pretrain_dir(path: Path) -> Path:
    path = Path(path)
    if path.is_file():
        path = path.parent
    if not (path / checkpoints.BEST).is_file() or not (path / "config.yaml").is_file():
        raise UserError(f"--from {path} is not a finished pretraining run (no best.pt/config.yaml); "
                        f"run `sptune pretrain` first and pass its run directory")
    return path


def run_dir_of(cfg: Config, stage: str) -> Path:
    name = cfg.run.name or f"{stage}-{cfg.task.name}-{cfg.model.name}-s{cfg.run.seed}"
    return Path(cfg.run.out_dir) / name


# ----------------------------------------------------------------------------- the stage function
def run_stage(cfg: Config, stage: str, init_from: Path | None = None, on_eval: OnEval | None = None,
              run_dir: Path | None = None) -> dict[str, Any]:
    if stage not in STAGES:
        raise UserError(f"unknown stage '{stage}'; choose one of: {', '.join(STAGES)}")

    # 1. Setup: resolve the config, seed, device, run directory, TensorBoard. Under DDP (Ray Train
    #    with several workers) every rank trains on its shard of each batch; rank 0 writes the files.
    task = get_task(cfg.task.name)
    cfg = resolve(cfg, task, stage, init_from)
    run_dir = Path(run_dir) if run_dir else run_dir_of(cfg, stage)
    rank, world = distributed_rank()
    main_rank = rank == 0
    if main_rank:
        run_dir.mkdir(parents=True, exist_ok=True)
        dump(cfg, run_dir / "config.yaml")
    torch.manual_seed(cfg.run.seed)
    if cfg.run.num_threads > 0:
        torch.set_num_threads(cfg.run.num_threads)
    device = pick_device(cfg.run.device, rank)
    writer = make_writer(run_dir, main_rank)

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
    model.to(device)
    trained = nn.parallel.DistributedDataParallel(model) if world > 1 else model  # gradients all-reduced

    # 4. Optimizer and schedule: AdamW with parameter groups; warmup then cosine or constant, per step.
    max_steps = cfg.optim.max_steps
    if cfg.optim.epochs > 0:
        max_steps = cfg.optim.epochs * steps_per_epoch(len(train_split), cfg.optim.batch_size)
    optimizer = make_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, make_schedule(cfg, max_steps))

    # 5. Resume from last.pt: model, optimizer, schedule, step, RNG and eval history.
    state = {"step": 0, "best_metric": -math.inf, "best_step": -1, "history": [], "train_seconds": 0.0}
    last_path = run_dir / checkpoints.LAST
    if cfg.run.resume and last_path.is_file():
        ckpt = checkpoints.load(last_path, device)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        torch.set_rng_state(ckpt["rng"])
        state = ckpt["state"]
        log.info("resumed %s at step %d", run_dir, state["step"])

    # 6. Train loop: one optimizer step per batch; eval, TensorBoard and checkpoints every eval_every.
    metric_name = "masked_accuracy" if pretraining and cfg.objective.loss == "ce" else (
        "masked_r2" if pretraining else task.metric)
    if pretraining and cfg.objective.kind == "causal":
        metric_name = metric_name.replace("masked", "next")
    tokens_per_example = task.seq_len * (2 if task.paired else 1)
    result: dict[str, Any] = {"stage": stage, "task": task.name, "model": cfg.model.name, "run_dir": str(run_dir),
                              "metric": metric_name, "n_params": count_parameters(model),
                              "init_from": str(pretrain_dir(init_from)) if init_from else None}
    progress = make_progress(cfg, max_steps, state["step"], f"{stage} {task.name}/{cfg.model.name}")
    running_loss, running_n, tick = 0.0, 0, time.perf_counter()
    while state["step"] < max_steps:
        step = state["step"]
        model.train()
        index = train_batch_index(len(train_split), cfg.optim.batch_size, cfg.run.seed, step)[rank::world]
        x, y, lengths = (t.to(device) for t in batch(train_split, index))
        with autocast(device, cfg.run.precision):
            loss = compute_loss(trained, cfg, task, stage, x, y, lengths, step_generator(cfg.run.seed, step))
        if not torch.isfinite(loss):
            reason = f"non-finite loss ({loss.item()}) at step {step}: lower optim.lr or raise optim.warmup_steps"
            log.error("%s failed: %s", run_dir.name, reason)
            writer.close()
            progress.close()
            return finish(result, state, run_dir, status="failed", reason=reason, write=main_rank)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.optim.grad_clip > 0:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        optimizer.step()
        scheduler.step()
        state["step"] = step + 1
        running_loss += loss.item()
        running_n += 1
        progress.update(1)

        if state["step"] % cfg.optim.eval_every == 0 or state["step"] == max_steps:
            elapsed = time.perf_counter() - tick
            state["train_seconds"] += elapsed
            val = evaluate(model, cfg, task, stage, splits["val"], device, cfg.task.max_val_examples)
            record = {"step": state["step"], "train_loss": running_loss / max(running_n, 1),
                      "val_loss": val["loss"], "val_metric": val["metric"], "lr": scheduler.get_last_lr()[0],
                      "tokens_per_s": running_n * cfg.optim.batch_size * tokens_per_example / max(elapsed, 1e-9)}
            state["history"].append(record)
            improved = val["metric"] > state["best_metric"]
            if improved:
                state["best_metric"], state["best_step"] = val["metric"], state["step"]
            if main_rank:
                if improved:
                    checkpoints.save_atomic({"model": model.state_dict(), "step": state["step"],
                                             "metric": val["metric"]}, run_dir / checkpoints.BEST)
                checkpoints.save_atomic({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                         "scheduler": scheduler.state_dict(), "rng": torch.get_rng_state(),
                                         "state": state}, last_path)
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
                on_eval(dict(record, best_metric=state["best_metric"], best_step=state["best_step"],
                             max_steps=max_steps), run_dir)
            running_loss, running_n, tick = 0.0, 0, time.perf_counter()
    progress.close()

    # 7. Test at the best validation checkpoint (the retrospective choice, Appendix C.1).
    best = checkpoints.load(run_dir / checkpoints.BEST, device)
    model.load_state_dict(best["model"])
    test = evaluate(model, cfg, task, stage, splits["test"], device, cfg.task.max_test_examples)
    if main_rank:
        writer.add_scalar("test/metric", test["metric"], state["best_step"])
        writer.close()
    result["test_metric"] = test["metric"]
    result["test_loss"] = test["loss"]
    result["examples_seen"] = state["step"] * cfg.optim.batch_size
    # Training FLOPs estimate: 6 x parameters x tokens (forward + backward), the usual dense rule.
    result["flops_estimate"] = 6.0 * result["n_params"] * result["examples_seen"] * tokens_per_example
    return finish(result, state, run_dir, status="completed", write=main_rank)


def finish(result: dict[str, Any], state: dict[str, Any], run_dir: Path, status: str,
           reason: str | None = None, write: bool = True) -> dict[str, Any]:
    history = state["history"]
    result.update(status=status, reason=reason, steps=state["step"], best_step=state["best_step"],
                  best_val=state["best_metric"] if history else None,
                  final_val=history[-1]["val_metric"] if history else None,
                  train_seconds=state["train_seconds"], history=history)
    if write:
        checkpoints.write_json_atomic(result, run_dir / checkpoints.RESULT)
    return result


def autocast(device: torch.device, precision: str):
    """bf16 autocast when asked (matmuls and attention in bf16, reductions and FFTs in fp32)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


def distributed_rank() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def pick_device(name: str, rank: int) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UserError("run.device=cuda but no CUDA device is visible; use run.device=auto or cpu")
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device("cpu")


class _NoWriter:
    """Stands in for the SummaryWriter on ranks other than 0."""

    def add_scalar(self, *args: Any, **kwargs: Any) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def make_writer(run_dir: Path, main_rank: bool):
    if not main_rank:
        return _NoWriter()
    from torch.utils.tensorboard import SummaryWriter  # imported here: tensorboard is slow to import

    return SummaryWriter(str(run_dir / "tb"))


# ----------------------------------------------------------------------------- pieces of the loop
def compute_loss(model: SequenceModel, cfg: Config, task: Task, stage: str, x: torch.Tensor, y: torch.Tensor,
                 lengths: torch.Tensor, generator: torch.Generator, metric: Metric | None = None) -> torch.Tensor:
    if stage == "pretrain":
        if task.paired:  # each document of a pair is its own pretraining sequence
            x, lengths = x.reshape(-1, x.shape[-1]), lengths.reshape(-1)  # (2B, L)
        d: Denoising = (masked_denoising(x, lengths, cfg.objective.mask_ratio, generator)
                        if cfg.objective.kind == "masked" else causal_denoising(x, lengths))
        pred = model(d.inputs, lengths)  # (B, L, V or C)
        if metric is not None:
            metric.update(pred[d.loss_mask], d.targets[d.loss_mask])
        return denoising_loss(pred, d, cfg.objective.loss)
    out = model(x, lengths)  # (B, K)
    if task.is_regression:
        out = out.squeeze(-1)  # (B,)
        loss = nn.functional.mse_loss(out, y.to(out.dtype))
    else:
        loss = nn.functional.cross_entropy(out, y)
    if metric is not None:
        metric.update(out, y)
    return loss


@torch.no_grad()
def evaluate(model: SequenceModel, cfg: Config, task: Task, stage: str, split: Split, device: torch.device,
             limit: int) -> dict[str, float]:
    model.eval()
    kind = "accuracy" if (task.metric == "accuracy" if stage != "pretrain" else cfg.objective.loss == "ce") else "r2"
    metric = Metric(kind)
    generator = torch.Generator().manual_seed(EVAL_MASK_SEED)
    total, batches = 0.0, 0
    for x, y, lengths in eval_batches(split, cfg.optim.batch_size, limit):
        x, y, lengths = x.to(device), y.to(device), lengths.to(device)
        with autocast(device, cfg.run.precision):
            total += compute_loss(model, cfg, task, stage, x, y, lengths, generator, metric).item()
        batches += 1
    return {"loss": total / max(batches, 1), "metric": metric.value()}


def load_pretrained_backbone(model: SequenceModel, pre_dir: Path) -> None:
    """Carry the backbone over; drop the pretraining head and the encoder's mask-indicator column."""
    state = checkpoints.load(pre_dir / checkpoints.BEST)["model"]
    state = {k: v for k, v in state.items() if k.startswith("backbone.")}
    key = "backbone.encoder.embed.weight"
    expected = model.state_dict()[key]
    if state[key].dim() == 2 and isinstance(model.backbone.encoder.embed, nn.Linear) \
            and state[key].shape[1] == expected.shape[1] + 1:
        state = drop_mask_channel(state)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if k.startswith("backbone.")]
    if missing or unexpected:
        raise UserError(f"pretraining checkpoint in {pre_dir} does not match this model "
                        f"(missing {missing[:3]}, unexpected {unexpected[:3]}); finetune with the same model config")


def make_optimizer(model: nn.Module, cfg: Config) -> torch.optim.Optimizer:
    """AdamW groups: SSM parameters with their own tagged lr and no weight decay (S4 convention),
    biases and norm weights without weight decay, the rest with optim.weight_decay."""
    decay, no_decay, tagged = [], [], {}
    for p in model.parameters():
        if not p.requires_grad:
            continue
        opt = getattr(p, "_optim", None)
        if opt:
            tagged.setdefault(tuple(sorted(opt.items())), []).append(p)
        elif p.dim() < 2:
            no_decay.append(p)
        else:
            decay.append(p)
    groups = [{"params": decay, "weight_decay": cfg.optim.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    groups += [{"params": ps, **dict(opt)} for opt, ps in tagged.items()]
    groups = [g for g in groups if g["params"]]
    return torch.optim.AdamW(groups, lr=cfg.optim.lr, betas=cfg.optim.betas)


def make_schedule(cfg: Config, max_steps: int) -> Callable[[int], float]:
    warmup = cfg.optim.warmup_steps

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if cfg.optim.schedule == "constant":
            return 1.0
        progress = (step - warmup) / max(1, max_steps - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return factor


def make_progress(cfg: Config, total: int, initial: int, desc: str):
    from tqdm.auto import tqdm

    import sys

    return tqdm(total=total, initial=initial, desc=desc, disable=not (cfg.run.progress and sys.stderr.isatty()),
                leave=False, dynamic_ncols=True)
