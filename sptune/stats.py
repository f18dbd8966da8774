"""The one statistics module: mean ± std over seeds, and the paired comparison of SPT with scratch.

    paired = paired_t(spt_values, scratch_values)     # per-seed pairs (same seed, same data)
    paired.mean, paired.low, paired.high               # mean paired gain and its 95% Student-t interval
    format_paired(paired, scale=100)                   # "+3.10 ± 1.96 (95% CI [+1.14, +5.06], n=5)"

The interval is the textbook one for paired differences d_i = spt_i - scratch_i over n seeds:
mean(d) ± t_{1-alpha/2, n-1} * sd(d) / sqrt(n), sd with n - 1 in the denominator. Pairing by seed
removes what two arms of one seed share (the validation/test split, the seed's data order), so the
interval is about the gain, not about each arm's spread. With n = 1 there is no interval.

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
from typing import Sequence


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
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence level must be in (0, 1), got {level}")
    n = len(d)
    mean = statistics.fmean(d)
    if n < 2:
        return Paired(n, mean, None, None, level, d)
    sd = statistics.stdev(d)
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return Paired(n, mean, sd, half, level, d, degenerate=(n == 2 or sd == 0.0))


def format_paired(p: Paired, scale: float = 1.0, digits: int = 2) -> str:
    """'+3.10 ± 1.96 (95% CI [+1.14, +5.06], n=5)'; values multiplied by `scale` (100: accuracy in points)."""
    m = p.mean * scale
    if p.half_width is None:
        return f"{m:+.{digits}f} (n={p.n}, no interval)"
    flag = ", degenerate: " + ("n=2" if p.n == 2 else "zero variance") if p.degenerate else ""
    return (f"{m:+.{digits}f} ± {p.half_width * scale:.{digits}f} ({p.level:.0%} CI [{p.low * scale:+.{digits}f}, "
            f"{p.high * scale:+.{digits}f}], n={p.n}{flag})")


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
