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
               17x off for a real config on an H100: FLOP/s depend on the shapes and the precision. With
               run.compile, each trial's compiling (its warm-up step and batch less a timed one) is added;
               with --trials-per-gpu N on a GPU, a trial's time is charged at max(1/N, the GPU's busy share
               of its step) of the device (point_seconds).
    a GPU      the vendor's dense peak for the config's precision x the utilisation measured on that GPU
               for the stage's model, precision and sequence length (sptune.utilization), else a stated
               default (MEASURED_UTILIZATION); or --utilization. --gpu defaults to cluster.yaml's workers.
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

from sptune import folds, utilization
from sptune.config import STAGES, Config, OptimConfig, RunConfig, TaskConfig, from_dict, resolve_compile, with_params
from sptune.errors import UserError
from sptune.tasks.base import SPECIAL_TOKENS, Split

if TYPE_CHECKING:
    from sptune.records.study_state import StudyState

# Dense (no sparsity) peak TFLOP/s, from the vendors' datasheets: NVIDIA A10 (the A10G of AWS g5
# instances is its variant), A100 SXM4, H100 SXM5. fp32 is the non-tensor-core rate: PyTorch leaves
# TF32 matmuls off by default.
GPU_PEAK_TFLOPS = {"a10g": {"fp32": 31.2, "bf16": 125.0}, "a100": {"fp32": 19.5, "bf16": 312.0},
                   "h100": {"fp32": 67.0, "bf16": 989.0}}
# The default fraction of that peak, per precision, where sptune.utilization has no measurement of a stage's
# GPU, model and precision: its DEFAULT entry's (the ListOps Transformer on an H100: bf16 0.27, fp32 0.57).
MEASURED_UTILIZATION = {kind: round(utilization.default(kind).tflops / GPU_PEAK_TFLOPS[utilization.DEFAULT[0]][kind],
                                    2) for kind in ("fp32", "bf16")}
DEFAULT_SOURCE = "the ListOps Transformer's on an H100"
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
    trials: float = 1.0  # the stage's trials that run it (its share of them: trials / grid points)


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
    extra_trials: int = 0  # the most trials grid extensions can add (sptune.search.bracketing)
    model: str = ""  # model.name: which measured utilisation a GPU's projection applies
    seq_len: int = 0  # the task's sequence length, likewise
    trials_per_gpu: int = 0  # --trials-per-gpu: trials packed on one GPU (0: not packed)

    @property
    def flops(self) -> float | None:
        return None if self.train_flops is None else self.train_flops + self.eval_flops


# ----------------------------------------------------------------------------- one trial
def random_split(task: Any, n: int) -> Split:
    """n random examples shaped as the task's loader gives them: FLOPs and a step's time depend on the shapes,
    not the values (sequences stay padded to the task's full length, sptune.run.data.batch), and no data is read."""
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
    from sptune.registry import task_of
    from sptune.run import runs, train

    cfg = from_dict(json.loads(cfg_key))
    task = task_of(cfg.task)
    return train.stage_model(runs.resolve(cfg, task, stage), task, stage, random_split(task, 1))[1]


def trial_cost(cfg: Config, stage: str, sizes: dict[str, int]) -> tuple[int, float, float]:
    """(steps, training FLOPs, evaluation FLOPs) of one trial."""
    from sptune.run.data import examples_seen, fraction_size, stage_steps

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
    from sptune.experiment.engine import domain
    from sptune.trials.trainable import trial_config

    made = [domain.stage_of(Path(), state, stage) for stage in stages]
    return [dataclasses.replace(
                stage_budget(trial_config(stage.spec, {}).to_dict(), stage.name, stage.trials,
                             shape_points(stage.grid.params), cell),
                extra_trials=domain.stage_extra_trials(state, stage.name), trials_per_gpu=state.options.trials_per_gpu)
            for stage in made]


