"""Search-space files: `search_spaces/<task>/<model>.yaml` -> a validated SearchSpace (no Ray, no Optuna:
reading or checking a space imports neither; sptune.search.searcher turns one into Tune's searcher).

A search-space file holds, per stage (pretrain / finetune / scratch), the grid of flattened config
keys to search and the points to evaluate first (the paper's best values, Tables 4-6):

    stages:
      pretrain:
        params: {optim.lr: [1.0e-3, 5.0e-4, 1.0e-4], optim.batch_size: [8, 32, 128]}
        points: [{optim.lr: 1.0e-3, optim.batch_size: 128}]

A list is a categorical grid; `{loguniform: [lo, hi]}` / `{uniform: [lo, hi]}` a continuous range.
Top-level keys: num_samples, max_concurrent, seed, sampler (SAMPLERS), asha, resources, limits, extend_grids
(false: the declared grids only; sptune.search.bracketing).

Early stopping: ASHA on our own clock (the fraction of each trial's budget), from an `asha:` block,
`--asha`, or by default for a stage of at least ASHA_MIN_TRIALS trials whose evals meet its rungs
(`--no-asha` turns it off). A trial it stops gets its test metric at its best checkpoint when the
stage ends (sptune.trials.stopped).
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sptune import folds
from sptune.config import MAPPING_FIELDS, STAGES, from_dict, read_yaml
from sptune.errors import UserError
from sptune.registry import check_names

# ASHA's max_t, just under the whole budget: ASHA puts a rung at max_t when the rungs reach it, and a
# trial judged at its last eval would be stopped before its test evaluation.
FULL_BUDGET = 1.0 - 1e-9
SAMPLERS = ("auto", "brute", "tpe")
RANGES = ("loguniform", "uniform")
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout's root when sptune runs from one


@dataclass
class StageSpace:
    params: dict[str, list[Any] | dict[str, list[float]]]
    points: list[dict[str, Any]] = field(default_factory=list)

    @property
    def categorical(self) -> bool:
        return all(isinstance(v, list) for v in self.params.values())

    @property
    def grid_size(self) -> int | None:
        return math.prod(len(v) for v in self.params.values()) if self.categorical else None


@dataclass
class SearchSpace:
    path: str
    stages: dict[str, StageSpace]
    task: str = ""  # the task / model the grid was made for ("" = any)
    model: str = ""
    num_samples: int = 9  # trials per stage; a categorical grid caps it at the grid size
    max_concurrent: int = 2
    seed: int = 0
    sampler: str = "auto"
    asha: dict[str, Any] | None = None  # {grace_period (budget fraction), reduction_factor}: off when absent
    resources: dict[str, float] = field(default_factory=dict)  # workers, cpus_per_worker, gpus_per_worker
    # param -> [low, high]: how far a grid may extend itself past its edges (sptune.search.bracketing)
    limits: dict[str, list[float]] = field(default_factory=dict)
    extend_grids: bool | None = None  # None: the command line's, else on

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "task": self.task, "model": self.model, "num_samples": self.num_samples,
                "max_concurrent": self.max_concurrent, "seed": self.seed, "sampler": self.sampler,
                "asha": self.asha, "resources": self.resources, "limits": self.limits,
                "extend_grids": self.extend_grids, "stages": {s: {"params": sp.params, "points": sp.points} for s, sp in self.stages.items()}}


def default_path(task: str, model: str) -> Path:
    """search_spaces/<task>/<model>.yaml: from the working directory, else from the source checkout sptune
    runs from (PYTHONPATH or the study scripts, not installed), else the copy installed with the package
    (package data sptune.search_spaces: a wheel, an editable install, a cluster node)."""
    relative = Path(task) / f"{model}.yaml"
    for root in (Path("search_spaces"), SOURCE_ROOT / "search_spaces", installed_search_spaces()):
        if root is not None and (root / relative).is_file():
            return root / relative
    raise UserError(f"no search space for task '{task}' / model '{model}' (search_spaces/{relative} not found); "
                    f"pass one with --search-space")


# The paper's grid (Appendix C.1): "a small grid of learning rates and batch sizes with log spacing, e.g.
# (1e-3 5e-4 1e-4) and (8 32 128)". Here a factor ~3 apart, as the project's own grids, so that an optimum
# inside is bracketed; grids extend themselves past an edge their best sits at (sptune.search.bracketing).
PAPER_LRS = [1e-4, 3e-4, 1e-3, 3e-3]
PAPER_BATCHES = [8, 32, 128]
PRETRAIN_LR = 1e-3  # the paper's pretraining lr (Appendix C.1.2)
BATCHES_PER_SPLIT = 4  # a batch size is kept when the training split holds at least this many batches of it


def paper_space(task: str, model: str, n_train: int) -> SearchSpace:
    """The grid of a task / model the project has no search-space file for: the paper's lr x batch size, with
    the batch sizes a training split of n_train examples holds BATCHES_PER_SPLIT times (the smallest at least);
    pretraining at the paper's lr. Its path says which grid it is."""
    batches = [b for b in PAPER_BATCHES if b * BATCHES_PER_SPLIT <= n_train] or [min(PAPER_BATCHES)]
    first = {"optim.lr": 1e-3, "optim.batch_size": 32 if 32 in batches else batches[0]}
    searched = {"optim.lr": list(PAPER_LRS), "optim.batch_size": batches}
    stages = {"pretrain": StageSpace({"optim.lr": [PRETRAIN_LR], "optim.batch_size": [first["optim.batch_size"]]}),
              **{s: StageSpace(dict(searched), [dict(first)]) for s in ("finetune", "scratch")}}
    path = (f"the paper's grid (App. C.1): lr {PAPER_LRS} x batch {batches} (the batches {n_train} training "
            f"examples hold {BATCHES_PER_SPLIT} times)")
    # A batch larger than the training split is the same full batch again: its grid extends no further.
    return SearchSpace(path=path, stages=stages, task=task, model=model, num_samples=len(PAPER_LRS) * len(batches),
                       limits={"optim.batch_size": [1, n_train]})


