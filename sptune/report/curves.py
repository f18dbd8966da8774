"""Learning curves of a study's selected finetuning and scratch trials: validation metric vs step and vs
cumulative training FLOPs.

    plots/learning-curves.png   (left) vs step; (right) vs training FLOPs, where SPT's curve starts at
                                the FLOPs of the pretraining run it finetuned from (App. D: compare SPT
                                and scratch at equal compute, pretraining included)

Data: each selected run's evals (result.json `history`), and its training FLOPs per step
(result.json train_flops / steps, sptune.flops). Written at the end of `sptune study` / `resume` and
by `sptune report <study dir>`.
"""

from __future__ import annotations

from pathlib import Path

from sptune.atomic import replacing
from sptune.records import results
from sptune.records.trial_rows import TrialRow
from sptune.report.search_plots import PLOTS_DIR

CURVES_PNG = "learning-curves.png"
ARMS = (("scratch", "scratch", "tab:gray"), ("finetune", "SPT (pretrain → finetune)", "tab:blue"))


def curve_points(rows: list[TrialRow]) -> dict[str, dict[str, list[float]]]:
    """Per stage (finetune, scratch) of the selected trial: steps, validation metrics and cumulative
    training FLOPs; finetuning's FLOPs start at its pretraining run's training FLOPs."""
    out = {}
    for stage, _, _ in ARMS:
        row = next((r for r in rows if r["stage"] == stage and r.get("selected")), None)
        result = results.run_result(row)
        if result is None or not result.get("history") or not result.get("steps"):
            continue
        per_step = (result.get("train_flops") or 0.0) / result["steps"]
        offset = pretraining_flops(rows, row) if stage == "finetune" else 0.0
        history = result["history"]
        out[stage] = {"step": [h["step"] for h in history], "val": [h["val_metric"] for h in history],
                      "flops": [offset + h["step"] * per_step for h in history], "offset": [offset]}
    return out


def pretraining_flops(rows: list[TrialRow], finetune_row: TrialRow) -> float:
    """Training FLOPs of the pretraining trial a finetuning trial started from (its whole run: the best
    checkpoint is only known once the run has finished)."""
    source = finetune_row.get("init_trial")
    pre = next((r for r in rows if r["stage"] == "pretrain" and r["trial_id"] == source), None)
    pre = pre or next((r for r in rows if r["stage"] == "pretrain" and r.get("selected")), None)
    return float((pre or {}).get("train_flops") or 0.0)


def write(study_dir: str | Path, rows: list[TrialRow]) -> Path | None:
    """plots/learning-curves.png of the study (None when neither arm has a finished selected trial)."""
    points = curve_points(rows)
    if not points:
        return None
    return save_panels(Path(study_dir) / PLOTS_DIR / CURVES_PNG, [(f"{Path(study_dir).name}: selected trials", points)],
                       metric_of(rows))


def metric_of(rows: list[TrialRow]) -> str:
    """The metric of the curves: the selected finetuning or scratch trials' (not pretraining's)."""
    return next((r.get("metric") for r in rows if r.get("selected") and r.get("metric")
                 and r.get("stage") in ("finetune", "scratch")), "metric")


# Curves that are not a study's own stages: an experiment adds them to a panel (e.g. scratch trained for
# SPT's total steps, sptune.report.architectures).
EXTRA_ARMS = {"tied": ("scratch, SPT's total steps", "tab:orange")}


def save_panels(path: Path, panels: list[tuple[str, dict[str, dict[str, list[float]]]]], metric: str) -> Path:
    """One row of two panels (vs step, vs training FLOPs) per (title, curve_points) entry."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(panels), 2, figsize=(11, 4 * len(panels)), squeeze=False)
    styles = {stage: (label, color) for stage, label, color in ARMS} | EXTRA_ARMS
    for (title, points), (by_step, by_flops) in zip(panels, axes):
        for stage, (label, color) in styles.items():
            if stage in points:
                p = points[stage]
                by_step.plot(p["step"], p["val"], "-o", ms=3, color=color, label=label)
                by_flops.plot(p["flops"], p["val"], "-o", ms=3, color=color, label=label)
        if "finetune" in points and points["finetune"]["offset"][0] > 0:
            by_flops.axvline(points["finetune"]["offset"][0], color="tab:blue", ls=":", lw=1,
                             label="end of pretraining")
        by_step.set_xlabel("step (of the stage)")
        by_flops.set_xlabel("cumulative training FLOPs (SPT: pretraining included)")
        for ax in (by_step, by_flops):
            ax.set_ylabel(f"validation {metric}")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        by_step.set_title(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with replacing(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