def stage_budget(resolved: dict[str, Any], stage: str, trials: int, points: list[dict[str, Any]],
                 cell: str = "") -> StageBudget:
    """`trials` trials of a resolved stage config, each costing the mean over `points` (the grid's shapes)."""
    from sptune.registry import task_of

    precision = resolved["run"]["precision"]
    sizes = split_sizes(resolved["task"]["name"], resolved["task"]["data_dir"], resolved["run"]["seed"],
                        resolved["task"].get("path", ""))
    if isinstance(sizes, str):
        return StageBudget(cell, stage, trials, precision, None, None, None, unknown=sizes)
    configs = [with_params(resolved, point) for point in points]
    costs = [trial_cost(cfg, stage, sizes) for cfg in configs]
    steps, train_flops, eval_flops = (sum(c[i] for c in costs) / len(costs) for i in range(3))
    share = trials / len(costs)
    timed = tuple(Point(timing_key(cfg), stage, share * c[1], share * c[2], share) for cfg, c in zip(configs, costs))
    return StageBudget(cell, stage, trials, precision, round(steps), trials * train_flops, trials * eval_flops,
                       points=timed, model=configs[0].model.name, seq_len=task_of(configs[0].task).seq_len)


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
    compile_s: float = 0.0  # what compiling costs a trial (run.compile): its warm-up step and batch less timed ones
    busy: float | None = None  # on a GPU: the share of a step's time its kernels keep the GPU busy


def node_seconds(stages: list[StageBudget], seconds: float) -> tuple[float, str]:
    """Device-seconds of the counted stages on this node, each grid point at its own model's timing
    (point_seconds), and what was timed (the printed line's head)."""
    if not seconds > 0:
        raise UserError(f"--seconds {seconds} must be > 0, e.g. 1")
    total, timed = 0.0, {}
    for stage in stages:
        for point in stage.points:
            kind = "pretrain" if point.stage == "pretrain" else "scratch"  # finetuning's step is scratch's step
            t = timed[point.key, kind] = time_model(point.key, kind, seconds)
            total += point_seconds(point, t, stage.trials_per_gpu)
    if not timed:
        return 0.0, "this node: nothing to time"
    where = "; ".join(sorted({t.where for t in timed.values()}))
    smaller = [f"{t.batch} (of {t.batch_size})" for t in timed.values() if t.batch < t.batch_size]
    return total, (f"this node ({where}): timed {span([t.steps for t in timed.values()], 'step')} and "
                   f"{span([t.batches for t in timed.values()], 'evaluation batch')} of each stage's model "
                   f"({span([len(timed)], 'model')}, each after a warm-up step and batch"
                   + (f"; where a whole batch's step takes over {seconds:g} s, extrapolated from steps of 1 "
                      f"and of {', '.join(sorted(set(smaller)))} examples" if smaller else "") + ")"
                   + compile_note(list(timed.values()))
                   + packing_note(list(timed.values()), max((s.trials_per_gpu for s in stages), default=0)))


def point_seconds(point: Point, t: Timed, trials_per_gpu: int) -> float:
    """Device-seconds of a grid point's trials: its FLOPs at its model's timed FLOP/s, plus each trial's
    compiling. Packed N to a GPU (trials_per_gpu > 1), a trial holds 1/N of it while N run side by side, and
    the GPU runs one process's kernels at a time: a step costs the device max(1/N, its busy share) of its time
    alone, and compiling, host work, 1/N of its time."""
    alone = point.train_flops / t.train_flops_per_s + point.eval_flops / t.eval_flops_per_s
    compiling = point.trials * t.compile_s
    if trials_per_gpu > 1 and t.busy is not None:
        return alone * max(1 / trials_per_gpu, t.busy) + compiling / trials_per_gpu
    return alone + compiling


def compile_note(timed: list[Timed]) -> str:
    compiled = [t.compile_s for t in timed if t.compile_s > 0]
    return (f"; compiling counted once a trial ({min(compiled):.3g}-{max(compiled):.3g} s a model, run.compile)"
            if compiled else "")