def installed_search_spaces() -> Path | None:
    """The search_spaces directory installed as package data (pyproject.toml), or None when not installed."""
    try:
        return Path(str(importlib.resources.files("sptune.search_spaces")))
    except ModuleNotFoundError:
        return None


def load(path: str | Path) -> SearchSpace:
    p = Path(path)
    data = read_yaml(p, "search space", "pass a search_spaces/<task>/<model>.yaml file")
    return parse(data, str(p))


def parse(data: Any, path: str = "<search space>") -> SearchSpace:
    """Validate a search-space mapping; every mistake is a UserError naming the file and the key."""
    if not isinstance(data, dict):
        raise UserError(f"{path}: must be a mapping with a 'stages' section")
    known = {"task", "model", "stages", "num_samples", "max_concurrent", "seed", "sampler", "asha", "resources",
             "limits", "extend_grids"}
    if set(data) - known:
        raise UserError(f"{path}: unknown keys {sorted(set(data) - known)}; allowed: {', '.join(sorted(known))}")
    stages = data.get("stages")
    if not isinstance(stages, dict) or not stages or set(stages) - set(STAGES):
        raise UserError(f"{path}: 'stages' must map some of {', '.join(STAGES)} to {{params, points}}")
    space = SearchSpace(path=path, stages={name: _stage(path, name, spec) for name, spec in stages.items()},
                        task=str(data.get("task", "")), model=str(data.get("model", "")))
    for key in ("num_samples", "max_concurrent", "seed"):
        if key in data:
            value = data[key]
            if not isinstance(value, int) or isinstance(value, bool) or value < (0 if key == "seed" else 1):
                raise UserError(f"{path}: {key}={value!r} must be a positive integer")
            setattr(space, key, value)
    space.sampler = data.get("sampler", "auto")
    if space.sampler not in SAMPLERS:
        raise UserError(f"{path}: sampler={space.sampler!r}; choose one of: {', '.join(SAMPLERS)}")
    if data.get("asha") is not None:
        space.asha = _asha(path, data["asha"])
    resources = data.get("resources") or {}
    allowed = {"workers", "cpus_per_worker", "gpus_per_worker"}
    if not isinstance(resources, dict) or set(resources) - allowed:
        raise UserError(f"{path}: 'resources' may set only {', '.join(sorted(allowed))}")
    space.resources = dict(resources)
    space.limits = _limits(path, data.get("limits") or {})
    if data.get("extend_grids") is not None:
        if not isinstance(data["extend_grids"], bool):
            raise UserError(f"{path}: extend_grids={data['extend_grids']!r} must be true or false")
        space.extend_grids = data["extend_grids"]
    return space


