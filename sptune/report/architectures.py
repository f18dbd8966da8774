"""The architecture result of an experiment (paper Table 1 read as a 2 x 2): per architecture the scratch
and SPT test numbers, the SPT gain, the architecture gap under each initialisation, a compute-tied
scratch arm, per-seed convergence, and trivial baselines on the same splits.

The paper's finding (§3.1, Table 1): the gap between Transformers and S4 trained from scratch on LRA
shrinks sharply once both are self-pretrained on the task's own data. Here, per seed s:

    gain(arch)_s    = SPT_s - scratch_s                       (same architecture)
    gap(init)_s     = SSM_s - Transformer_s                   (same initialisation)
    gap change_s    = gap(SPT)_s - gap(scratch)_s             (< 0: SPT closes the gap)
    tied gain_s     = SPT_s - scratch at SPT's total steps_s  (paper App. D: equal training compute)

each reported as the mean over seeds with its paired 95% Student-t interval (sptune.report.stats). Pairing
by seed is sound here: every arm of one seed shares the data split and the seed's data order. That interval
is about this test set; where every run kept its per-example test outcomes (result.json's `test_hits`), the
interval that also resamples the test examples follows it (`; with test-set sampling ± h [low, high]`).
Seeds are grouped by the cells' `role` label: `selection` seeds chose a setting (grids, steps) and are
reported apart from `confirmation` seeds, which chose nothing. Each group also gets how steady selection was:
per arm the lr chosen on each seed, the share of seeds choosing the most frequent one, and the test SD. Baselines (sptune.baselines: majority
class, 1-NN Euclidean, logistic regression on raw inputs) are fit on the task's train split and scored
on its val and test splits, those the models trained and selected on.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from sptune import baselines, registry
from sptune.errors import UserError
from sptune.report import pairs, power, stats

SPT, SCRATCH, TIED = "masked", "scratch", "tied"  # arm keys: SPT, scratch, scratch at SPT's total steps
ROLES = ("selection", "confirmation")
ROLE_TEXT = {"selection": "selection seeds: they chose the grids or the step budget; not a confirmation",
             "confirmation": "confirmation seeds: they chose nothing"}


def arm_key(arm: dict[str, Any]) -> str:
    """SPT, scratch, or the compute-tied scratch arm (a cell labelled `compute: tied`)."""
    return TIED if arm.get("compute") == "tied" else arm["arm"]


def lines(arm_rows: list[dict[str, Any]], layout: dict[str, Any]) -> list[str]:
    """The section's lines (markdown; also printed at the end of the script)."""
    done = [a for a in arm_rows if a["test"] is not None]
    out = ["## Architecture result (test accuracy, %)", ""]
    roles = [r for r in ROLES if any(a.get("role") == r for a in done)] or [None]
    for role in roles:
        group = [a for a in done if role is None or a.get("role") == role]
        seeds = sorted({a.get("seed") for a in group})
        if role is not None:
            out += [f"### Seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))} ({ROLE_TEXT[role]})", ""]
        out += role_lines(group, layout) + [""] + selection_table(group)
    out += convergence_table(done)
    task = layout.get("baselines_task")
    if task:
        rows = baselines.evaluate(registry.get_task(task, layout.get("baselines_task_path", "")).load())
        out += ["", f"Trivial baselines on the same {task} splits (fit on train):", "", "```",
                baselines.format_rows(rows), "```"]
    return out + [""]


def compared(architectures: dict[str, Any]) -> tuple[list[str], list[tuple[str, str]]]:
    """The models in table order and the (model, baseline) pairs whose gaps are reported: `candidate` against
    each of `baselines` (sptune evaluate), or an SSM against a Transformer (records written before)."""
    if "candidate" in architectures:
        candidate, others = architectures["candidate"], list(architectures["baselines"])
        return others + [candidate], [(candidate, other) for other in others]
    return [architectures["transformer"], architectures["ssm"]], [(architectures["ssm"], architectures["transformer"])]


def role_lines(done: list[dict[str, Any]], layout: dict[str, Any]) -> list[str]:
    """Means, gains and gaps of one seed group."""
    models, gaps = compared(layout["architectures"])
    by_seed = per_seed(done)
    out = []
    for model in models:
        line = (f"- {model}: scratch {_pct(mean(by_seed, model, SCRATCH))}, SPT {_pct(mean(by_seed, model, SPT))}, "
                f"SPT gain {paired_text(by_seed, (model, SPT), (model, SCRATCH))}")
        if mean(by_seed, model, TIED) is not None:
            line += (f"; scratch at SPT's total steps {_pct(mean(by_seed, model, TIED))}, compute-tied SPT gain "
                     f"{paired_text(by_seed, (model, SPT), (model, TIED))}")
        out.append(line)
    for model, baseline in gaps:
        out += gap_lines(by_seed, model, baseline, named=len(gaps) > 1)
    return out


