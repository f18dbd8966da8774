"""Data multiplier: synthetic curves with a known answer, bounds outside the measured range, the interval (an
inverted paired t-test, checked by hand and against sptune.report.stats), and no interval where none is valid."""

import math

import pytest

from sptune.report import multiplier, stats

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
    assert m[0.1].low is None and m[0.1].text() == "2.00x [no interval: n=1, needs >= 3 seeds]"


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


def test_interval_covers_the_true_multiplier_and_an_offset_both_arms_share_cancels():
    spt_noise = (-0.02, 0.01, 0.0, 0.02, -0.01, 0.0)  # per-seed SPT noise, mean 0: the point estimate stays 2
    recs = [(f, seed, scratch_curve(f), scratch_curve(2 * f) + e) for seed, e in enumerate(spt_noise)
            for f in FRACTIONS]
    m = multiplier.multipliers(recs)
    assert m[0.1].value == pytest.approx(2.0) and m[0.1].seeds == 6
    assert m[0.1].low < 2.0 < m[0.1].high < 3.0 and not (m[0.1].low_open or m[0.1].high_open)
    assert m[0.1].text().startswith("2.00x [")
    shared = multiplier.multipliers(records((-0.02, 0.0, 0.02)))
    assert shared[0.1].low == pytest.approx(2.0) and shared[0.1].high == pytest.approx(2.0)


def test_interval_by_hand_when_scratch_is_the_same_for_every_seed():
    # scratch 0.5 / 0.6 / 0.7 at 0.1 / 0.2 / 0.4 for every seed; SPT at 0.1 is 0.54, 0.55, 0.56: the t-interval of
    # SPT's mean, 0.55 +- t_{0.975, 2} 0.01 / sqrt(3), read off scratch's line between 0.1 and 0.2: the
    # multiplier 2^w with w = (0.55 -+ half - 0.5) / 0.1
    half = stats.t_quantile(0.975, 2) * 0.01 / math.sqrt(3)
    recs = [(f, seed, acc, 0.55 + e if f == 0.1 else acc) for seed, e in enumerate((-0.01, 0.0, 0.01))
            for f, acc in ((0.1, 0.5), (0.2, 0.6), (0.4, 0.7))]
    m = multiplier.multipliers(recs)[0.1]
    assert m.value == pytest.approx(2 ** 0.5)
    assert (m.low, m.high) == (pytest.approx(2 ** ((0.05 - half) / 0.1)), pytest.approx(2 ** ((0.05 + half) / 0.1)))


def test_interval_includes_one_when_the_paired_gain_interval_includes_zero():
    """At the fraction itself the test is the paired t-test of the gains: a gain interval with 0 gives one with 1"""
    for spt_noise in ((0.05, -0.04, 0.01), (0.004, -0.003, 0.001)):
        recs = [(f, seed, scratch_curve(f) + 0.01 * seed, scratch_curve(1.5 * f) + e + 0.01 * seed)
                for seed, e in enumerate(spt_noise) for f in FRACTIONS]
        m = multiplier.multipliers(recs)[0.2]
        gain = stats.paired_t([r[3] for r in recs if r[0] == 0.2], [r[2] for r in recs if r[0] == 0.2])
        assert (m.low <= 1.0) == (gain.low <= 0.0)
    assert m.low > 1.0 and not gain.low <= 0.0  # the quiet case excludes both


def test_an_interval_reaching_a_measured_end_is_open():
    noisy = [(f, seed, scratch_curve(f), scratch_curve(2 * f) + e) for seed, e in enumerate((-0.2, 0.0, 0.2))
             for f in FRACTIONS]
    m = multiplier.multipliers(noisy)[0.1]
    assert m.low_open and m.high_open and m.text() == "2.00x [<=0.50, >=8.00]"


def test_no_interval_where_none_is_valid_says_why():
    for noise in ((0.0,), (0.0, 0.01)):
        m = multiplier.multipliers(records(noise))
        assert m[0.1].low is None and m[0.1].high is None
        assert m[0.1].reason == f"n={len(noise)}, needs >= 3 seeds" and "[no interval: n=" in m[0.1].text()
    top = multiplier.multipliers(records((0.0, 0.01, 0.02)))[0.8]
    assert top.low is None and top.reason == "the multiplier is a bound" and top.text() == ">1x"


def test_seeds_missing_a_fraction_are_left_out_and_one_fraction_gives_nothing():
    recs = records((0.0, 0.01)) + [(0.1, 7, 0.9, 0.95)]  # seed 7 ran only one fraction
    assert multiplier.multipliers(recs)[0.1].seeds == 2
    assert multiplier.multipliers([(0.1, 0, 0.5, 0.6)]) == {}
