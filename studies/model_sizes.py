"""SPT across model sizes on Image: Transformer + Rotary and S4, scratch vs masked SPT (Appendix E, Table 9).

    launch:  python studies/model_sizes.py                    # 100K ... 10M parameters, Ray Tune + Optuna
    resume:  python studies/model_sizes.py                    # the same command; finished cells are skipped
    report:  sptune report runs/experiments/model_sizes
    smoke:   python studies/model_sizes.py --smoke-test       # 25 s on a 2-core CPU (measured)
    GPUs:    add --gpus-per-worker 1 --max-concurrent <GPUs>

Scientific axis: parameter budget {100K, 300K, 1M, 3M, 10M} x model (Transformer + Rotary, S4) x
scratch / masked SPT. Each budget is met within 10% by sptune.experiments.sizing: width (and depth when the
paper's depth 6 cannot land inside the tolerance) of the Image models of Tables 4 and 2, counted on the
task model the trainer builds. Seeds are an axis (--seeds, default 0 1 2).
Nuisance: lr x batch size per stage, searched with Ray Tune + Optuna over the Image recipes' grids
(sptune.experiments.paper.RECIPES: Appendix C.1 grid, the Table 4 rotary row / Table 5 S4 values first; S4
from scratch: Gu et al.'s setting first).
Fixed: everything of the Image models but their size (rotary positions and mean pooling for the
Transformer, LayerNorm / dropout 0.1 for S4), 50% masking, L1 pretraining loss, S4-config epochs.

Smoke test: listops-mini stands in for Image, budgets 5K / 10K / 20K parameters stand in for the paper's
three smallest (1-2 layers), 15 steps per stage, two seeds (so entries show a std), no search.
"""

from __future__ import annotations

import sys

from sptune.experiments import paper, settings, sizing
from sptune.experiments_cli import main
from sptune.experiments.plan import Cell, Plan

EXPERIMENT = "model_sizes"
SMOKE_BUDGETS = (5_000, 10_000, 20_000)
SMOKE_TASK = "listops-mini"  # the cheapest embedded task: this smoke test runs 12 cells
DEPTHS = (6, 4, 8, 5, 7, 3, 2)  # the paper's Image depth first (Tables 4 and S4 configs: 6 layers)
MODELS = [  # (Image recipe variant (sptune.experiments.paper.RECIPES), display name, arm -> Table 9 row)
    ("rotary", "Transformer + Rotary", {"scratch": "Transformer+Rotary", "masked": "Transformer+Rotary + Masked SPT"}),
    ("s4", "S4", {"scratch": "S4", "masked": "S4 + Masked SPT"}),
]


def size_label(budget: int) -> str:
    return f"{budget / 1e6:g}M" if budget >= 1_000_000 else f"{budget / 1e3:g}K"


def build(args) -> Plan:
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
        commands={"launch": "python studies/model_sizes.py", "resume": "python studies/model_sizes.py (same flags)",
                  "report": "sptune report <experiment dir>"})


if __name__ == "__main__":
    sys.exit(main(EXPERIMENT, build, __doc__))