def _limits(path: str, spec: Any) -> dict[str, list[float]]:
    """`limits: {optim.lr: [1.0e-6, 1.0e-1]}`: numbers low <= high per searched config key."""
    if not isinstance(spec, dict):
        raise UserError(f"{path}: 'limits' maps config keys to [low, high], e.g. {{optim.lr: [1.0e-6, 1.0e-1]}}")
    out = {}
    for key, bounds in spec.items():
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(isinstance(b, (int, float)) and
                                                                      not isinstance(b, bool) for b in bounds)
                and bounds[0] <= bounds[1]):
            raise UserError(f"{path}: limits.{key} must be [low, high] with low <= high, e.g. [1.0e-6, 1.0e-1]")
        out[key] = [float(bounds[0]), float(bounds[1])]
    return out


def _stage(path: str, name: str, spec: Any) -> StageSpace:
    where = f"{path}: stages.{name}"
    if not isinstance(spec, dict) or not isinstance(spec.get("params"), dict) or not spec["params"]:
        raise UserError(f"{where} needs 'params': a mapping of config keys (e.g. optim.lr) to value lists")
    if set(spec) - {"params", "points"}:
        raise UserError(f"{where}: unknown keys {sorted(set(spec) - {'params', 'points'})}; use params, points")
    params: dict[str, Any] = {}
    for key, values in spec["params"].items():
        if isinstance(values, list):
            if not values or len(set(map(repr, values))) != len(values):
                raise UserError(f"{where}.params.{key}: give a non-empty list of distinct values")
            for value in values:
                check_value(where, key, value)
        elif isinstance(values, dict) and len(values) == 1 and next(iter(values)) in RANGES:
            kind, bounds = next(iter(values.items()))
            if not (isinstance(bounds, list) and len(bounds) == 2 and 0 < float(bounds[0]) < float(bounds[1])):
                raise UserError(f"{where}.params.{key}: {kind} needs [low, high] with 0 < low < high")
            values = {kind: [float(bounds[0]), float(bounds[1])]}
            check_value(where, key, values[kind][0])
        else:
            raise UserError(f"{where}.params.{key}: give a list of values or {{loguniform: [low, high]}}")
        params[key] = values
    stage = StageSpace(params=params, points=list(spec.get("points") or []))
    for point in stage.points:
        if not isinstance(point, dict) or set(point) != set(params):
            raise UserError(f"{where}.points: each point must set exactly {', '.join(params)}; got {point!r}")
        for key, value in point.items():
            domain = params[key]
            inside = (value in domain) if isinstance(domain, list) else \
                (next(iter(domain.values()))[0] <= float(value) <= next(iter(domain.values()))[1])
            if not inside:
                raise UserError(f"{where}.points: {key}={value!r} is outside its grid {domain}; add it to params")
    return stage


def check_value(where: str, key: str, value: Any) -> None:
    """A searched key must be a real config field and each value a valid setting of it."""
    section, dot, name = key.partition(".")
    if section == "model" and name.partition(".")[0] in MAPPING_FIELDS and name.count(".") == 1:
        return  # a layer's own option (model.options.d_state): the layer's contract check sees its values
    if not dot or "." in name:
        raise UserError(f"{where}.params: '{key}' must be a flattened config key section.field (e.g. optim.lr)")
    # A fold is valid only beside a fold count (the stage config's task.val_folds): checked as one of enough.
    fields = {name: value} | ({"val_folds": max(2, value + 1)} if key == folds.FOLD_KEY and isinstance(value, int)
                              else {})
    try:
        check_names(from_dict({section: fields}))
    except UserError as exc:
        raise UserError(f"{where}.params.{key}: {exc}") from None


