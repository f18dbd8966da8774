"""Group-sequential designs for a paired endpoint over seeds: look at the seeds as batches finish, stop early
when the endpoint is settled, and keep the two-sided type I error at alpha over all the looks.

A design declares, before the first look: K looks at equally spaced numbers of seeds (`look_sizes`: round(N k / K)
of N planned seeds), alpha, an alpha-spending function and, optionally, a non-binding futility rule. The
statistic at look k is the paired one-sample t of the endpoint's per-seed values over the first n_k seeds (in
seed order), t_k = mean / (sd / sqrt(n_k)).

    spent(t, alpha, family)            Lan & DeMets (1983) alpha spending at information fraction t = n_k / N, each
                                       side alpha / 2: O'Brien-Fleming-type 4 - 4 Phi(z_{1-alpha/4} / sqrt(t)) in
                                       all (z bounds 4.33, 2.96, 2.36, 2.01 at K = 4, as gsDesign and ldbounds),
                                       Pocock-type alpha ln(1 + (e - 1) t) (2.37, 2.37, 2.36, 2.35)
    crossings(bounds, fractions, drift) P(first crossing at look k, above and below) for the score process
                                       (Brownian motion with drift, observed at the fractions), by the recursive
                                       numerical integration of Armitage, McPherson & Rowe (1969), Jennison &
                                       Turnbull (2000) ch. 19: the density of Z_k on the continuation region,
                                       propagated look to look on a Simpson grid
    spending_bounds(fractions, alpha, family)   the z bound of each look: the smallest c_k whose crossing
                                       probability under H0 (given no earlier crossing) is the alpha spent
                                       between looks k - 1 and k, solved by bisection
    classical_bounds(looks, alpha, delta)   Wang & Tsiatis (1987) bounds c_k = C (k / K)^(delta - 1/2) for K
                                       equally spaced looks: delta = 0 the classical O'Brien & Fleming (1979)
                                       test (4.05, 2.86, 2.34, 2.02 at K = 4), delta = 1/2 Pocock's (1977)
                                       (2.36 at K = 4). Reference values for the integration; designs spend alpha
    calibrated_t_bounds(...)           the critical t at each look, which a design uses: the per-seed SD is
                                       estimated from few seeds, so a z bound on t rejects far too often (8.6%
                                       instead of 5% for O'Brien-Fleming at 5/10/15/20 seeds). Look 1 takes the
                                       exact t quantile of the alpha spent there; each later look the |t| that the
                                       alpha spent there crosses first among Monte Carlo experiments with normal
                                       per-seed values (200 000, seed 0, drawn through the sufficient statistics),
                                       so the type I error is alpha up to about 0.05% (benchmarks/
                                       sequential_error_rates.py). design.json stores them at declaration
    t_bound(z, dof)                    the approximation they replace, Jennison & Turnbull (2000) §3.8's
                                       "significance level approach": the t quantile with the z bound's nominal
                                       one-sided tail Phi(-z); slightly liberal with few seeds (5.3% for Pocock at
                                       5/10/15/20 seeds)
    conditional_power(z, fraction, final_bound)   the futility rule: the probability of crossing the final
                                       bound given the look's z under the current trend, Phi((|z| / sqrt(t) - c_K)
                                       / sqrt(1 - t)) (Lan, Simon & Halperin 1982; Jennison & Turnbull ch. 10).
                                       Non-binding: the efficacy bounds ignore it, so continuing past a futility
                                       stop keeps the type I error at most alpha
    run_looks(design, values)          each look reached: t, bounds, the repeated confidence interval
                                       mean -+ t_bound_k sd / sqrt(n_k) (Jennison & Turnbull ch. 9: all looks'
                                       intervals cover together with probability 1 - alpha), the verdict
    simulate(design, effect, ...)      Monte Carlo of the whole design (a seeded numpy generator): how often it
                                       rejects, stops for futility, and the mean seeds used

Only two-sided tests: the endpoints (a gain, a gap change) may go either way.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from statistics import NormalDist
from typing import Any, Sequence

import numpy as np

from sptune import atomic
from sptune.errors import UserError
from sptune.report import stats

DESIGN_FILE = "design.json"
SPENDING = ("obrien-fleming", "pocock")
FUTILITY_RULE = "conditional power under the current trend below the threshold (non-binding)"
CALIBRATION_REPLICATES = 200_000  # the t bounds' Monte Carlo: alpha to about +-0.05% (1 SE)
MIN_CROSSINGS = 20
# Simpson step on the z scale, at most 1/8 of the sd of Z's step between the closest two looks (their kernel):
# bounds agree with a 20x finer grid to 1e-5.
GRID_STEP = 0.05
Z_CAP = 12.0  # a look that spends no alpha: no bound; its continuation region is cut here (tail < 1e-32)
_NORMAL = NormalDist()


# ----------------------------------------------------------------------------- normal distribution, vectorized
def _erfc():
    try:
        from scipy.special import erfc  # vectorized C
        return erfc
    except ImportError:  # the same function, one value at a time (slower, as exact)
        return np.frompyfunc(math.erfc, 1, 1)


_ERFC = _erfc()


def normal_cdf(x: np.ndarray | float) -> np.ndarray:
    """Phi(x), elementwise; the tail through erfc keeps its relative precision far out (Phi(-8) = 6e-16)."""
    return 0.5 * np.asarray(_ERFC(-np.asarray(x, dtype=float) / math.sqrt(2.0)), dtype=float)


def normal_pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


# ----------------------------------------------------------------------------- alpha spending
def spent(t: float, alpha: float, family: str) -> float:
    """The alpha spent by information fraction t (two-sided; Lan & DeMets 1983); all of it at t >= 1."""
    if t >= 1.0:
        return alpha
    if t <= 0.0:
        return 0.0
    if family == "obrien-fleming":  # each side spends alpha / 2 by the one-sided function (gsDesign, ldbounds)
        return float(4.0 * normal_cdf(-_NORMAL.inv_cdf(1.0 - alpha / 4.0) / math.sqrt(t)))
    if family == "pocock":
        return alpha * math.log(1.0 + (math.e - 1.0) * t)
    raise UserError(f"unknown spending function {family!r}: use one of {', '.join(SPENDING)}")


# ----------------------------------------------------------------------------- recursive numerical integration
def _simpson(c: float, step: float) -> tuple[np.ndarray, np.ndarray]:
    """Points and Simpson weights on [-c, c] (an even number of intervals of at most `step`)."""
    intervals = max(2, 2 * math.ceil(c / step))
    z = np.linspace(-c, c, intervals + 1)
    w = np.full(intervals + 1, 2.0)
    w[1::2], w[0], w[-1] = 4.0, 1.0, 1.0
    return z, w * (2.0 * c / intervals) / 3.0


@dataclass
class _Continuation:
    """The sub-density of Z_k on the continuation region (-c_k, c_k) at fraction t_k: points, weights, values."""

    t: float
    z: np.ndarray
    w: np.ndarray
    density: np.ndarray

    def next_moments(self, t_next: float, drift: float) -> tuple[np.ndarray, float]:
        """Mean of Z_{k+1} given each grid point, and its sd: the score Z sqrt(t) gains N(drift dt, dt)."""
        dt = t_next - self.t
        return (self.z * math.sqrt(self.t) + drift * dt) / math.sqrt(t_next), math.sqrt(dt / t_next)

    def crossing(self, c: float, t_next: float, drift: float) -> tuple[float, float]:
        """P(no crossing before, Z_{k+1} >= c) and P(no crossing before, Z_{k+1} <= -c)."""
        mean, sd = self.next_moments(t_next, drift)
        mass = self.w * self.density
        return float(mass @ normal_cdf((mean - c) / sd)), float(mass @ normal_cdf((-c - mean) / sd))

    def advance(self, c: float, t_next: float, drift: float, step: float) -> "_Continuation":
        mean, sd = self.next_moments(t_next, drift)
        z, w = _simpson(min(c, Z_CAP), step)
        kernel = normal_pdf((z[:, None] - mean[None, :]) / sd) / sd
        return _Continuation(t_next, z, w, kernel @ (self.w * self.density))


def _grid_step(fractions: Sequence[float], step: float) -> float:
    """`step`, or less where two looks are close: Z's step between them (sd sqrt(1 - t_k / t_k+1)) is sharp."""
    sds = [math.sqrt(1.0 - a / b) for a, b in zip(fractions, fractions[1:])]
    return min([step] + [sd / 8.0 for sd in sds])


