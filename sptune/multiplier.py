"""Data multiplier: how much more labelled data scratch needs to match SPT (§3.4, Figure 3 read sideways).

At a training fraction f, SPT reaches accuracy A_spt(f). Scratch's mean accuracy curve, measured at
the fractions run, is made monotone (its running maximum: more data never counts as worse) and
interpolated linearly in log(fraction); the fraction f* where it first reaches A_spt(f) gives the
multiplier f* / f. "SPT at 10% is worth 2x the labels" is then a statement about the data, not the
accuracy scale.

    m = multipliers(records)              # records: (fraction, seed, scratch_test, spt_test)
    m[0.1].text()                         # '2.00x [1.41, 3.10]', '>10x' or '<=1x'

Outside the measured range the multiplier is a bound, never an extrapolation: '>M' when scratch never
reaches SPT's accuracy up to the largest fraction (M = largest / f), '<=m' when scratch's smallest
fraction already matches it (m = smallest / f). The 95% interval is a percentile bootstrap over seeds:
each replicate draws seeds with replacement (a seed's scratch and SPT runs at every fraction stay
together: paired across arms and fractions), with a fixed RNG seed so a report is reproducible.
Only seeds with both arms at every fraction are used.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass
from typing import Sequence

BOOTSTRAP_REPLICATES = 2000
BOOTSTRAP_SEED = 0


@dataclass(frozen=True)
class Multiplier:
    """f* / f at one fraction; `bound` is '' (inside the range), '>' or '<=' (the value is that bound)."""

    fraction: float
    value: float
    bound: str = ""
    low: float | None = None  # bootstrap interval; high may be inf (some replicates beyond the range)
    high: float | None = None
    seeds: int = 0

    def text(self) -> str:
        head = f"{self.bound}{self.value:.3g}x" if self.bound else f"{self.value:.2f}x"
        if self.low is None or self.bound:
            return head
        high = ">max" if math.isinf(self.high) else f"{self.high:.2f}"
        return f"{head} [{self.low:.2f}, {high}]"


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


def multipliers(records: Sequence[tuple[float, int, float, float]], replicates: int = BOOTSTRAP_REPLICATES,
                rng_seed: int = BOOTSTRAP_SEED, level: float = 0.95) -> dict[float, Multiplier]:
    """Per fraction, the data multiplier with its bootstrap interval; {} with fewer than two fractions."""
    by_seed: dict[int, dict[float, tuple[float, float]]] = {}
    for fraction, seed, scratch, spt in records:
        by_seed.setdefault(seed, {})[float(fraction)] = (float(scratch), float(spt))
    fractions = sorted({float(r[0]) for r in records})
    seeds = sorted(s for s, cells in by_seed.items() if set(cells) == set(fractions))
    if len(fractions) < 2 or not seeds:
        return {}
    point = point_estimates(fractions, *_arms(by_seed, seeds, fractions))
    draws = _bootstrap(by_seed, seeds, fractions, replicates, rng_seed)
    out = {}
    for f in fractions:
        value, bound = point[f]
        low, high = _percentiles(draws[f], level) if len(seeds) > 1 else (None, None)
        out[f] = Multiplier(f, value, bound, low, high, len(seeds))
    return out


def _arms(by_seed: dict[int, dict[float, tuple[float, float]]], seeds: Sequence[int], fractions: Sequence[float]
          ) -> tuple[dict[float, list[float]], dict[float, list[float]]]:
    scratch = {f: [by_seed[s][f][0] for s in seeds] for f in fractions}
    spt = {f: [by_seed[s][f][1] for s in seeds] for f in fractions}
    return scratch, spt


def _bootstrap(by_seed: dict[int, dict[float, tuple[float, float]]], seeds: Sequence[int],
               fractions: Sequence[float], replicates: int, rng_seed: int) -> dict[float, list[float]]:
    """Each replicate's multiplier per fraction; a replicate beyond the range counts as +inf."""
    rng = random.Random(rng_seed)
    draws: dict[float, list[float]] = {f: [] for f in fractions}
    for _ in range(replicates):
        sample = [rng.choice(seeds) for _ in seeds]
        for f, (value, bound) in point_estimates(fractions, *_arms(by_seed, sample, fractions)).items():
            draws[f].append(math.inf if bound == ">" else value)
    return draws


def _percentiles(values: list[float], level: float) -> tuple[float, float]:
    """The (1 - level)/2 and (1 + level)/2 empirical quantiles (nearest rank)."""
    ordered = sorted(values)
    rank = lambda q: ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]  # noqa: E731
    return rank((1 - level) / 2), rank((1 + level) / 2)


def _running_max(values: Sequence[float]):
    best = -math.inf
    for v in values:
        best = max(best, v)
        yield best
