"""An experiment's results -> results.csv (every trial), summary.csv (per table entry), table.md and PNG plots.

Everything is rebuilt from the cells' run directories (`sptune report <experiment dir>`), never from
memory, so a report after a crash or a resume shows exactly what ran.

Terms:
    trial   one stage run (plain backend: one per stage; tune backend: every trial of the search)
    arm     what a cell measures: "scratch" (scratch stage), "masked" / "causal" (SPT: the selected
            pretraining trial -> the selected finetuning trial), or "pretrain" (pretraining only)
    entry   the arms of one table position over seeds: mean ± std of the test metric (measured at the
            best-validation checkpoint, Appendix C.1), mean device-seconds and mean FLOPs (sptune.flops) of
            training and evaluation, where an SPT arm's cost includes its pretraining (so SPT and scratch
            compare at equal compute, App. D)
    gain    SPT vs scratch at one table position: the mean paired difference over seeds (pairs matched by
            seed) with its 95% Student-t interval, sptune.report.stats, as `sptune study/compare --seeds` report it
    data ×  (fraction experiment) how many times the labelled data scratch needs to match SPT's accuracy at
            that fraction, with its 95% interval (an inverted paired t-test over seeds, sptune.report.multiplier)
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from sptune import atomic, files
from sptune.atomic import write_text as write_text_atomic
from sptune.config import load as load_config
from sptune.experiment.backends import cell_columns, experiment_rows
from sptune.experiment.plan import Plan, load_plan
from sptune.records import results
from sptune.report import architectures, figures, multiplier, pairs, search_checks, stats

ARM_SUFFIX = {"scratch": "", "masked": " + Masked SPT", "causal": " + Causal SPT", "pretrain": " (pretrained)"}

def row_label(model: str, arm: str) -> str:
    return model + ARM_SUFFIX[arm]


# ----------------------------------------------------------------------------- arms
def arms(experiment_dir: Path, plan: Plan, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for cell in plan.cells:
        mine = [r for r in rows if r["cell"] == cell.key]
        selected = {r["stage"]: r for r in mine if r.get("selected")}
        chains: list[tuple[str, tuple[str, ...]]] = []
        if "scratch" in cell.stages:
            chains.append(("scratch", ("scratch",)))
        if "finetune" in cell.stages:
            chains.append((load_config(None, list(cell.overrides)).objective.kind, ("pretrain", "finetune")))
        elif "pretrain" in cell.stages:
            chains.append(("pretrain", ("pretrain",)))
        error = experiment_dir / files.CELLS / cell.key / files.CELL_ERROR
        for arm, chain in chains:
            runs = [selected.get(stage) for stage in chain]
            final = runs[-1] or {}
            ok = all(r is not None and r.get("status") == "completed" for r in runs)
            status = "completed" if ok else stage_status(mine, chain, error.is_file())
            row = cell.labels.get("row") or row_label(cell.labels["model"], arm)  # a label may name its own row
            if plan.layout.get("merge_spt") and arm in ("masked", "causal"):
                row = cell.labels["model"] + " + SPT"  # Table 3 has one SPT row per model
            out.append({**cell.labels, **(run_facts(final) if ok else {}),
                        "experiment": plan.experiment, "cell": cell.key, "arm": arm, "row": row,
                        "status": status, "metric": final.get("metric"),
                        "test": final.get("test_metric") if ok else None, "val": final.get("best_val") if ok else None,
                        "lr": final.get("optim.lr"),  # the selected lr of the arm's last stage (a searched grid)
                        "n_params": final.get("n_params"),
                        "device_seconds": sum(r["device_seconds"] for r in runs if r),
                        "search_device_seconds": sum(r["device_seconds"] for r in mine if r["stage"] in chain),
                        "flops": sum((r.get("train_flops") or 0.0) + (r.get("eval_flops") or 0.0) for r in runs if r),
                        "paper": cell.paper.get(arm), "run_dir": final.get("run_dir")})
    return out


def run_facts(row: dict[str, Any]) -> dict[str, Any]:
    """What the per-seed report reads from an arm's last run (its result.json): the best-validation step, the
    step budget, the last training loss and each test example's outcome ('0'/'1', accuracy tasks). The arm
    carries them, so summary.csv keeps them and a record reports them after its run directories are gone."""
    result = results.run_result(row) or {}
    found = pairs.convergence("run", result)
    return {"best_step": found["run_best_step"], "steps": found["run_steps"], "train_loss": found["run_train_loss"],
            "test_hits": result.get("test_hits")}


def stage_status(rows: list[dict[str, Any]], chain: tuple[str, ...], errored: bool) -> str:
    """Why an arm has no result: the first stage of its chain without a completed selected trial. A stage
    that a time budget or a stop left before its selection is `unfinished` (its best so far is no result)."""
    for stage in chain:
        mine = [r for r in rows if r["stage"] == stage]
        if any(r.get("selected") and r.get("status") == "completed" for r in mine):
            continue
        if not mine:
            return f"{stage} {'error' if errored else 'missing'}"
        if any(r.get("leading") or r.get("status") == "unfinished" for r in mine):
            return f"{stage} unfinished"
        return f"{stage} " + "/".join(sorted({str(r.get("status")) for r in mine}))
    return "missing"


def entries(arm_rows: list[dict[str, Any]], row_key: str, col_key: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Group arms (seeds) by (row, column): mean and std of the test metric, mean device-seconds and FLOPs."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for arm in arm_rows:
        groups.setdefault((str(arm[row_key]), str(arm[col_key])), []).append(arm)
    out = {}
    for key, members in groups.items():
        done = [m for m in members if m["test"] is not None]
        values = [m["test"] for m in done]
        mean, std = stats.mean_std(values)
        out[key] = {
            "n": len(values), "runs": len(members), "mean": mean, "std": std,
            "seconds": mean_of_all([m["device_seconds"] for m in members]),
            "flops": mean_of_all([m["flops"] for m in members]),
            "search_seconds": mean_of_all([m["search_device_seconds"] for m in members]),
            "n_params": mean_of_all([m["n_params"] for m in done]) if done else None,
            "metric": next((m["metric"] for m in done), None), "paper": members[0]["paper"],
            "status": ",".join(sorted({m["status"] for m in members if m["status"] != "completed"})),
            "members": members,
        }
    return out


def mean_of_all(values: list[float | None]) -> float | None:
    """The mean, or None where a value is unknown (a kept record that lost its costs: sptune.report.pool)."""
    return None if any(v is None for v in values) else statistics.fmean(values)


# ----------------------------------------------------------------------------- formatting
def scale(metric: str | None) -> float:
    """Accuracies print in % as the paper's tables; R² as is."""
    return 100.0 if metric == "accuracy" else 1.0


