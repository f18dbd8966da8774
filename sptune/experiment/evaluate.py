"""`sptune evaluate`: does an architecture still win once everyone is self-pretrained? (paper §3.1, Table 1)

    sptune evaluate --model my_layers.lru:make_lru --task ucr-osuleaf --seeds 0 1 2
    sptune evaluate --model longconv --task files --task-path data/order --baselines transformer --smoke

Every model (the researcher's and each baseline) sits in the same backbone and runs the protocol on the same
task: masked (or causal) SPT then finetuning, and scratch, finetuning and scratch searched over the same grid
with the same budget and stopping rule. One experiment, one engine run; the report prints each model's
scratch and SPT test metric, its SPT gain, each gap to each baseline under scratch and under SPT and the gap
change, paired over seeds with 95% intervals, plus the trivial baselines of the same splits.

The backbone and budget are the CPU-scale comparison's (configs/ucr_osuleaf_*.yaml: 2 blocks of 64, feed-forward
128, mean pooling, batch 32, 200 pretraining steps, 400 finetuning / scratch steps with early stopping after 100
without a validation gain); `section.field=value` overrides change them for every model. A model's grid is
search_spaces/<task>/<model>.yaml when the project has one, else the paper's grid (Appendix C.1: lr x batch size,
log-spaced) with the batch sizes a quarter of the training split can hold.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from sptune import registry
from sptune.config import STAGES, load as load_config
from sptune.errors import UserError
from sptune.experiment import settings
from sptune.experiment.plan import Cell, Plan

EXPERIMENT = "evaluate"
DEFAULT_BASELINES = ("transformer", "s4d-legs")
# Built-in layers: (the CPU-scale config they take their own fields from, the name the tables print).
BUILTIN = {"transformer": ("transformer", "Transformer"), "s4d-legs": ("s4", "S4D")}
# A built-in layer's settings on top of its CPU-scale config: the paper's Transformers use rotary positions.
PAPER_SETTINGS = {"transformer": ["model.pos_encoding=rotary"]}
# The shared backbone every model of the comparison gets (the CPU-scale configs' model section minus the
# fields of one layer), so two models differ in their sequence layer alone.
BACKBONE_FIELDS = ("model.d_model", "model.n_layers", "model.d_ff", "model.pooling")
@dataclass(frozen=True)
class Entry:
    """One model of the comparison: its model.name, its cell key part and the name its table rows print."""

    name: str
    key: str
    display: str


def entry(name: str) -> Entry:
    if name in BUILTIN:
        return Entry(name, *BUILTIN[name])
    slug = registry.slug(name)
    return Entry(name, slug, slug)


def task_overrides(task: str, task_path: str) -> list[str]:
    return [f"task.name={task}"] + ([f"task.path={task_path}"] if task_path else [])


def model_overrides(model: Entry, task: str, task_path: str) -> list[str]:
    """The CPU-scale config of the comparison for `model` on `task`: a built-in layer's own config on its
    task, else the shared backbone and budget with the model's name."""
    if model.name in BUILTIN:
        base = settings.cpu_overrides(model.key)
    else:
        base = [o for o in settings.cpu_overrides("transformer")
                if not o.startswith("model.") or o.partition("=")[0] in BACKBONE_FIELDS]
        base.append(f"model.name={model.name}")
    if task != settings.CPU_TASK or task_path:
        base = [o for o in base if not o.startswith("task.")] + task_overrides(task, task_path)
    return base


def own_settings(name: str, per_model: dict[str, list[str]]) -> list[str]:
    """A model's own overrides: those given for it, else the paper's (PAPER_SETTINGS)."""
    return per_model[name] if name in per_model else PAPER_SETTINGS.get(name, [])


def is_layer_option(override: str) -> bool:
    """model.options.<key>=... (or <stage>.model.options.<key>=...)."""
    parts = override.partition("=")[0].split(".")
    return (parts[1:] if parts[0] in STAGES else parts)[:2] == ["model", "options"]


