"""Do sptune's 95% intervals cover the truth 95% of the time? Simulated seeds with a known answer.

    python benchmarks/interval_coverage.py             # 2000 replicates a cell: coverage to about +-1% (2 MC SE)
    python benchmarks/interval_coverage.py --quick     # 40 replicates (10 for the endpoints): checks it runs (seconds);
                                                       # its figures mean nothing

Every interval sptune prints, each through sptune's own function (none is re-implemented here):
  paired gain      sptune.report.stats.paired_t: the Student-t interval of the mean SPT - scratch gain over seeds (the
                   seeds table of `sptune compare/study --seeds` and `sptune report`, the `gain` columns of an
                   experiment report, the architecture experiment's gains)
  data multiplier  sptune.report.multiplier.multipliers: how much more labelled data scratch needs to match SPT (the
                   `data ×` column of the data-fractions report)
  test-set gain    sptune.report.stats.paired_with_test_sampling: the mean gain's interval when the test examples are a
                   sample too (`; with test-set sampling` in the architecture experiment's report)
  gains together   sptune.report.stats.simultaneous: a table's gains read together, intervals that ALL cover at once (the
                   correction line under each gains table of an experiment report, e.g. data_fractions' four)
  endpoints        the architecture experiment's lines (sptune.report.architectures, the endpoints of `sptune
                   power` and the group-sequential looks): each SPT gain, the gap S4D - Transformer under scratch and
                   under SPT, and the gap change (S4D SPT - T SPT) - (S4D scratch - T scratch), the main job's primary
                   endpoint; each with its seed interval (stats.paired_t on the per-seed values) and its interval
                   "with test-set sampling" (stats.contrast_with_test_sampling, signs as the report passes them)
(The `mean ± std` entries and the plots' error bars are spreads over seeds, not intervals: no coverage to check.)

The model, in accuracy points (a point = 0.01), per seed i of n (n = 3, 5, 10):
  paired gain      scratch_i = 70 + u_i + e_i,  SPT_i = 70 + 2 + u_i + e'_i: u_i (sd 3) is what both arms of a seed
                   share (correlated pairs), e, e' (sd 2) each run's own noise; the truth is the mean gain,
                   2 + E[e'] - E[e].
  data multiplier  scratch's accuracy at fraction f of the data is A(f) (log-linear: 72 + 9 log2 f, about the
                   main job's 52 -> 72 over 12.5% -> 100%; or a saturating 85 - 13 / sqrt(f)), SPT's at f is
                   A(m f): SPT at f is worth m times the data. Run at fractions 1/8, 1/4, 1/2, 1 as
                   experiments/data_fractions.py --cpu; every run of seed i shares u_i (sd 1.5), each run has its own
                   noise (sd 2). The truth is the estimand sptune's point estimate targets: where the log-linear
                   interpolation of scratch's population mean curve reaches SPT's population mean
                   (multiplier.fraction_needed on the model's means; exactly m for the log-linear curve). Only
                   fractions whose truth lies inside the fractions run count (outside, sptune prints a bound).
  test-set gain    a population of test examples and seeds, of which each simulated study draws n seeds and a
                   fresh test set of m = 242 examples (OSULeaf's TEST); run (seed i, arm a) gets example j right
                   when  base_a + b_j + g_j [a = SPT] + u_i + v_ia + e_ija > 0:  b_j the example's difficulty
                   (both arms), g_j how much more SPT helps on it, u_i the seed's effect (both arms), v_ia the
                   run's own, e_ija unit normal noise, correlated across the two arms of one (seed, example).
                   The truth is the gain over the POPULATION of examples and seeds, not over the drawn test set:
                   Phi(base_SPT / sd_SPT) - Phi(base_scratch / sd_scratch), sd the latent's total sd. Two
                   populations: the test examples' part of the gain's variance dominates, or the seeds'. Beside
                   the new interval, for contrast, paired_t on the runs' accuracies (sptune's seed interval,
                   about this test set only) against the same population truth: informational, not gated.
  gains together   four gains (true 0, +2, -1, +3 points: four fractions of one study) on the same n seeds,
                   each pair as for the paired gain, the seed's shared effect common to all four; a study counts
                   as covered when all four intervals contain their truths. Beside it, for contrast, the four
                   uncorrected 95% intervals on the same studies (each covers 95%; all four together do not).
  endpoints        noise estimated from the kept records of the main job (docs/records/architectures-confirm-* and
                   architectures-rotary-[0-9]*, one model per Transformer design, ucr-osuleaf, 242 test series): run
                   (seed i, arm a) gets test example j right with probability expit(logit p_aj + u_ia). p_j, the 4 arms'
                   hit rates of example j over the seeds with test_hits, shrunk so their covariance across examples
                   loses the rates' own sampling noise; u_i normal, its 4 x 4 covariance fitted so that the per-arm
                   means, seed SDs and seed correlations of test accuracy are the records'; the arms' outcomes
                   independent given p_j and u_i (the records' residual correlation within a seed and example is
                   |r| < 0.1). The printed header gives the records and the estimates beside what the fitted model
                   gives back, including the per-example SD of d_ij (0.4-0.7 in the records, against about 0.37 in the
                   test-set gain's populations above). Each simulated study draws a fresh test set of 242 examples from
                   the records' 242 (with replacement) and n = 3, 5, 10 or 20 seeds. Truths: the seed interval's is the
                   endpoint's mean over seeds on that study's test set (what it is about); the test-sampling
                   interval's is the population's (over examples and seeds). paired_t against the population truth
                   is shown for contrast, not gated.
Noise (each run's own; 2 points sd unless said): normal; heavy tails (Student t with 3 dof, scaled to the same
sd); and two stress models outside the t-interval's assumptions, where one scratch run in 10 goes wrong and
loses 10 points (skewed gains): with the usual noise, and with quiet seeds (run sd 1 point), where the rare
bad run dwarfs the seed noise. No interval for a mean holds its level over every distribution at a fixed n
(Bahadur & Savage 1956), so the stress cells are reported, not gated.

Coverage = the share of printed intervals that contain the truth, over --replicates simulated studies per cell.
With 2000 replicates a coverage near 95% has a Monte Carlo standard error of 0.5%. A multiplier's interval is
printed only when its point estimate lies inside the fractions run (else sptune prints a bound such as '>1x');
`printed` gives that share. The last line is the lowest coverage over every cell whose noise the intervals
assume (normal, heavy tails; for the test-set gain, its crossed seed x example sampling; every endpoint cell, the
gap change and n = 20 included), the line before it the lowest of the skewed stress cells; the paired_t contrast
cells count in neither.
"""