def gap_lines(by_seed: dict[Any, dict[tuple[str, str], dict[str, Any]]], model: str, baseline: str,
              named: bool) -> list[str]:
    """The gap model - baseline under scratch and under SPT, and its change (`named`: the change says whose)."""
    out = [f"- architecture gap ({model} - {baseline}) under {name}: "
           f"{paired_text(by_seed, (model, arm), (baseline, arm))}" for arm, name in ((SCRATCH, "scratch"), (SPT, "SPT"))]
    keys = ((model, SPT), (baseline, SPT), (model, SCRATCH), (baseline, SCRATCH))  # + - - +
    complete = [[s[k] for k in keys] for s in by_seed.values() if all(k in s for k in keys)]
    gap_change = [(a["test"] - b["test"], c["test"] - d["test"]) for a, b, c, d in complete]
    whose = f" ({model} - {baseline})" if named else ""
    out.append(f"- gap under SPT minus gap under scratch{whose} (< 0: SPT closes the gap): "
               + _paired_or_dash(gap_change) + test_sampling_text(complete, (1, -1, -1, 1)))
    return out


def frame(arm_rows: list[dict[str, Any]], architectures: dict[str, Any]):
    """The architecture table as a pandas DataFrame (sptune.evaluate), one row per quantity, in points for
    accuracy: `quantity` (scratch, SPT, SPT gain, gap, gap change), `model`, `baseline` and `init` (gaps),
    `mean`, the paired 95% interval `low` / `high` (NaN on one seed) and `n` seeds."""
    import pandas as pd

    models, gaps = compared(architectures)
    by_seed = per_seed([a for a in arm_rows if a["test"] is not None])
    rows = []
    for model in models:
        for quantity, arm in (("scratch", SCRATCH), ("SPT", SPT)):
            values = [100 * s[(model, arm)]["test"] for s in by_seed.values() if (model, arm) in s]
            rows.append(_row(quantity, model, None, None, stats.t_interval(values) if values else None))
        rows.append(_row("SPT gain", model, None, None, _paired(by_seed, [((model, SPT), 1), ((model, SCRATCH), -1)])))
    for model, baseline in gaps:
        for init, arm in (("scratch", SCRATCH), ("SPT", SPT)):
            rows.append(_row("gap", model, baseline, init,
                             _paired(by_seed, [((model, arm), 1), ((baseline, arm), -1)])))
        rows.append(_row("gap change", model, baseline, None, _paired(
            by_seed, [((model, SPT), 1), ((baseline, SPT), -1), ((model, SCRATCH), -1), ((baseline, SCRATCH), 1)])))
    return pd.DataFrame(rows, columns=["quantity", "model", "baseline", "init", "mean", "low", "high", "n"])


def _paired(by_seed: dict[Any, dict[tuple[str, str], dict[str, Any]]],
            terms: list[tuple[tuple[str, str], int]]) -> stats.Paired | None:
    """The interval of sum(sign x test) over the seeds where every term finished (points)."""
    values = [100 * sum(sign * s[key]["test"] for key, sign in terms)
              for s in by_seed.values() if all(key in s for key, _ in terms)]
    return stats.t_interval(values) if values else None


def _row(quantity: str, model: str, baseline: str | None, init: str | None, p: stats.Paired | None) -> dict[str, Any]:
    nan = float("nan")
    if p is None:
        return {"quantity": quantity, "model": model, "baseline": baseline, "init": init, "mean": nan, "low": nan,
                "high": nan, "n": 0}
    low, high = (p.low, p.high) if p.half_width is not None else (nan, nan)
    return {"quantity": quantity, "model": model, "baseline": baseline, "init": init, "mean": p.mean, "low": low,
            "high": high, "n": p.n}