def _first(c: float, t: float, drift: float, step: float) -> tuple[tuple[float, float], _Continuation]:
    mean = drift * math.sqrt(t)
    z, w = _simpson(min(c, Z_CAP), step)
    up, down = float(normal_cdf(mean - c)), float(normal_cdf(-c - mean))
    return (up, down), _Continuation(t, z, w, normal_pdf(z - mean))


def crossings(bounds: Sequence[float], fractions: Sequence[float], drift: float = 0.0,
              step: float = GRID_STEP) -> list[tuple[float, float]]:
    """P(first crossing at look k above c_k, below -c_k) for each look; `drift`: E[Z] at t = 1 (0 under H0)."""
    _check_fractions(fractions)
    step = _grid_step(fractions, step)
    out: list[tuple[float, float]] = []
    state: _Continuation | None = None
    for c, t in zip(bounds, fractions):
        if state is None:
            probabilities, state = _first(c, t, drift, step)
        else:
            probabilities = state.crossing(c, t, drift)
            state = state.advance(c, t, drift, step)
        out.append(probabilities)
    return out


def spending_bounds(fractions: Sequence[float], alpha: float = 0.05, family: str = "obrien-fleming",
                    step: float = GRID_STEP) -> list[float]:
    """Two-sided z bounds that spend alpha by `family` at `fractions` (the last is 1: all alpha spent there)."""
    _check_fractions(fractions)
    _check_alpha(alpha)
    step = _grid_step(fractions, step)
    bounds: list[float] = []
    state: _Continuation | None = None
    previous = 0.0
    for t in fractions:
        target = spent(t, alpha, family) - previous
        previous += target
        if state is None:
            c = -_NORMAL.inv_cdf(target / 2.0) if target > 0 else math.inf
            _, state = _first(c, t, 0.0, step)
        else:
            c = _solve(lambda x, s=state, t=t: sum(s.crossing(x, t, 0.0)), target)
            state = state.advance(c, t, 0.0, step)
        bounds.append(c)
    return bounds