from __future__ import annotations

import argparse
import csv
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from sptune.report import multiplier, stats

LEVEL = 0.95
TARGET = 0.93
SEED_COUNTS = (3, 5, 10)
POINT = 0.01
FRACTIONS = (0.125, 0.25, 0.5, 1.0)
BAD_LOSS = 10 * POINT


@dataclass(frozen=True)
class Noise:
    """A run's own noise: normal or Student t with 3 dof (infinite kurtosis), scaled to sd `sd`; in a stress
    model a share of scratch runs also goes wrong and loses BAD_LOSS (skewed, outside the t's assumptions)."""

    name: str
    sd: float = 2 * POINT
    heavy: bool = False
    bad_share: float = 0.0

    @property
    def gated(self) -> bool:
        """Symmetric noise, which the intervals assume: counted in the lowest coverage."""
        return self.bad_share == 0.0

    @property
    def mean(self) -> float:
        return -self.bad_share * BAD_LOSS

    def draw(self, rng: np.random.Generator, shape: tuple[int, ...], scratch: bool = True) -> np.ndarray:
        base = rng.standard_t(3, shape) * self.sd / math.sqrt(3) if self.heavy else rng.normal(0.0, self.sd, shape)
        return base - BAD_LOSS * (rng.random(shape) < self.bad_share) if scratch else base


NOISES = (Noise("normal"), Noise("t3 heavy tails", heavy=True),
          Noise("1 in 10 scratch runs loses 10 points", bad_share=0.1),
          Noise("the same, quiet seeds (run sd 1 point)", sd=POINT, bad_share=0.1))


@dataclass
class Cell:
    """One printed line: an interval under one model at one n; `coverage` None where nothing is measured."""

    interval: str
    model: str
    n: int
    gated: bool
    coverage: dict[str, float | None]  # column -> coverage
    notes: str = ""
    contrast: bool = False  # an interval against a truth it does not estimate: shown, in no lowest line


