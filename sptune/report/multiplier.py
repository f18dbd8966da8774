"""Data multiplier: how much more labelled data scratch needs to match SPT (§3.4, Figure 3 read sideways).

At a training fraction f, SPT reaches accuracy A_spt(f). Scratch's mean accuracy curve, measured at
the fractions run, is made monotone (its running maximum: more data never counts as worse) and
interpolated linearly in log(fraction); the fraction f* where it first reaches A_spt(f) gives the
multiplier f* / f. "SPT at 10% is worth 2x the labels" is then a statement about the data, not the
accuracy scale.

    m = multipliers(records)              # records: (fraction, seed, scratch_test, spt_test)
    m[0.1].text()                         # '2.00x [1.41, 3.10]', '2.00x [<=0.50, >=8.00]', '>10x' or
                                          # '2.00x [no interval: n=2, needs >= 3 seeds]'

Outside the measured range the multiplier is a bound, never an extrapolation: '>M' when scratch never
reaches SPT's accuracy up to the largest fraction (M = largest / f), '<=m' when scratch's smallest
fraction already matches it (m = smallest / f); a bound has no interval. Only seeds with both arms at
every fraction are used.

The 95% interval inverts a paired t-test, as Fieller's interval for a ratio does (Fieller 1954, JRSS B 16;
the inverse-prediction interval of calibration, Draper & Smith, Applied Regression Analysis): a log
fraction x is in the set unless the paired t-test rejects "scratch's interpolated mean at x equals SPT's
mean at f", computed on the per-seed differences d_i(x) = spt_i(f) - scratch_i(x) (scratch_i(x): seed
i's own scratch accuracies interpolated in log fraction). Interpolation is linear in the accuracies, so
at the true x the d_i are independent with mean 0 and, for normal seed noise, the t statistic is exactly
Student-t with n - 1 dof: the set covers the truth with probability exactly `level` at every n, whatever
the correlation between arms and fractions (the truth being where scratch's population curve, when it
does not decrease with data, reaches SPT's mean). Within a segment between measured fractions the condition
t(x)^2 <= q^2 is a quadratic inequality in the position, solved in closed form. The printed interval
is the set's hull, widened to the point estimate if the running maximum put it outside (a dip in
scratch's mean curve); an end that reaches a measured end is open ('<=m', '>=M': the truth may lie
beyond). It needs 3 seeds: with 2 the t quantile has 1 dof (12.7) and the interval, though valid, is not
evidence (in the benchmark's model, at fraction 1/4, it reached an end of the range 84% of the time), as
sptune.report.stats flags a 2-seed paired interval degenerate. At the fraction itself (x = log f) the test is
the paired t-test of the gains, so the interval includes 1 whenever the paired gain's interval
(sptune.report.stats.paired_t) includes 0.

Why not the percentile bootstrap over seeds used before: with n seeds it has only C(2n-1, n) distinct
resamples (10 at n = 3) and is too narrow at small n (Hesterberg 2015, "What teachers should know about
the bootstrap", The American Statistician 69: it uses z where t is due and sd with n, not n - 1);
benchmarks/interval_coverage.py measured its coverage at nominal 95% at 72-78% (n = 3), 80-87% (n = 5)
and 87-92% (n = 10); this interval's is 94.1% or more in every cell with symmetric noise
(docs/benchmarks.md).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

from sptune.report import stats

MIN_SEEDS = 3


@dataclass(frozen=True)
class Multiplier:
    """f* / f at one fraction; `bound` is '' (inside the range), '>' or '<=' (the value is that bound)."""

    fraction: float
    value: float
    bound: str = ""
    low: float | None = None  # the interval; None when there is none (`reason` says why)
    high: float | None = None
    seeds: int = 0
    low_open: bool = False  # the interval reaches the smallest fraction run: the truth may lie below `low`
    high_open: bool = False  # it reaches the largest: the truth may lie above `high`
    reason: str = ""

    def text(self) -> str:
        head = f"{self.bound}{self.value:.3g}x" if self.bound else f"{self.value:.2f}x"
        if self.bound:
            return head
        if self.low is None:
            return f"{head} [no interval: {self.reason}]"
        low = f"<={self.low:.2f}" if self.low_open else f"{self.low:.2f}"
        high = f">={self.high:.2f}" if self.high_open else f"{self.high:.2f}"
        return f"{head} [{low}, {high}]"


def fraction_needed(fractions: Sequence[float], scratch_means: Sequence[float], target: float
                    ) -> tuple[float, str]:
    """The fraction where scratch's monotone curve (running max, linear in log f) reaches `target`:
    (f*, ''), or (largest fraction, '>') when it never does, or (smallest, '<=') when it starts above."""
    order = sorted(range(len(fractions)), key=lambda i: fractions[i])
    xs = [math.log(fractions[i]) for i in order]
    envelope = list(_running_max([scratch_means[i] for i in order]))
    if target <= envelope[0]:
        return math.exp(xs[0]), "<="
    for i in range(1, len(xs)):
        if envelope[i] >= target:
            rise = envelope[i] - envelope[i - 1]  # > 0: envelope[i - 1] < target <= envelope[i]
            return math.exp(xs[i - 1] + (target - envelope[i - 1]) / rise * (xs[i] - xs[i - 1])), ""
    return math.exp(xs[-1]), ">"


def point_estimates(fractions: Sequence[float], scratch: dict[float, list[float]], spt: dict[float, list[float]]
                    ) -> dict[float, tuple[float, str]]:
    """Per fraction: (multiplier or its bound, bound) from the arms' mean accuracies."""
    scratch_means = [statistics.fmean(scratch[f]) for f in fractions]
    out = {}
    for f in fractions:
        needed, bound = fraction_needed(fractions, scratch_means, statistics.fmean(spt[f]))
        out[f] = (needed / f, bound)
    return out