# Rungs at 1/8 and 3/8 of the budget; a third of the trials go on from each. Measured on the 12-point grid
# of benchmarks/search_efficiency.py (15 search seeds): median compute to come within 1 point of the
# grid's best 36% of the grid's, never missed; with reduction factor 2 (rungs 1/8, 1/4, 1/2) 47% and 3 of
# 15 searches never came within 1 point (the best trial starts slowly and was stopped); grace 1/4: 50%.
# (The 35% in docs/cluster.md is the benchmark's own default run, 3 search seeds: another sample.)
DEFAULT_ASHA = {"grace_period": 0.125, "reduction_factor": 3.0}
# ASHA is on by default for a stage of at least this many trials, where its rungs fit the evals (else it
# silently stays off). With fewer, a trial is judged at a rung against one or two others: little compute
# is saved and a slow starter is easily lost.
ASHA_MIN_TRIALS = 8


def stage_asha(options: Any, trials: int) -> dict[str, Any] | None:
    """The ASHA settings of a stage of `trials` trials, or None (FIFO). options: a study's
    sptune.search.options.Resolved; asha_min_trials is 0 when ASHA was asked for (--asha, an asha block), so
    every stage gets it."""
    return options.asha if options.asha and trials >= options.asha_min_trials else None


def _asha(path: str, spec: Any) -> dict[str, Any]:
    spec = {} if spec is True else spec
    if not isinstance(spec, dict) or set(spec) - {"grace_period", "reduction_factor"}:
        raise UserError(f"{path}: asha takes grace_period (a fraction of each trial's budget) and reduction_factor")
    out = {key: float(spec.get(key, default)) for key, default in DEFAULT_ASHA.items()}
    if not 0 < out["grace_period"] < 1 or out["reduction_factor"] <= 1:
        raise UserError(f"{path}: asha needs 0 < grace_period < 1 (a fraction of each trial's budget, e.g. 0.125) "
                        f"and reduction_factor > 1")
    return out


def rungs(asha: dict[str, Any]) -> list[float]:
    """ASHA's rungs as fractions of a trial's budget: grace_period x reduction_factor^k below 1."""
    out, rung = [], asha["grace_period"]
    while rung < FULL_BUDGET:
        out.append(rung)
        rung *= asha["reduction_factor"]
    return out


def check_rungs(asha: dict[str, Any], max_steps: dict[int, int], eval_every: int, where: str) -> None:
    """Every rung must be met by an eval of every trial before the next rung (and before its last
    step): else trials are compared after unequal work, or judged at their final eval and stopped
    before testing. `max_steps` maps each searched batch size to its resolved step budget."""
    levels = rungs(asha)
    for batch_size, steps in sorted(max_steps.items()):
        evals = [s / steps for s in range(eval_every, steps, eval_every)]  # the final eval is no rung
        for low, high in zip(levels, levels[1:] + [1.0]):
            if not any(low <= e < high for e in evals):
                raise UserError(
                    f"{where}: ASHA's rung at {low:.4g} of the budget has no eval before {high:.4g} for "
                    f"optim.batch_size={batch_size} ({steps} steps, an eval every {eval_every}); lower "
                    f"optim.eval_every or raise asha.grace_period")


def trial_count(stage: StageSpace, requested: int) -> int:
    """A categorical grid has finitely many points: asking for more would repeat some. A cross-validated
    stage runs each of the `requested` settings on every fold."""
    requested *= len(stage.params.get(folds.FOLD_KEY, [0]))
    return min(requested, stage.grid_size) if stage.categorical else requested


def cross_validated(space: SearchSpace, k: int) -> SearchSpace:
    """`space` with a fold axis (sptune.folds) on the finetuning and scratch grids: every setting, and every
    listed point, once per fold."""
    stages = dict(space.stages)
    for name in folds.FOLDED_STAGES:
        stage = stages.get(name)
        if stage is None:
            continue
        if folds.FOLD_KEY in stage.params:
            raise UserError(f"{space.path}: stages.{name} searches {folds.FOLD_KEY} itself; drop it or --val-folds")
        stages[name] = StageSpace(params={**stage.params, folds.FOLD_KEY: list(range(k))},
                                  points=[{**p, folds.FOLD_KEY: i} for p in stage.points for i in range(k)])
    return dataclasses.replace(space, stages=stages)


def grid_points(stage: StageSpace) -> list[dict[str, Any]]:
    """Every point of a categorical grid (for tests and for reading a study's coverage)."""
    keys = list(stage.params)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(stage.params[k] for k in keys))]
