"""SPT across data scales (paper §3.4, Figure 3): S4 scratch vs masked SPT on nested training subsets.

    launch:  python experiments/data_fractions.py              # Text and Image, fractions 0.005 ... 1.0
    resume:  python experiments/data_fractions.py              # the same command; finished cells are skipped
    report:  sptune report runs/experiments/data_fractions    # runs/experiments/data_fractions-cpu for --cpu
    smoke:   python experiments/data_fractions.py --smoke-test    # listops-mini and pathfinder-tiny, a tiny S4, 15 steps
    CPU:     python experiments/data_fractions.py --cpu        # the main job's task and S4D, seeds 6-15; in batches:
             # --seeds 8 9 --dir <batch dir>, then sptune report <batch dir> <batch dir> ... pools them
             python experiments/data_fractions.py --cpu --plan    # its budget first: trials, FLOPs, device-hours
             python experiments/data_fractions.py --cpu --first-budget   # 200 steps every stage, seeds 1-3
    GPUs:    add --gpus-per-worker 1 --max-concurrent <GPUs>

Varies: the training fraction (nested, Appendix C.1.4) x seed. Fixed: the paper's steps, lr and batch sizes (Text's
scratch lr searched); --cpu: the main job's setting, 12.5-100% of its 159 series, pretraining up to 1000 steps.
"""

from __future__ import annotations

import sys

from sptune.cli.experiment import main
from sptune.config import STAGES
from sptune.experiment import paper, settings
from sptune.experiment.plan import Cell, Plan

EXPERIMENT = "data_fractions"
CPU_MODEL = "s4"  # the paper's Figure 3 model family (S4); the Transformer would double the cost
CPU_FRACTIONS = (0.125, 0.25, 0.5, 1.0)
TASKS = ("text", "image")
# "Until convergence" budget of finetuning and scratch: the S4 configs' full-data schedules (steps).
CONVERGED_STEPS = {"text": 50_000, "image": 200_000}


def space(task: str) -> dict:
    """Appendix C.1.4's values per stage, nothing else (two scratch learning rates on Text)."""
    points = paper.FRACTION_SETTINGS[task]
    return {stage: {"params": {"optim.lr": sorted({lr for lr, _ in points[stage]}, reverse=True),
                               "optim.batch_size": sorted({batch for _, batch in points[stage]})},
                    "points": [{"optim.lr": lr, "optim.batch_size": batch} for lr, batch in points[stage]]}
            for stage in STAGES}


def add_flags(parser) -> None:
    parser.add_argument("--cpu", action="store_true",
                        help="the experiment at CPU scale on the main job's task (UCR OSULeaf), S4D and setting: 4 "
                             "fractions x seeds 6-15, pretraining up to 1000 steps (a budget, not a plateau)")
    parser.add_argument("--first-budget", action="store_true",
                        help="with --cpu: the study as first reported, under the main job's first budget (200 steps "
                             "every stage, its first grid), seeds 1-3")


