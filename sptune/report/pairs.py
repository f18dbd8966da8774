"""Multi-seed comparison of SPT with scratch: per-seed pairs, the paired gain's 95% CI, a table, a plot.

The same statistics (sptune.report.stats.paired_t) behind every multi-seed output:

    sptune compare <config> --seeds 0 1 2 3 4     # single runs per seed (sptune.cli.main)
    sptune study   <config> --seeds 0 1 2 3 4     # one Ray Tune study per seed (sptune.records.seeds)
    sptune report  <seeds dir>                    # rebuilds seeds.md, seeds.csv, seeds.png from the runs

A pair is one seed's SPT test metric (the selected finetuning trial, started from the selected
pretraining trial) and its scratch test metric (the selected scratch trial): both measured once, at
each run's best-validation checkpoint. The gain is their difference, paired by seed.
"""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from sptune import atomic
from sptune.errors import UserError
from sptune.report import stats


@dataclass
class Pair:
    """One seed: SPT and scratch, validation (selection) and test (reported) metrics."""

    seed: int
    spt_test: float | None
    scratch_test: float | None
    spt_val: float | None = None
    scratch_val: float | None = None
    pretrain_val: float | None = None  # the selected pretraining trial's validation metric
    seconds: float | None = None  # wall seconds of this seed's runs (study: sum of trials' device-seconds)
    status: str = "completed"
    # Convergence of each arm's selected run: its best-validation step, its step budget (steps run) and
    # its training loss at the last eval; a best step late in the budget says the run was still improving.
    spt_best_step: int | None = None
    spt_steps: int | None = None
    spt_train_loss: float | None = None
    scratch_best_step: int | None = None
    scratch_steps: int | None = None
    scratch_train_loss: float | None = None
    # Each test example's outcome ('0'/'1', result.json's test_hits; accuracy tasks only): what the interval
    # with test-set sampling resamples (sptune.report.stats.paired_with_test_sampling). Not in seeds.csv.
    spt_hits: str | None = None
    scratch_hits: str | None = None

    @property
    def complete(self) -> bool:
        return self.spt_test is not None and self.scratch_test is not None

    @property
    def gain(self) -> float | None:
        return self.spt_test - self.scratch_test if self.complete else None


HIT_FIELDS = ("spt_hits", "scratch_hits")  # one character per test example: summary.json keeps them, not seeds.csv
LATE_FRACTION = 0.8  # a best step past 80% of the budget: the run may not have converged
SEED_KEYS = ("run.seed", "pretrain.run.seed", "finetune.run.seed", "scratch.run.seed")


def check_seeds(seeds: Sequence[int], overrides: Sequence[str]) -> None:
    """--seeds: distinct seeds, and the seed comes from --seeds alone (a run.seed= override would give every
    seed's runs the same seed)."""
    if not seeds or len(set(seeds)) != len(seeds):
        raise UserError(f"--seeds needs distinct seeds, got {list(seeds)}")
    if any(o.split("=", 1)[0] in SEED_KEYS for o in overrides):
        raise UserError("pass seeds with --seeds, not a run.seed= override")


def of_seed(seed: int, selected: Mapping[str, Mapping[str, Any] | None], seconds: float | None, status: str,
            runs: Mapping[str, Mapping[str, Any] | None] | None = None) -> Pair:
    """One seed's pair from each stage's selected run (`selected[stage]`: its numbers, test_metric and
    best_val; None where the stage selected nothing) and, for the convergence columns, those runs'
    result.json (`runs`, default `selected`). The plain path (`sptune compare --seeds`) and the seed cells of
    a study (sptune.records.seeds) both pair seeds here."""
    runs = selected if runs is None else runs
    get = lambda stage, key: (selected.get(stage) or {}).get(key)  # noqa: E731
    return Pair(seed, get("finetune", "test_metric"), get("scratch", "test_metric"), get("finetune", "best_val"),
                get("scratch", "best_val"), get("pretrain", "best_val"), seconds, status,
                **convergence("spt", runs.get("finetune")), **convergence("scratch", runs.get("scratch")),
                spt_hits=(runs.get("finetune") or {}).get("test_hits"),
                scratch_hits=(runs.get("scratch") or {}).get("test_hits"))