def shared(model: Entry, overrides: list[str]) -> list[str]:
    """The overrides that apply to `model`: a layer's own options go to the layers from outside sptune, whose
    factories take them; a built-in layer has none."""
    return [o for o in overrides if not (registry.is_builtin_model(model.name) and is_layer_option(o))]


def grid(model: Entry, task: str, task_path: str, overrides: list[str]) -> tuple[dict[str, Any], str]:
    """The model's search space on the task, and where it came from (printed with the plan): the project's
    search_spaces/<task>/<model>.yaml, else the paper's grid scaled to the task (sptune.search.spaces.paper_space)."""
    from sptune.experiment.plan import repo_space
    from sptune.search import spaces

    space = None if task_path else repo_space(Cell(key="", labels={}, overrides=tuple(overrides)))
    if space is not None:
        return space, f"search_spaces/{task}/{model.name}.yaml"
    n_train = registry.get_task(task, task_path).split_sizes(seed=0)["train"]
    paper = spaces.paper_space(task, model.name, n_train)
    return {**{s: {"params": sp.params, "points": sp.points} for s, sp in paper.stages.items()},
            "limits": paper.limits}, paper.path


def cells(models: list[Entry], task: str, task_path: str, seeds: list[int], extra: list[str],
          per_model: dict[str, list[str]], smoke: bool, compute_tied: bool,
          selection_seeds: tuple[int, ...]) -> tuple[list[Cell], list[str]]:
    """Every (model, seed) cell, baselines first as the paper's tables; and one line per model on its grid."""
    out, grids = [], []
    for model in models:
        overrides = model_overrides(model, task, task_path) + own_settings(model.name, per_model) + shared(model, extra)
        if smoke:
            overrides += settings.SMOKE_COMMON
        space, source = grid(model, task, task_path, overrides)
        if smoke:
            space = settings.smoke_space()
            source = "one point (smoke)"
        grids.append(f"{model.display}: {source}")
        for seed in seeds:
            labels = {"task": task, "model": model.display, "seed": seed, "column": task,
                      "role": settings.cpu_role(seed, selection_seeds)}
            seeded = overrides + [f"run.seed={seed}"]
            out.append(Cell(key=f"{task}-{model.key}-s{seed}", labels=labels, overrides=tuple(seeded), stages=STAGES,
                            space=space))
            if compute_tied:
                out.append(tied_cell(task, model, seeded, labels, space))
    return out, grids


def tied_cell(task: str, model: Entry, overrides: list[str], labels: dict, space: dict[str, Any]) -> Cell:
    """Scratch with SPT's total training steps (pretraining's plus finetuning's), on the scratch arm's grid
    (paper Appendix D: equal training compute), stopped by the same rule."""
    steps = sum(load_config(None, overrides, stage=stage).optim.max_steps for stage in ("pretrain", "finetune"))
    return Cell(key=f"{task}-{model.key}-tied-s{labels['seed']}",
                labels={**labels, "compute": "tied", "row": f"{model.display} scratch, {steps} steps"},
                overrides=tuple(overrides + [f"optim.max_steps={steps}"]), stages=("scratch",),
                space={"scratch": space["scratch"], **{k: v for k, v in space.items() if k == "limits"}})