def fmt_value(value: float | None, metric: str | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{value * scale(metric):.2f}" if metric == "accuracy" else f"{value:.3f}"


def fmt_entry(entry: dict[str, Any] | None, show_paper: bool = True) -> str:
    if entry is None:
        return ""
    if entry["mean"] is None:
        text = f"not done ({entry['status']})"
    else:
        text = fmt_value(entry["mean"], entry["metric"])
        if entry["std"] is not None:
            text += f" ± {fmt_value(entry['std'], entry['metric'])}"
        if entry["n"] != entry["runs"]:
            text += f" ({entry['n']}/{entry['runs']} seeds)"
        if entry["seconds"] is not None and entry["flops"] is not None:
            text += f" · {fmt_seconds(entry['seconds'])} · {fmt_flops(entry['flops'])}"
    paper = entry.get("paper")
    if show_paper and paper and paper.get("value") is not None:
        text += f" [paper {paper['value']:g}]"
    return text


def fmt_flops(flops: float) -> str:
    """FLOPs with an SI prefix: 2.3 TFLOP."""
    for prefix, scale_ in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if flops >= scale_:
            return f"{flops / scale_:.1f} {prefix}FLOP"
    return f"{flops:.0f} FLOP"


def fmt_seconds(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f} s"
    return f"{seconds:.0f} s" if seconds < 10_000 else f"{seconds / 3600:.1f} h"


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


def ordered(values: list[str]) -> list[str]:
    """Unique values in first-seen order (the plan's order is the table's)."""
    return list(dict.fromkeys(values))


# ----------------------------------------------------------------------------- layouts
def grid_table(arm_rows: list[dict[str, Any]], layout: dict[str, Any]) -> str:
    """Rows = model + arm (or the layout's row key), columns = the layout's column key, optional Avg."""
    row_key, col_key = layout.get("row", "row"), layout["col"]
    table = entries(arm_rows, row_key, col_key)
    rows = ordered([str(a[row_key]) for a in arm_rows])
    cols = ordered([str(a[col_key]) for a in arm_rows])
    average = layout.get("average")
    header = [layout.get("row_title", ""), *cols] + (["Avg."] if average is not None else [])
    body = []
    for row in rows:
        line = [row] + [fmt_entry(table.get((row, col))) for col in cols]
        if average is not None:
            line.append(average_entry(row, cols, table, average))
        body.append(line)
    return markdown_table(header, body)


def gains_lines(arm_rows: list[dict[str, Any]], layout: dict[str, Any]) -> list[str]:
    """Every row's paired gain over the layout's reference row (`gains_over`, e.g. the SPT shares of a
    compute-tied budget over its 0% scratch row), per column, pairs matched by seed (sptune.report.stats)."""
    reference, row_key, col_key = layout["gains_over"], layout.get("row", "row"), layout["col"]
    table = entries(arm_rows, row_key, col_key)
    cols = ordered([str(a[col_key]) for a in arm_rows])
    rows = [row for row in ordered([str(a[row_key]) for a in arm_rows]) if row != reference]
    body = [[row] + [fmt_gain(table.get((reference, col)), table.get((row, col))) for col in cols] for row in rows]
    gains = [(f"{col} {row}", table.get((reference, col)), table.get((row, col))) for col in cols for row in rows]
    return [f"Paired gain over {reference} (test metric, points for accuracy; 95% CI, pairs matched by seed):", "",
            markdown_table([layout.get("row_title", ""), *cols], body), ""] + simultaneous_lines(gains)


def spt_gain_lines(arm_rows: list[dict[str, Any]], layout: dict[str, Any]) -> list[str]:
    """Each model's SPT - scratch per column (e.g. a parameter budget), paired by seed (sptune.report.stats)."""
    col_key = layout["col"]
    table = entries(arm_rows, "row", col_key)
    cols = ordered([str(a[col_key]) for a in arm_rows])
    pairs = {model: [(table.get((row_label(model, "scratch"), col)), table.get((row_label(model, "masked"), col)))
                     for col in cols] for model in ordered([a["model"] for a in arm_rows])}
    body = [[model] + [fmt_gain(scratch, spt) for scratch, spt in row] for model, row in pairs.items()]
    gains = [(f"{model} {col}", *pair) for model, row in pairs.items() for col, pair in zip(cols, row)]
    return ["Paired SPT gain per model (masked SPT - scratch, test metric, points for accuracy; 95% CI, pairs "
            "matched by seed):", "", markdown_table(["model", *cols], body), ""] + simultaneous_lines(gains)


def average_entry(row: str, cols: list[str], table: dict, average: dict[str, Any]) -> str:
    """The paper's average: the mean over the row's tasks, leaving out average["exclude"] (PathX-256, Table 2)."""
    used = [c for c in cols if c not in average.get("exclude", [])]
    means = [table[(row, c)]["mean"] for c in used if (row, c) in table and table[(row, c)]["mean"] is not None]
    metric = next((table[(row, c)]["metric"] for c in used if (row, c) in table), None)
    text = fmt_value(statistics.fmean(means), metric) if means else "—"
    if means and len(means) < len(used):
        text += f" ({len(means)} of {len(used)} tasks)"
    paper = average.get("paper", {}).get(row)
    if paper and paper.get("value") is not None:
        text += f" [paper {paper['value']:g}]"
    return text


def fraction_table(arm_rows: list[dict[str, Any]], layout: dict[str, Any]) -> str:
    """Rows = training fraction; per task: scratch, SPT, relative gain of SPT over scratch (Figure 3, right)."""
    table = entries(arm_rows, "fraction", "column_arm")
    fractions = sorted({a["fraction"] for a in arm_rows})
    cols = ordered([a["column"] for a in arm_rows])
    header = ["train fraction"] + [f"{c} {what}" for c in cols for what in ("scratch", "SPT", "gain", "data ×")]
    multipliers = data_multipliers(arm_rows)
    body = []
    for fraction in fractions:
        line = [f"{fraction:g}"]
        for col in cols:
            scratch = table.get((str(fraction), f"{col}|scratch"))
            spt = table.get((str(fraction), f"{col}|masked"))
            found = multipliers.get(col, {}).get(float(fraction))
            line += [fmt_entry(scratch), fmt_entry(spt), fmt_gain(scratch, spt), found.text() if found else "—"]
        body.append(line)
    return markdown_table(header, body)


def fraction_sections(arm_rows: list[dict[str, Any]], layout: dict[str, Any]) -> list[str]:
    """A fraction layout's section: the table of Figure 3 (arms tagged by with_column_arms), then its gains
    corrected for being read together."""
    table = entries(arm_rows, "fraction", "column_arm")
    cols = ordered([a["column"] for a in arm_rows])
    gains = [(f"{col} {fraction:g}" if len(cols) > 1 else f"{fraction:g}",
              table.get((str(fraction), f"{col}|scratch")), table.get((str(fraction), f"{col}|masked")))
             for col in cols for fraction in sorted({a["fraction"] for a in arm_rows})]
    return (["## Test metric vs training-data fraction (§3.4, Figure 3)", "", fraction_table(arm_rows, layout), ""]
            + simultaneous_lines(gains))


def simultaneous_lines(gains: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]) -> list[str]:
    """A table's paired gains (label, scratch entry, SPT entry) once more, with intervals that all cover together
    (sptune.report.stats.simultaneous), and which of them exclude 0 then; nothing for fewer than two intervals."""
    usable = [(label, paired, spt["metric"]) for label, scratch, spt in gains
              if (paired := paired_gain(scratch, spt)) is not None and paired.half_width is not None
              and not paired.degenerate]
    if len(usable) < 2:
        return []
    wide = stats.simultaneous([paired for _, paired, _ in usable])
    parts = [f"{label} {paired.mean * scale(metric):+.2f} [{wide_p.low * scale(metric):+.2f}, "
             f"{wide_p.high * scale(metric):+.2f}] (p = {stats.p_value(paired):.2g})"
             for (label, paired, metric), wide_p in zip(usable, wide)]
    found = [label for (label, _, _), wide_p in zip(usable, wide) if wide_p.excludes_zero]
    return [f"The {len(usable)} gains read together, with intervals that all cover at once with "
            f"{usable[0][1].level:.0%} probability (Bonferroni: each at {wide[0].level:.2%}) and each gain's "
            f"uncorrected paired-t p: " + "; ".join(parts) + f". Excluding 0 after the correction: "
            f"{', '.join(found) or 'none'}.", ""]


