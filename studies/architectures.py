"""The architecture result at CPU scale (paper Table 1, §3.1): a Transformer and an SSM, each trained from
scratch and with masked SPT, on a real task, with trivial baselines on the same splits.

    launch:  python studies/architectures.py                  # UCR OSULeaf, seed 0: 800 s on 2 CPU cores (measured)
    resume:  python studies/architectures.py                  # the same command: finished cells are skipped
    report:  sptune report runs/experiments/architectures     # table + architecture section again, no training
    confirm: python studies/architectures.py --fresh-seeds 5 --compute-tied --dir runs/experiments/architectures-confirm
             # seeds 6-10, which chose nothing (0-5 chose the grids and the budget), plus scratch given SPT's total
             # steps (paper App. D), searched on the scratch grid: 69 min on 2 CPU cores when that arm ran one
             # lr (measured); its grid adds 2 (S4D) and 3 (Transformer) 600-step trials per seed
    declared: python studies/architectures.py --seeds 50 51 52 53 54 --compute-tied --dir runs/experiments/architectures-confirm-50
             # the README's declared confirmation (seeds 50-69, primary endpoint the gap change), in batches of
             # seeds: seeds 55-59 took 104 min on 2 CPU cores, two trials at once (3.4 device-hours with their
             # grid extensions and searched compute-tied arms; seeds 60-64 took 7.1 on a slower day of the same
             # machine). A batch extends its directory (--seeds 50 ... 59) or runs in its own (--seeds 60 ... 64
             # --dir ...-60); each keeps plan.json + summary.csv in docs/records/, and
             # `sptune report docs/records/architectures-confirm-50-59 docs/records/architectures-confirm-60-64`
             # pools them
    rotary:  python studies/architectures.py --positions rotary --seeds 70 71 72 73 74 --compute-tied --dir runs/experiments/architectures-rotary-70
             # the README's second declared confirmation (seeds 70-89, the gap change), the Transformer with rotary
             # positions (the paper's), in batches of 5 seeds as above
    smoke:   python studies/architectures.py --smoke-test     # 10 steps a stage, no search (plain backend)

Scientific axis: architecture (Transformer, S4D = S4 in diagonal mode, model s4d-legs) x initialisation
(scratch, masked SPT on the task's own training series). The report prints the four test accuracies,
the SPT gain per architecture (paired by seed), the architecture gap SSM - Transformer under scratch and
under SPT (the paper: the gap shrinks with SPT), and majority / 1-NN / logistic baselines on the same
train / val / test splits.
Nuisance, searched per stage with Ray Tune + Optuna: the lr grid of search_spaces/ucr-osuleaf/
{transformer,s4d-legs}.yaml (finetune and scratch: the SAME lr grid, the SAME step budget; selection on
validation only, test read once at each selected run's best-validation checkpoint).
Fixed: configs/ucr_osuleaf_{transformer,s4}.yaml (same backbone: 2 blocks, d_model 64, feed-forward 128,
mean pooling; the sequence layer is the architecture), batch 32, 200 pretraining steps, finetuning and scratch
up to 400 steps with early stopping after 100 steps without a validation gain, 25% masking with L1
(continuous input, §3.7). Settings were chosen on validation only: docs/main-job-selection.md.
"""

from __future__ import annotations

import sys

from sptune.experiments import evaluate, settings
from sptune.experiments.plan import Plan
from sptune.experiments_cli import main

EXPERIMENT = "architectures"
TASK = settings.CPU_TASK
POSITIONS = ("sinusoidal", "rotary")  # the Transformer's; the first is configs/ucr_osuleaf_transformer.yaml's
# The compute-tied scratch arm (--compute-tied, paper App. D) is a scratch cell given pretraining + finetuning's
# steps, searched over the same lr grid as the other scratch arm and stopped by the same rule (the configs'
# patience): a fair baseline, not one that kept another budget's lr.


def add_flags(parser) -> None:
    parser.add_argument("--compute-tied", action="store_true",
                        help="also train scratch for SPT's total steps (pretraining + finetuning), searched over the "
                             "scratch lr grid with the same early stopping, per architecture and seed (paper "
                             "Appendix D)")
    parser.add_argument("--positions", choices=POSITIONS, default=POSITIONS[0],
                        help="the Transformer's position encoding (default sinusoidal, the main job's). rotary: the "
                             "paper's, the candidate that selection seeds 1-5 chose (docs/main-job-selection.md, "
                             "probe 12) for the README's second declared confirmation")


def build(args) -> Plan:
    """`sptune evaluate --model s4d-legs --baselines transformer --task ucr-osuleaf`, with this experiment's text."""
    positions = getattr(args, "positions", POSITIONS[0])
    per_model = {"transformer": [f"model.pos_encoding={positions}"]} if positions != POSITIONS[0] else {}
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
    plan.commands = {"launch": "python studies/architectures.py", "resume": "python studies/architectures.py",
                     "report": "sptune report <experiment dir>"}
    return plan


if __name__ == "__main__":
    sys.exit(main(EXPERIMENT, build, __doc__, extra=add_flags, selection_seeds=settings.MAIN_JOB_SELECTION_SEEDS))
