"""PNG plots of a study (matplotlib, Agg backend: no display needed). Error bars are ± std over seeds."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend

plt.rcParams.update({"font.size": 10, "axes.grid": True, "grid.alpha": 0.3, "figure.dpi": 110})


def _unit(metric: str | None) -> tuple[float, str]:
    return (100.0, "test accuracy (%)") if metric == "accuracy" else (1.0, "test R²")


def _stats(members: list[dict[str, Any]]) -> tuple[float | None, float]:
    values = [m["test"] for m in members if m["test"] is not None]
    if not values:
        return None, 0.0
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _metric(arm_rows: list[dict[str, Any]]) -> str | None:
    return next((a["metric"] for a in arm_rows if a["metric"]), None)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def _series(arm_rows: list[dict[str, Any]], line_key: str, x_key: str) -> dict[str, list[tuple[float, float, float]]]:
    """{line: [(x, mean, std)]} over the arms, x sorted; arms without a finished test metric are left out."""
    groups: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for arm in arm_rows:
        groups.setdefault((str(arm[line_key]), float(arm[x_key])), []).append(arm)
    out: dict[str, list[tuple[float, float, float]]] = {}
    for (line, x), members in groups.items():
        mean, std = _stats(members)
        if mean is not None:
            out.setdefault(line, []).append((x, mean, std))
    return {line: sorted(points) for line, points in out.items()}


def fractions(arm_rows: list[dict[str, Any]], path: Path, multipliers: dict[str, dict[float, Any]] | None = None
              ) -> Path:
    """Figure 3 layout: (left) test metric vs training fraction, scratch vs SPT, each SPT point annotated
    with its data multiplier (sptune.report.multiplier: 'scratch needs 2.0x the data'); (right) relative gain."""
    factor, ylabel = _unit(_metric(arm_rows))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    columns = list(dict.fromkeys(a["column"] for a in arm_rows))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, column in enumerate(columns):
        mine = [a for a in arm_rows if a["column"] == column]
        series = _series(mine, "arm", "fraction")
        for arm, style, marker, label in (("scratch", "--", "o", "scratch"), ("masked", "-", "s", "SPT")):
            points = series.get(arm, [])
            if points:
                xs, ys, es = zip(*points)
                left.errorbar(xs, [y * factor for y in ys], yerr=[e * factor for e in es], fmt=style + marker,
                              color=colors[i % len(colors)], capsize=3, label=f"{column}: {label}")
                if arm == "masked":
                    _annotate_multipliers(left, points, (multipliers or {}).get(column, {}), factor)
        scratch = dict((x, y) for x, y, _ in series.get("scratch", []))
        gains = [(x, 100.0 * (y - scratch[x]) / scratch[x]) for x, y, _ in series.get("masked", [])
                 if scratch.get(x)]
        if gains:
            xs, ys = zip(*gains)
            right.plot(xs, ys, "-o", color=colors[i % len(colors)], label=column)
    fractions_run = sorted({a["fraction"] for a in arm_rows})
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xticks(fractions_run, [f"{f:g}" for f in fractions_run])
        ax.minorticks_off()
        ax.set_xlabel("fraction of the training set (log scale)")
    left.set_ylabel(ylabel)
    left.set_title("scratch (dashed) vs SPT (solid)")
    right.axhline(0.0, color="black", linewidth=0.8)
    right.set_ylabel("relative gain of SPT over scratch (%)")
    right.set_title("relative gain")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    return _save(fig, path)


def _annotate_multipliers(ax: Any, points: list[tuple[float, float, float]], found: dict[float, Any],
                          factor: float) -> None:
    for x, y, _ in points:
        if float(x) in found:
            ax.annotate(found[float(x)].text().split(" [")[0], (x, y * factor), textcoords="offset points",
                        xytext=(4, 6), fontsize=7)


def _count_label(value: float, _position: Any = None) -> str:
    return f"{value / 1e6:g}M" if value >= 1e6 else f"{value / 1e3:g}K"


def sizes(arm_rows: list[dict[str, Any]], layout: dict[str, Any], path: Path) -> Path:
    """Appendix E: test metric vs parameter count; a colour per model, scratch dashed, SPT solid."""
    factor, ylabel = _unit(_metric(arm_rows))
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    done = [a for a in arm_rows if a["n_params"] is not None]
    models = list(dict.fromkeys(a["model"] for a in arm_rows))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for row, points in _series(done, "row", "n_params").items():
        first = next(a for a in arm_rows if a["row"] == row)
        color = colors[models.index(first["model"]) % len(colors)]
        xs, ys, es = zip(*points)
        style = "--o" if first["arm"] == "scratch" else "-s"
        ax.errorbar(xs, [y * factor for y in ys], yerr=[e * factor for e in es], fmt=style, color=color,
                    capsize=3, label=row)
        if layout.get("paper_on_plot"):
            paper = sorted({(a["budget"], a["paper"]["value"]) for a in arm_rows
                            if a["row"] == row and a["paper"] and a["paper"]["value"] is not None})
            if paper:
                px, py = zip(*paper)
                ax.plot(px, py, ":", marker="x", color=color, alpha=0.6, label=f"{row} (paper)")
    ax.set_xscale("log")
    budgets = sorted({a["budget"] for a in arm_rows})
    ax.set_xticks(budgets, [_count_label(b) for b in budgets])
    ax.minorticks_off()
    ax.set_xlabel("parameters (log scale; ticks at the budgets, points at the exact counts)")
    ax.set_ylabel(ylabel)
    ax.set_title(layout.get("plot_title", "test metric vs model size"))
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _save(fig, path)


def shares(arm_rows: list[dict[str, Any]], layout: dict[str, Any], path: Path) -> Path:
    """Appendix D: test metric vs the share of a fixed step budget spent on SPT (0% = scratch), a panel per
    task and a line per model."""
    factor, ylabel = _unit(_metric(arm_rows))
    tasks = list(dict.fromkeys(a["task"] for a in arm_rows))
    models = list(dict.fromkeys(a["model"] for a in arm_rows))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5.0 * len(tasks), 4.2), squeeze=False)
    shares_run = sorted({a["share"] for a in arm_rows})
    for ax, task in zip(axes[0], tasks):
        mine = [a for a in arm_rows if a["task"] == task]
        for model, points in _series(mine, "model", "share").items():
            xs, ys, es = zip(*points)
            i = models.index(model)  # a marker per model too, so equal values stay visible
            ax.errorbar([100 * x for x in xs], [y * factor for y in ys], yerr=[e * factor for e in es],
                        fmt="-" + "osD^v"[i % 5], markersize=7 - 2 * (i % 2), color=colors[i % len(colors)],
                        capsize=3, label=model)
        ax.set_xticks([100 * s for s in shares_run],
                      ["0\n(scratch)" if s == 0 else f"{100 * s:.0f}" for s in shares_run])
        ax.set_xlabel("share of the step budget spent on SPT (%)")
        ax.set_ylabel(ylabel)
        ax.set_title(mine[0]["column"].rsplit(" · ", 1)[0])
        ax.legend(fontsize=8)
    fig.suptitle(layout.get("plot_title", "compute-tied: SPT share of a fixed budget"))
    return _save(fig, path)


def bars(arm_rows: list[dict[str, Any]], layout: dict[str, Any], path: Path) -> Path:
    """Grouped bars: one group per task column, one bar per model and arm (Figure 1 / 2 style); a colour per
    model, the arm as hatching. Accuracy and R² columns get separate panels."""
    rows = list(dict.fromkeys(a["row"] for a in arm_rows))
    models = list(dict.fromkeys(a["model"] for a in arm_rows))
    color_of = {m: plt.get_cmap("tab10")(i % 10) for i, m in enumerate(models)}
    hatch_of = {"scratch": None, "masked": "///", "causal": "..."}
    metric_of = {}
    for a in arm_rows:
        if a["metric"]:
            metric_of.setdefault(a["column"], a["metric"])
    panels = list(dict.fromkeys(metric_of.get(a["column"]) for a in arm_rows))
    width = 0.8 / max(len(rows), 1)
    n_cols = len({a["column"] for a in arm_rows})
    fig, axes = plt.subplots(1, len(panels), figsize=(max(8.0, 0.28 * n_cols * len(rows) + 4.0), 4.8), squeeze=False)
    labelled: set[str] = set()
    for ax, metric in zip(axes[0], panels):
        factor, ylabel = _unit(metric)
        cols = list(dict.fromkeys(a["column"] for a in arm_rows if metric_of.get(a["column"]) == metric))
        for i, row in enumerate(rows):
            for j, col in enumerate(cols):
                members = [a for a in arm_rows if a["row"] == row and a["column"] == col]
                mean, std = _stats(members)
                if mean is None:
                    continue  # not run (or not finished) for this task: no bar rather than a zero
                n = sum(m["test"] is not None for m in members)
                ax.bar(j + (i - (len(rows) - 1) / 2) * width, mean * factor, width,
                       color=color_of[members[0]["model"]], hatch=hatch_of.get(members[0]["arm"]), edgecolor="white",
                       linewidth=0.5, yerr=std * factor if n > 1 else None, capsize=2,
                       label=None if row in labelled else row)
                labelled.add(row)
        ax.set_xticks(range(len(cols)), cols)
        ax.set_ylabel(ylabel)
    fig.suptitle(layout.get("plot_title", "scratch (solid) vs SPT (hatched)"))
    fig.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return _save(fig, path)


def kernels(per_task: dict[str, list[dict[str, Any]]], experiment_dir: Path) -> list[Path]:
    """Figure 4: K_max(l) per layer, pretrained (solid) vs initialization (dashed), one PNG per task.
    Mean over seeds; with more than 4 layers only odd layers are drawn, as in the paper."""
    paths = []
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for column, runs in per_task.items():
        n_layers = len(runs[0]["layers"])
        shown = [i for i in range(n_layers) if n_layers <= 4 or i % 2 == 0]
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        for k, layer in enumerate(shown):
            for which, style, suffix in (("pretrained", "-", "SPT"), ("init", "--", "init")):
                curves = [r["layers"][layer][which] for r in runs]
                mean = [statistics.fmean(values) for values in zip(*curves)]
                ax.plot(range(len(mean)), mean, style, color=colors[k % len(colors)], linewidth=1.2,
                        label=f"layer {layer + 1} {suffix}")
        resolution = runs[0].get("resolution")
        if resolution:  # 2D tasks: mark image rows, where §3.6 sees kernel peaks (PathX)
            for x in range(resolution, runs[0]["seq_len"], resolution):
                ax.axvline(x, color="grey", linewidth=0.4, alpha=0.5)
        ax.set_yscale("log")
        ax.set_xlabel("lag l (positions apart)")
        ax.set_ylabel("K_max(l) = max over channels |K|")
        init = "HiPPO init" if runs[0]["ssm_init"] == "structured" else "random init"
        ax.set_title(f"{column}: {runs[0]['label']} kernels, SPT (solid) vs {init} (dashed)")
        ax.legend(fontsize=8, ncol=2)
        slug = "-".join("".join(ch if ch.isalnum() else " " for ch in column).lower().split())
        name = f"kernels-{slug}.png"
        paths.append(_save(fig, experiment_dir / name))
    return paths


def learning_curves(plan: Any, rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Figure 5 for an experiment: validation metric vs step and vs cumulative training FLOPs of each cell's
    selected finetuning and scratch trials (sptune.report.curves), one row of panels per cell of the lowest
    seed; a compute-tied scratch cell (label `compute: tied`) of the same model and seed joins its panel."""
    from sptune.report import curves

    seeds = [c.labels["seed"] for c in plan.cells if c.labels.get("seed") is not None]
    first = min(seeds) if seeds else None
    mine = [c for c in plan.cells if c.labels.get("seed") == first]
    panels = []
    for cell in [c for c in mine if c.labels.get("compute") != "tied"]:
        points = curves.curve_points([r for r in rows if r["cell"] == cell.key])
        for tied in [c for c in mine if c.labels.get("compute") == "tied"
                     and c.labels.get("model") == cell.labels.get("model")]:
            scratch = curves.curve_points([r for r in rows if r["cell"] == tied.key]).get("scratch")
            if scratch:
                points["tied"] = scratch
        if points:
            panels.append((f"{cell.labels.get('model')}, seed {first}: selected trials", points))
    return curves.save_panels(path, panels, curves.metric_of(rows)) if panels else None