def with_column_arms(arm_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each arm tagged `column|arm`, the column key of the fraction table (a task column's scratch or SPT)."""
    for arm in arm_rows:
        arm["column_arm"] = f"{arm.get('column')}|{arm['arm']}"
    return arm_rows


def data_multipliers(arm_rows: list[dict[str, Any]]) -> dict[str, dict[float, multiplier.Multiplier]]:
    """Per task column: how much labelled data scratch needs to match SPT at each fraction (sptune.report.multiplier),
    from the seeds whose scratch and SPT arms both finished."""
    out = {}
    for col in ordered([a["column"] for a in arm_rows]):
        done = {(a["fraction"], a.get("seed"), a["arm"]): a["test"] for a in arm_rows
                if a["column"] == col and a["test"] is not None}
        records = [(f, seed, test, done[(f, seed, "masked")]) for (f, seed, arm), test in done.items()
                   if arm == "scratch" and (f, seed, "masked") in done]
        out[col] = multiplier.multipliers(records)
    return out


def relative_gain(scratch: dict[str, Any] | None, spt: dict[str, Any] | None) -> float | None:
    if not scratch or not spt or scratch["mean"] in (None, 0.0) or spt["mean"] is None:
        return None
    return (spt["mean"] - scratch["mean"]) / scratch["mean"]


def paired_gain(scratch: dict[str, Any] | None, spt: dict[str, Any] | None) -> stats.Paired | None:
    """SPT - scratch paired by seed (seeds where both arms finished), with its 95% Student-t interval."""
    if not scratch or not spt:
        return None
    base = {m.get("seed"): m["test"] for m in scratch["members"] if m["test"] is not None}
    pairs = [(m["test"], base[m.get("seed")]) for m in spt["members"] if m["test"] is not None and m.get("seed") in base]
    if not pairs:
        return None
    return stats.paired_t([a for a, _ in pairs], [b for _, b in pairs])


def fmt_gain(scratch: dict[str, Any] | None, spt: dict[str, Any] | None) -> str:
    """The paired gain (points for accuracy) with its 95% CI, and the relative gain of the means (Figure 3)."""
    paired, relative = paired_gain(scratch, spt), relative_gain(scratch, spt)
    if paired is None:
        return "—"
    text = stats.format_paired(paired, scale(spt["metric"]))
    return text + (f" · {relative:+.1%} rel." if relative is not None else "")


def kernel_table(experiment_dir: Path, arm_rows: list[dict[str, Any]]) -> tuple[str, dict[str, list]]:
    """Per task and layer: the lag holding 90% of sum_l K_max(l), pretrained vs initialization (mean ± std)."""
    from sptune.report import kernel_analysis

    per_task: dict[str, list[dict[str, Any]]] = {}
    for arm in arm_rows:
        if arm["status"] == "completed":
            data = kernel_data(experiment_dir / files.CELLS / arm["cell"], arm["run_dir"])
            per_task.setdefault(arm["column"], []).append({**data, "seconds": arm["device_seconds"],
                                                           "label": arm["model"]})
    body = []
    for column, runs in per_task.items():
        for layer in range(len(runs[0]["layers"])):
            radii = {which: [kernel_analysis.mass_radius(_tensor(r["layers"][layer][which])) for r in runs]
                     for which in ("pretrained", "init")}
            body.append([column, str(layer + 1), str(runs[0]["seq_len"]), fmt_stat(radii["pretrained"]),
                         fmt_stat(radii["init"]), str(len(runs)),
                         fmt_seconds(statistics.fmean(r["seconds"] for r in runs))])
    header = ["task", "layer", "L", "90% K_max mass within lag (pretrained)", "same, at init (HiPPO)", "seeds",
              "pretraining"]
    return markdown_table(header, body), per_task


def kernel_data(cell_dir: Path, run_dir: str) -> dict[str, Any]:
    """K_max curves of a pretraining run, computed once from its best.pt and kept in kmax.json."""
    from sptune.report import kernel_analysis

    path = cell_dir / "kmax.json"
    if path.is_file() and files.read_json(path).get("run_dir") == run_dir:
        return files.read_json(path)
    data = kernel_analysis.pretrained_vs_init(run_dir)
    atomic.write_json(path, data)
    return data


def _tensor(values: list[float]):
    import torch

    return torch.tensor(values)


def fmt_stat(values: list[float]) -> str:
    mean = statistics.fmean(values)
    return f"{mean:.0f}" + (f" ± {statistics.stdev(values):.0f}" if len(values) > 1 else "")


# ----------------------------------------------------------------------------- files
def not_completed_lines(arm_rows: list[dict[str, Any]]) -> list[str]:
    """The arms without a result and why (no number above counts them): a failed stage, or one a time budget or a
    stop left unfinished (resuming finishes it)."""
    missing = [a for a in arm_rows if a["status"] != "completed"]
    if not missing:
        return []
    return ["Not completed (left out of every number above): "
            + ", ".join(f"{a['cell']}/{a['arm']} ({a['status']})" for a in missing), ""]


def header_lines(plan: Plan, experiment_dir: Path, arm_rows: list[dict[str, Any]]) -> list[str]:
    seeds = sorted({a.get("seed") for a in arm_rows if a.get("seed") is not None})
    lines = [f"# {plan.title}", ""]
    if plan.smoke:
        lines += ["**Smoke test**: the embedded tasks stand in for the paper's (column names say which), with "
                  "tiny models and a few steps per stage. The numbers check the pipeline, not the paper; the "
                  "paper's values are shown for orientation only.", ""]
    lines += [f"- axis: {plan.axis}", f"- nuisance: {plan.nuisance}", f"- fixed: {plan.fixed}",
              f"- backend: `{plan.backend}`" + (" (Ray Tune + Optuna search per stage)" if plan.backend == "tune"
                                               else " (train.run_stage at the paper's values, no search)"),
              f"- seeds: {', '.join(map(str, seeds))}; " + (
                  "entries are mean ± std over seeds; `pretraining` = its device-seconds" if plan.layout["kind"] ==
                  "kernels" else "entries are mean ± std over seeds of the test metric at the best-validation "
                  "checkpoint, `· s · FLOP` = device-seconds and FLOPs of training and evaluation (SPT includes "
                  "pretraining), [paper x] = the paper's number for the same entry")]
    for name, command in plan.commands.items():
        lines.append(f"- {name}: `{command}`")
    lines += [f"- every trial: `results.csv`; every entry: `summary.csv`; experiment directory `{experiment_dir}`", ""]
    return lines


def write_summary(arm_rows: list[dict[str, Any]], path: Path) -> Path:
    """summary.csv: one row per arm (sptune.report.pool reads it back where the cells are gone). Its
    run_dir is relative to the experiment directory, so a record kept elsewhere names no machine's paths."""
    summary = [{k: v for k, v in a.items() if k != "paper"} | {
        "paper_value": (a.get("paper") or {}).get("value"), "paper_source": (a.get("paper") or {}).get("source"),
        "run_dir": relative_run_dir(a.get("run_dir"), path.parent)} for a in arm_rows]
    first = ["experiment", "cell", "row", "arm", "status", "test"]
    return results.write_rows(summary, path, first + ordered([k for a in summary for k in a if k not in first]))


def relative_run_dir(run_dir: str | None, experiment_dir: Path) -> str | None:
    """`run_dir` relative to `experiment_dir` where it lies inside it (cells/<cell>/<stage>/...), else as given."""
    if not run_dir:
        return run_dir
    try:
        return str(Path(run_dir).resolve().relative_to(experiment_dir.resolve()))
    except ValueError:
        return run_dir


def grid_sections(arm_rows: list[dict[str, Any]], layout: dict[str, Any]) -> tuple[list[str], list[str]]:
    """A grid layout's table, then the lines the script also prints: gains, SPT gains, the architecture result."""
    table = [f"## {layout.get('heading', 'Results')}", "", grid_table(arm_rows, layout), ""]
    out: list[str] = []
    if layout.get("gains_over"):
        out += gains_lines(arm_rows, layout)
    if layout.get("spt_gains"):
        out += spt_gain_lines(arm_rows, layout)
    if layout.get("architectures"):  # the 2 x 2 of paper Table 1: gains, gaps, baselines
        out += architectures.lines(arm_rows, layout)
    return table, out


def write(experiment_dir: str | Path) -> dict[str, Any]:
    experiment_dir = Path(experiment_dir).resolve()
    plan = load_plan(experiment_dir)
    rows = experiment_rows(experiment_dir, plan)
    arm_rows = with_column_arms(arms(experiment_dir, plan, rows))
    layout = plan.layout
    results_csv = results.write_csv(rows, experiment_dir / files.RESULTS_CSV, prefix=cell_columns(plan))
    summary_csv = write_summary(arm_rows, experiment_dir / files.SUMMARY_CSV)
    lines = header_lines(plan, experiment_dir, arm_rows)
    summary_lines: list[str] = []  # what the script prints at its end besides the paths
    pngs: list[Path] = []
    kind = layout["kind"]
    if kind == "kernels":
        table, per_task = kernel_table(experiment_dir, arm_rows)
        lines += ["## K_max decay per layer (§3.6, Figure 4)", "", table, ""]
        pngs += figures.kernels(per_task, experiment_dir)
    elif kind == "fraction":
        lines += fraction_sections(arm_rows, layout)
        pngs.append(figures.fractions(arm_rows, experiment_dir / "fractions.png", data_multipliers(arm_rows)))
    else:
        table, summary_lines = grid_sections(arm_rows, layout)
        lines += table + summary_lines
        for name in layout.get("plots", []):
            pngs.append(getattr(figures, name)(arm_rows, layout, experiment_dir / f"{name}.png"))
    searched = search_checks.lines(plan, rows, experiment_dir)
    lines += searched
    summary_lines += searched
    if layout.get("curves"):  # Figure 5: the selected trials' validation curves, by step and by FLOPs
        pngs += [p for p in [figures.learning_curves(plan, rows, experiment_dir / "learning-curves.png")] if p]
    missing = not_completed_lines(arm_rows)
    lines += missing
    summary_lines += missing
    lines += [f"- {note}" for note in plan.notes] + ([""] if plan.notes else [])
    lines += [f"![{p.stem}]({p.name})" for p in pngs]
    table_md = experiment_dir / "table.md"
    write_text_atomic(table_md, "\n".join(lines) + "\n")
    return {"results": results_csv, "summary": summary_csv, "table": table_md, "plots": pngs,
            "summary_lines": summary_lines, "arm_rows": arm_rows}
