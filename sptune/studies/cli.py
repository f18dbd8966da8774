"""`sptune report <study dir>`: rebuild a study's table, CSVs and plots from its run directories.

    sptune report runs/studies/lra_table                   # a paper study (plan.json): table.md, CSVs, plots
    sptune report runs/study-listops_mini_transformer      # a `sptune study` (study.json): table, results.csv,
                                                           # Optuna's plots of each phase's search (plots/)
    sptune report runs/seeds-shapes_tiny_transformer --plot docs/seeds-shapes-tiny.png   # a `study --seeds` dir

Nothing is trained: the report reads plan.json and every cell's result files (a study script
writes the same report at its end; this regenerates it, e.g. after a resume or a change of layout),
or a `sptune study` directory's run directories and Optuna journal.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    report = subparsers.add_parser(
        "report", help="rebuild a study's table.md, results.csv and PNG plots from its runs (no training)",
        description="Rebuild table.md, results.csv, summary.csv and the PNG plots of a study directory "
                    "written by a script in studies/; for a `sptune study` directory: its table, results.csv "
                    "and Optuna's plots of each phase (optimization history, parameter importances, slice); for "
                    "a `sptune study --seeds` directory: the paired SPT - scratch table and its plot.")
    report.add_argument("study_dir", help="the study directory (holds plan.json, study.json, or seeds.json)")
    report.add_argument("--plot", metavar="PNG", help="seeds study: also write its plot here (e.g. the README's "
                                                      "docs/seeds-shapes-tiny.png)")
    report.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from sptune import api, files, seeds

    if seeds.is_seeds_dir(args.study_dir):  # `sptune study --seeds ...`: the paired summary and its plot
        out = seeds.report(args.study_dir, plot_path=args.plot)
        print(out["text"])
        print(f"table: {out['table']}\nper seed: {out['csv']}\nplot:  {out['plot']}")
        return 0
    from sptune.studies import report

    if (Path(args.study_dir) / files.STUDY).is_file():
        table, pngs = api.report(args.study_dir)
        print(table)
        for png in pngs:
            print(f"plot:  {png}")
        return 0

    paths = report.write(args.study_dir)
    print(f"table: {paths['table']}")
    print(f"trials: {paths['results']}")
    for png in paths["plots"]:
        print(f"plot:  {png}")
    return 0
