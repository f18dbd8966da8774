"""Budget before paying: what a study (or every cell of an experiment) will cost, before anything trains.

For each stage: the number of trials the search space gives it (spaces.trial_count), the optimizer
steps of each trial (data.stage_steps, as the trainer resolves them), and FLOPs counted on a meta copy
of the trial's model (sptune.flops, the same count result.json reports): training = FLOPs per example x
examples seen, evaluation = one validation pass every eval_every steps and at the end, plus the single
test pass. Device-hours are FLOPs / achieved FLOP/s:
    this node  each grid point's own model timed here (node_seconds): the trainer's step (forward +
               backward in the run's precision, clipping, AdamW) at the point's batch size, sequence
               length and torch threads as a trial runs them, and its evaluation batches; training FLOPs
               at the step's FLOP/s, evaluation FLOPs at the evaluation's. `doctor`'s toy fp32 model was
               17x off for a real config on an H100: FLOP/s depend on the shapes and the precision.
    a GPU      the vendor's dense peak for the config's precision x the utilisation measured for that
               precision (MEASURED_UTILIZATION), or --utilization. --gpu defaults to cluster.yaml's workers.
Trials run side by side (max_concurrent per stage, across cells of an experiment), so wall-clock time on
N devices is about device-hours / N. ASHA and early stopping (optim.patience) end trials before their
budget, so with either on the figures are an upper bound. Nothing here creates a directory or starts Ray.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import sys
import time
from contextlib import closing
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import torch
import yaml

from sptune import folds
from sptune.config import STAGES, Config, OptimConfig, RunConfig, TaskConfig, from_dict, merge
from sptune.errors import UserError
from sptune.tasks.base import SPECIAL_TOKENS, Split

if TYPE_CHECKING:
    from sptune.tune.records.study_state import StudyState

# Dense (no sparsity) peak TFLOP/s, from the vendors' datasheets: NVIDIA A10 (the A10G of AWS g5
# instances is its variant), A100 SXM4, H100 SXM5. fp32 is the non-tensor-core rate: PyTorch leaves
# TF32 matmuls off by default.
GPU_PEAK_TFLOPS = {"a10g": {"fp32": 31.2, "bf16": 125.0}, "a100": {"fp32": 19.5, "bf16": 312.0},
                   "h100": {"fp32": 67.0, "bf16": 989.0}}
# The fraction of that peak a trial reaches, per precision: the one GPU measurement there is (docs/benchmarks.md),
# on an H100 with torch 2.11+cu130, this project's ListOps Transformer (d 512, 6 layers, L 2048): bf16 trained
# at 266 TFLOP/s = 26.9% of the datasheet's 989 (33.6% of the 792 its matmuls reached in the same process),
# fp32 at 70-74% of its peak. Taken for every GPU; the 40% guess it replaces was 1.5x optimistic there.
MEASURED_UTILIZATION = {"fp32": 0.70, "bf16": 0.27}
UTILIZATION_SOURCE = "measured on an H100, ListOps Transformer, see docs/benchmarks.md"
# --gpu's default: the GPU of cluster.yaml's worker nodes (AWS instance family -> GPU), else FALLBACK_GPU.
INSTANCE_GPUS = {"g5": "a10g", "p4d": "a100", "p4de": "a100", "p5": "h100"}
FALLBACK_GPU = "a100"
CLUSTER_FILE = "cluster.yaml"


@dataclass(frozen=True)
class Point:
    """A grid point of a stage as this node's timing runs it, and the FLOPs the stage's trials spend on it."""

    key: str  # its timed config (timing_key)
    stage: str
    train_flops: float
    eval_flops: float


@dataclass(frozen=True)
class StageBudget:
    """One stage of one study: its trials and their summed cost (None where the data must be read)."""

    cell: str
    stage: str
    trials: int
    precision: str  # run.precision: which GPU peak applies
    steps: int | None  # per trial (the mean over the grid's batch sizes)
    train_flops: float | None
    eval_flops: float | None
    unknown: str = ""  # why the cost is unknown: the task whose data is not prepared
    points: tuple[Point, ...] = ()  # what this node's timing runs, the FLOPs above split by grid point
    extra_trials: int = 0  # the most trials grid extensions can add (sptune.tune.records.bracketing)

    @property
    def flops(self) -> float | None:
        return None if self.train_flops is None else self.train_flops + self.eval_flops


# ----------------------------------------------------------------------------- one trial
def stage_config(stage: dict[str, Any], params: dict[str, Any]) -> Config:
    nested: dict[str, dict[str, Any]] = {}
    for key, value in params.items():
        section, _, name = key.partition(".")
        nested.setdefault(section, {})[name] = value
    return from_dict(merge(stage, nested))


def random_split(task: Any, n: int) -> Split:
    """n random examples shaped as the task's loader gives them: FLOPs and a step's time depend on the shapes,
    not the values (sequences stay padded to the task's full length, sptune.data.batch), and no data is read."""
    generator = torch.Generator().manual_seed(0)
    L, rows = task.seq_len, (n, 2) if task.paired else (n,)
    if task.input_kind == "continuous":
        inputs = torch.randn(n, L, task.channels, generator=generator)  # (n, L, C)
    else:
        inputs = torch.randint(len(SPECIAL_TOKENS), task.vocab_size, (*rows, L), generator=generator)  # (n[, 2], L)
    targets = (torch.randint(task.num_classes, (n,), generator=generator) if task.num_classes
               else torch.randn(n, generator=generator))  # (n,)
    return Split(inputs, targets, torch.full(rows, L))


@lru_cache(maxsize=None)
def model_flops(cfg_key: str, stage: str) -> Any:
    """sptune.flops.Flops of the stage's model (cached: grid points differ in lr and batch, not shape)."""
    from sptune import flops, runs, train
    from sptune.build import build_pretrain_model, build_task_model
    from sptune.data import step_draw
    from sptune.registry import task_of

    cfg = from_dict(json.loads(cfg_key))
    task = task_of(cfg.task)
    cfg = runs.resolve(cfg, task, stage)
    example = random_split(task, 1)
    x, lengths = example.inputs, example.lengths
    if stage == "pretrain":
        masked_continuous = cfg.objective.kind == "masked" and task.input_kind == "continuous"
        model = build_pretrain_model(cfg.model, cfg.objective, task, mask_channel=masked_continuous)
    else:
        model = build_task_model(cfg.model, task)
    if stage == "pretrain":
        problem, lengths = train.denoise(cfg.objective, task, x, lengths, step_draw(cfg.run.seed, 0))
        x = problem.inputs
    return flops.measure(model, x, lengths, task.seq_len)


def trial_cost(cfg: Config, stage: str, sizes: dict[str, int]) -> tuple[int, float, float]:
    """(steps, training FLOPs, evaluation FLOPs) of one trial."""
    from sptune.data import examples_seen, fraction_size, stage_steps

    sizes = folds.sizes(sizes, cfg.task.val_folds, cfg.task.val_fold)
    n_train = fraction_size(sizes["train"], cfg.task.train_fraction)
    steps = stage_steps(cfg.optim.max_steps, cfg.optim.epochs, cfg.optim.batch_size, n_train)
    # Only the shapes matter: one count per model and task, whatever the trial's lr, batch size or seed.
    shape_only = dataclasses.replace(cfg, optim=type(cfg.optim)(), run=type(cfg.run)())
    cost = model_flops(_key(shape_only), stage)
    # optim.accumulate splits each batch into micro-batches: the same examples, `accumulate` model calls.
    train_flops = cost.train(examples_seen(n_train, cfg.optim.batch_size, steps), steps * cfg.optim.accumulate)
    evals = steps // cfg.optim.eval_every + (1 if steps % cfg.optim.eval_every else 0)
    eval_flops = evals * pass_flops(cost, sizes["val"], cfg.task.max_val_examples, cfg.optim.batch_size) + \
        pass_flops(cost, sizes["test"], cfg.task.max_test_examples, cfg.optim.batch_size)
    return steps, train_flops, eval_flops


def pass_flops(cost: Any, n: int, limit: int, batch_size: int) -> float:
    """One evaluation pass over a split's first `limit` examples (0 = all), in batches (train.evaluate)."""
    examples = min(n, limit) if limit > 0 else n
    return cost.forward(examples, math.ceil(examples / batch_size))


def _key(cfg: Config) -> str:
    return json.dumps(cfg.to_dict(), sort_keys=True)


# ----------------------------------------------------------------------------- one study
def study_budget(state: StudyState, cell: str = "", stages: tuple[str, ...] = STAGES) -> list[StageBudget]:
    """The stages of a resolved study (studies.resolve's state), each summed over its trials. A stage's
    config is what its trials get (trainable.trial_config: one torch thread per reserved CPU), so this
    node's timing runs with the trials' threads."""
    from sptune.tune.records import studies
    from sptune.tune.trials.trainable import trial_config

    return [dataclasses.replace(
                stage_budget(trial_config(studies.trial_spec(Path(), state, stage), {}).to_dict(), stage,
                             studies.stage_trials(state, stage),
                             shape_points(studies.stage_space(state, stage).params), cell),
                extra_trials=studies.stage_extra_trials(state, stage))
            for stage in stages]


def stage_budget(resolved: dict[str, Any], stage: str, trials: int, points: list[dict[str, Any]],
                 cell: str = "") -> StageBudget:
    """`trials` trials of a resolved stage config, each costing the mean over `points` (the grid's shapes)."""
    precision = resolved["run"]["precision"]
    sizes = split_sizes(resolved["task"]["name"], resolved["task"]["data_dir"], resolved["run"]["seed"],
                        resolved["task"].get("path", ""))
    if isinstance(sizes, str):
        return StageBudget(cell, stage, trials, precision, None, None, None, unknown=sizes)
    configs = [stage_config(resolved, point) for point in points]
    costs = [trial_cost(cfg, stage, sizes) for cfg in configs]
    steps, train_flops, eval_flops = (sum(c[i] for c in costs) / len(costs) for i in range(3))
    share = trials / len(costs)
    timed = tuple(Point(timing_key(cfg), stage, share * c[1], share * c[2]) for cfg, c in zip(configs, costs))
    return StageBudget(cell, stage, trials, precision, round(steps), trials * train_flops, trials * eval_flops,
                       points=timed)


@lru_cache(maxsize=None)
def split_sizes(task: str, data_dir: str, seed: int, path: str = "") -> dict[str, int] | str:
    """The task's split sizes, or why they are unknown (its data is not prepared here)."""
    from sptune.registry import get_task

    try:
        return get_task(task, path).split_sizes(data_dir or None, seed)
    except UserError as exc:
        return str(exc).splitlines()[0]


def shape_points(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The combinations of a stage's listed values (ranges, like lr, change no shape and are left out):
    each trial's cost is taken as their mean, exact when the whole grid runs."""
    listed = {k: v for k, v in params.items() if isinstance(v, list)}
    return [dict(zip(listed, combo)) for combo in itertools.product(*listed.values())]


# ----------------------------------------------------------------------------- this node: each model timed
def timing_key(cfg: Config) -> str:
    """What a step's time depends on: model, objective, the task's shapes, batch size, micro-batches, clipping,
    precision, torch threads and compiling; lr, seed and budgets change no step, so grid points that differ
    only in them share a timing. Each grid point is timed at its own batch size, not at the grid's mean:
    FLOP/s grow with the batch (strongly on a GPU) and a few steps per distinct batch size cost little. The
    device is left to this node (run.device auto)."""
    optim, run = cfg.optim, cfg.run
    return _key(dataclasses.replace(
        cfg, task=TaskConfig(name=cfg.task.name),
        optim=OptimConfig(batch_size=optim.batch_size, accumulate=optim.accumulate, grad_clip=optim.grad_clip),
        run=RunConfig(precision=run.precision, num_threads=run.num_threads, compile=run.compile)))


@dataclass(frozen=True)
class Timed:
    """A model timed on this node: FLOP/s of its training steps and of its evaluation batches."""

    train_flops_per_s: float
    eval_flops_per_s: float
    steps: int
    batches: int
    batch: int  # examples a timed step took: the config's batch size, or fewer (step_seconds)
    batch_size: int  # the config's
    where: str  # the device, and the torch threads on a CPU


def node_seconds(stages: list[StageBudget], seconds: float) -> tuple[float, str]:
    """Device-seconds of the counted stages on this node, each grid point's FLOPs at its own model's timed
    FLOP/s (training and evaluation apart), and what was timed (the printed line's head)."""
    if not seconds > 0:
        raise UserError(f"--seconds {seconds} must be > 0, e.g. 1")
    total, timed = 0.0, {}
    for point in (p for stage in stages for p in stage.points):
        kind = "pretrain" if point.stage == "pretrain" else "scratch"  # finetuning's step is scratch's step
        t = timed[point.key, kind] = time_model(point.key, kind, seconds)
        total += point.train_flops / t.train_flops_per_s + point.eval_flops / t.eval_flops_per_s
    if not timed:
        return 0.0, "this node: nothing to time"
    where = "; ".join(sorted({t.where for t in timed.values()}))
    smaller = [f"{t.batch} (of {t.batch_size})" for t in timed.values() if t.batch < t.batch_size]
    return total, (f"this node ({where}): timed {span([t.steps for t in timed.values()], 'step')} and "
                   f"{span([t.batches for t in timed.values()], 'evaluation batch')} of each stage's model "
                   f"({span([len(timed)], 'model')}, each after a warm-up step and batch"
                   + (f"; where a whole batch's step takes over {seconds:g} s, extrapolated from steps of 1 "
                      f"and of {', '.join(sorted(set(smaller)))} examples" if smaller else "") + ")")


def span(counts: list[int], noun: str) -> str:
    """'1 step', '3 steps', '3-12 steps'."""
    low, high = min(counts), max(counts)
    plural = noun + ("es" if noun.endswith("ch") else "s")
    return f"1 {noun}" if high == 1 else f"{low}{f'-{high}' if high > low else ''} {plural}"


@lru_cache(maxsize=None)
def time_model(key: str, stage: str, seconds: float) -> Timed:
    """One model (a timing_key) timed on this node with the trainer's own pieces, on random examples of the
    task's shapes: about `seconds` of training steps (step_seconds), then `seconds` of evaluation batches. A
    model that cannot train here (out of memory) is a UserError: its trials would fail too."""
    from sptune import doctor, runs, train
    from sptune.train_setup import pick_device, wrap_model

    cfg, fp = runs.identify(from_dict(json.loads(key)), stage)
    device = pick_device(cfg.run.device, 0)
    at = partial(run_at, cfg, fp, stage, device)
    with torch_threads(cfg.run.num_threads) as threads, \
            torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):  # the caller's RNG untouched
        try:
            model, cost = train.build_model(at(1), random_split(at(1).task, 1), None)
            trained, _, run_model = wrap_model(model.to(device), device, False, cfg.run.compile)
            steps, step_s, batch = step_seconds(at, model, trained, cfg.optim.batch_size, seconds)
            batches, eval_s = time_evals(at(batch), run_model, seconds)
        except (RuntimeError, MemoryError) as exc:
            raise UserError(f"timing the {stage} model of {cfg.task.name}/{cfg.model.name} on this node failed: "
                            f"{type(exc).__name__}: {doctor.first_line(exc)}") from exc
    where = doctor.describe_device(device) if device.type == "cuda" else f"cpu, {threads} thread{'s' * (threads > 1)}"
    return Timed(cost.train(cfg.optim.batch_size, cfg.optim.accumulate) / step_s,
                 cost.forward(batches * batch, batches) / eval_s, steps, batches, batch, cfg.optim.batch_size, where)


def step_seconds(at: Callable[[int], Any], model: torch.nn.Module, trained: torch.nn.Module, batch_size: int,
                 seconds: float) -> tuple[int, float, int]:
    """(steps timed, seconds of one step of `batch_size` examples, examples a timed step took). A step of one
    example is timed first; steps of a whole batch are timed when they fit in `seconds`, else (a paper-scale
    model on a CPU) steps of as many examples as fit, at least 2, and the whole batch's step extrapolated:
    a step's time is affine in its examples (the model's work per example, as its FLOPs, plus the
    optimizer's per step, which a step of few examples would overweight)."""
    one = time_steps(at(1), model, trained, 0.0)[1]
    batch = min(batch_size, max(2, int(seconds / one)))
    steps, spent = time_steps(at(batch), model, trained, seconds)
    per_step = spent / steps
    if batch < batch_size:  # kept between no work per example and no work per step (a noisy single step)
        line = per_step + (batch_size - batch) * (per_step - one) / (batch - 1)
        per_step = min(max(line, per_step), per_step * batch_size / batch)
    return steps, per_step, batch


def run_at(cfg: Config, fp: Any, stage: str, device: torch.device, batch: int) -> Any:
    """train.Run of the timed config at `batch` examples a step (its run directory is never used)."""
    from sptune import train
    from sptune.registry import task_of

    cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, batch_size=batch))
    return train.Run(cfg, task_of(cfg.task), stage, Path(), fp, 0, 1, device)