def build(args) -> Plan:
    if getattr(args, "cpu", False):
        return build_cpu(args)
    seeds = args.seeds or ([0] if args.smoke_test else [0, 1, 2])
    cells = []
    for paper_task in TASKS:
        task = settings.STAND_IN[paper_task] if args.smoke_test else paper_task
        recipe = settings.recipe(paper_task, "s4")
        if args.smoke_test:
            run, cell_space = settings.smoke_model(recipe.model), settings.smoke_space()
        else:
            run = settings.real(recipe, epochs=False) + [
                f"pretrain.optim.max_steps={paper.FRACTION_SETTINGS[paper_task]['pretrain_steps']}",
                f"finetune.optim.max_steps={CONVERGED_STEPS[paper_task]}",
                f"scratch.optim.max_steps={CONVERGED_STEPS[paper_task]}"]
            cell_space = space(paper_task)
        for fraction in paper.DATA_FRACTIONS:
            for seed in seeds:
                cells.append(Cell(
                    key=f"{task}-f{fraction:g}-s{seed}",
                    labels={"task": task, "paper_task": paper_task, "model": "S4", "fraction": fraction, "seed": seed,
                            "column": settings.column(task, paper_task, args.smoke_test)},
                    overrides=tuple([f"task.name={task}", *run, "objective.kind=masked",
                                     f"task.train_fraction={fraction}", f"run.seed={seed}"]),
                    space=cell_space))
    return Plan(
        experiment=EXPERIMENT, title="SPT across data scales: S4 on nested training subsets (§3.4, Figure 3)",
        axis="training fraction {0.005, 0.01, 0.05, 0.1, 0.5, 1.0} (nested subsets) x scratch / masked SPT; seeds",
        nuisance="Text scratch lr {1e-3, 5e-4} (Appendix C.1.4); nothing else",
        fixed="pretraining steps at every fraction (Text 40K, Image 10K), finetuning to convergence, lr and batch "
              "size per stage (Appendix C.1.4), S4 sizes of the S4 configs",
        layout={"kind": "fraction"},
        cells=cells,
        notes=["gain = (SPT - scratch) / scratch, the relative gain of Figure 3 (right).",
               "The paper gives Figure 3 as a plot only; its text: " + paper.FIGURE_3_TEXT],
        commands={"launch": "python experiments/data_fractions.py",
                  "resume": "python experiments/data_fractions.py (same flags)", "report": "sptune report <experiment dir>"})


def build_cpu(args) -> Plan:
    """The main job's task and S4D on nested fractions of its training split (see the header)."""
    first = getattr(args, "first_budget", False)
    seeds = args.seeds or ([1, 2, 3] if first else list(settings.SCALING_SEEDS))
    display = settings.CPU_MODELS[CPU_MODEL][1]
    if first:
        base, cell_space = settings.first_budget_overrides(CPU_MODEL), settings.first_budget_space(CPU_MODEL)
    else:
        base = settings.cpu_overrides(CPU_MODEL) + settings.SCALING_PRETRAINING
        cell_space = settings.cpu_space(CPU_MODEL)
    cells = [Cell(key=f"{settings.CPU_TASK}-f{fraction:g}-s{seed}",
                  labels={"task": settings.CPU_TASK, "model": display, "fraction": fraction, "seed": seed,
                          "role": settings.scaling_role(seed, first), "column": f"OSULeaf · {display}"},
                  overrides=tuple(base + [f"task.train_fraction={fraction}", f"run.seed={seed}"]),
                  space=cell_space)
             for fraction in CPU_FRACTIONS for seed in seeds]
    flags = "--cpu --first-budget" if first else "--cpu"
    return Plan(
        experiment=EXPERIMENT, title="SPT across data scales at CPU scale: S4D on nested subsets of UCR OSULeaf (§3.4, "
                                     "Figure 3)",
        axis="training fraction {0.125, 0.25, 0.5, 1.0} of 159 series (nested) x scratch / masked SPT; seeds",
        nuisance=("lr per stage, the main job's first grid (finetune and scratch: the same 5 values and 200 steps)"
                  if first else "lr per stage: the main job's S4D grid, extended past an edge (search_spaces/ucr-osuleaf/)"),
        fixed=("configs/ucr_osuleaf_s4.yaml (2 blocks x 64, batch 32), 200 pretraining steps at every fraction" if first
               else "configs/ucr_osuleaf_s4.yaml (2 blocks x 64, batch 32); pretraining up to 1000 steps, finetuning and "
                    "scratch up to 400, each stopped after 100 steps without a validation gain"),
        layout={"kind": "fraction", "curves": True}, cells=cells,
        notes=["gain = (SPT - scratch) / scratch, the relative gain of Figure 3 (right); data x = how many times "
               "its labelled data scratch needs to match SPT (sptune.report.multiplier).",
               "The paper gives Figure 3 as a plot only; its text: " + paper.FIGURE_3_TEXT],
        commands={"launch": f"python experiments/data_fractions.py {flags}",
                  "resume": f"python experiments/data_fractions.py {flags} (same flags)",
                  "report": "sptune report <experiment dir>"})


if __name__ == "__main__":
    sys.exit(main(EXPERIMENT, build, __doc__, extra=add_flags, selection_seeds=settings.MAIN_JOB_SELECTION_SEEDS))