def convergence(arm: str, result: dict[str, Any] | None) -> dict[str, Any]:
    """Pair fields `<arm>_best_step`, `<arm>_steps` (the step budget: max_steps, which an early-stopped run
    did not use up; result.json from before early stopping has only the steps trained) and `<arm>_train_loss`."""
    result = result or {}
    history = result.get("history") or []
    return {f"{arm}_best_step": result.get("best_step"),
            f"{arm}_steps": result.get("max_steps") or result.get("steps"),
            f"{arm}_train_loss": history[-1].get("train_loss") if history else None}


def late_arms(p: Pair) -> list[str]:
    """The arms of a seed whose best step lies in the last 20% of their budget."""
    late = []
    for arm in ("spt", "scratch"):
        best, steps = getattr(p, f"{arm}_best_step"), getattr(p, f"{arm}_steps")
        if best is not None and steps and best > LATE_FRACTION * steps:
            late.append(arm)
    return late


def paired(pairs: Sequence[Pair], level: float = 0.95) -> stats.Paired | None:
    done = [p for p in pairs if p.complete]
    if not done:
        return None
    return stats.paired_t([p.spt_test for p in done], [p.scratch_test for p in done], level)


def scale_of(metric: str | None) -> float:
    return 100.0 if metric == "accuracy" else 1.0


def table(pairs: Sequence[Pair], metric: str | None, title: str = "") -> str:
    """Per seed SPT and scratch (val / test) and the gain; then the mean paired gain with its 95% CI."""
    k = scale_of(metric)
    unit = " (accuracy, %)" if metric == "accuracy" else f" ({metric})"

    def fmt(v: float | None, sign: bool = False) -> str:
        return "—" if v is None else (f"{v * k:+.2f}" if sign else f"{v * k:.2f}")

    lines = [title] if title else []
    lines += [f"SPT vs scratch over {len(pairs)} seed(s), test metric at each run's best-validation checkpoint{unit}",
              f"{'seed':>6s} {'SPT val':>8s} {'SPT test':>9s} {'scratch val':>12s} {'scratch test':>13s} "
              f"{'gain':>7s}  {'SPT best@/budget':>16s} {'loss':>7s}  {'scratch best@/budget':>20s} {'loss':>7s}"]
    for p in pairs:
        if not p.complete:
            lines.append(f"{p.seed:6d}  not complete ({p.status})")
            continue
        lines.append(f"{p.seed:6d} {fmt(p.spt_val):>8s} {fmt(p.spt_test):>9s} {fmt(p.scratch_val):>12s} "
                     f"{fmt(p.scratch_test):>13s} {fmt(p.gain, True):>7s}  {_at(p, 'spt'):>16s} "
                     f"{_loss(p.spt_train_loss):>7s}  {_at(p, 'scratch'):>20s} {_loss(p.scratch_train_loss):>7s}")
    done = [p for p in pairs if p.complete]
    if done:
        spt_mean, spt_sd = stats.mean_std([p.spt_test for p in done])
        sc_mean, sc_sd = stats.mean_std([p.scratch_test for p in done])
        sd = lambda v: "" if v is None else f" ± {v * k:.2f} sd"  # noqa: E731
        lines.append(f"{'mean':>6s} {'':>8s} {spt_mean * k:9.2f} {'':>12s} {sc_mean * k:13.2f}")
        lines.append(f"SPT {spt_mean * k:.2f}{sd(spt_sd)}, scratch {sc_mean * k:.2f}{sd(sc_sd)}")
        p = paired(done)
        lines.append(f"mean paired gain (SPT - scratch): {stats.format_paired(p, k)}"
                     + (f"  [Student-t, {p.n - 1} dof]" if p.n > 1 else ""))
        if p.half_width is not None:
            lines.append(interval_verdict(p))
        lines += test_sampling_lines(done, k)
    lines += late_lines(done)
    return "\n".join(lines)


def test_sampling_lines(done: Sequence[Pair], k: float) -> list[str]:
    """The same gain with an interval that also resamples the test examples (the seed interval is about this
    one test set), where every seed's two runs kept their per-example outcomes."""
    if len(done) < 2 or any(p.spt_hits is None or p.scratch_hits is None for p in done):
        return []
    try:
        p = stats.paired_with_test_sampling([p.spt_hits for p in done], [p.scratch_hits for p in done])
    except UserError as err:
        return [f"with test-set sampling: none ({err})"]
    return [f"with test-set sampling (seeds and test examples resampled): {stats.format_paired(p, k)}"]


