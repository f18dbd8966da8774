"""The one statistics module: mean ± std over seeds, and the paired comparison of SPT with scratch.

    paired = paired_t(spt_values, scratch_values)     # per-seed pairs (same seed, same data)
    paired.mean, paired.low, paired.high               # mean paired gain and its 95% Student-t interval
    format_paired(paired, scale=100)                   # "+3.10 ± 1.96 (95% CI [+1.14, +5.06], n=5)"
    paired_with_test_sampling(spt_hits, scratch_hits)  # the same gain; its interval also resamples the test set

The interval is the textbook one for paired differences d_i = spt_i - scratch_i over n seeds:
mean(d) ± t_{1-alpha/2, n-1} * sd(d) / sqrt(n), sd with n - 1 in the denominator. Pairing by seed
removes what two arms of one seed share (the seed's data order, and its train / val split), so the
interval is about the gain, not about each arm's spread. With n = 1 there is no interval.

What each interval covers. The seed interval (paired_t, and the contrasts of paired differences built
on it) covers seed-to-seed variation: the initialisation and data order a run seed decides. The train /
val split is one fixed draw for every seed unless task.resample_splits=true, which draws it from the run
seed; only then does the seed interval also cover split-to-split variation. The test set is one fixed
draw for every run: only the interval "with test-set sampling" (paired_with_test_sampling) also covers
the sampling of test examples.

The seed interval is conditional on the one test set every run was scored on (e.g. 242 series). The gain on
the population of examples that test set was drawn from also varies with the draw: `paired_with_test_sampling`
treats seeds and test examples both as samples. From per-example outcomes (result.json's `test_hits`, one
'0'/'1' per test example, in the split's order, which no run seed changes), the n x m table
d_ij = a_ij - b_ij (seed i, test example j) is a crossed two-way random-effects design,
    d_ij = gain + s_i + x_j + e_ij     (seed, example and seed x example effects, variances σ²_s, σ²_x, σ²_e),
whose grand mean (paired_t's point estimate on the runs' accuracies) has the variance
    Var = σ²_s / n + σ²_x / m + σ²_e / (n m),   estimated by (MS_seed + MS_example - MS_residual) / (n m)
from the ANOVA mean squares (E[MS_seed] = m σ²_s + σ²_e, E[MS_example] = n σ²_x + σ²_e,
E[MS_residual] = σ²_e); details in crossed_interval.

Degenerate intervals: with n = 2 the t quantile has one degree of freedom (12.7) and sd rests on a
single difference, and with zero variance the interval has width 0. Both are computed but flagged
`degenerate`; a degenerate interval is never reported as excluding 0. NaN or inf inputs raise ValueError.

Pure Python (no scipy): the t quantile inverts the Student-t CDF, written with the regularized
incomplete beta function (continued fraction, Numerical Recipes 6.4), by bisection.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from sptune.errors import UserError


@dataclass(frozen=True)
class Paired:
    """The paired comparison of two arms over n seeds (a - b per seed)."""

    n: int
    mean: float  # mean difference
    sd: float | None  # sample standard deviation of the differences (n - 1); None for n < 2
    half_width: float | None  # t_{1-alpha/2, n-1} * sd / sqrt(n); None for n < 2
    level: float  # confidence level, e.g. 0.95
    differences: tuple[float, ...]
    degenerate: bool = False  # n == 2 or zero variance: the interval is not evidence either way

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width

    @property
    def excludes_zero(self) -> bool:
        """Whether the interval lies entirely on one side of 0 (a 'significant' paired gain)."""
        if self.half_width is None or self.degenerate:
            return False
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict:
        return {"n": self.n, "mean": self.mean, "sd": self.sd, "half_width": self.half_width, "low": self.low,
                "high": self.high, "level": self.level, "excludes_zero": self.excludes_zero,
                "degenerate": self.degenerate, "differences": list(self.differences)}


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1); (None, None) for no values, std None for one."""
    values = finite_floats(values, "mean_std")
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def paired_t(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Paired:
    """Mean of a_i - b_i with its Student-t confidence interval (n - 1 degrees of freedom)."""
    if len(a) != len(b):
        raise ValueError(f"paired_t needs pairs: got {len(a)} and {len(b)} values")
    a, b = finite_floats(a, "paired_t"), finite_floats(b, "paired_t")
    return t_interval([x - y for x, y in zip(a, b)], level)


def finite_floats(values: Sequence[float], caller: str) -> list[float]:
    """`values` as floats; ValueError naming the position of a NaN or infinite value (a diverged run)."""
    out = [float(v) for v in values]
    bad = [i for i, v in enumerate(out) if not math.isfinite(v)]
    if bad:
        raise ValueError(f"{caller} got a non-finite value ({out[bad[0]]}) at position {bad[0]}: "
                         "drop or rerun the diverged seed before computing statistics")
    return out


def t_interval(differences: Sequence[float], level: float = 0.95) -> Paired:
    """The one-sample Student-t interval of the mean of `differences`."""
    d = tuple(finite_floats(differences, "t_interval"))
    if not d:
        raise ValueError("t_interval needs at least one value")
    check_level(level)
    n = len(d)
    mean = statistics.fmean(d)
    if n < 2:
        return Paired(n, mean, None, None, level, d)
    sd = statistics.stdev(d)
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return Paired(n, mean, sd, half, level, d, degenerate=(n == 2 or sd == 0.0))


def p_value(p: Paired) -> float | None:
    """The two-sided p of the paired t-test that the mean difference is 0; None without a usable interval."""
    if p.sd is None or p.sd == 0.0:
        return None
    return 2.0 * t_cdf(-abs(p.mean) / (p.sd / math.sqrt(p.n)), p.n - 1)


def simultaneous(intervals: Sequence[Paired]) -> list[Paired]:
    """The intervals widened so that ALL of them cover together with the first one's level (Bonferroni: each at
    1 - (1 - level) / k). A report that reads k null gains at 95% each would otherwise call one of them
    'significant' with probability up to k * 5% (1 - 0.95^k = 19% for 4 independent ones)."""
    if not intervals:
        return []
    level = 1.0 - (1.0 - intervals[0].level) / len(intervals)
    return [t_interval(p.differences, level) for p in intervals]


def check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")


# ----------------------------------------------------------------------------- seeds and test examples sampled
def paired_with_test_sampling(a_hits: Sequence[str | Sequence[int]], b_hits: Sequence[str | Sequence[int]],
                              level: float = 0.95) -> Paired:
    """The mean of a - b over seeds AND test examples, with an interval that resamples both: a_hits[i] and
    b_hits[i] are seed i's per-example outcomes ('0'/'1' strings, result.json's `test_hits`) on one test set."""
    if len(a_hits) != len(b_hits):
        raise ValueError(f"paired_with_test_sampling needs pairs: got {len(a_hits)} and {len(b_hits)} seeds")
    return contrast_with_test_sampling(list(zip(a_hits, b_hits)), (1, -1), level)


def contrast_with_test_sampling(runs: Sequence[Sequence[str | Sequence[int]]], signs: Sequence[int],
                                level: float = 0.95) -> Paired:
    """sum_k signs[k] * run k's outcome, per seed and test example, averaged, with the crossed interval
    (crossed_interval): runs[i] holds seed i's hit strings, one per sign (a gain: (1, -1))."""
    parsed = [[hit_list(hits) for hits in seed_runs] for seed_runs in runs]  # (n, K, m)
    lengths = sorted({len(hits) for seed_runs in parsed for hits in seed_runs})
    if len(lengths) > 1:
        raise UserError(f"test outcomes of {lengths[0]} and {lengths[-1]} examples: the runs were not scored on "
                        "one test set (same task, same task.max_test_examples)")
    table = [[sum(s * h for s, h in zip(signs, outcomes)) for outcomes in zip(*seed_runs)] for seed_runs in parsed]
    return crossed_interval(table, level)


HIT_VALUES = {"0": 0, "1": 1, 0: 0, 1: 1}  # True and False hash as 1 and 0


def hit_list(hits: str | Sequence[int]) -> list[int]:
    """Per-example outcomes as 0/1 ints, from a '0'/'1' string (result.json's `test_hits`) or 0/1 values."""
    try:
        return [HIT_VALUES[h] for h in hits]
    except (KeyError, TypeError):
        raise UserError(f"test outcomes must be 0 or 1, got {str(hits)[:40]!r}: a corrupted result.json") from None


def crossed_interval(table: Sequence[Sequence[int]], level: float = 0.95) -> Paired:
    """The grand mean of an n seeds x m test examples table of integers with its interval when both the
    seeds and the examples are samples (module docstring). mean ± t_{1-alpha/2, n-1} sqrt(V), where

        V = max(MS_seed + MS_example - MS_residual, MS_seed, MS_example) / (n m).

    The floor: each one-way part estimates less than the whole (E[MS_seed] / (n m) = σ²_s / n + σ²_e / (n m),
    E[MS_example] / (n m) = σ²_x / m + σ²_e / (n m)), and the moment combination can fall below either,
    even below 0, by chance. MS_seed / (n m) is paired_t's variance, so this interval always contains the
    seed interval. n - 1 degrees of freedom, conservative: V combines MS_seed (n - 1 dof) with mean squares
    of m - 1 and (n - 1)(m - 1) dof, so its effective dof (Satterthwaite) runs from about n - 1, when the
    seeds' part dominates, to far more, when the test examples' does; t_{n-1} is the widest quantile of that
    range (benchmarks/interval_coverage.py, at 3 / 5 / 10 seeds: 97.5 / 95.2 / 95.0% coverage when the seeds
    dominate, 99.9 / 99.0 / 98.0% when the test set does). n < 2 (or m < 2): no interval, as in paired_t."""
    check_level(level)
    if not table:
        raise ValueError("crossed_interval needs at least one seed")
    n, m = len(table), len(table[0])
    if m == 0:
        raise UserError("no test outcomes to compare: the runs' test_hits are empty")
    if any(len(row) != m for row in table):
        raise UserError(f"test outcome rows of {m} and {next(len(r) for r in table if len(r) != m)} examples: "
                        "every seed must be scored on the same test set")
    seed_means = tuple(sum(row) / m for row in table)
    mean = sum(map(sum, table)) / (n * m)
    if n < 2 or m < 2:
        return Paired(n, mean, None, None, level, seed_means)
    ms_seed, ms_example, ms_residual = crossed_mean_squares(table)
    variance = float(max(ms_seed + ms_example - ms_residual, ms_seed, ms_example)) / (n * m)
    half = t_quantile(0.5 + level / 2, n - 1) * math.sqrt(variance)
    return Paired(n, mean, statistics.stdev(seed_means), half, level, seed_means,
                  degenerate=(n == 2 or variance == 0.0))


def crossed_mean_squares(table: Sequence[Sequence[int]]) -> tuple[Fraction, Fraction, Fraction]:
    """(MS_seed, MS_example, MS_residual) of a two-way table with one cell per seed x example. Integer
    entries: the sums of squares are exact fractions, so the difference of large sums loses nothing."""
    n, m = len(table), len(table[0])
    row_sums = [sum(row) for row in table]
    col_sums = [sum(col) for col in zip(*table)]
    correction = Fraction(sum(row_sums) ** 2, n * m)
    ss_seed = Fraction(sum(r * r for r in row_sums), m) - correction
    ss_example = Fraction(sum(c * c for c in col_sums), n) - correction
    ss_total = sum(x * x for row in table for x in row) - correction
    ss_residual = ss_total - ss_seed - ss_example
    return ss_seed / (n - 1), ss_example / (m - 1), ss_residual / ((n - 1) * (m - 1))


def format_paired(p: Paired, scale: float = 1.0, digits: int = 2) -> str:
    """'+3.10 ± 1.96 (95% CI [+1.14, +5.06], n=5)'; values multiplied by `scale` (100: accuracy in points)."""
    m = p.mean * scale
    if p.half_width is None:
        return f"{m:+.{digits}f} (n={p.n}, no interval)"
    flag = ", degenerate: " + degeneracy(p) if p.degenerate else ""
    return (f"{m:+.{digits}f} ± {p.half_width * scale:.{digits}f} ({p.level:.0%} CI [{p.low * scale:+.{digits}f}, "
            f"{p.high * scale:+.{digits}f}], n={p.n}{flag})")


def degeneracy(p: Paired) -> str:
    """Why a degenerate interval is not evidence: 'n=2' or 'zero variance'."""
    return "n=2" if p.n == 2 else "zero variance"


# ----------------------------------------------------------------------------- Student-t distribution
def t_cdf(t: float, dof: float) -> float:
    """P(T <= t) for Student's t with `dof` degrees of freedom."""
    if dof <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {dof}")
    x = dof / (dof + t * t)
    tail = 0.5 * betainc(dof / 2.0, 0.5, x)  # P(T > |t|)
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, dof: float) -> float:
    """The p-quantile of Student's t (e.g. t_quantile(0.975, 4) = 2.7764), by bisection on t_cdf."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile probability must be in (0, 1), got {p}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_quantile(1.0 - p, dof)
    low, high = 0.0, 1.0
    while t_cdf(high, dof) < p:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if t_cdf(mid, dof) < p:
            low = mid
        else:
            high = mid
        if high - low < 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < eps:
            break
    return h
