"""Do sptune's group-sequential designs keep their type I error? Simulated experiments with a known answer.

    python benchmarks/sequential_error_rates.py             # 50000 replicates a design: rates to about +-0.2% (2 MC SE)
    python benchmarks/sequential_error_rates.py --quick     # 500 replicates: checks it runs (seconds), figures
                                                            # mean nothing

Each design is sptune.report.sequential.Design, run by sptune.report.sequential.simulate on experiments whose per-seed paired
values are N(effect, 1) (the endpoint in units of its per-seed SD): K looks at equally spaced seed counts, the
paired t of the first n_k seeds against the design's critical t (calibrated to the alpha spent at each look,
sptune.report.sequential.calibrated_t_bounds, on another random stream than these). Per design:
  type I error      the share of experiments at effect 0 that reject at some look, beside the nominal alpha
  nominal-level t   for contrast, the same experiments against Jennison & Turnbull §3.8's approximate critical t's
                    (each z bound's nominal level at n_k - 1 degrees of freedom)
  z bounds on t     for contrast, the z bounds themselves as critical values, i.e. ignoring that each look
                    estimates the SD from few seeds (what comparing t = -3.42 at 10 seeds with a z bound of 2.86
                    does)
  power, seeds      at effect 0.75 SD: the share that reject and the mean seeds used, beside the fixed-sample paired
                    t-test's power at the planned seeds (sptune.report.power)
Futility rules are non-binding: the type I error with the rule followed is at most the rule-free one.
The last line is the largest type I error over the designs, against nominal alpha plus 3 Monte Carlo SE (the
largest of five rates: 2 SE would be passed by chance alone about one run in nine).
"""

from __future__ import annotations

import argparse
import math
import time

from sptune.report import power, sequential

ALPHA = 0.05
EFFECT = 0.75  # per-seed SDs: 80% power for a fixed 16-seed paired t-test
STREAM = 1000  # the simulations' seeds start here: apart from the calibration's (seed 0)
DESIGNS = [sequential.Design(4, 20, "obrien-fleming"), sequential.Design(4, 20, "pocock"),
           sequential.Design(2, 10, "obrien-fleming"), sequential.Design(4, 40, "obrien-fleming"),
           sequential.Design(4, 20, "obrien-fleming", futility=0.1)]


def name(design: sequential.Design) -> str:
    futility = f", futility CP < {design.futility:g}" if design.futility is not None else ""
    return f"{design.spending}, K={design.looks}, looks at {'/'.join(map(str, design.look_sizes()))}{futility}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicates", type=int, default=50_000, help="simulated experiments per design and effect")
    parser.add_argument("--seed", type=int, default=0, help="the simulation's RNG seed")
    parser.add_argument("--quick", action="store_true",
                        help="500 replicates, seconds: checks the benchmark runs (the test suite uses it); its figures "
                             "mean nothing")
    args = parser.parse_args()
    replicates = 500 if args.quick else args.replicates
    se = math.sqrt(ALPHA * (1 - ALPHA) / replicates)
    start = time.perf_counter()
    print(f"group-sequential designs, two-sided alpha {ALPHA:g}: {replicates} simulated experiments per cell "
          f"(Monte Carlo SE {se:.2%} at {ALPHA:.0%})")
    print("| design | type I error | nominal | nominal-level t | z bounds on t | power at 0.75 SD | mean seeds | "
          "fixed-sample power |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for k, design in enumerate(DESIGNS):
        seed = STREAM + args.seed + 2 * k
        null = sequential.simulate(design, 0.0, replicates, seed=seed)
        level = sequential.simulate(design, 0.0, replicates, seed=seed, t_bounds=design.significance_level_t_bounds())
        naive = sequential.simulate(design, 0.0, replicates, seed=seed, t_bounds=design.z_bounds())
        alternative = sequential.simulate(design, EFFECT, replicates, seed=seed + 1)
        fixed = power.power(design.seeds, EFFECT, 1.0, ALPHA)
        worst = max(worst, null["reject"])
        print(f"| {name(design)} | {null['reject']:.2%} | {ALPHA:.0%} | {level['reject']:.2%} | "
              f"{naive['reject']:.2%} | "
              f"{alternative['reject']:.1%} | {alternative['mean_seeds']:.1f} of {design.seeds} | {fixed:.1%} |",
              flush=True)
    print(f"{time.perf_counter() - start:.1f} s")
    verdict = "PASS" if worst <= ALPHA + 3 * se else "MISS"
    print(f"largest simulated type I error: {worst:.2%} (nominal {ALPHA:.0%}, + 3 MC SE = {ALPHA + 3 * se:.2%}: "
          f"{verdict})")


if __name__ == "__main__":
    main()