def late_lines(done: Sequence[Pair]) -> list[str]:
    """'best@/budget': a run's best-validation step / steps run, '*' past 80% of them; loss: training loss
    at the last eval. One warning per arm with late best steps."""
    lines = ["best@/budget: best-validation step / steps run (* = in the last 20% of the budget); "
             "loss: training loss at the last eval"] if done else []
    for arm, name in (("spt", "SPT (finetune)"), ("scratch", "scratch")):
        late = [p.seed for p in done if arm in late_arms(p)]
        if late:
            lines.append(f"warning: {name} reached its best validation in the last 20% of its step budget for "
                         f"seed(s) {', '.join(map(str, late))}: it may still be improving; a longer budget may "
                         f"change the comparison")
    return lines


def _at(p: Pair, arm: str) -> str:
    best, steps = getattr(p, f"{arm}_best_step"), getattr(p, f"{arm}_steps")
    if best is None:
        return "—"
    return f"{best}/{steps if steps is not None else '?'}" + ("*" if arm in late_arms(p) else "")


def _loss(value: float | None) -> str:
    return "—" if value is None else f"{value:.4f}"


def interval_verdict(p: stats.Paired) -> str:
    """One line on what the paired interval says; a degenerate one (n = 2, zero variance) says nothing."""
    if p.degenerate:
        return "the 95% interval is degenerate (n=2 or zero variance): not evidence either way; run more seeds"
    return "the 95% interval " + ("excludes 0" if p.excludes_zero else "includes 0: no significant "
                                  "difference at this number of seeds")


def write_csv(pairs: Sequence[Pair], path: Path) -> Path:
    out = io.StringIO()
    columns = [*(k for k in asdict(pairs[0]) if k not in HIT_FIELDS), "gain"] if pairs else ["seed"]
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for p in pairs:
        writer.writerow({**asdict(p), "gain": p.gain})
    atomic.write_text(Path(path), out.getvalue())
    return Path(path)


def plot(pairs: Sequence[Pair], metric: str | None, path: Path, title: str = "") -> Path:
    """(left) each seed's scratch and SPT test metric, joined; (right) per-seed gains, mean and 95% CI."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    k = scale_of(metric)
    done = [p for p in pairs if p.complete]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
    for i, p in enumerate(done):
        left.plot([0, 1], [p.scratch_test * k, p.spt_test * k], "-o", color="0.6", lw=1, ms=5, zorder=1)
        left.annotate(f"s{p.seed}", (1.03, p.spt_test * k), fontsize=8, va="center")
    if done:
        for x, values, color, name in ((0, [p.scratch_test for p in done], "tab:gray", "scratch"),
                                       (1, [p.spt_test for p in done], "tab:blue", "SPT")):
            mean, _ = stats.mean_std(values)
            left.plot([x - 0.15, x + 0.15], [mean * k] * 2, color=color, lw=3, label=f"{name} mean {mean * k:.2f}")
    left.set_xticks([0, 1], ["scratch", "SPT (pretrain → finetune)"])
    left.set_xlim(-0.4, 1.3)
    left.set_ylabel("test accuracy (%)" if metric == "accuracy" else f"test {metric}")
    left.set_title("per seed (lines join one seed's pair)")
    left.legend(loc="best", fontsize=8)
    p = paired(done)
    if p is not None:
        gains = [d * k for d in p.differences]
        right.scatter(range(len(gains)), gains, color="tab:blue", zorder=3, label="per-seed gain")
        right.axhline(0.0, color="black", lw=0.8)
        right.axhline(p.mean * k, color="tab:red", lw=1.5, label=f"mean {p.mean * k:+.2f}")
        if p.half_width is not None:
            right.axhspan(p.low * k, p.high * k, color="tab:red", alpha=0.15,
                          label=f"95% CI [{p.low * k:+.2f}, {p.high * k:+.2f}]")
        right.set_xticks(range(len(gains)), [f"s{q.seed}" for q in done])
        right.legend(loc="best", fontsize=8)
    right.set_ylabel("SPT − scratch (points)" if metric == "accuracy" else "SPT − scratch")
    right.set_title(f"paired gain, n={len(done)} (Student-t)")
    for ax in (left, right):
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
