"""The architecture result at CPU scale (paper Table 1): a Transformer (rotary positions, the paper's) and S4D, each
from scratch and with masked SPT, on UCR OSULeaf, beside majority / 1-NN / logistic baselines. Settings chosen on validation: docs/main-job-selection.md.

    launch:  python experiments/architectures.py               # seed 0
    resume:  python experiments/architectures.py               # the same command: finished cells are skipped
    report:  sptune report runs/experiments/architectures     # tables and plots again, no training
    confirm: python experiments/architectures.py --fresh-seeds 5 --compute-tied --dir runs/experiments/architectures-confirm
    batches: python experiments/architectures.py --positions rotary --seeds 70 71 72 73 74 --compute-tied --dir runs/experiments/architectures-rotary-70
             python experiments/architectures.py --positions sinusoidal --seeds 50 51 52 53 54 --compute-tied --dir runs/experiments/architectures-confirm-50
    pool:    sptune report docs/records/architectures-confirm-50-59 docs/records/architectures-confirm-60-64 docs/records/architectures-confirm-65-69
    smoke:   python experiments/architectures.py --smoke-test  # 10 steps a stage, no search (plain backend)

Varies: architecture x initialisation (scratch, masked SPT) x seed; --compute-tied adds scratch for SPT's 600 steps.
Fixed: configs/ucr_osuleaf_{transformer,s4}.yaml and the lr grids of search_spaces/ucr-osuleaf/ (extended past an edge).
"""

from __future__ import annotations

import sys

from sptune.cli.experiment import main
from sptune.experiment import evaluate, settings
from sptune.experiment.plan import Plan

EXPERIMENT = "architectures"
TASK = settings.CPU_TASK
POSITIONS = ("rotary", "sinusoidal")  # the Transformer's: the paper's (the default), configs/ucr_osuleaf_transformer.yaml's
# The compute-tied scratch arm (--compute-tied, paper App. D) is a scratch cell given pretraining + finetuning's
# steps, searched over the same lr grid as the other scratch arm and stopped by the same rule (the configs'
# patience): a fair baseline, not one that kept another budget's lr.


def add_flags(parser) -> None:
    parser.add_argument("--compute-tied", action="store_true",
                        help="also train scratch for SPT's total steps (pretraining + finetuning), searched over the "
                             "scratch lr grid with the same early stopping, per architecture and seed (paper "
                             "Appendix D)")
    parser.add_argument("--positions", choices=POSITIONS, default=POSITIONS[0],
                        help="the Transformer's position encoding: rotary (default), the paper's; sinusoidal, the "
                             "one of the first declared confirmation (seeds 50-69)")


def build(args) -> Plan:
    """`sptune evaluate --model s4d-legs --baselines transformer --task ucr-osuleaf`, with this experiment's text."""
    positions = getattr(args, "positions", POSITIONS[0])
    per_model = {"transformer": []} if positions == "sinusoidal" else {}  # the config's own positions
    # --smoke-test: the plumbing only, 10 steps a stage at the grid's first point (plain backend)
    smoke = ["optim.max_steps=10", "optim.eval_every=5"] if args.smoke_test else []
    plan = evaluate.build_plan(
        "s4d-legs", TASK, baselines=["transformer"], seeds=args.seeds, overrides=smoke,
        compute_tied=getattr(args, "compute_tied", False), per_model=per_model,
        selection_seeds=settings.MAIN_JOB_SELECTION_SEEDS,
        title="Architecture result at CPU scale: Transformer vs S4D, scratch vs SPT (Table 1)",
        fixed=f"configs/ucr_osuleaf_{{transformer,s4}}.yaml: the Transformer's {positions} positions, backbone size, "
              "batch 32, 200 pretraining steps, 400 finetuning / scratch steps with early stopping (patience 100), "
              "25% masking with L1")
    plan.experiment = EXPERIMENT
    plan.axis = "architecture (Transformer, S4D) x initialisation (scratch, masked SPT); seeds"
    plan.nuisance = "lr per stage (finetune and scratch: the same grid and step budget; S4D 3 values, Transformer 4)"
    plan.layout.update({"heading": "Test accuracy (%), UCR OSULeaf",
                        "plot_title": "OSULeaf test accuracy: scratch (solid), masked SPT (hatched)"})
    for cell in plan.cells:
        cell.labels["column"] = "OSULeaf"
    plan.preamble = []  # the grids are this experiment's own files, named in its header
    plan.notes = ["Test = the UCR TEST split (242 series); val = a stratified 20% of TRAIN (41 series), train = the "
                  "other 159. The archive's 1-NN Euclidean on the full TRAIN scores 52.1% on TEST."]
    plan.commands = {"launch": "python experiments/architectures.py", "resume": "python experiments/architectures.py",
                     "report": "sptune report <experiment dir>"}
    return plan


if __name__ == "__main__":
    sys.exit(main(EXPERIMENT, build, __doc__, extra=add_flags, selection_seeds=settings.MAIN_JOB_SELECTION_SEEDS))