def time_steps(run: Any, model: torch.nn.Module, trained: torch.nn.Module, seconds: float) -> tuple[int, float]:
    """Optimizer steps as train.train_loop takes them: batches from the trainer's prefetcher, forward +
    backward in micro-batches under the run's autocast (train.accumulate_gradients), clipping, AdamW, the
    schedule, the loss kept on the device. One warm-up step (allocations, kernel choices, compiling), then
    steps for about `seconds`, at least one: (steps, seconds)."""
    from sptune import doctor, train
    from sptune.train_setup import make_optimizer, make_schedule

    cfg, device = run.cfg, run.device
    optimizer = make_optimizer(model, cfg.optim)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, make_schedule(cfg.optim, cfg.optim.max_steps))
    period = train.Period(device)
    with closing(train.prefetch(run, random_split(run.task, cfg.optim.batch_size), 0, sys.maxsize)) as batches:
        def step(i: int) -> None:
            trained.train()
            problem = batches.get(i).to(device)
            optimizer.zero_grad(set_to_none=True)
            loss = train.accumulate_gradients(trained, None, cfg, run.task, run.stage, problem, device)
            if cfg.optim.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip, foreach=True)
            optimizer.step()
            scheduler.step()
            period.add(i, loss)

        step(0)
        doctor.synchronize(device)
        steps, start = 0, time.perf_counter()
        while steps == 0 or time.perf_counter() - start < seconds:  # CUDA queues at most a bounded backlog
            steps += 1
            step(steps)
        doctor.synchronize(device)  # the clock must see finished work, not queued work
        return steps, time.perf_counter() - start


