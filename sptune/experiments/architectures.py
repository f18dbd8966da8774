"""The architecture result of an experiment (paper Table 1 read as a 2 x 2): per architecture the scratch
and SPT test numbers, the SPT gain, the architecture gap under each initialisation, and trivial
baselines on the same splits.

The paper's finding (§3.1, Table 1): the gap between Transformers and S4 trained from scratch on LRA
shrinks sharply once both are self-pretrained on the task's own data. Here:

    gap_scratch = SSM - Transformer, both from scratch
    gap_spt     = SSM - Transformer, both pretrained -> finetuned
    gain(arch)  = SPT - scratch, paired by seed (sptune.stats)

Gaps are differences of seed means (the architectures' seeds are not paired runs). Baselines
(sptune.baselines: majority class, 1-NN Euclidean, logistic regression on raw inputs) are fit on the
task's train split and scored on its val and test splits, those the models trained and selected on.
"""

from __future__ import annotations

from typing import Any

from sptune import baselines, registry, stats
from sptune.experiments.plan import Plan
from sptune.tune import boundary


def lines(arm_rows: list[dict[str, Any]], layout: dict[str, Any]) -> list[str]:
    """The section's lines (markdown; also printed at the end of the script)."""
    ssm, transformer = layout["architectures"]["ssm"], layout["architectures"]["transformer"]
    done = [a for a in arm_rows if a["test"] is not None]
    means = {(a["model"], a["arm"]): stats.mean_std([b["test"] for b in done
                                                     if (b["model"], b["arm"]) == (a["model"], a["arm"])])[0]
             for a in done}
    out = ["## Architecture result (test accuracy, %)", ""]
    for model in (transformer, ssm):
        scratch, spt = means.get((model, "scratch")), means.get((model, "masked"))
        out.append(f"- {model}: scratch {_pct(scratch)}, SPT {_pct(spt)}, SPT gain {gain_text(done, model)}")
    for arm, name in (("scratch", "scratch"), ("masked", "SPT")):
        a, b = means.get((ssm, arm)), means.get((transformer, arm))
        gap = None if a is None or b is None else 100 * (a - b)
        out.append(f"- architecture gap ({ssm} - {transformer}) under {name}: "
                   + ("—" if gap is None else f"{gap:+.2f} points"))
    task = layout.get("baselines_task")
    if task:
        rows = baselines.evaluate(registry.get_task(task).load())
        out += ["", f"Trivial baselines on the same {task} splits (fit on train):", "", "```",
                baselines.format_rows(rows), "```"]
    return out + [""]


def boundary_lines(plan: Plan, rows: list[dict[str, Any]]) -> list[str]:
    """The boundary check (sptune.tune.boundary) of every cell: a selected lr at the edge of its grid."""
    out = []
    for cell in plan.cells:
        selected = {r["stage"]: r for r in rows if r["cell"] == cell.key and r.get("selected")}
        out += [f"{cell.key}: {line}" for line in boundary.warnings(selected, {"stages": cell.space or {}})]
    return out + ([""] if out else [])


def gain_text(done: list[dict[str, Any]], model: str) -> str:
    """SPT - scratch of one architecture, paired by seed, in points with its interval."""
    scratch = {a.get("seed"): a["test"] for a in done if a["model"] == model and a["arm"] == "scratch"}
    pairs = [(a["test"], scratch[a.get("seed")]) for a in done
             if a["model"] == model and a["arm"] == "masked" and a.get("seed") in scratch]
    if not pairs:
        return "—"
    return stats.format_paired(stats.paired_t([p for p, _ in pairs], [s for _, s in pairs]), 100.0)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f}"
