"""configs/<task>_<model>.yaml and search_spaces/<task>/<model>.yaml, generated from the paper's table.

    python -m sptune.experiment.paper_files            # rewrite every file that differs from the table
    python -m sptune.experiment.paper_files --check    # list them and exit 1 (what tests/test_paper_files.py checks)

sptune.experiment.paper.RECIPES is the one copy of the paper's hyper-parameters; these files are views of it
for `sptune study` and `sptune compare`, so a change goes into the table and the files are regenerated.
One config and one search space per task and model name (the variant in CONFIG_VARIANTS); the other
variants (causal SPT, random init, ...) run from the experiment scripts, which read the table directly. The
embedded demo task (listops-mini) keeps its hand-written files.
"""

from __future__ import annotations

import argparse
import math
import sys
import textwrap
from pathlib import Path
from typing import Any

from sptune.config import STAGES
from sptune.errors import UserError
from sptune.experiment import paper, settings

# model name -> the recipe variant its files hold, first one the paper reports on the task: Table 1's
# Transformers († rows, sinusoidal positions) on the LRA tasks, the rotary rows (Table 3) on the others.
CONFIG_VARIANTS = {"transformer": ("transformer", "rotary"), "s4": ("s4",), "dlr": ("dlr",)}
# Registered tasks that run another task's recipe: the same search spaces under their own name, so that
# `sptune study configs/listops_s4.yaml task.name=listops-lra` finds one (the LRA release of ListOps).
SAME_RECIPE = {"listops-lra": "listops"}
DESCRIPTION = {
    "transformer": "Transformer, Tay et al.'s sizes, sinusoidal positions (paper Table 4 † rows, Table 1)",
    "rotary": "Transformer, rotary positions (paper Table 4 rotary rows, Tables 2-3)",
    "s4": "S4, HiPPO init (Gu et al.'s S4 configs, paper C.1.2; Tables 5-6)",
    "dlr": "DLR (paper C.1.3, official DLR layer; Tables 5, 7)",
}
GENERATED = ("# Generated from sptune/experiment/paper.py (RECIPES[({task!r}, {variant!r})]) by\n"
             "# `python -m sptune.experiment.paper_files`: change the table there, not this file.\n")
SCI_KEYS = ("lr", "ssm_lr", "dt_min", "dt_max")  # written as 1.0e-3 (PyYAML reads "1e-3" as a string)


def shipped() -> dict[tuple[str, str], paper.Recipe]:
    """(task, model name) -> the recipe its config and search space hold."""
    out = {}
    for model, preferred in CONFIG_VARIANTS.items():
        for task in dict.fromkeys(task for task, _ in paper.RECIPES):
            variant = next((v for v in preferred if (task, v) in paper.RECIPES), None)
            if variant is not None:
                out[(task, model)] = paper.RECIPES[(task, variant)]
    return out


def config_path(task: str, model: str) -> str:
    return f"configs/{task.replace('-', '_')}_{model}.yaml"


def space_path(task: str, model: str) -> str:
    return f"search_spaces/{task}/{model}.yaml"


def files() -> dict[str, str]:
    """Repository-relative path -> the text the table says it holds."""
    out = {}
    recipes = shipped()
    for (task, model), recipe in recipes.items():
        out[config_path(task, model)] = config_text(recipe)
        out[space_path(task, model)] = space_text(recipe, task)
    for alias, task in SAME_RECIPE.items():
        for (recipe_task, model), recipe in recipes.items():
            if recipe_task == task:
                out[space_path(alias, model)] = space_text(recipe, alias)
    return out