def time_evals(run: Any, run_model: torch.nn.Module, seconds: float) -> tuple[int, float]:
    """Evaluation batches as train.evaluate runs them (no grad, the run's autocast, the masking draws of
    pretraining's eval examples, the metric), one a call: a warm-up, then about `seconds`, at least one."""
    from sptune import train

    split = random_split(run.task, run.cfg.optim.batch_size)

    def batch() -> float:
        return train.evaluate(run_model, run.cfg, run.task, run.stage, split, run.device, 0)["seconds"]

    batch()
    batches, spent = 0, 0.0
    while batches == 0 or spent < seconds:
        batches, spent = batches + 1, spent + batch()
    return batches, spent


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[int]:
    """torch's intra-op threads set to n for the block as a run sets them (0: left as they are); yields the count."""
    before = torch.get_num_threads()
    if n > 0:
        torch.set_num_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        torch.set_num_threads(before)


# ----------------------------------------------------------------------------- a GPU, and the table
def default_gpu(paths: tuple[Path, ...] | None = None) -> tuple[str, str]:
    """--gpu's default and its source: the GPU of cluster.yaml's worker nodes (the working directory's file,
    else the checkout's: the one `ray up` launches), else FALLBACK_GPU."""
    for path in paths or (Path(CLUSTER_FILE), Path(__file__).resolve().parents[1] / CLUSTER_FILE):
        if path.is_file():
            return cluster_gpu(path)
    return FALLBACK_GPU, f"default: no {CLUSTER_FILE} found"


