"""Compute-tied SPT (paper Appendix D, Table 8): a fixed step budget split between masked SPT and finetuning.

    launch:  python experiments/spt_ratio.py                   # Text and Image, Transformer + Rotary and S4
    resume:  python experiments/spt_ratio.py                   # the same command; finished cells are skipped
    report:  sptune report runs/experiments/spt_ratio         # runs/experiments/spt_ratio-cpu for --cpu
    smoke:   python experiments/spt_ratio.py --smoke-test      # listops-mini and pathfinder-tiny, a 20-step budget
    CPU:     python experiments/spt_ratio.py --cpu             # the main job's task and models, 600 steps, seeds 6-15
             python experiments/spt_ratio.py --cpu --plan      # its budget first: trials, FLOPs, device-hours
             python experiments/spt_ratio.py --cpu --first-budget # 400 steps, no search, seeds 1-5
    GPUs:    add --gpus-per-worker 1 --max-concurrent <GPUs>

Varies: the share of the budget spent on SPT (0% = scratch, 20, 40, 60%) x task x model x seed. Fixed: the budget (the
paper's epochs, in steps) and each stage's lr (the paper's, not searched); --cpu searches each stage's grid.
"""

from __future__ import annotations

import sys

from sptune.cli.experiment import main
from sptune.config import STAGES
from sptune.experiment import paper, settings
from sptune.experiment.plan import Cell, Plan, fixed_space

EXPERIMENT = "spt_ratio"
TASKS = ("image", "text")  # Table 8's column order
TRAIN_EXAMPLES = {"text": 22_500, "image": 45_000}  # training split after the 10% validation hold-out
# Appendix C.1.4's finetuning batch sizes (Text 16, Image 50), one per task for both stages.
BATCH = {task: paper.FRACTION_SETTINGS[task]["finetune"][0][1] for task in TASKS}
SMOKE_BUDGET = 20
FIRST_CPU_BUDGET = 400  # steps: the main job's 200 pretraining + 200 finetuning steps of its first budget
CPU_BUDGET = 600  # steps: the main job's SPT total now, 200 pretraining + up to 400 finetuning steps
MODELS = (("transformer", "Transformer"), ("s4", "S4"))  # Table 8's column names