def packing_note(timed: list[Timed], trials_per_gpu: int) -> str:
    if trials_per_gpu <= 1:
        return ""
    busy = [t.busy for t in timed if t.busy is not None]
    if not busy:
        return f"; --trials-per-gpu {trials_per_gpu} not counted: this node has no GPU"
    return (f"; {trials_per_gpu} trials per GPU: a step charged max(1/{trials_per_gpu}, the GPU's busy share of "
            f"it, {min(busy):.0%}-{max(busy):.0%})")


def span(counts: list[int], noun: str) -> str:
    """'1 step', '3 steps', '3-12 steps'."""
    low, high = min(counts), max(counts)
    plural = noun + ("es" if noun.endswith("ch") else "s")
    return f"1 {noun}" if high == 1 else f"{low}{f'-{high}' if high > low else ''} {plural}"


@lru_cache(maxsize=None)
def time_model(key: str, stage: str, seconds: float) -> Timed:
    """One model (a timing_key) timed on this node with the trainer's own pieces, on random examples of the
    task's shapes: about `seconds` of training steps (step_seconds), then `seconds` of evaluation batches. A
    compiled model compiles from scratch here (the compiler's in-process cache reset), as in a trial's fresh
    process. A model that cannot train here (out of memory) is a UserError: its trials would fail too."""
    from sptune import doctor
    from sptune.run import runs, train
    from sptune.run.train_setup import pick_device, wrap_model

    cfg, fp = runs.identify(from_dict(json.loads(key)), stage)
    device = pick_device(cfg.run.device, 0)
    # run.compile auto resolves as a trial on this node resolves it (config.compile_default)
    cfg = resolve_compile(dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, device=device.type)))
    at = partial(run_at, cfg, fp, stage, device)
    with torch_threads(cfg.run.num_threads) as threads, \
            torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):  # the caller's RNG untouched
        try:
            model, cost = train.build_model(at(1), random_split(at(1).task, 1), None)
            trained, _, run_model = wrap_model(model.to(device), device, False, cfg.run.compile)
            compiled = trained is not model  # compile_model falls back to the model where compiling cannot work
            if compiled:
                torch.compiler.reset()
            steps = step_seconds(at, model, trained, cfg.optim.batch_size, seconds)
            batches, eval_s, eval_warmup = time_evals(at(steps.batch), run_model, seconds)
        except (RuntimeError, MemoryError) as exc:
            raise UserError(f"timing the {stage} model of {cfg.task.name}/{cfg.model.name} on this node failed: "
                            f"{type(exc).__name__}: {doctor.first_line(exc)}") from exc
    where = doctor.describe_device(device) if device.type == "cuda" else f"cpu, {threads} thread{'s' * (threads > 1)}"
    compile_s = steps.compile_s + max(0.0, eval_warmup - eval_s / batches) if compiled else 0.0
    return Timed(cost.train(cfg.optim.batch_size, cfg.optim.accumulate) / steps.per_step,
                 cost.forward(batches * steps.batch, batches) / eval_s, steps.steps, batches, steps.batch,
                 cfg.optim.batch_size, where, compile_s, steps.busy)


@dataclass(frozen=True)
class Steps:
    """Optimizer steps timed: how many, each one's seconds, the warm-up step's, and on a GPU the seconds its
    kernels ran in one more (profiled) step."""

    steps: int
    seconds: float
    warmup: float
    kernels: float | None = None


@dataclass(frozen=True)
class StepTiming:
    """A model's training step on this node (step_seconds)."""

    steps: int  # steps timed
    per_step: float  # seconds of one step of the config's batch size
    batch: int  # examples a timed step took
    compile_s: float  # the first warm-up step less a timed step of its size: compiling, where the model compiles
    busy: float | None  # on a GPU: kernel seconds / seconds of a timed step (at most 1)