def cluster_gpu(path: Path) -> tuple[str, str]:
    """The GPU of the first worker node type (any but head_node_type) whose InstanceType is a known GPU instance."""
    try:
        cluster = yaml.safe_load(path.read_text()) or {}
        nodes = cluster.get("available_node_types") or {}
        types = [str(node["node_config"]["InstanceType"]) for name, node in nodes.items()
                 if name != cluster.get("head_node_type") and "InstanceType" in (node.get("node_config") or {})]
    except (OSError, yaml.YAMLError, AttributeError, TypeError) as exc:
        return FALLBACK_GPU, f"default: {path} unreadable ({type(exc).__name__})"
    for instance in types:
        if instance.split(".")[0] in INSTANCE_GPUS:
            return INSTANCE_GPUS[instance.split(".")[0]], f"from {path.name}'s worker InstanceType {instance}"
    return FALLBACK_GPU, f"default: no GPU known for {path.name}'s worker InstanceType ({', '.join(types) or 'none'})"


def gpu_flops_per_s(gpu: str, precision: str, utilization: float | None = None) -> float:
    """The GPU's dense peak for the precision x the utilisation (None: MEASURED_UTILIZATION's)."""
    if gpu not in GPU_PEAK_TFLOPS:
        raise UserError(f"--gpu {gpu!r}; choose one of: {', '.join(GPU_PEAK_TFLOPS)}")
    if utilization is not None and not 0 < utilization <= 1:
        raise UserError(f"--utilization {utilization} must be in (0, 1], e.g. 0.3")
    kind = "fp32" if precision == "fp32" else "bf16"
    return GPU_PEAK_TFLOPS[gpu][kind] * 1e12 * (MEASURED_UTILIZATION[kind] if utilization is None else utilization)