def multipliers(records: Sequence[tuple[float, int, float, float]], level: float = 0.95
                ) -> dict[float, Multiplier]:
    """Per fraction, the data multiplier with its interval (or the reason for none); {} with fewer than two
    fractions."""
    by_seed: dict[int, dict[float, tuple[float, float]]] = {}
    for fraction, seed, scratch, spt in records:
        by_seed.setdefault(seed, {})[float(fraction)] = (float(scratch), float(spt))
    fractions = sorted({float(r[0]) for r in records})
    seeds = sorted(s for s, cells in by_seed.items() if set(cells) == set(fractions))
    if len(fractions) < 2 or not seeds:
        return {}
    scratch = {f: [by_seed[s][f][0] for s in seeds] for f in fractions}
    spt = {f: [by_seed[s][f][1] for s in seeds] for f in fractions}
    out = {}
    for f, (value, bound) in point_estimates(fractions, scratch, spt).items():
        if bound:
            out[f] = Multiplier(f, value, bound, seeds=len(seeds), reason="the multiplier is a bound")
        elif len(seeds) < MIN_SEEDS:
            out[f] = Multiplier(f, value, seeds=len(seeds), reason=f"n={len(seeds)}, needs >= {MIN_SEEDS} seeds")
        else:
            low, high = inverted_t_test(fractions, scratch, spt[f], level, math.log(value * f))
            out[f] = Multiplier(f, value, "", math.exp(low) / f, math.exp(high) / f, len(seeds),
                                low_open=low <= math.log(fractions[0]), high_open=high >= math.log(fractions[-1]))
    return out


def inverted_t_test(fractions: Sequence[float], scratch: dict[float, list[float]], spt: Sequence[float],
                   level: float, point: float) -> tuple[float, float]:
    """The hull (in log fraction) of the x where the paired t-test of mean(spt_i - scratch_i(x)) = 0 does not
    reject at 1 - level, over the measured range; widened to `point`. Fractions sorted ascending."""
    q = stats.t_quantile(0.5 + level / 2, len(spt) - 1)
    xs = [math.log(f) for f in fractions]
    kept = [point]
    for k in range(1, len(fractions)):
        u = [s - c for s, c in zip(spt, scratch[fractions[k - 1]])]
        v = [b - a for a, b in zip(scratch[fractions[k - 1]], scratch[fractions[k]])]
        kept += [(1 - w) * xs[k - 1] + w * xs[k] for w in not_rejected(u, v, q)]
    return min(kept), max(kept)


def not_rejected(u: Sequence[float], v: Sequence[float], q: float) -> list[float]:
    """The extreme w in [0, 1] (none, or its min and max) where d_i = u_i - w v_i passes the t-test of mean 0:
    n mean(d)^2 <= q^2 var(d), i.e. a w^2 + b w + c <= 0 (Fieller's quadratic, sample (co)variances)."""
    n = len(u)
    mu, mv = statistics.fmean(u), statistics.fmean(v)
    cuu, cvv, cuv = statistics.variance(u), statistics.variance(v), statistics.covariance(u, v)
    a, b, c = n * mv * mv - q * q * cvv, -2 * (n * mu * mv - q * q * cuv), n * mu * mu - q * q * cuu
    kept = [w for w in (0.0, 1.0) if (a * w + b) * w + c <= 0] + [r for r in _roots(a, b, c) if 0 <= r <= 1]
    return [min(kept), max(kept)] if kept else []


def _roots(a: float, b: float, c: float) -> list[float]:
    """Real roots of a w^2 + b w + c (numerically stable form; a linear or constant one handled)."""
    if a == 0:
        return [] if b == 0 else [-c / b]
    disc = b * b - 4 * a * c
    if disc < 0:
        return []
    s = -0.5 * (b + math.copysign(math.sqrt(disc), b))
    return [s / a, c / s] if s != 0 else [0.0]


def _running_max(values: Sequence[float]):
    best = -math.inf
    for v in values:
        best = max(best, v)
        yield best