def classical_bounds(looks: int, alpha: float = 0.05, delta: float = 0.0, step: float = GRID_STEP) -> list[float]:
    """Wang & Tsiatis bounds C (k / K)^(delta - 1/2) for K equally spaced looks whose total two-sided crossing
    probability under H0 is alpha: delta 0 O'Brien & Fleming's, 1/2 Pocock's."""
    fractions = [k / looks for k in range(1, looks + 1)]
    shape = [t ** (delta - 0.5) for t in fractions]
    total = lambda scale: sum(sum(p) for p in crossings([scale * s for s in shape], fractions, 0.0, step))
    scale = _solve(total, alpha)
    return [scale * s for s in shape]


def _solve(probability, target: float) -> float:
    """The c where the decreasing `probability(c)` equals `target` (bisection on [0, Z_CAP])."""
    if target <= 0.0:
        return math.inf
    low, high = 0.0, Z_CAP
    for _ in range(40):  # 1e-11 on the z scale
        mid = 0.5 * (low + high)
        low, high = (mid, high) if probability(mid) > target else (low, mid)
    return 0.5 * (low + high)


def _check_fractions(fractions: Sequence[float]) -> None:
    if not fractions or any(b <= a for a, b in zip(fractions, fractions[1:])) or not 0 < fractions[0] \
            or fractions[-1] > 1.0 + 1e-12:
        raise ValueError(f"information fractions must increase within (0, 1], got {list(fractions)}")


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 0.5:
        raise UserError(f"alpha must be in (0, 0.5), got {alpha}: e.g. --alpha 0.05")


# ----------------------------------------------------------------------------- t statistics
def t_tail(t: float, dof: float) -> float:
    """P(T > t) for t >= 0, Student's t with `dof` degrees of freedom (no 1 - cdf: exact far out)."""
    return 0.5 * stats.betainc(dof / 2.0, 0.5, dof / (dof + t * t))


def t_bound(z: float, dof: float) -> float:
    """The critical t with the z bound's one-sided nominal tail Phi(-z) (Jennison & Turnbull 2000, §3.8)."""
    return math.inf if math.isinf(z) else t_upper(float(normal_cdf(-z)), dof)