def plan_lines(title: str, stages: list[StageBudget], seconds: float, gpu: str | None = None,
               utilization: float | None = None) -> list[str]:
    """The plan as `sptune plan` and the scripts' --plan print it; a bad --gpu / --utilization fails before
    this node's timing (about 2 x `seconds` per distinct model)."""
    gpu_flops_per_s(gpu or FALLBACK_GPU, "fp32", utilization)
    return format_budget(title, stages, node_seconds(stages, seconds), gpu, utilization)


def format_budget(title: str, stages: list[StageBudget], node: tuple[float, str], gpu: str | None = None,
                  utilization: float | None = None) -> list[str]:
    """The plan as printed: a row per (cell,) stage, the total, device-hours on this node (`node`:
    node_seconds' device-seconds and what it timed) and on the GPU (None: default_gpu's)."""
    gpu, source = (gpu, "--gpu") if gpu else default_gpu()
    width = max([len(p.cell) for p in stages] + [4]) if any(p.cell for p in stages) else 0
    cell = (lambda text: f"{text:{width}s} ") if width else (lambda text: "")
    lines = [title, f"{cell('cell')}{'stage':9s} {'trials':>6s} {'steps/trial':>11s} {'train PFLOP':>12s} "
                    f"{'eval PFLOP':>11s}  precision"]
    for p in stages:
        numbers = (f"{'?':>11s} {'?':>12s} {'?':>11s}" if p.flops is None else
                   f"{p.steps:11d} {p.train_flops / 1e15:12.4g} {p.eval_flops / 1e15:11.4g}")
        lines.append(f"{cell(p.cell)}{p.stage:9s} {p.trials:6d} {numbers}  {p.precision}")
    known = [p for p in stages if p.flops is not None]
    lines.append(f"{cell('')}{'total':9s} {sum(p.trials for p in known):6d} {'':11s} "
                 f"{sum(p.train_flops for p in known) / 1e15:12.4g} {sum(p.eval_flops for p in known) / 1e15:11.4g}")
    gpu_hours = sum(p.flops / gpu_flops_per_s(gpu, p.precision, utilization) for p in known) / 3600
    peaks = ", ".join(f"{k} {v:g}" for k, v in GPU_PEAK_TFLOPS[gpu].items())
    used = (f"{utilization:.0%} utilization (--utilization)" if utilization is not None else
            "utilization " + ", ".join(f"{k} {v:.0%}" for k, v in MEASURED_UTILIZATION.items())
            + f" ({UTILIZATION_SOURCE})")
    lines += [f"{node[1]}: {node[0] / 3600:.4g} device-hours",
              f"{gpu} ({source}; peak TFLOP/s {peaks}, by each stage's precision, x {used}): "
              f"{gpu_hours:.4g} device-hours",
              "device-hours are summed over trials (wall-clock on N devices: about device-hours / N); "
              "with ASHA or optim.patience on they are an upper bound"]
    extra = sum(p.extra_trials for p in stages)
    if extra:
        lines.append(f"counted: the declared grids; a grid whose best sits at an edge extends itself (on by default, "
                     f"--no-extend-grids for none), up to {extra} more trials in all")
    unknown = sorted({p.unknown for p in stages if p.unknown})
    if unknown:
        lines.append(f"not counted: {len(stages) - len(known)} stage(s) of {sum(p.trials for p in stages) - sum(p.trials for p in known)} "
                     f"trials ('?'), whose split sizes come from data not prepared here:")
        lines += [f"  {reason}" for reason in unknown]
    return lines
