"""Budget before paying: what a study (or every cell of an experiment) will cost, before anything trains.

For each stage: the number of trials the search space gives it (spaces.trial_count), the optimizer
steps of each trial (data.stage_steps, as the trainer resolves them), and FLOPs counted on a meta copy
of the trial's model (sptune.flops, the same count result.json reports): training = FLOPs per example x
examples seen, evaluation = one validation pass every eval_every steps and at the end, plus the single
test pass. Device-hours are FLOPs / achieved FLOP/s:
    this node  the training FLOP/s `sptune doctor` measures here (its throughput model, fp32), which a
               different model reaches only roughly;
    a GPU      the vendor's dense peak for the config's precision x a stated utilisation (--utilization).
Trials run side by side (max_concurrent per stage, across cells of an experiment), so wall-clock time on
N devices is about device-hours / N. ASHA and early stopping (optim.patience) end trials before their
budget, so with either on the figures are an upper bound. Nothing here creates a directory or starts Ray.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import torch

from sptune.config import STAGES, Config, from_dict, merge
from sptune.errors import UserError

if TYPE_CHECKING:
    from sptune.tune.records.study_state import StudyState

# Dense (no sparsity) peak TFLOP/s, from the vendors' datasheets: NVIDIA A10 (the A10G of AWS g5
# instances is its variant), A100 SXM4, H100 SXM5. fp32 is the non-tensor-core rate: PyTorch leaves
# TF32 matmuls off by default.
GPU_PEAK_TFLOPS = {"a10g": {"fp32": 31.2, "bf16": 125.0}, "a100": {"fp32": 19.5, "bf16": 312.0},
                   "h100": {"fp32": 67.0, "bf16": 989.0}}
DEFAULT_GPU, DEFAULT_UTILIZATION = "a100", 0.4


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


def example_inputs(task: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """One example shaped as the task's loader gives it (values are irrelevant: FLOPs depend on shapes)."""
    L = task.seq_len
    if task.input_kind == "continuous":
        return torch.zeros(1, L, task.channels), torch.full((1,), L)  # (1, L, C), (1,)
    if task.paired:
        return torch.zeros(1, 2, L, dtype=torch.long), torch.full((1, 2), L)  # (1, 2, L), (1, 2)
    return torch.zeros(1, L, dtype=torch.long), torch.full((1,), L)  # (1, L), (1,)


@lru_cache(maxsize=None)
def model_flops(cfg_key: str, stage: str) -> Any:
    """sptune.flops.Flops of the stage's model (cached: grid points differ in lr and batch, not shape)."""
    from sptune import flops, runs, train
    from sptune.build import build_pretrain_model, build_task_model
    from sptune.data import step_draw
    from sptune.registry import get_task

    cfg = from_dict(json.loads(cfg_key))
    task = get_task(cfg.task.name)
    cfg = runs.resolve(cfg, task, stage)
    x, lengths = example_inputs(task)
    if stage == "pretrain":
        masked_continuous = cfg.objective.kind == "masked" and task.input_kind == "continuous"
        model = build_pretrain_model(cfg, task, mask_channel=masked_continuous)
    else:
        model = build_task_model(cfg, task)
    if stage == "pretrain":
        problem, lengths = train.denoise(cfg, task, x, lengths, step_draw(cfg.run.seed, 0))
        x = problem.inputs
    return flops.measure(model, x, lengths, task.seq_len)


def trial_cost(cfg: Config, stage: str, sizes: dict[str, int]) -> tuple[int, float, float]:
    """(steps, training FLOPs, evaluation FLOPs) of one trial."""
    from sptune.data import examples_seen, fraction_size, stage_steps

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
    """The stages of a resolved study (studies.resolve's state), each summed over its trials."""
    from sptune.tune.records import studies

    return [stage_budget(state.stages[stage], stage, studies.stage_trials(state, stage),
                         shape_points(studies.stage_space(state, stage).params), cell)
            for stage in stages]