# ----------------------------------------------------------------------------- YAML text
def scalar(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and key.rsplit(".", 1)[-1] in SCI_KEYS:
        mantissa, exponent = f"{value:.1e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return str(value)


def flow(values: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{key}: {scalar(key, value)}" for key, value in values.items()) + "}"


def config_text(recipe: paper.Recipe) -> str:
    task, model = recipe.task, recipe.model["model.name"]
    path = config_path(task, model)
    lines = [f"# {task} / {model} at the paper's scale (GPU): {DESCRIPTION[recipe.variant]}.",
             "#",
             f"#   sptune study {path}            # Ray Tune over {space_path(task, model)}",
             f"#   sptune compare {path}          # one pretrain -> finetune and one scratch run",
             "#",
             GENERATED.format(task=task, variant=recipe.variant).rstrip("\n"),
             "# Needs the task's data: `sptune data list` says where it goes and how to prepare it.",
             "#",
             *textwrap.wrap(f"model and weight decay: {recipe.source}", 110, initial_indent="# ",
                            subsequent_indent="#   ", break_on_hyphens=False, break_long_words=False),
             "# epochs: the S4 configs' max_epochs, every stage (Appendix C.1: at most 200 epochs or 24 h a stage)",
             "task:", f"  name: {task}", "model:"]
    lines += [f"  {key.split('.', 1)[1]}: {scalar(key, value)}" for key, value in recipe.model.items()]
    objective = "the task's masking ratio (paper §2)" if recipe.objective == "masked" else "causal SPT (paper §2)"
    lines += ["objective:", f"  kind: {recipe.objective}          # {objective}",
              "optim:", f"  weight_decay: {scalar('weight_decay', recipe.weight_decay)}",
              f"  epochs: {recipe.epochs}", f"  eval_every: {settings.EVAL_EVERY}",
              "run:", "  seed: 0", "  out_dir: runs", "  precision: bf16",
              "stages:"]
    for stage in STAGES:
        spec = recipe.stages[stage]
        first = spec.points[0].source if spec.points else "none reported: the grid's first values"
        lines += [f"  # lr, batch size: {first}", f"  # schedule: {spec.schedule_source}",
                  f"  {stage}:",
                  "    optim: " + flow({k.split(".", 1)[1]: v for k, v in recipe.stage_values(stage).items()})]
    return "\n".join(lines) + "\n"


def space_text(recipe: paper.Recipe, task: str) -> str:
    model = recipe.model["model.name"]
    config = config_path(recipe.task, model)
    launch = config + ("" if task == recipe.task else f" task.name={task}")
    space = recipe.space()
    trials = max(math.prod(len(v) for v in stage["params"].values()) for stage in space.values())
    lines = [f"# {task} / {model}: the paper's grid per stage, lr {{1e-3, 5e-4, 1e-4}} x batch {{8, 32, 128}}",
             "# (Appendix C.1), with each stage's points below added to it and evaluated first.",
             "#",
             f"#   sptune study {launch}            # this file is its default search space",
             f"#   sptune resume runs/study-{Path(config).stem}   # after Ctrl-C or a lost driver",
             "#",
             GENERATED.format(task=recipe.task, variant=recipe.variant).rstrip("\n"),
             "# One trial per GPU (Ray Train TorchTrainer, 1 worker); raise resources.workers for DDP.",
             f"task: {task}", f"model: {model}",
             f"num_samples: {trials}         # the whole grid of every stage (capped at each stage's size)",
             "max_concurrent: 4       # cluster.yaml scales to 4 GPU workers",
             "seed: 0",
             "resources: {workers: 1, cpus_per_worker: 4, gpus_per_worker: 1}",
             "stages:"]
    for stage in STAGES:
        lines += [f"  {stage}:", "    params:"]
        lines += [f"      {key}: [{', '.join(scalar(key, v) for v in values)}]"
                  for key, values in space[stage]["params"].items()]
        points = recipe.stages[stage].points
        lines.append("    points:" if points else "    points: []  # none reported: the grid alone")
        lines += [f"      - {flow(point.values())}  # {point.source}" for point in points]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="list the files that differ from the table; exit 1 if any")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[2]
    try:
        if not (root / "configs").is_dir():
            raise UserError(f"{root} is not a source checkout (no configs/); run this from one")
        wanted = files()
        paths = [path for path, text in wanted.items()
                 if not (root / path).is_file() or (root / path).read_text() != text]
        if args.check:
            for path in paths:
                print(f"differs from sptune/experiment/paper.py: {path}")
            return 1 if paths else 0
        for path in paths:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(wanted[path])
            print(f"wrote {path}")
    except UserError as exc:
        print(f"sptune: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