def selection_table(done: list[dict[str, Any]]) -> list[str]:
    """How steady selection is over one seed group's seeds: per model and arm, the lr its last stage
    selected on each seed, how many seeds chose the most frequent one, and the test spread (SD over seeds)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for arm in sorted(done, key=lambda a: (a["model"], arm_key(a), a.get("seed"))):
        groups.setdefault((arm["model"], arm_key(arm)), []).append(arm)
    body = []
    for (model, key), members in groups.items():
        lrs = [a["lr"] for a in members if a.get("lr") is not None]
        if len(lrs) < 2:
            continue
        modal, count = Counter(lrs).most_common(1)[0]
        spread = stats.mean_std([a["test"] for a in members])[1]
        body.append(f"| {model} | {key} | {modal:g} | {count} of {len(lrs)} | {' '.join(f'{lr:g}' for lr in lrs)} | "
                    f"{_pct(spread)} |")
    if not body:
        return []
    return ["Selection over seeds (the selected lr of each arm's last stage, in seed order; test SD in points):", "",
            "| model | arm | modal lr | seeds choosing it | lr per seed | test SD |", "|---|---|---|---|---|---|",
            *body, ""]


def per_seed(done: list[dict[str, Any]]) -> dict[Any, dict[tuple[str, str], dict[str, Any]]]:
    """{seed: {(model, arm key): arm}}."""
    out: dict[Any, dict[tuple[str, str], dict[str, Any]]] = {}
    for arm in done:
        out.setdefault(arm.get("seed"), {})[(arm["model"], arm_key(arm))] = arm
    return out


def mean(by_seed: dict[Any, dict[tuple[str, str], dict[str, Any]]], model: str, arm: str) -> float | None:
    return stats.mean_std([s[(model, arm)]["test"] for s in by_seed.values() if (model, arm) in s])[0]


def paired_text(by_seed: dict[Any, dict[tuple[str, str], dict[str, Any]]], a: tuple[str, str],
                b: tuple[str, str]) -> str:
    """a - b over the seeds where both finished, in points with its 95% interval (and the one that also
    resamples the test set, where the runs kept their test outcomes)."""
    both = [[s[a], s[b]] for s in by_seed.values() if a in s and b in s]
    return _paired_or_dash([(x["test"], y["test"]) for x, y in both]) + test_sampling_text(both, (1, -1))


def _paired_or_dash(values: list[tuple[float, float]]) -> str:
    if not values:
        return "—"
    paired = stats.paired_t([a for a, _ in values], [b for _, b in values])
    return stats.format_paired(paired, 100.0) + power.detectable_text(paired, 100.0)  # undecided: what n could show


def test_sampling_text(runs: list[list[dict[str, Any]]], signs: tuple[int, ...]) -> str:
    """'; with test-set sampling ± h [low, high]' (points): the interval of sum_k signs[k] * run k over
    seeds (runs[i]: seed i's runs) that also resamples the test examples (stats.contrast_with_test_sampling).
    Empty where the seed interval has none (one seed) or an arm carries no test outcomes (its result.json's
    `test_hits`, kept in summary.csv: runs and records before they were written, and R² tasks, have none);
    the reason where the runs' outcomes cannot be compared (another test set), so the rest of the report is
    still written."""
    hits = [[run.get("test_hits") for run in seed_runs] for seed_runs in runs]
    if len(runs) < 2 or any(h is None for seed_hits in hits for h in seed_hits):
        return ""
    try:
        p = stats.contrast_with_test_sampling(hits, signs)
    except UserError as err:
        return f"; with test-set sampling: none ({err})"
    flag = f" (degenerate: {stats.degeneracy(p)})" if p.degenerate else ""
    return f"; with test-set sampling ± {100 * p.half_width:.2f} [{100 * p.low:+.2f}, {100 * p.high:+.2f}]{flag}"


def convergence_table(done: list[dict[str, Any]]) -> list[str]:
    """Per seed and arm: test, best step / budget and the last training loss (sptune.report.pairs.convergence); a
    warning per arm whose best step lies in the last 20% of its budget (it may still have been improving)."""
    body, late = [], []
    for arm in sorted(done, key=lambda a: (a.get("seed"), a["model"], arm_key(a))):
        best, steps, loss = arm.get("best_step"), arm.get("steps"), arm.get("train_loss")
        if best is not None and steps and best > pairs.LATE_FRACTION * steps:
            late.append(f"{arm['model']} {arm_key(arm)} seed {arm.get('seed')}")
        body.append(f"| {arm.get('seed')} | {arm.get('role', '')} | {arm['model']} | {arm_key(arm)} | "
                    f"{_pct(arm['test'])} | " + ("—" if best is None else f"{best}/{steps}") + " | " + ("—" if loss is None else f"{loss:.3f}") + " |")
    if not body:
        return []
    out = ["Per seed (test %, best-validation step / step budget, training loss at the last evaluation):", "",
           "| seed | role | model | arm | test | best step | train loss |", "|---|---|---|---|---|---|---|", *body]
    if late:
        out += ["", f"warning: best step in the last {1 - pairs.LATE_FRACTION:.0%} of the budget (may not have "
                    f"converged): " + ", ".join(late)]
    return out


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f}"
