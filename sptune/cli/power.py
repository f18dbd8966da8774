"""`sptune power` and `sptune design`: plan the seeds of an architecture experiment before running them.

    sptune power docs/records/architectures-rotary-70-74 ... --effect 4 --seeds-planned 20   # from pilot runs
    sptune power --sd 10.3 --effect 4                                                         # from a stated SD
    sptune design runs/experiments/architectures-confirm --looks 4 --seeds-planned 20 --spending obrien-fleming

`power` prints, per endpoint, the per-seed SD of the paired difference, the power at the planned seeds for the
stated effect, the seeds that effect needs and the effect the planned seeds detect (sptune.experiment.pilots,
sptune.report.power). `design` declares a group-sequential design before the first look: it writes design.json into
the experiment directory (made if absent; the experiment's command line with --dir DIR then runs into it), or to
a path ending in .json, and prints its bounds (sptune.report.sequential). `sptune report` on that directory, or on its
pooled batches, then says at each look whether to continue or stop (sptune.experiment.looks). A separate
command rather than a flag of every experiment script: the design belongs to the confirmation as a whole, not
to one batch's command line, and it is written before any batch runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sptune.errors import UserError


def register(subparsers) -> None:
    text = ("seeds you can plan: per endpoint of an architecture experiment, the per-seed SD of the paired "
            "difference (from pilot runs or --sd), the power at --seeds-planned seeds for an --effect, the seeds "
            "that effect needs at --power, and the effect the planned seeds detect (no training)")
    p = subparsers.add_parser("power", help=text, description=text)
    p.add_argument("pilot_dirs", metavar="dir", nargs="*",
                   help="experiment directories or kept records of one experiment (pooled as `sptune report` does)")
    p.add_argument("--sd", type=float, nargs="+", default=[], metavar="POINTS",
                   help="a per-seed SD of the paired difference, in points, instead of (or beside) pilot runs")
    p.add_argument("--effect", type=float, metavar="POINTS", help="the difference to detect, in points (e.g. 4)")
    p.add_argument("--power", type=float, default=0.8, help="the power wanted (default 0.8)")
    p.add_argument("--seeds-planned", type=int, metavar="N",
                   help="the seeds you plan to run (default: each endpoint's pilot seeds)")
    p.add_argument("--alpha", type=float, default=0.05, help="two-sided significance level (default 0.05)")
    p.add_argument("--endpoint", help="one endpoint only, by name or its start (e.g. 'gap change')")
    p.set_defaults(func=cmd_power)

    text = ("declare a group-sequential design for an architecture experiment before its first look: K looks "
            "over the planned seeds, alpha spending, optional futility; writes DIR/design.json")
    d = subparsers.add_parser("design", help=text, description=text)
    d.add_argument("target", metavar="dir", help="the experiment directory (made if absent), or a path ending in .json")
    d.add_argument("--looks", type=int, required=True, help="number of looks K, equally spaced in seeds")
    d.add_argument("--seeds-planned", type=int, required=True, metavar="N", help="seeds at the last look")
    d.add_argument("--spending", default="obrien-fleming", help="alpha spending: obrien-fleming (default) or pocock")
    d.add_argument("--alpha", type=float, default=0.05, help="two-sided significance level (default 0.05)")
    d.add_argument("--futility", type=float, nargs="?", const=0.1, metavar="CP",
                   help="non-binding futility: stop when the conditional power under the current trend falls "
                        "below CP (default 0.1 when given without a value)")
    d.add_argument("--endpoint", default="gap change", help="the primary endpoint (default: 'gap change')")
    d.add_argument("--replace", action="store_true", help="overwrite a different design already declared there")
    d.set_defaults(func=cmd_design)


def cmd_power(args: argparse.Namespace) -> int:
    from sptune.experiment import pilots

    if not args.pilot_dirs and not args.sd:
        raise UserError("sptune power needs pilot runs (experiment directories or kept records) or --sd POINTS")
    question = pilots.Question(args.effect, args.power, args.seeds_planned, args.alpha)
    pilot = pilots.read(args.pilot_dirs) if args.pilot_dirs else None
    print("\n".join(pilots.power_lines(question, pilot, args.sd, args.endpoint)))
    return 0


def cmd_design(args: argparse.Namespace) -> int:
    from sptune.report import sequential

    design = sequential.Design(args.looks, args.seeds_planned, args.spending, args.alpha, args.futility, args.endpoint)
    target = Path(args.target)
    path = target if target.suffix == ".json" else target / sequential.DESIGN_FILE
    if path.is_file() and not args.replace:
        if sequential.read_design(path).declared() != design.declared():
            raise UserError(f"{path} already declares another design; a design is fixed before the first look: "
                            "pass --replace only if no look has been taken")
    sequential.write_design(path, design)
    print("\n".join(design_table(design)))
    print(f"file:  {path}")
    return 0


def design_table(design) -> list[str]:
    """The declared looks: seeds, alpha spent by then, the z bound and the critical t at n - 1 dof."""
    from sptune.report import sequential

    rows = [f"| {k} | {n} | {sequential.spent(n / design.seeds, design.alpha, design.spending):.5f} | {z:.3f} | "
            f"{t:.3f} ({n - 1} dof) |"
            for k, (n, z, t) in enumerate(zip(design.look_sizes(), design.z_bounds(), design.t_bounds()), 1)]
    futility = "none" if design.futility is None else (
        f"conditional power under the current trend below {design.futility:g} (non-binding)")
    return [f"Group-sequential design: {design.looks} looks, two-sided alpha {design.alpha:g}, {design.spending}-type "
            f"spending (Lan & DeMets), endpoint '{design.endpoint}', futility: {futility}", "",
            "| look | seeds | alpha spent | z bound | critical t |", "|---|---|---|---|---|", *rows]
