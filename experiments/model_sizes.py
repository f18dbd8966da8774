"""SPT across model sizes (paper Appendix E, Table 9): Transformer + Rotary and S4, scratch vs masked SPT.

    launch:  python experiments/model_sizes.py                 # Image, 100K ... 10M parameters, Ray Tune + Optuna
    resume:  python experiments/model_sizes.py                 # the same command; finished cells are skipped
    report:  sptune report runs/experiments/model_sizes
    smoke:   python experiments/model_sizes.py --smoke-test    # listops-mini, 5K / 10K / 20K parameters, no search
    CPU:     python experiments/model_sizes.py --cpu           # the main job's task and models at 20K / 80K / 320K, seeds 6-15
             python experiments/model_sizes.py --cpu --plan    # its budget first: trials, FLOPs, device-hours
    GPUs:    add --gpus-per-worker 1 --max-concurrent <GPUs>  (--cpu on one GPU: --trials-per-gpu 16)

Varies: parameter budget (met within 10% by width, and depth where needed) x model x scratch / SPT x seed. Fixed: the
rest of the Image models; --cpu: the main job's setting, pretraining up to 1000 steps (a budget, not a plateau).
"""

from __future__ import annotations

import sys

from sptune.cli.experiment import main
from sptune.experiment import paper, settings, sizing
from sptune.experiment.plan import Cell, Plan

EXPERIMENT = "model_sizes"
SMOKE_BUDGETS = (5_000, 10_000, 20_000)
SMOKE_TASK = "listops-mini"  # the cheapest embedded task: this smoke test runs 12 cells
DEPTHS = (6, 4, 8, 5, 7, 3, 2)  # the paper's Image depth first (Tables 4 and S4 configs: 6 layers)
CPU_BUDGETS = (20_000, 80_000, 320_000)  # around the main job's 68K / 84K models, x4 each way
CPU_DEPTHS = (2, 1, 3, 4)  # the main job's depth first
MODELS = [  # (Image recipe variant (sptune.experiment.paper.RECIPES), display name, arm -> Table 9 row)
    ("rotary", "Transformer + Rotary", {"scratch": "Transformer+Rotary", "masked": "Transformer+Rotary + Masked SPT"}),
    ("s4", "S4", {"scratch": "S4", "masked": "S4 + Masked SPT"}),
]


def size_label(budget: int) -> str:
    return f"{budget / 1e6:g}M" if budget >= 1_000_000 else f"{budget / 1e3:g}K"


def add_flags(parser) -> None:
    parser.add_argument("--cpu", action="store_true",
                        help="the experiment at CPU scale on the main job's task (UCR OSULeaf) and models: 20K / 80K / "
                             "320K parameters, pretraining up to 1000 steps (a budget, not a plateau), seeds 6-15")