# ----------------------------------------------------------------------------- paired gain
GAIN, BASE, PAIR_SD = 2 * POINT, 0.70, 3 * POINT


def paired_cell(noise: Noise, n: int, replicates: int, rng: np.random.Generator) -> Cell:
    """Coverage of stats.paired_t's interval of the mean gain."""
    shared = rng.normal(0.0, PAIR_SD, (replicates, n))
    spt = BASE + GAIN + shared + noise.draw(rng, (replicates, n), scratch=False)
    scratch = BASE + shared + noise.draw(rng, (replicates, n))
    truth = GAIN - noise.mean
    hits, widths = 0, []
    for a, b in zip(spt.tolist(), scratch.tolist()):
        p = stats.paired_t(a, b, LEVEL)
        hits += p.low <= truth <= p.high
        widths.append(p.half_width)
    return Cell("paired gain", noise.name, n, noise.gated, {"all": hits / replicates},
                f"median half-width {np.median(widths) / POINT:.1f} points")


# ----------------------------------------------------------------------------- data multiplier
def log_linear(f: float) -> float:
    return 0.72 + 0.09 * math.log2(f)


def saturating(f: float) -> float:
    return 0.85 - 0.13 / math.sqrt(f)


@dataclass(frozen=True)
class Curves:
    """Scratch's mean accuracy curve, SPT worth `m` times the data, and the runs' noise."""

    name: str
    curve: Callable[[float], float]
    m: float
    noise: Noise

    def truths(self) -> dict[float, float]:
        """Per fraction whose answer lies inside the fractions run: the estimand (multiplier.fraction_needed
        on the population means)."""
        scratch = [self.curve(f) + self.noise.mean for f in FRACTIONS]
        out = {}
        for f in FRACTIONS:
            needed, bound = multiplier.fraction_needed(FRACTIONS, scratch, self.curve(self.m * f))
            if not bound:
                out[f] = needed / f
        return out

    def records(self, n: int, rng: np.random.Generator) -> list[tuple[float, int, float, float]]:
        """(fraction, seed, scratch, SPT) for n seeds, as sptune.report.tables hands them over."""
        shared = rng.normal(0.0, 1.5 * POINT, n)
        scratch = self.noise.draw(rng, (n, len(FRACTIONS)))
        spt = self.noise.draw(rng, (n, len(FRACTIONS)), scratch=False)
        return [(f, i, self.curve(f) + shared[i] + scratch[i, j], self.curve(self.m * f) + shared[i] + spt[i, j])
                for i in range(n) for j, f in enumerate(FRACTIONS)]


def covers(m: multiplier.Multiplier, truth: float) -> bool:
    """An open end (the set reaches a measured end) covers every truth beyond it inside the range."""
    return (m.low_open or m.low <= truth * (1 + 1e-9)) and (m.high_open or truth <= m.high * (1 + 1e-9))


def multiplier_cell(curves: Curves, n: int, replicates: int, rng: np.random.Generator) -> Cell:
    """Coverage of multiplier.multipliers' interval at each fraction with an inside truth, among those printed."""
    truths = curves.truths()
    printed, hits = dict.fromkeys(truths, 0), dict.fromkeys(truths, 0)
    for _ in range(replicates):
        found = multiplier.multipliers(curves.records(n, rng), level=LEVEL)
        for f, truth in truths.items():
            if found[f].low is not None:
                printed[f] += 1
                hits[f] += covers(found[f], truth)
    coverage = {f"{f:g}": (hits[f] / printed[f] if printed[f] else None) for f in truths}
    shares = ", ".join(f"{printed[f] / replicates:.0%}" for f in truths)
    truth_text = ", ".join(f"{t:.2f}" for t in truths.values())
    return Cell("data multiplier", curves.name, n, curves.noise.gated, coverage,
                f"truth {truth_text}; printed {shares}")


MULTIPLIER_MODELS = (
    Curves("log-linear, m=1.5, normal", log_linear, 1.5, NOISES[0]),
    Curves("log-linear, m=1 (no gain), normal", log_linear, 1.0, NOISES[0]),
    Curves("saturating, m=1.5, normal", saturating, 1.5, NOISES[0]),
    *(Curves(f"log-linear, m=1.5, {noise.name}", log_linear, 1.5, noise) for noise in NOISES[1:]),
)


