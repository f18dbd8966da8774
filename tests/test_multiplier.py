"""Data multiplier: synthetic curves with a known answer, bounds outside the measured range, the bootstrap."""

import math

import pytest

from sptune import multiplier

FRACTIONS = [0.05, 0.1, 0.2, 0.4, 0.8]


def scratch_curve(f):
    return 0.5 + 0.1 * math.log(f)


def records(noise=(0.0,), shift=2.0):
    """Scratch acc = a + b log f; SPT = scratch at `shift` times the data (so the multiplier is `shift`)."""
    return [(f, seed, scratch_curve(f) + e, scratch_curve(shift * f) + e)
            for seed, e in enumerate(noise) for f in FRACTIONS]


def test_spt_shifted_by_twice_the_data_gives_multiplier_two_and_a_bound_beyond_the_range():
    m = multiplier.multipliers(records())
    for f in FRACTIONS[:-1]:
        assert m[f].value == pytest.approx(2.0) and m[f].bound == ""
    top = m[0.8]
    assert top.bound == ">" and top.value == pytest.approx(1.0) and top.text() == ">1x"
    assert m[0.1].low is None and m[0.1].text() == "2.00x"  # one seed: no interval


def test_interpolation_is_linear_in_log_fraction_on_the_monotone_envelope():
    fractions, means = [0.1, 0.2, 0.4], [0.5, 0.45, 0.7]  # a dip at 0.2: the running max is 0.5 there
    needed, bound = multiplier.fraction_needed(fractions, means, 0.6)
    # envelope 0.5 -> 0.7 between 0.2 and 0.4: halfway in log space is sqrt(0.2 * 0.4)
    assert bound == "" and needed == pytest.approx(math.sqrt(0.08))
    assert multiplier.fraction_needed(fractions, means, 0.5) == (pytest.approx(0.1), "<=")
    assert multiplier.fraction_needed(fractions, means, 0.71) == (pytest.approx(0.4), ">")


def test_spt_worse_than_the_smallest_scratch_fraction_is_an_upper_bound():
    recs = [(f, 0, scratch_curve(f), scratch_curve(f) - 0.5) for f in FRACTIONS]
    m = multiplier.multipliers(recs)
    assert m[0.05].bound == "<=" and m[0.05].value == pytest.approx(1.0)
    assert m[0.8].bound == "<=" and m[0.8].value == pytest.approx(0.05 / 0.8)


def test_bootstrap_interval_covers_the_true_multiplier_and_is_reproducible():
    spt_noise = (-0.02, 0.01, 0.0, 0.02, -0.01, 0.0)  # per-seed SPT noise, mean 0: the point estimate stays 2
    recs = [(f, seed, scratch_curve(f), scratch_curve(2 * f) + e) for seed, e in enumerate(spt_noise)
            for f in FRACTIONS]
    m = multiplier.multipliers(recs)
    assert m == multiplier.multipliers(recs)  # fixed RNG seed
    assert m[0.1].value == pytest.approx(2.0) and m[0.1].seeds == 6
    assert m[0.1].low < 2.0 < m[0.1].high < 3.0
    assert m[0.1].text().startswith("2.00x [")
    shared = multiplier.multipliers(records((-0.02, 0.0, 0.02)))  # an offset both arms of a seed share cancels
    assert shared[0.1].low == pytest.approx(2.0) and shared[0.1].high == pytest.approx(2.0)


def test_seeds_missing_a_fraction_are_left_out_and_one_fraction_gives_nothing():
    recs = records((0.0, 0.01)) + [(0.1, 7, 0.9, 0.95)]  # seed 7 ran only one fraction
    assert multiplier.multipliers(recs)[0.1].seeds == 2
    assert multiplier.multipliers([(0.1, 0, 0.5, 0.6)]) == {}