def step_seconds(at: Callable[[int], Any], model: torch.nn.Module, trained: torch.nn.Module, batch_size: int,
                 seconds: float) -> StepTiming:
    """A step of one example is timed first; steps of a whole batch are timed when they fit in `seconds`, else
    (a paper-scale model on a CPU) steps of as many examples as fit, at least 2, and the whole batch's step
    extrapolated: a step's time is affine in its examples (the model's work per example, as its FLOPs, plus
    the optimizer's per step, which a step of few examples would overweight)."""
    first = time_steps(at(1), model, trained, 0.0)
    one = first.seconds / first.steps
    batch = min(batch_size, max(2, int(seconds / one)))
    timed = time_steps(at(batch), model, trained, seconds)
    per_step = measured = timed.seconds / timed.steps
    if batch < batch_size:  # kept between no work per example and no work per step (a noisy single step)
        line = per_step + (batch_size - batch) * (per_step - one) / (batch - 1)
        per_step = min(max(line, per_step), per_step * batch_size / batch)
    busy = None if timed.kernels is None else min(1.0, timed.kernels / measured)
    return StepTiming(timed.steps, per_step, batch, max(0.0, first.warmup - one), busy)


def run_at(cfg: Config, fp: Any, stage: str, device: torch.device, batch: int) -> Any:
    """train.Run of the timed config at `batch` examples a step (its run directory is never used)."""
    from sptune.registry import task_of
    from sptune.run import train

    cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, batch_size=batch))
    return train.Run(cfg, task_of(cfg.task), stage, Path(), fp, 0, 1, device)


def time_steps(run: Any, model: torch.nn.Module, trained: torch.nn.Module, seconds: float) -> Steps:
    """Optimizer steps as train.train_loop takes them: batches from the trainer's prefetcher, forward +
    backward in micro-batches under the run's autocast (train.accumulate_gradients), clipping, AdamW, the
    schedule, the loss kept on the device. One warm-up step (allocations, kernel choices, compiling), then
    steps for about `seconds`, at least one, then on a GPU one profiled step."""
    from sptune import doctor
    from sptune.run import train
    from sptune.run.train_setup import make_optimizer, make_schedule

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

        start = time.perf_counter()
        step(0)
        doctor.synchronize(device)
        warmup = time.perf_counter() - start
        steps, start = 0, time.perf_counter()
        while steps == 0 or time.perf_counter() - start < seconds:  # CUDA queues at most a bounded backlog
            steps += 1
            step(steps)
        doctor.synchronize(device)  # the clock must see finished work, not queued work
        spent = time.perf_counter() - start
        return Steps(steps, spent, warmup, kernel_seconds(lambda: step(steps + 1), device))


def kernel_seconds(call: Callable[[], None], device: torch.device) -> float | None:
    """Seconds the GPU spends in kernels and copies during `call` (the profiler's device events), None on a CPU:
    what N processes packed on the GPU each need of it, since it runs one process's kernels at a time."""
    if device.type != "cuda":
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize(device)
    return sum(e.device_time_total for e in prof.events() if e.device_type == DeviceType.CUDA) / 1e6


def time_evals(run: Any, run_model: torch.nn.Module, seconds: float) -> tuple[int, float, float]:
    """Evaluation batches as train.evaluate runs them (no grad, the run's autocast, the masking draws of
    pretraining's eval examples, the metric), one a call: a warm-up, then about `seconds`, at least one.
    (batches, their seconds, the warm-up's seconds)."""
    from sptune.run import train

    split = random_split(run.task, run.cfg.optim.batch_size)

    def batch() -> float:
        return train.evaluate(run_model, run.cfg, run.task, run.stage, split, run.device, 0)["seconds"]

    warmup = batch()
    batches, spent = 0, 0.0
    while batches == 0 or spent < seconds:
        batches, spent = batches + 1, spent + batch()
    return batches, spent, warmup


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