def t_upper(tail: float, dof: float) -> float:
    """The t with P(T > t) = tail, by bisection on t_tail."""
    low, high = 0.0, 1.0
    while t_tail(high, dof) > tail:
        high *= 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        low, high = (mid, high) if t_tail(mid, dof) > tail else (low, mid)
        if high - low < 1e-10 * high:
            break
    return 0.5 * (low + high)


def z_equivalent(t: float, dof: float) -> float:
    """The z with t's one-sided nominal tail, sign kept (for the conditional power of a t statistic)."""
    tail = max(t_tail(abs(t), dof), 1e-300)
    return math.copysign(-_NORMAL.inv_cdf(tail) if tail < 0.5 else 0.0, t)


def conditional_power(z: float, fraction: float, final_bound: float) -> float:
    """P(cross the final bound | Z = z at `fraction`) under the trend z / sqrt(fraction), toward z's side."""
    if fraction >= 1.0:
        return 1.0 if abs(z) >= final_bound else 0.0
    return float(normal_cdf((abs(z) / math.sqrt(fraction) - final_bound) / math.sqrt(1.0 - fraction)))


def calibrated_t_bounds(sizes: Sequence[int], alpha: float, family: str, z_bounds: Sequence[float],
                        replicates: int = CALIBRATION_REPLICATES, seed: int = 0) -> list[float]:
    """Critical t's whose first-crossing probability at each look, for normal per-seed values under H0, is the
    alpha spent there: look 1 exactly (the t quantile at n_1 - 1 dof), later looks by Monte Carlo over `replicates`
    simulated experiments (a numpy generator seeded with `seed`; each look draws the new seeds' mean and sum of
    squares, the sufficient statistics). A look that spends fewer than MIN_CROSSINGS of the replicates keeps the
    significance-level bound t_bound(z), whose error is then negligible."""
    rng = np.random.default_rng(seed)
    mean, squares = np.zeros(replicates), np.zeros(replicates)  # running mean and sum of squared deviations
    alive = np.ones(replicates, dtype=bool)
    bounds: list[float] = []
    before, spent_before = 0, 0.0
    for n, z in zip(sizes, z_bounds):
        increment = spent(n / sizes[-1], alpha, family) - spent_before
        spent_before += increment
        m = n - before
        batch_mean = rng.standard_normal(replicates) / math.sqrt(m)
        batch_squares = rng.chisquare(m - 1, replicates) if m > 1 else np.zeros(replicates)
        squares += batch_squares + before * m / n * (mean - batch_mean) ** 2
        mean = (before * mean + m * batch_mean) / n
        t = np.abs(mean) / np.sqrt(squares / ((n - 1) * n))
        crossings = round(increment * replicates)
        if not bounds:
            c = t_upper(increment / 2.0, n - 1) if increment > 0 else math.inf
        elif crossings < MIN_CROSSINGS or crossings >= alive.sum():
            c = t_bound(z, n - 1)
        else:  # between the crossings-th and the next largest |t| of the experiments still running
            top = -np.sort(-t[alive])[:crossings + 1]
            c = float(0.5 * (top[-2] + top[-1]))
        alive &= t < c
        bounds.append(c)
        before = n
    return bounds