def build_plan(model: str, task: str, baselines: list[str] | tuple[str, ...] = DEFAULT_BASELINES,
               seeds: list[int] | None = None, overrides: list[str] | None = None, task_path: str = "",
               smoke: bool = False, compute_tied: bool = False, per_model: dict[str, list[str]] | None = None,
               selection_seeds: tuple[int, ...] | None = None, title: str | None = None,
               fixed: str | None = None) -> Plan:
    """The plan of `model` against `baselines` on `task` (cells: models x seeds). `per_model`: overrides of one
    model alone, in place of its PAPER_SETTINGS (the Transformer's positions); `selection_seeds`: the seeds whose
    validation numbers chose the settings, reported apart from the confirmation seeds (default: on UCR OSULeaf the
    seeds the built-in grids were chosen on, elsewhere none)."""
    names = [b for b in baselines if b != model] + [model]
    if len(set(names)) != len(names):
        raise UserError(f"--baselines {' '.join(baselines)} names a model twice; name each once")
    models = [entry(n) for n in names]
    if len({m.key for m in models}) != len(models):
        raise UserError(f"models {', '.join(names)} share a short name; name their factories differently")
    extra = list(overrides or [])
    for name in names:  # every name and the layers' contracts, before any cell is made
        registry.check_names(load_config(None, model_overrides(entry(name), task, task_path)
                                         + own_settings(name, per_model or {}) + shared(entry(name), extra)))
    seeds = list(seeds or [0])
    if selection_seeds is None:  # the built-in grids of the CPU-scale task were chosen on these seeds' validation
        selection_seeds = settings.MAIN_JOB_SELECTION_SEEDS if task == settings.CPU_TASK and not task_path else ()
    plan_cells, grids = cells(models, task, task_path, seeds, extra, per_model or {}, smoke, compute_tied,
                              selection_seeds)
    candidate, others = models[-1].display, [m.display for m in models[:-1]]
    return Plan(
        experiment=EXPERIMENT,
        title=title or f"{candidate} against {', '.join(others) or 'no baseline'} on {task}: scratch vs SPT",
        axis="architecture x initialisation (scratch, SPT); seeds",
        nuisance="lr x batch size per stage; finetuning and scratch of one model: the same grid and budget. "
                 + "; ".join(grids),
        fixed=fixed or "the shared backbone and budget of the CPU-scale comparison (configs/ucr_osuleaf_*.yaml)"
                       + (f"; overrides {' '.join(extra)}" if extra else ""),
        layout={"kind": "grid", "col": "column", "row_title": "model", "heading": f"Test metric (%), {task}",
                "plots": ["bars"], "plot_title": f"{task} test metric: scratch (solid), SPT (hatched)",
                "architectures": {"candidate": candidate, "baselines": others},
                "baselines_task": task, "baselines_task_path": task_path, "curves": True},
        cells=plan_cells,
        preamble=task_lines(task, task_path) + [f"grid of {line}" for line in grids],
        commands={"launch": "sptune evaluate ...", "resume": "the same command",
                  "report": "sptune report <experiment dir>"})


def task_lines(task: str, task_path: str) -> list[str]:
    """What was inferred from a files task (input kind, classes, length, splits, SPT defaults), said up front."""
    if task != registry.FILES_TASK:
        return []
    from sptune.tasks.files import describe

    return [describe(registry.get_task(task, task_path))]


# ----------------------------------------------------------------------------- the command line
def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True,
                        help="the architecture to evaluate: a built-in layer, a registered or entry-point name, or "
                             "an import path package.module:factory")
    parser.add_argument("--task", required=True, help="a task name, or `files` with --task-path DIR")
    parser.add_argument("--task-path", default="", metavar="DIR",
                        help="task files: a directory of train / val / test (.npz, Parquet or save_to_disk)")
    parser.add_argument("--baselines", nargs="+", default=list(DEFAULT_BASELINES), metavar="NAME",
                        help=f"models to compare against (default: {' '.join(DEFAULT_BASELINES)})")
    parser.add_argument("--compute-tied", action="store_true",
                        help="also train scratch for SPT's total steps, searched on the scratch grid (App. D)")
    parser.add_argument("--ship", action="append", default=[], metavar="DIR",
                        help="a package directory to send to every Ray worker (runtime_env py_modules); code "
                             "imported from outside an installed package is sent without it")
    parser.add_argument("overrides", nargs="*", help="section.field=value for every model, e.g. "
                                                     "model.options.max_len=1024 optim.max_steps=800")


def name_parser() -> argparse.ArgumentParser:
    """--model and --task alone (the default directory's name), before the full command line is parsed."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--model")
    parser.add_argument("--task")
    return parser


def build(args: argparse.Namespace) -> Plan:
    from sptune import plugins

    for path in args.ship:
        plugins.ship(path)
    if args.task == registry.FILES_TASK and not args.task_path:
        raise UserError("--task files needs --task-path DIR, the directory holding train / val / test")
    return build_plan(args.model, args.task, args.baselines, args.seeds, args.overrides, args.task_path,
                      smoke=args.smoke_test, compute_tied=args.compute_tied)