def check_gpu(gpu: str, utilization: float | None) -> None:
    if gpu not in GPU_PEAK_TFLOPS:
        raise UserError(f"--gpu {gpu!r}; choose one of: {', '.join(GPU_PEAK_TFLOPS)}")
    if utilization is not None and not 0 < utilization <= 1:
        raise UserError(f"--utilization {utilization} must be in (0, 1], e.g. 0.3")


def stage_utilization(gpu: str, stage: StageBudget) -> tuple[float, str]:
    """The fraction of `gpu`'s datasheet peak a stage reaches, and where it comes from: its model's measurements
    on that GPU at its precision (sptune.utilization), interpolated in log2 of the sequence length between
    the measured lengths and held beyond them; without one, MEASURED_UTILIZATION's default, saying so."""
    kind = "fp32" if stage.precision == "fp32" else "bf16"
    name = utilization.MODEL_KINDS.get(stage.model, stage.model)
    found = sorted((m for m in utilization.MEASUREMENTS if (m.gpu, m.model, m.precision) == (gpu, name, kind)),
                   key=lambda m: m.seq_len)
    if not found:
        return MEASURED_UTILIZATION[kind], f"default, {DEFAULT_SOURCE}: no measurement of {stage.model} {kind} on {gpu}"
    tflops = interpolate([(math.log2(m.seq_len), m.tflops) for m in found], math.log2(max(stage.seq_len, 1)))
    lengths = "/".join(str(m.seq_len) for m in found)
    beyond = not found[0].seq_len <= stage.seq_len <= found[-1].seq_len
    return tflops / GPU_PEAK_TFLOPS[gpu][kind], (f"measured on {gpu} at L {lengths}, {found[0].setting}"
                                                 + (", the nearest length's" if beyond else "")
                                                 + f"; {found[0].date}, {found[0].versions}")


def interpolate(points: list[tuple[float, float]], x: float) -> float:
    """The piecewise-linear function through `points` (sorted by x) at x, constant beyond its ends."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def plan_lines(title: str, stages: list[StageBudget], seconds: float, gpu: str | None = None,
               utilization: float | None = None) -> list[str]:
    """The plan as `sptune plan` and the scripts' --plan print it; a bad --gpu / --utilization fails before
    this node's timing (about 2 x `seconds` per distinct model)."""
    check_gpu(gpu or FALLBACK_GPU, utilization)
    return format_budget(title, stages, node_seconds(stages, seconds), gpu, utilization)


def format_budget(title: str, stages: list[StageBudget], node: tuple[float, str], gpu: str | None = None,
                  utilization: float | None = None) -> list[str]:
    """The plan as printed: a row per (cell,) stage, the total, device-hours on this node (`node`:
    node_seconds' device-seconds and what it timed) and on the GPU (None: default_gpu's), with the
    utilisation each stage was projected at."""
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
    shares = {id(p): (utilization, "--utilization") if utilization is not None else stage_utilization(gpu, p)
              for p in known}
    gpu_hours = sum(p.flops / (GPU_PEAK_TFLOPS[gpu]["fp32" if p.precision == "fp32" else "bf16"] * 1e12
                               * shares[id(p)][0]) for p in known) / 3600
    peaks = ", ".join(f"{k} {v:g}" for k, v in GPU_PEAK_TFLOPS[gpu].items())
    used = (f"{utilization:.0%} utilization (--utilization)" if utilization is not None
            else "each stage's utilization below")
    lines += [f"{node[1]}: {node[0] / 3600:.4g} device-hours",
              f"{gpu} ({source}; peak TFLOP/s {peaks}, by each stage's precision, x {used}): "
              f"{gpu_hours:.4g} device-hours"]
    if utilization is None:
        rows = {(p.model, p.precision, p.seq_len): shares[id(p)] for p in known}
        lines += [f"  {model} {precision} L {seq_len}: {share:.1%} ({why})"
                  for (model, precision, seq_len), (share, why) in sorted(rows.items())]
    lines.append("device-hours are summed over trials (wall-clock on N devices: about device-hours / N); "
                 "with ASHA or optim.patience on they are an upper bound")
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