# ----------------------------------------------------------------------------- gain with test-set sampling
TEST_EXAMPLES = 242


@dataclass(frozen=True)
class Population:
    """Test examples and seeds as samples (module docstring): sds of the latent's parts, and the two arms'
    noise correlation within one (seed, example)."""

    name: str
    spt_effect_sd: float  # g_j
    run_sd: float  # v_ia
    difficulty_sd: float = 2.0  # b_j: from near-sure to near-hopeless examples
    seed_sd: float = 0.2  # u_i
    arm_corr: float = 0.8
    scratch_base: float = 0.2  # about 54% accuracy
    spt_base: float = 0.35  # about 2 points more

    def truth(self) -> float:
        shared = 1.0 + self.difficulty_sd**2 + self.seed_sd**2 + self.run_sd**2
        return normal_cdf(self.spt_base / math.sqrt(shared + self.spt_effect_sd**2)) \
            - normal_cdf(self.scratch_base / math.sqrt(shared))

    def hits(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(SPT, scratch) outcomes of n seeds on a fresh test set, each (n, TEST_EXAMPLES) bool."""
        m = TEST_EXAMPLES
        example = rng.normal(0.0, self.difficulty_sd, m)  # (m,)
        seed = rng.normal(0.0, self.seed_sd, (n, 1)) + example  # (n, m)
        noise = rng.normal(size=(2, n, m))
        spt_noise = self.arm_corr * noise[1] + math.sqrt(1 - self.arm_corr**2) * noise[0]
        spt = self.spt_base + rng.normal(0.0, self.spt_effect_sd, m) + seed + rng.normal(0.0, self.run_sd, (n, 1))
        scratch = self.scratch_base + seed + rng.normal(0.0, self.run_sd, (n, 1))
        return spt + spt_noise > 0, scratch + noise[1] > 0


def example_sd(population: Population) -> float:
    """The per-example SD of d_ij = SPT_ij - scratch_ij within a seed, averaged (10 seeds, own generator)."""
    spt, scratch = population.hits(10, np.random.default_rng(7))
    return float((spt.astype(np.int64) - scratch).std(axis=1, ddof=1).mean())


def normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def hit_strings(hits: np.ndarray) -> list[str]:
    """Each seed's outcomes as result.json's test_hits ('0'/'1' per example)."""
    return [(row.astype(np.uint8) + ord("0")).tobytes().decode("ascii") for row in hits]


def population_cells(population: Population, n: int, replicates: int, rng: np.random.Generator) -> list[Cell]:
    """Coverage of the population gain by stats.paired_with_test_sampling and, for contrast, by stats.paired_t
    on the runs' accuracies, on the same simulated studies."""
    truth = population.truth()
    covered, widths = {"test": 0, "seed": 0}, {"test": [], "seed": []}
    for _ in range(replicates):
        spt, scratch = population.hits(n, rng)
        for key, p in (("test", stats.paired_with_test_sampling(hit_strings(spt), hit_strings(scratch), LEVEL)),
                       ("seed", stats.paired_t(spt.mean(1).tolist(), scratch.mean(1).tolist(), LEVEL))):
            covered[key] += p.low <= truth <= p.high
            widths[key].append(p.half_width)
    half = {key: np.median(w) / POINT for key, w in widths.items()}
    notes = f"truth {truth / POINT:+.2f} points, median half-width {half['test']:.2f} vs seed-only {half['seed']:.2f}"
    return [Cell("test-set gain", population.name, n, True, {"all": covered["test"] / replicates}, notes),
            Cell("paired gain", f"{population.name}: paired_t (this test set only)", n, False,
                 {"all": covered["seed"] / replicates}, f"median half-width {half['seed']:.2f} points", contrast=True)]


# The test examples' part dominates where SPT's help varies much by example and the runs little; the seeds' where
# the runs vary more. The per-seed gains' sd on one test set: about 3 points in the first, 7 in the second (the
# README's OSULeaf gains, seeds 6-10: about 2 for the Transformer, 6 for S4D).
POPULATIONS = (Population("test examples dominate", spt_effect_sd=0.8, run_sd=0.1),
               Population("seeds dominate", spt_effect_sd=0.6, run_sd=0.3))


# ----------------------------------------------------------------------------- gains read together
FAMILY_GAINS = (0.0, GAIN, -POINT, 3 * POINT)


def simultaneous_cells(noise: Noise, n: int, replicates: int, rng: np.random.Generator) -> list[Cell]:
    """The share of studies in which all of stats.simultaneous' intervals cover their truths and, for contrast,
    all of the uncorrected ones."""
    k = len(FAMILY_GAINS)
    shared = rng.normal(0.0, PAIR_SD, (replicates, n, 1))  # the seed's effect, every gain's both arms
    spt = BASE + np.array(FAMILY_GAINS) + shared + noise.draw(rng, (replicates, n, k), scratch=False)
    scratch = BASE + shared + noise.draw(rng, (replicates, n, k))  # (replicates, n, k)
    truths = [gain - noise.mean for gain in FAMILY_GAINS]
    together = {"corrected": 0, "each": 0}
    for a, b in zip(spt, scratch):
        gains = [stats.paired_t(a[:, j].tolist(), b[:, j].tolist(), LEVEL) for j in range(k)]
        for key, intervals in (("corrected", stats.simultaneous(gains)), ("each", gains)):
            together[key] += all(p.low <= truth <= p.high for p, truth in zip(intervals, truths))
    return [Cell("gains together", noise.name, n, noise.gated, {"all": together["corrected"] / replicates},
                 f"{k} gains, all covered"),
            Cell("gains together", f"{noise.name}, uncorrected", n, False,
                 {"all": together["each"] / replicates}, f"{k} gains, all covered", contrast=True)]


# ----------------------------------------------------------------------------- the main job's endpoints, records' noise
RECORDS = Path(__file__).resolve().parents[1] / "docs" / "records"
# Each design's records (one Transformer per design): its confirmation seeds' summary.csv files.
RECORD_DESIGNS = (("sinusoidal Transformer", "architectures-confirm-*"),
                  ("rotary Transformer", "architectures-rotary-[0-9]*"))
ARMS = (("Transformer", "scratch"), ("Transformer", "masked"), ("S4D", "scratch"), ("S4D", "masked"))
ARM_NAMES = ("T scratch", "T SPT", "S4D scratch", "S4D SPT")
# name -> sign of each arm (ARMS order), as sptune.experiment.endpoints defines them (gap change: the primary one)
ENDPOINTS = {"gap change": (1, -1, -1, 1), "S4D SPT gain": (0, 0, -1, 1), "T SPT gain": (-1, 1, 0, 0),
             "gap, scratch": (-1, 0, 1, 0), "gap, SPT": (0, -1, 0, 1)}  # gaps: S4D - Transformer
RECORD_SEED_COUNTS = (3, 5, 10, 20)
HERMITE = np.polynomial.hermite_e.hermegauss(40)  # nodes and weights for E[f(Z)], Z standard normal


def expit(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def psd(matrix: np.ndarray, power: float = 1.0) -> np.ndarray:
    """A symmetric matrix's nearest positive semi-definite one (negative eigenvalues to 0), to `power`."""
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2)
    return (vectors * np.clip(values, 0.0, None) ** power) @ vectors.T


def endpoint_moments(hits: np.ndarray) -> dict[str, tuple[float, float]]:
    """Per endpoint: (the per-example SD of d_ij within a seed, averaged over seeds; the SD over seeds of its
    value on this test set) from hits (n, 4 arms, m)."""
    out = {}
    for name, signs in ENDPOINTS.items():
        d = np.tensordot(np.array(signs), hits.astype(np.int64), axes=([0], [1]))  # (n, m)
        out[name] = (float(d.std(axis=1, ddof=1).mean()), float(d.mean(1).std(ddof=1)))
    return out


@dataclass
class RecordModel:
    """Seeds x test examples of the four arms, with parameters estimated from kept records. Run (seed i, arm a)
    gets example j right with probability expit(logit p_aj + u_ia): p_j (4 arms) an example of the population,
    u_i (4 arms) the seed's effects, normal with covariance `seed_cov`; given those, the arms' outcomes are
    independent (the records' residual correlation within a seed and example is |r| < 0.1)."""

    name: str
    sources: list[str]
    seeds: int
    hit_seeds: int
    examples: np.ndarray  # (4, M) p_aj, the population of test examples
    seed_cov: np.ndarray  # (4, 4) on the logit scale
    record_acc: np.ndarray  # (seeds, 4) the records' test accuracies
    record_moments: dict[str, tuple[float, float]]

    @property
    def logits(self) -> np.ndarray:
        return np.log(self.examples) - np.log1p(-self.examples)

    def expected(self) -> np.ndarray:
        """(4, M): each example's probability of a hit averaged over seeds, E_u[expit(logit p + u)]."""
        nodes, weights = HERMITE
        sd = np.sqrt(np.diag(self.seed_cov))[:, None, None]  # (4, 1, 1)
        return (expit(self.logits[:, :, None] + sd * nodes) * weights).sum(-1) / weights.sum()

    def hits(self, n: int, index: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """(n, 4, m) bool: n seeds on the test set of the population's examples `index`."""
        u = rng.multivariate_normal(np.zeros(4), self.seed_cov, n)  # (n, 4)
        q = expit(self.logits[:, index][None] + u[:, :, None])  # (n, 4, m)
        return rng.random(q.shape) < q


def read_design(pattern: str) -> tuple[list[str], dict[int, dict[tuple[str, str], dict[str, str]]]]:
    """The records matching `pattern` and their arms: {seed: {(model, arm): row}}, compute-tied arms left out."""
    dirs = sorted(RECORDS.glob(pattern))
    by_seed: dict[int, dict[tuple[str, str], dict[str, str]]] = {}
    for directory in dirs:
        with open(directory / "summary.csv", newline="") as file:
            for row in csv.DictReader(file):
                if row.get("compute") != "tied" and row["status"] == "completed" and row["test"]:
                    by_seed.setdefault(int(row["seed"]), {})[(row["model"], row["arm"])] = row
    return [d.name for d in dirs], by_seed


def fit_design(name: str, pattern: str) -> RecordModel:
    """Estimates from one design's records (method of moments):
    - per-arm mean and seed covariance of test accuracy: every seed whose four arms finished;
    - the examples: per example, each arm's hit rate over the seeds with test_hits, its spread across examples
      shrunk to remove the rate's own sampling noise (cov over examples minus the mean within-example covariance
      of the outcomes / seeds, mapped by the linear transform that gives the rates that covariance), in [0, 1];
    - the seed effects' covariance on the logit scale: the accuracies' seed covariance minus the Bernoulli part,
      divided by each arm's mean p(1 - p) (first order); then, three times, each arm's rates shifted on the logit
      scale to the arm's mean over every seed, and the covariance corrected against simulated seeds."""
    sources, by_seed = read_design(pattern)
    seeds = sorted(s for s, arms in by_seed.items() if all(a in arms for a in ARMS))
    if len(seeds) < 3:
        raise SystemExit(f"{RECORDS}/{pattern}: {len(seeds)} seeds with all four arms; the records are missing")
    acc = np.array([[float(by_seed[s][a]["test"]) for a in ARMS] for s in seeds])
    with_hits = [s for s in seeds if all(by_seed[s][a].get("test_hits") for a in ARMS)]
    hits = np.array([[[c == "1" for c in by_seed[s][a]["test_hits"]] for a in ARMS] for s in with_hits])
    h = len(with_hits)
    rates = hits.mean(0)  # (4, M)
    observed = np.cov(rates)
    centred = hits - rates[None]
    within = np.einsum("iaj,ibj->ab", centred, centred) / (h - 1) / rates.shape[1]  # mean over examples
    target = psd(observed - within / h)
    transform = psd(target, 0.5) @ np.linalg.pinv(psd(observed, 0.5))
    mean = rates.mean(1, keepdims=True)
    examples = np.clip(mean + transform @ (rates - mean), 1e-6, 1 - 1e-6)
    per_example = endpoint_moments(hits)  # their SD over seeds: from every seed's accuracies instead
    moments = {key: (per_example[key][0], float((acc @ np.array(signs)).std(ddof=1))) for key, signs in ENDPOINTS.items()}
    model = RecordModel(name, sources, len(seeds), h, examples, np.zeros((4, 4)), acc, moments)
    slope = 1.0 / (examples * (1 - examples)).mean(1)  # (4,) d logit / d accuracy, first order
    wanted = np.cov(acc.T)
    model.seed_cov = psd(np.diag(slope) @ (wanted - np.diag(1 / slope) / examples.shape[1]) @ np.diag(slope))
    check = np.random.default_rng(12345)
    everything = np.arange(examples.shape[1])
    for _ in range(3):
        shift = slope * (acc.mean(0) - model.expected().mean(1))
        model.examples = np.clip(expit(model.logits + shift[:, None]), 1e-6, 1 - 1e-6)
        simulated = np.cov(model.hits(4000, everything, check).mean(2).T)
        model.seed_cov = psd(model.seed_cov + np.diag(slope) @ (wanted - simulated) @ np.diag(slope))
    return model


def points(values: np.ndarray) -> str:
    return ", ".join(f"{v / POINT:.1f}" for v in values)


def correlations(cov: np.ndarray) -> str:
    sd = np.sqrt(np.diag(cov))
    corr = cov / np.outer(sd, sd)
    return " ".join(f"{corr[i, j]:+.2f}" for i in range(4) for j in range(i + 1, 4))


def describe_model(model: RecordModel) -> list[str]:
    """Which records and which estimates, and what the fitted model gives back (simulated on the records' test set)."""
    simulated = model.hits(4000, np.arange(model.examples.shape[1]), np.random.default_rng(54321))
    acc = simulated.mean(2)
    moments = endpoint_moments(simulated[:400])
    pairs = "T-T' T-S T-S' T'-S T'-S' S-S'"
    out = [f"{model.name}: {', '.join(model.sources)} ({model.seeds} seeds; test_hits on {model.hit_seeds})",
           f"  arms {', '.join(ARM_NAMES)}: mean {points(model.record_acc.mean(0))} points (model "
           f"{points(acc.mean(0))}); seed SD {points(model.record_acc.std(0, ddof=1))} (model "
           f"{points(acc.std(0, ddof=1))})",
           f"  seed correlations {pairs}: records {correlations(np.cov(model.record_acc.T))}; model "
           f"{correlations(np.cov(acc.T))}"]
    for name in ENDPOINTS:
        (rec_example, rec_seed), (mod_example, mod_seed) = model.record_moments[name], moments[name]
        out.append(f"  {name:12s} per-example SD of d_ij {rec_example:.2f} (model {mod_example:.2f}); SD over seeds "
                   f"{rec_seed / POINT:.1f} points (model {mod_seed / POINT:.1f})")
    return out


def record_cells(model: RecordModel, n: int, replicates: int, rng: np.random.Generator) -> list[Cell]:
    """Per endpoint, on the same simulated studies (a fresh test set of M examples drawn from the population, n
    seeds): stats.paired_t against the truth on that test set (the seeds' mean), stats.contrast_with_test_sampling
    against the population's, and, for contrast, paired_t against the population's."""
    expected = model.expected()  # (4, M)
    m = expected.shape[1]
    signs = {name: np.array(s) for name, s in ENDPOINTS.items()}
    population = {name: float(s @ expected.mean(1)) for name, s in signs.items()}
    counts = {name: {"seed": 0, "test": 0, "contrast": 0} for name in ENDPOINTS}
    widths = {name: {"seed": [], "test": []} for name in ENDPOINTS}
    for _ in range(replicates):
        index = rng.integers(0, m, m)
        hits = model.hits(n, index, rng)
        acc = hits.mean(2)  # (n, 4)
        strings = [hit_strings(hits[:, a]) for a in range(4)]
        conditional = expected[:, index].mean(1)  # (4,) the truth on this test set
        for name, s in signs.items():
            used = np.flatnonzero(s)
            seed = stats.paired_t((acc[:, s > 0]).sum(1).tolist(), (acc[:, s < 0]).sum(1).tolist(), LEVEL)
            test = stats.contrast_with_test_sampling(list(zip(*(strings[a] for a in used))),
                                                     tuple(int(x) for x in s[used]), LEVEL)
            truth = float(s @ conditional)
            counts[name]["seed"] += seed.low <= truth <= seed.high
            counts[name]["test"] += test.low <= population[name] <= test.high
            counts[name]["contrast"] += seed.low <= population[name] <= seed.high
            widths[name]["seed"].append(seed.half_width)
            widths[name]["test"].append(test.half_width)
    cells = []
    for name in ENDPOINTS:
        half = {key: np.median(w) / POINT for key, w in widths[name].items()}
        cells += [Cell(name, f"{model.name}: seeds (paired_t, this test set)", n, True,
                       {"all": counts[name]["seed"] / replicates},
                       f"truth {population[name] / POINT:+.1f} points, median half-width {half['seed']:.1f}"),
                  Cell(name, f"{model.name}: with test-set sampling", n, True,
                       {"all": counts[name]["test"] / replicates}, f"median half-width {half['test']:.1f}"),
                  Cell(name, f"{model.name}: paired_t vs the population truth", n, False,
                       {"all": counts[name]["contrast"] / replicates}, "the seed interval above", contrast=True)]
    return cells


# ----------------------------------------------------------------------------- report
def line(cell: Cell) -> str:
    values = "  ".join(f"{col}: " + ("—" if c is None else f"{c:.1%}") for col, c in cell.coverage.items())
    flag = "  (contrast, not gated)" if cell.contrast else "" if cell.gated else "  (stress, not gated)"
    return f"{cell.interval:16s} {cell.model:58s} n={cell.n:<3d} {values}  [{cell.notes}]{flag}"


def lowest(cells: list[Cell], gated: bool) -> float:
    return min(c for cell in cells if cell.gated == gated and not cell.contrast for c in cell.coverage.values()
               if c is not None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=2000, help="simulated studies per cell")
    parser.add_argument("--seed", type=int, default=0, help="the simulation's RNG seed")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes, seconds: checks the benchmark runs (the test suite uses it); its figures "
                             "mean nothing")
    args = parser.parse_args()
    replicates = 40 if args.quick else args.replicates
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    print(f"coverage of sptune's {LEVEL:.0%} intervals, {replicates} simulated studies a cell (target >= {TARGET:.0%})")
    cells = []
    for noise in NOISES:
        for n in SEED_COUNTS:
            cells.append(paired_cell(noise, n, replicates, rng))
            print(line(cells[-1]), flush=True)
    print("data multiplier: coverage per fraction among printed intervals (columns: fraction)")
    for curves in MULTIPLIER_MODELS:
        for n in SEED_COUNTS:
            cells.append(multiplier_cell(curves, n, replicates, rng))
            print(line(cells[-1]), flush=True)
    print(f"gain with test-set sampling: a fresh test set of {TEST_EXAMPLES} examples a study, the truth over the "
          "population of examples and seeds; paired_t against the same truth for contrast")
    for population in POPULATIONS:
        for n in SEED_COUNTS:
            cells += population_cells(population, n, replicates, rng)
            print(line(cells[-2]), line(cells[-1]), sep="\n", flush=True)
    print(f"gains read together: {len(FAMILY_GAINS)} gains on the same seeds, all covered at once (Bonferroni); the "
          f"uncorrected {LEVEL:.0%} intervals for contrast")
    for noise in NOISES:
        for n in SEED_COUNTS:
            cells += simultaneous_cells(noise, n, replicates, rng)
            print(line(cells[-2]), line(cells[-1]), sep="\n", flush=True)
    print("the main job's endpoints (sptune.experiment.endpoints: S4D vs Transformer on ucr-osuleaf, scratch and "
          "SPT), noise estimated from the kept records, each design's estimates beside what its model gives back")
    print("per-example SD of d_ij in the test-set gain rows above, for comparison: "
          + ", ".join(f"{p.name} {example_sd(p):.2f}" for p in POPULATIONS))
    for name, pattern in RECORD_DESIGNS:
        model = fit_design(name, pattern)
        for text in describe_model(model):
            print(text, flush=True)
        for n in RECORD_SEED_COUNTS:
            made = record_cells(model, n, 10 if args.quick else replicates, rng)
            cells += made
            for cell in made:
                print(line(cell), flush=True)
    print(f"{time.perf_counter() - start:.0f} s")
    print(f"lowest coverage of the stress cells (skewed noise, not gated): {lowest(cells, False):.1%}")
    low = lowest(cells, True)
    print(f"lowest coverage: {low:.1%} (target >= {TARGET:.0%}: {'PASS' if low >= TARGET else 'MISS'})")


if __name__ == "__main__":
    main()
