"""SPT on other modalities (paper §3.7, Table 3; Appendix C.3): Speech Commands, sCIFAR, BIDMC.

    launch:  python experiments/modalities.py                  # needs the data: `sptune data list`
    resume:  python experiments/modalities.py                  # the same command; finished cells are skipped
    report:  sptune report runs/experiments/modalities
    smoke:   python experiments/modalities.py --smoke-test     # listops-mini and pathfinder-tiny stand in; no BIDMC
    GPUs:    add --gpus-per-worker 1 --max-concurrent <GPUs>

Varies: task (SC causal, SC bidirectional, sCIFAR, BIDMC HR / RR / SpO2) x model (S4, Transformer + Rotary) x scratch /
SPT x seed. Fixed: sptune.experiment.paper.RECIPES. Smoke-test numbers say nothing about these modalities.
"""

from __future__ import annotations

import sys

from sptune.cli.experiment import main
from sptune.experiment import paper, settings
from sptune.experiment.plan import Cell, Plan

EXPERIMENT = "modalities"
# Table 3 column -> (task, causal model?, embedded stand-in or None)
COLUMNS = {
    "SC-Causal": ("speech-commands", True, "listops-mini"),
    "SC-Bi.": ("speech-commands", False, "listops-mini"),
    "sCIFAR": ("scifar", False, "pathfinder-tiny"),
    "BIDMC-HR": ("bidmc-hr", False, None),
    "BIDMC-RR": ("bidmc-rr", False, None),
    "BIDMC-SpO2": ("bidmc-spo2", False, None),
}
# (key, recipe variants (bidirectional, causal), display name, Table 3 row)
MODELS = (("s4", ("s4", "s4-causal"), "S4", "S4"),
          ("transformer", ("rotary", "rotary-causal"), "Transformer + Rotary", "Transformers"))


def build(args) -> Plan:
    seeds = args.seeds or ([0] if args.smoke_test else [0, 1, 2])
    cells = []
    for model, variants, name, paper_row in MODELS:
        for column, (paper_task, causal, stand_in) in COLUMNS.items():
            if args.smoke_test and stand_in is None:
                continue
            task = stand_in if args.smoke_test else paper_task
            recipe = settings.recipe(paper_task, variants[causal])
            if args.smoke_test:
                run, space = settings.smoke_model(recipe.model), settings.smoke_space()
            else:
                run, space = settings.real(recipe), recipe.space()
            objective = "causal" if causal else "masked"
            for seed in seeds:
                cells.append(Cell(
                    key=f"{task}-{model}-{column.lower().rstrip('.')}-s{seed}",
                    labels={"task": task, "paper_task": paper_task, "model": name, "seed": seed,
                            "column": f"{task} (for {column})" if args.smoke_test else column},
                    overrides=tuple([f"task.name={task}", *run, f"objective.kind={objective}", f"run.seed={seed}"]),
                    space=space,
                    paper={"scratch": paper.TABLE_3.cite(paper_row, column),
                           objective: paper.TABLE_3.cite(f"{paper_row} + SPT", column)}))
    notes = ["SPT rows: causal SPT in the SC-Causal column, masked SPT elsewhere (Table 3's single '+ SPT' row).",
             "SC-Causal S4 uses LayerNorm instead of the S4 config's BatchNorm, whose sequence statistics would let "
             "a causal model see the future in training mode.",
             *paper.TABLE_3.notes]
    if args.smoke_test:
        notes.insert(0, "SMOKE TEST SUBSTITUTES: listops-mini for Speech Commands, pathfinder-tiny for sCIFAR; "
                        "BIDMC (regression, R²) has no embedded stand-in and is not run.")
    return Plan(
        experiment=EXPERIMENT, title="SPT on other modalities: Speech Commands, sCIFAR, BIDMC (§3.7, Table 3)",
        axis="task (SC causal / bidirectional, sCIFAR, BIDMC HR / RR / SpO2) x model (S4, Transformer + Rotary) x "
             "scratch / SPT; seeds",
        nuisance="lr x batch size per stage (Appendix C.1 grid, Tables 4 and 6 first)",
        fixed="mask ratios (C.3), L1 pretraining loss, model sizes (Table 4, S4 configs), epochs",
        layout={"kind": "grid", "col": "column", "row_title": "model", "merge_spt": True, "plots": ["bars"],
                "heading": "Test accuracy (%) / R² per task",
                "plot_title": "scratch (solid), masked SPT (hatched), causal SPT (dotted)"},
        cells=cells, notes=notes,
        commands={"launch": "python experiments/modalities.py", "resume": "python experiments/modalities.py (same flags)",
                  "report": "sptune report <experiment dir>"})


if __name__ == "__main__":
    sys.exit(main(EXPERIMENT, build, __doc__))