# ----------------------------------------------------------------------------- the declared design
@dataclass(frozen=True)
class Design:
    """K looks over `seeds` planned seeds, two-sided `alpha` spent by `spending`; `futility`: the conditional-power
    threshold below which a look before the last says stop for futility (None: no futility rule)."""

    looks: int
    seeds: int
    spending: str = "obrien-fleming"
    alpha: float = 0.05
    futility: float | None = None
    endpoint: str = "gap change"
    stored_t_bounds: tuple[float, ...] | None = field(default=None, compare=False, repr=False)  # design.json's

    def __post_init__(self) -> None:
        if self.looks < 1:
            raise UserError(f"--looks must be >= 1, got {self.looks}")
        if self.spending not in SPENDING:
            raise UserError(f"unknown spending function {self.spending!r}: use --spending "
                            f"{' or --spending '.join(SPENDING)}")
        _check_alpha(self.alpha)
        if self.futility is not None and not 0.0 < self.futility < 1.0:
            raise UserError(f"the futility threshold is a conditional power in (0, 1), got {self.futility}: "
                            "e.g. --futility 0.1")
        if self.look_sizes()[0] < 3 or len(set(self.look_sizes())) < self.looks:
            raise UserError(f"{self.looks} looks over {self.seeds} seeds leave a look with fewer than 3 seeds or two "
                            f"looks at one seed count: plan more seeds (--seeds-planned) or fewer looks (--looks)")
        if self.stored_t_bounds is not None and len(self.stored_t_bounds) != self.looks:
            raise UserError(f"the design lists {len(self.stored_t_bounds)} critical t's for {self.looks} looks; write "
                            "it again with `sptune design`")

    def look_sizes(self) -> list[int]:
        """Seeds at each look: round(N k / K), the last N."""
        return [round(self.seeds * k / self.looks) for k in range(1, self.looks + 1)]

    def fractions(self) -> list[float]:
        return [n / self.seeds for n in self.look_sizes()]

    @cached_property
    def _z_bounds(self) -> tuple[float, ...]:  # computed once per design (tens of ms)
        return tuple(spending_bounds(self.fractions(), self.alpha, self.spending))

    def z_bounds(self) -> list[float]:
        return list(self._z_bounds)

    @cached_property
    def _t_bounds(self) -> tuple[float, ...]:  # a design file's, else calibrated once (a fraction of a second)
        if self.stored_t_bounds is not None:
            return self.stored_t_bounds
        return tuple(calibrated_t_bounds(self.look_sizes(), self.alpha, self.spending, self.z_bounds()))

    def t_bounds(self) -> list[float]:
        """The critical t of each look (calibrated_t_bounds; the ones design.json stored at declaration, so a
        report decides with the bounds declared, whatever numpy version recomputes them)."""
        return list(self._t_bounds)

    def significance_level_t_bounds(self) -> list[float]:
        """The approximate critical t's of Jennison & Turnbull §3.8 (each z bound's nominal level)."""
        return [t_bound(z, n - 1) for z, n in zip(self.z_bounds(), self.look_sizes())]

    def declared(self) -> dict[str, Any]:
        """What a design declares (its bounds follow from it)."""
        return {"design": "group-sequential", "sides": 2, "looks": self.looks, "seeds": self.seeds,
                "alpha": self.alpha, "spending": self.spending,
                "futility": None if self.futility is None else {"rule": FUTILITY_RULE, "below": self.futility},
                "endpoint": self.endpoint}

    def to_dict(self) -> dict[str, Any]:
        return {**self.declared(), "look_sizes": self.look_sizes(), "z_bounds": [round(z, 4) for z in self.z_bounds()],
                "t_bounds": [round(t, 4) for t in self.t_bounds()],
                "t_bounds_method": f"Monte Carlo calibration, {CALIBRATION_REPLICATES} replicates, seed 0 "
                                   "(sptune.report.sequential.calibrated_t_bounds)"}

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "design") -> "Design":
        if data.get("design") != "group-sequential":
            raise UserError(f"{source} is not a group-sequential design (no \"design\": \"group-sequential\"); "
                            "write one with `sptune design`")
        try:
            futility = data.get("futility")
            return cls(looks=int(data["looks"]), seeds=int(data["seeds"]), spending=str(data["spending"]),
                       alpha=float(data["alpha"]), futility=None if futility is None else float(futility["below"]),
                       endpoint=str(data.get("endpoint", "gap change")),
                       stored_t_bounds=tuple(map(float, data["t_bounds"])) if data.get("t_bounds") else None)
        except (KeyError, TypeError, ValueError) as err:
            raise UserError(f"{source} lacks or garbles a field ({err}); write it again with `sptune design`") from None


def write_design(path: str | Path, design: Design) -> Path:
    """design.json (atomically): in an experiment directory or at a file path ending in .json."""
    path = Path(path)
    path = path if path.suffix == ".json" else path / DESIGN_FILE
    atomic.write_json(path, design.to_dict())
    return path


def read_design(path: str | Path) -> Design:
    path = Path(path)
    path = path / DESIGN_FILE if path.is_dir() else path
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"no design at {path}: write one with `sptune design`") from None
    except json.JSONDecodeError as err:
        raise UserError(f"{path} is not JSON ({err}); write it again with `sptune design`") from None
    return Design.from_dict(data, str(path))