def build(args) -> Plan:
    if getattr(args, "cpu", False):
        return build_cpu(args)
    seeds = args.seeds or ([0, 1] if args.smoke_test else [0, 1, 2])
    task = SMOKE_TASK if args.smoke_test else "image"
    budgets = SMOKE_BUDGETS if args.smoke_test else paper.MODEL_SIZES
    cells = []
    for key, name, rows in MODELS:
        recipe = settings.recipe("image", key)
        model = settings.smoke_model(recipe.model) if args.smoke_test else settings.real(recipe)
        base = [f"task.name={task}", *model]
        for budget, paper_size in zip(budgets, paper.MODEL_SIZES):
            shape = sizing.fit(base, budget, depths=(1, 2) if args.smoke_test else DEPTHS)
            column = size_label(budget) + (f" (for {size_label(paper_size)})" if args.smoke_test else "")
            run = base + shape.overrides()
            for seed in seeds:
                cells.append(Cell(
                    key=f"{task}-{key}-{size_label(budget)}-s{seed}",
                    labels={"task": task, "paper_task": "image", "model": name, "budget": budget, "seed": seed,
                            "column": column, "d_model": shape.d_model, "n_layers": shape.n_layers},
                    overrides=tuple(run + ["objective.kind=masked", f"run.seed={seed}"]),
                    space=settings.smoke_space() if args.smoke_test else recipe.space(),
                    paper={arm: paper.TABLE_9.cite(row, size_label(paper_size)) for arm, row in rows.items()}))
    return Plan(
        experiment=EXPERIMENT, title="SPT across model sizes on Image (Appendix E, Table 9)",
        axis="parameter budget (within 10%) x model (Transformer + Rotary, S4) x scratch / masked SPT; seeds",
        nuisance="lr x batch size per stage (the Image recipes' grids: Table 4 rotary row / Table 5 S4 first)",
        fixed="the Image models of Table 4 / the S4 config except width and depth; mask ratio 50%, L1 loss",
        layout={"kind": "grid", "col": "column", "row_title": "model", "plots": ["sizes"],
                "heading": "Test accuracy (%) per parameter budget", "paper_on_plot": not args.smoke_test,
                "plot_title": f"{settings.column(task, 'image', args.smoke_test)}: test accuracy vs parameters"},
        cells=cells,
        notes=["Shapes (d_model x layers) per budget are in summary.csv; parameter counts are the task model's.",
               "Smoke: the paper's Image numbers are printed for orientation only (different task and sizes)."
               if args.smoke_test else "Dotted lines on the plot: the paper's Table 9 at its nominal sizes."],
        commands={"launch": "python experiments/model_sizes.py", "resume": "python experiments/model_sizes.py (same flags)",
                  "report": "sptune report <experiment dir>"})


def build_cpu(args) -> Plan:
    """The main job's task and models at three sizes (see the header)."""
    seeds = args.seeds or list(settings.SCALING_SEEDS)
    cells = []
    for model, (_, display) in settings.CPU_MODELS.items():  # the Transformer first, as the main job
        base = settings.cpu_overrides(model) + settings.SCALING_PRETRAINING
        for budget in CPU_BUDGETS:
            shape = sizing.fit(base, budget, depths=CPU_DEPTHS)
            for seed in seeds:
                cells.append(Cell(
                    key=f"{settings.CPU_TASK}-{model}-{size_label(budget)}-s{seed}",
                    labels={"task": settings.CPU_TASK, "model": display, "budget": budget, "seed": seed,
                            "column": size_label(budget), "d_model": shape.d_model, "n_layers": shape.n_layers,
                            "role": settings.cpu_role(seed, settings.MAIN_JOB_SELECTION_SEEDS)},
                    overrides=tuple(base + shape.overrides() + [f"run.seed={seed}"]),
                    space=settings.cpu_space(model)))
    return Plan(
        experiment=EXPERIMENT, title="SPT across model sizes at CPU scale: UCR OSULeaf (Appendix E, Table 9)",
        axis="parameter budget {20K, 80K, 320K} (within 10%) x model (Transformer, S4D) x scratch / masked SPT; seeds",
        nuisance="lr per stage: the main job's grids, extended past an edge (search_spaces/ucr-osuleaf/)",
        fixed="configs/ucr_osuleaf_{transformer,s4}.yaml but width and depth; pretraining up to 1000 steps, finetuning "
              "and scratch up to 400, each stopped after 100 steps without a validation gain",
        layout={"kind": "grid", "col": "column", "row_title": "model", "plots": ["sizes"], "spt_gains": True,
                "heading": "Test accuracy (%) per parameter budget", "plot_title": "OSULeaf: test accuracy vs parameters"},
        cells=cells,
        notes=["Shapes (d_model x layers) per budget are in summary.csv; parameter counts are the task model's."],
        commands={"launch": "python experiments/model_sizes.py --cpu",
                  "resume": "python experiments/model_sizes.py --cpu (same flags)", "report": "sptune report <experiment dir>"})


if __name__ == "__main__":
    sys.exit(main(EXPERIMENT, build, __doc__, extra=add_flags, selection_seeds=settings.MAIN_JOB_SELECTION_SEEDS))
