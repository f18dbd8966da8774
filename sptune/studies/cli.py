"""`sptune report <study dir>`: rebuild a study's table, CSVs and plots from its run directories.

    sptune report runs/studies/lra_table                   # a paper study (plan.json): table.md, CSVs, plots
    sptune report runs/study-listops_mini_transformer      # a `sptune study` (study.json): table, results.csv,
                                                           # Optuna's plots of each phase's search (plots/)

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
                    "and Optuna's plots of each phase (optimization history, parameter importances, slice).")
    report.add_argument("study_dir", help="the study directory (holds plan.json or study.json)")
    report.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from sptune import api, results
    from sptune.studies import report

    if (Path(args.study_dir) / results.STUDY_FILE).is_file():
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