def stage_budget(resolved: dict[str, Any], stage: str, trials: int, points: list[dict[str, Any]],
                 cell: str = "") -> StageBudget:
    """`trials` trials of a resolved stage config, each costing the mean over `points` (the grid's shapes)."""
    precision = resolved["run"]["precision"]
    sizes = split_sizes(resolved["task"]["name"], resolved["task"]["data_dir"], resolved["run"]["seed"])
    if isinstance(sizes, str):
        return StageBudget(cell, stage, trials, precision, None, None, None, unknown=sizes)
    costs = [trial_cost(stage_config(resolved, point), stage, sizes) for point in points]
    steps, train_flops, eval_flops = (sum(c[i] for c in costs) / len(costs) for i in range(3))
    return StageBudget(cell, stage, trials, precision, round(steps), trials * train_flops, trials * eval_flops)


@lru_cache(maxsize=None)
def split_sizes(task: str, data_dir: str, seed: int) -> dict[str, int] | str:
    """The task's split sizes, or why they are unknown (its data is not prepared here)."""
    from sptune.registry import get_task

    try:
        return get_task(task).split_sizes(data_dir or None, seed)
    except UserError as exc:
        return str(exc).splitlines()[0]


def shape_points(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The combinations of a stage's listed values (ranges, like lr, change no shape and are left out):
    each trial's cost is taken as their mean, exact when the whole grid runs."""
    listed = {k: v for k, v in params.items() if isinstance(v, list)}
    return [dict(zip(listed, combo)) for combo in itertools.product(*listed.values())]


# ----------------------------------------------------------------------------- devices and the table
def node_flops_per_s(seconds: float = 2.0) -> tuple[float, str]:
    """Training FLOP/s achieved on this node: `sptune doctor`'s throughput run, in FLOPs."""
    from sptune import config, doctor, flops
    from sptune.build import build_task_model
    from sptune.registry import get_task

    device = doctor.device_of()
    measured = doctor.measure_throughput(device, seconds)
    if not measured["ok"]:
        raise UserError(f"this node cannot train ({measured['detail']}); run `sptune doctor`")
    batch, length = doctor.THROUGHPUT_SHAPE["cuda" if device.type == "cuda" else "cpu"]
    task = dataclasses.replace(get_task("listops-mini"), seq_len=length)
    model = build_task_model(config.load(None, doctor.THROUGHPUT_MODEL), task)
    per_token = flops.measure(model, torch.zeros(1, length, dtype=torch.long), torch.full((1,), length),
                              length).train_example / length
    rate = measured["tokens_per_s"] * per_token
    return rate, f"{doctor.describe_device(device)}, {rate / 1e9:.1f} GFLOP/s measured by `sptune doctor`'s run"


def gpu_flops_per_s(gpu: str, precision: str, utilization: float) -> float:
    if gpu not in GPU_PEAK_TFLOPS:
        raise UserError(f"--gpu {gpu!r}; choose one of: {', '.join(GPU_PEAK_TFLOPS)}")
    if not 0 < utilization <= 1:
        raise UserError(f"--utilization {utilization} must be in (0, 1], e.g. 0.4")
    return GPU_PEAK_TFLOPS[gpu]["fp32" if precision == "fp32" else "bf16"] * 1e12 * utilization


def format_budget(title: str, stages: list[StageBudget], node: tuple[float, str], gpu: str = DEFAULT_GPU,
                  utilization: float = DEFAULT_UTILIZATION) -> list[str]:
    """The plan as printed: a row per (cell,) stage, the total, device-hours here and on the GPU."""
    gpu_flops_per_s(gpu, "fp32", utilization)  # a bad --gpu / --utilization fails before the table
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
    total = sum(p.flops for p in known)
    gpu_hours = sum(p.flops / gpu_flops_per_s(gpu, p.precision, utilization) for p in known) / 3600
    peaks = ", ".join(f"{k} {v:g}" for k, v in GPU_PEAK_TFLOPS[gpu].items())
    lines += [f"this node ({node[1]}): {total / node[0] / 3600:.4g} device-hours",
              f"{gpu} (peak TFLOP/s {peaks}, by each stage's precision, x {utilization:.0%} utilization): "
              f"{gpu_hours:.4g} device-hours",
              "device-hours are summed over trials (wall-clock on N devices: about device-hours / N); "
              "with ASHA or optim.patience on they are an upper bound"]
    unknown = sorted({p.unknown for p in stages if p.unknown})
    if unknown:
        lines.append(f"not counted: {len(stages) - len(known)} stage(s) of {sum(p.trials for p in stages) - sum(p.trials for p in known)} "
                     f"trials ('?'), whose split sizes come from data not prepared here:")
        lines += [f"  {reason}" for reason in unknown]
    return lines