def budget_steps(task: str) -> int:
    per_epoch = -(-TRAIN_EXAMPLES[task] // BATCH[task])
    return paper.COMPUTE_TIED_EPOCHS[task] * per_epoch


def recipe(task: str, model: str):
    return settings.recipe(task, "rotary" if model == "transformer" else "s4")


def learning_rates(task: str, model: str) -> tuple[float, float]:
    """(pretraining, finetuning / scratch) lr: Transformers the Table 4 rotary row, S4 Appendix C.1.4."""
    if model == "transformer":
        stages = recipe(task, model).stages
        return stages["pretrain"].points[0].lr, stages["finetune"].points[0].lr
    return paper.FRACTION_SETTINGS[task]["pretrain"][0][0], paper.FRACTION_SETTINGS[task]["finetune"][0][0]


def share_label(share: float) -> str:
    return "0% (scratch)" if share == 0 else f"{share:.0%}"


def add_flags(parser) -> None:
    parser.add_argument("--cpu", action="store_true",
                        help="the experiment at CPU scale on the main job's task (UCR OSULeaf), Transformer and S4D, "
                             f"a {CPU_BUDGET}-step budget, each stage searched over the main job's grid, seeds 6-15")
    parser.add_argument("--first-budget", action="store_true",
                        help=f"with --cpu: the study as first reported, a {FIRST_CPU_BUDGET}-step budget at seed 0's "
                             "lrs, seeds 1-5")


NOTES = ["Each entry's device-seconds cover its whole budget (SPT + finetuning, or scratch)."]


def shares_layout(heading: str) -> dict:
    """Rows = SPT share, columns = task · model; each share's paired gain over 0% (scratch for the budget)."""
    return {"kind": "grid", "row": "share_label", "col": "column", "row_title": "SPT share", "heading": heading,
            "plots": ["shares"], "plot_title": "compute-tied: test accuracy vs SPT share of the budget",
            "gains_over": share_label(0)}


def split_steps(share: float, total: int) -> list[str]:
    """A share p pretrains round(p * total) steps and finetunes the rest; 0% is scratch for the whole budget."""
    pre = round(share * total)
    return ([f"scratch.optim.max_steps={total}"] if share == 0 else
            [f"pretrain.optim.max_steps={pre}", f"finetune.optim.max_steps={total - pre}"])


def build(args) -> Plan:
    if getattr(args, "cpu", False):
        return build_cpu(args)
    seeds = args.seeds or ([0] if args.smoke_test else [0, 1, 2])
    cells = []
    for paper_task in TASKS:
        task = settings.STAND_IN[paper_task] if args.smoke_test else paper_task
        total = SMOKE_BUDGET if args.smoke_test else budget_steps(paper_task)
        for model, name in MODELS:
            if args.smoke_test:
                base = settings.smoke_model(recipe(paper_task, model).model) + ["optim.eval_every=4"]
                space = settings.smoke_space()
            else:
                base = settings.real(recipe(paper_task, model), epochs=False)
                pre_lr, lr = learning_rates(paper_task, model)
                space = fixed_space({stage: {"optim.lr": pre_lr if stage == "pretrain" else lr,
                                             "optim.batch_size": BATCH[paper_task]}
                                     for stage in STAGES})
            paper_column = f"{paper.TASK_COLUMN[paper_task]} {name}"
            for share in paper.SPT_SHARES:
                steps = split_steps(share, total)
                arm = "scratch" if share == 0 else "masked"
                paper_row = "0% (TFS)" if share == 0 else f"{share:.0%}"
                for seed in seeds:
                    cells.append(Cell(
                        key=f"{task}-{model}-spt{round(100 * share)}-s{seed}",
                        labels={"task": task, "paper_task": paper_task, "model": name, "share": share,
                                "share_label": share_label(share), "seed": seed, "budget_steps": total,
                                "column": f"{settings.column(task, paper_task, args.smoke_test)} · {name}"},
                        overrides=tuple([f"task.name={task}", *base, *steps, "objective.kind=masked",
                                         f"run.seed={seed}"]),
                        stages=("scratch",) if share == 0 else ("pretrain", "finetune"),
                        space=space, paper={arm: paper.TABLE_8.cite(paper_row, paper_column)}))
    return Plan(
        experiment=EXPERIMENT, title="Compute-tied SPT: share of a fixed step budget spent on pretraining (Appendix D, Table 8)",
        axis="SPT share {0, 20, 40, 60}% of a fixed step budget x task x model; seeds",
        nuisance="none searched (fixed lr per stage: Table 4 rotary rows, Appendix C.1.4)",
        fixed="total steps per task (Text 30 / Image 150 epochs' worth), one batch size for both stages, models",
        layout=shares_layout("Test accuracy (%) at a fixed total budget"), cells=cells, notes=NOTES,
        commands={"launch": "python experiments/spt_ratio.py", "resume": "python experiments/spt_ratio.py (same flags)",
                  "report": "sptune report <experiment dir>"})


def build_cpu(args) -> Plan:
    """The main job's task and models under a fixed step budget (see the header)."""
    first = getattr(args, "first_budget", False)
    seeds = args.seeds or ([1, 2, 3, 4, 5] if first else list(settings.SCALING_SEEDS))
    total = FIRST_CPU_BUDGET if first else CPU_BUDGET
    cells = []
    for model, (_, name) in settings.CPU_MODELS.items():
        if first:
            lrs = settings.FIRST_SELECTED_LR[model]
            base = settings.first_budget_overrides(model)
            space = fixed_space({stage: {"optim.lr": lrs[stage], "optim.batch_size": 32} for stage in STAGES})
        else:
            base, space = settings.cpu_overrides(model), settings.cpu_space(model)
        for share in paper.SPT_SHARES:
            for seed in seeds:
                cells.append(Cell(
                    key=f"{settings.CPU_TASK}-{model}-spt{round(100 * share)}-s{seed}",
                    labels={"task": settings.CPU_TASK, "model": name, "share": share, "share_label": share_label(share),
                            "seed": seed, "role": settings.scaling_role(seed, first), "budget_steps": total,
                            "column": f"OSULeaf · {name}"},
                    overrides=tuple(base + split_steps(share, total) + [f"run.seed={seed}"]),
                    stages=("scratch",) if share == 0 else ("pretrain", "finetune"), space=space))
    flags = "--cpu --first-budget" if first else "--cpu"
    return Plan(
        experiment=EXPERIMENT, title=f"Compute-tied SPT at CPU scale: a {total}-step budget on UCR OSULeaf (Appendix D, "
                                     "Table 8)",
        axis=f"SPT share {{0, 20, 40, 60}}% of {total} steps x model (Transformer, S4D); seeds",
        nuisance=("none searched: each stage's lr as the main job's selection seed 0 chose it" if first else
                  "lr per stage: the main job's grids, extended past an edge (search_spaces/ucr-osuleaf/)"),
        fixed=(f"configs/ucr_osuleaf_{{transformer,s4}}.yaml (2 blocks x 64, batch 32), the {total}-step budget" +
               ("" if first else ", every stage stopped after 100 steps without a validation gain")),
        layout=shares_layout(f"Test accuracy (%) at a fixed total budget of {total} steps"), cells=cells,
        notes=NOTES,
        commands={"launch": f"python experiments/spt_ratio.py {flags}",
                  "resume": f"python experiments/spt_ratio.py {flags} (same flags)", "report": "sptune report <experiment dir>"})


if __name__ == "__main__":
    sys.exit(main(EXPERIMENT, build, __doc__, extra=add_flags, selection_seeds=settings.MAIN_JOB_SELECTION_SEEDS))