# ----------------------------------------------------------------------------- looks at the data
@dataclass(frozen=True)
class Look:
    """Look `index` (1-based) over the first `seeds` values: the paired t and what the design says."""

    index: int
    seeds: int
    mean: float
    sd: float
    t: float | None  # None: zero variance, no test
    z_bound: float
    t_bound: float
    conditional_power: float | None  # with a futility rule, before the last look
    verdict: str  # continue | efficacy | futility | final: no efficacy | no test

    @property
    def low(self) -> float:
        """The repeated confidence interval's lower end (all looks' intervals cover together at 1 - alpha)."""
        return self.mean - self.t_bound * self.sd / math.sqrt(self.seeds)

    @property
    def high(self) -> float:
        return self.mean + self.t_bound * self.sd / math.sqrt(self.seeds)


def run_looks(design: Design, values: Sequence[float]) -> list[Look]:
    """The design's looks that `values` (per-seed values in seed order) reach, up to the first efficacy stop."""
    values = stats.finite_floats(values, "run_looks")
    z_bounds, t_bounds = design.z_bounds(), design.t_bounds()
    out: list[Look] = []
    for k, n in enumerate(design.look_sizes()):
        if n > len(values):
            break
        out.append(_look(design, k, values[:n], z_bounds, t_bounds[k]))
        if out[-1].verdict == "efficacy":
            break
    return out


def _look(design: Design, k: int, values: list[float], z_bounds: list[float], t_crit: float) -> Look:
    n, last = len(values), k == design.looks - 1
    p = stats.t_interval(values)
    t = None if p.sd == 0.0 else p.mean / (p.sd / math.sqrt(n))
    power = None
    if t is None:
        verdict = "no test"
    elif abs(t) >= t_crit:
        verdict = "efficacy"
    elif last:
        verdict = "final: no efficacy"
    else:
        if design.futility is not None:
            power = conditional_power(z_equivalent(t, n - 1), n / design.seeds, z_bounds[-1])
        verdict = "futility" if power is not None and power < design.futility else "continue"
    return Look(k + 1, n, p.mean, p.sd, t, z_bounds[k], t_crit, power, verdict)


# ----------------------------------------------------------------------------- Monte Carlo of the design
def simulate(design: Design, effect: float = 0.0, replicates: int = 10_000, seed: int = 0,
             t_bounds: Sequence[float] | None = None) -> dict[str, float]:
    """The design run on `replicates` simulated experiments whose per-seed values are N(effect, 1): the share
    that rejects H0 (type I error at effect 0, power otherwise), the share that stops for futility before the
    last look, the mean seeds used (stopping at efficacy or futility). `t_bounds`: other critical t's (e.g. the
    z bounds themselves, to show what ignoring the estimated variance costs)."""
    rng = np.random.default_rng(seed)
    values = rng.standard_normal((replicates, design.seeds)) + effect
    sizes = design.look_sizes()
    bounds = np.asarray(design.t_bounds() if t_bounds is None else t_bounds)
    sums, squares = np.cumsum(values, axis=1), np.cumsum(values ** 2, axis=1)
    alive = np.ones(replicates, dtype=bool)
    rejected, futile = np.zeros(replicates, dtype=bool), np.zeros(replicates, dtype=bool)
    used = np.full(replicates, float(sizes[-1]))
    final = design.z_bounds()[-1]
    for k, n in enumerate(sizes):
        mean = sums[:, n - 1] / n
        sd = np.sqrt(np.maximum(squares[:, n - 1] - n * mean ** 2, 0.0) / (n - 1))
        t = mean / (sd / math.sqrt(n))
        stop = alive & (np.abs(t) >= bounds[k])
        rejected |= stop
        used[stop] = n
        alive &= ~stop
        if design.futility is not None and k < design.looks - 1:
            z = np.array([z_equivalent(x, n - 1) for x in t[alive]])
            low = np.zeros(replicates, dtype=bool)
            low[np.flatnonzero(alive)] = normal_cdf((np.abs(z) / math.sqrt(n / design.seeds) - final)
                                                    / math.sqrt(1.0 - n / design.seeds)) < design.futility
            futile |= low
            used[low] = n
            alive &= ~low  # stop at a futility verdict: the design as followed (its bounds ignore the rule)
    return {"reject": float(rejected.mean()), "futility": float(futile.mean()), "mean_seeds": float(used.mean())}
