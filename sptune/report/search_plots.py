"""Optuna's standard plots of each stage's search, as PNG, from the study's journal (files.OPTUNA_JOURNAL):

    plots/<stage>-history.png      optimization history (validation metric per trial, best so far)
    plots/<stage>-importance.png   parameter importances (PED-ANOVA: numpy only), when >= 2 params vary
    plots/<stage>-slice.png        the metric against each searched param

Written at the end of `sptune study` / `resume` and by `sptune report <study dir>`.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend
import optuna  # noqa: E402
from optuna.trial import TrialState  # noqa: E402
from optuna.visualization import matplotlib as ovm  # noqa: E402

from sptune import files  # noqa: E402
from sptune.atomic import replacing  # noqa: E402
from sptune.config import STAGES  # noqa: E402
from sptune.search import journal  # noqa: E402

log = logging.getLogger("sptune.engine")

PLOTS_DIR = "plots"


def write(study_dir: str | Path) -> list[Path]:
    """Every plot that the stages' finished trials allow; returns the PNG paths."""
    study_dir = Path(study_dir)
    journal_path = study_dir / files.OPTUNA_JOURNAL
    if not journal_path.is_file():
        return []
    storage = journal.journal_storage(journal_path)
    names = {s.study_name for s in storage.get_all_studies()}
    paths = []
    for stage in STAGES:
        name = journal.optuna_study_name(study_dir, stage)
        if name not in names:
            continue
        study = optuna.load_study(study_name=name, storage=storage)
        complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if not complete:
            continue
        varying = sorted(k for k in complete[0].params if len({repr(t.params.get(k)) for t in complete}) > 1)
        figures = {"history": lambda: ovm.plot_optimization_history(study, target_name="validation metric"),
                   "slice": lambda: ovm.plot_slice(study, params=varying or None, target_name="validation metric")}
        if len(varying) >= 2:
            figures["importance"] = lambda: ovm.plot_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), params=varying)
        for kind, draw in figures.items():
            path = study_dir / PLOTS_DIR / f"{stage}-{kind}.png"
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # optuna.visualization.matplotlib is "experimental"
                    axes = draw()
            except (ValueError, RuntimeError) as exc:  # e.g. importances of trials that all scored the same
                log.warning("no %s plot for %s: %s", kind, stage, exc)
                continue
            figure = (axes.flat[0] if hasattr(axes, "flat") else axes).figure
            figure.suptitle(name, fontsize=9)
            path.parent.mkdir(parents=True, exist_ok=True)
            with replacing(path) as tmp:
                figure.savefig(tmp, format="png", bbox_inches="tight")
            plt.close(figure)
            paths.append(path)
    return paths
