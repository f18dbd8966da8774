"""sptune.report.stats: the paired Student-t interval every multi-seed output uses, against hand-computed values."""

import math
import random
from dataclasses import replace

import numpy as np
import pytest

from sptune.errors import UserError
from sptune.report import pairs, stats


def test_paired_interval_hand_computed_case():
    # differences [1, 2, 3, 4, 5]: mean 3, sd sqrt(2.5) = 1.5811, t_{0.975, 4} = 2.7764,
    # half-width 2.7764 * 1.5811 / sqrt(5) = 1.9632
    p = stats.paired_t([11, 12, 13, 14, 15], [10, 10, 10, 10, 10])
    assert p.n == 5 and p.mean == pytest.approx(3.0)
    assert p.sd == pytest.approx(1.5811, abs=1e-4)
    assert p.half_width == pytest.approx(1.9632, abs=1e-4)
    assert (p.low, p.high) == (pytest.approx(1.0368, abs=1e-4), pytest.approx(4.9632, abs=1e-4))
    assert p.excludes_zero
    assert stats.format_paired(p) == "+3.00 ± 1.96 (95% CI [+1.04, +4.96], n=5)"


@pytest.mark.parametrize("p, dof, expected", [
    (0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 4, 2.7764), (0.975, 9, 2.2622), (0.975, 29, 2.0452),
    (0.95, 4, 2.1318), (0.995, 4, 4.6041), (0.5, 7, 0.0), (0.025, 4, -2.7764)])
def test_t_quantiles_match_the_tables(p, dof, expected):
    assert stats.t_quantile(p, dof) == pytest.approx(expected, abs=1e-4)


def test_t_quantile_tends_to_the_normal():
    assert stats.t_quantile(0.975, 1e6) == pytest.approx(1.95996, abs=1e-4)


def test_t_cdf_is_symmetric_and_monotone():
    assert stats.t_cdf(0.0, 3) == pytest.approx(0.5)
    assert stats.t_cdf(-1.3, 5) == pytest.approx(1 - stats.t_cdf(1.3, 5))
    values = [stats.t_cdf(t / 4, 3) for t in range(-20, 21)]
    assert values == sorted(values)


def test_interval_that_includes_zero_and_degenerate_cases():
    p = stats.t_interval([-1.0, 2.0, 0.5])
    assert p.low < 0 < p.high and not p.excludes_zero
    one = stats.t_interval([0.7])
    assert one.half_width is None and one.low is None and not one.excludes_zero
    assert "no interval" in stats.format_paired(one)
    same = stats.t_interval([0.2, 0.2, 0.2])
    assert same.half_width == 0.0 and same.degenerate and not same.excludes_zero
    assert "degenerate: zero variance" in stats.format_paired(same)
    two = stats.t_interval([1.0, 1.1])
    assert two.degenerate and two.low > 0 and not two.excludes_zero
    assert "degenerate: n=2" in stats.format_paired(two) and two.to_dict()["degenerate"] is True
    assert not stats.t_interval([1.0, 1.1, 1.2]).degenerate
    with pytest.raises(ValueError):
        stats.paired_t([1, 2], [1])
    with pytest.raises(ValueError):
        stats.t_interval([])


def test_the_p_value_is_where_the_interval_reaches_zero():
    differences = [1.0, 2.0, 3.0, 4.0, 5.0]
    low = stats.t_interval(differences).low
    assert stats.p_value(stats.t_interval([d - low for d in differences])) == pytest.approx(0.05, abs=1e-9)
    assert stats.p_value(stats.t_interval([-d for d in differences])) == stats.p_value(stats.t_interval(differences))
    assert stats.p_value(stats.t_interval([0.7])) is None and stats.p_value(stats.t_interval([0.2, 0.2])) is None


def test_simultaneous_intervals_widen_each_to_the_bonferroni_level():
    gains = [stats.t_interval(d) for d in ([1.0, 2.0, 3.0], [-1.0, 2.0, 0.5], [0.3, 0.1, 0.6, 0.2])]
    wide = stats.simultaneous(gains)
    assert [w.level for w in wide] == [pytest.approx(1 - 0.05 / 3)] * 3
    assert all(w.mean == g.mean and w.half_width > g.half_width for w, g in zip(wide, gains))
    assert wide[2] == stats.t_interval([0.3, 0.1, 0.6, 0.2], 1 - 0.05 / 3)
    assert stats.simultaneous([]) == []


def test_mean_std():
    assert stats.mean_std([]) == (None, None)
    assert stats.mean_std([2.0]) == (2.0, None)
    mean, sd = stats.mean_std([1, 2, 3, 4])
    assert mean == 2.5 and sd == pytest.approx(math.sqrt(5 / 3))


def test_seed_table_and_plot(tmp_path):
    seed_pairs = [pairs.Pair(s, 0.60 + 0.01 * s, 0.55, 0.61, 0.56) for s in range(5)] + [pairs.Pair(9, None, 0.5,
                                                                                               status="failed")]
    text = pairs.table(seed_pairs, "accuracy")
    assert "mean paired gain (SPT - scratch): +7.00 ± 1.96 (95% CI [+5.04, +8.96], n=5)" in text
    assert "excludes 0" in text and "not complete (failed)" in text
    png = pairs.plot(seed_pairs, "accuracy", tmp_path / "seeds.png")
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert pairs.write_csv(seed_pairs, tmp_path / "s.csv").read_text().count("\n") == 7


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_inputs_raise_a_value_error_naming_the_position(bad):
    with pytest.raises(ValueError, match="non-finite value .* at position 1"):
        stats.mean_std([0.5, bad])
    with pytest.raises(ValueError, match="non-finite"):
        stats.paired_t([0.5, 0.6, 0.7], [0.4, bad, 0.5])
    with pytest.raises(ValueError, match="non-finite"):
        stats.t_interval([bad])


def test_seed_table_says_a_two_seed_interval_is_degenerate():
    seed_pairs = [pairs.Pair(s, 0.60 + 0.01 * s, 0.55, 0.61, 0.56) for s in range(2)]
    text = pairs.table(seed_pairs, "accuracy")
    assert "degenerate" in text and "excludes 0" not in text


def _pair(seed, spt_best, scratch_best, budget=100):
    return pairs.Pair(seed, 0.7, 0.6, 0.71, 0.61, spt_best_step=spt_best, spt_steps=budget, spt_train_loss=0.25,
                      scratch_best_step=scratch_best, scratch_steps=budget, scratch_train_loss=0.5)


def test_seed_table_shows_best_step_budget_and_train_loss_and_flags_late_best_steps():
    text = pairs.table([_pair(0, 50, 90), _pair(1, 80, 100), _pair(2, 40, 60)], "accuracy")
    row0 = next(line for line in text.splitlines() if line.strip().startswith("0 "))
    assert "50/100" in row0 and "90/100*" in row0 and "0.2500" in row0 and "0.5000" in row0
    assert "80/100 " in text  # exactly 80%: not in the last 20%
    assert ("warning: scratch reached its best validation in the last 20% of its step budget for seed(s) 0, 1"
            in text)
    assert "warning: SPT" not in text
    assert pairs.late_arms(_pair(3, 81, 10)) == ["spt"]


def test_convergence_fields_come_from_a_result(tmp_path):
    result = {"best_step": 40, "steps": 50, "history": [{"train_loss": 1.0}, {"train_loss": 0.3}]}
    assert pairs.convergence("spt", result) == {"spt_best_step": 40, "spt_steps": 50, "spt_train_loss": 0.3}
    assert pairs.convergence("scratch", None) == {"scratch_best_step": None, "scratch_steps": None,
                                                  "scratch_train_loss": None}
    csv_text = pairs.write_csv([_pair(0, 50, 90)], tmp_path / "s.csv").read_text()
    assert "scratch_best_step" in csv_text.splitlines()[0] and ",90," in csv_text


# ----------------------------------------------------------------------------- seeds and test examples sampled
def test_identical_seeds_leave_only_the_test_sets_variance():
    # Every seed's SPT - scratch differences are [1, 1, 0, 0]: MS_seed = MS_residual = 0, and MS_example =
    # 3 * 4 * 0.25 / 3 = 1, so V = 1 / (3 * 4) and the half-width is t_{0.975, 2} * sqrt(1 / 12) = 1.2421.
    p = stats.paired_with_test_sampling(["1110"] * 3, ["0010"] * 3)
    assert p.n == 3 and p.mean == 0.5 and p.differences == (0.5, 0.5, 0.5)
    assert p.half_width == pytest.approx(4.3027 / math.sqrt(12), abs=1e-4)
    seed_only = stats.paired_t([0.75] * 3, [0.25] * 3)
    assert seed_only.half_width == 0.0 and seed_only.degenerate and not p.degenerate


def test_without_example_effects_the_interval_is_the_seed_interval():
    # Each seed's difference is the same on every example (1, 0, 1): nothing varies by example, V is paired_t's.
    p = stats.paired_with_test_sampling(["1111", "0000", "1111"], ["0000"] * 3)
    seed_only = stats.paired_t([1.0, 0.0, 1.0], [0.0, 0.0, 0.0])
    assert p.mean == pytest.approx(seed_only.mean) and p.half_width == pytest.approx(seed_only.half_width)
    assert p.half_width == pytest.approx(4.3027 / 3, abs=1e-4)  # sd sqrt(1/3) over sqrt(3) seeds


def test_mean_squares_match_the_textbook_two_way_anova():
    rng = np.random.default_rng(0)
    latent = rng.normal(0, 1, (5, 1)) + rng.normal(0, 1, (1, 40)) + rng.normal(0, 0.5, (5, 40))  # seed + example
    d = np.digitize(latent, [-0.5, 0.5]) - 1  # (n, m) in {-1, 0, 1}
    n, m = d.shape
    seeds, examples, grand = d.mean(1, keepdims=True), d.mean(0, keepdims=True), d.mean()
    expected = (m * ((seeds - grand) ** 2).sum() / (n - 1), n * ((examples - grand) ** 2).sum() / (m - 1),
                ((d - seeds - examples + grand) ** 2).sum() / ((n - 1) * (m - 1)))
    assert [float(ms) for ms in stats.crossed_mean_squares(d.tolist())] == pytest.approx(expected, rel=1e-12)
    p = stats.crossed_interval(d.tolist())
    combined = expected[0] + expected[1] - expected[2]
    assert combined > max(expected[:2])  # the moment estimate itself, above its floors
    v = combined / (n * m)
    assert p.half_width == pytest.approx(stats.t_quantile(0.975, n - 1) * math.sqrt(v)) and p.mean == grand


def test_the_test_sampling_interval_always_contains_the_seed_interval():
    rng = np.random.default_rng(1)
    for i in range(50):
        difficulty = rng.random((2, 1, 30)) if i % 2 else 0.5  # shared by the seeds, or none: coin flips
        spt, scratch = rng.random((2, 4, 30)) < difficulty
        p = stats.paired_with_test_sampling([row.tolist() for row in spt], [row.tolist() for row in scratch])
        seed_only = stats.paired_t(spt.mean(1).tolist(), scratch.mean(1).tolist())
        assert p.mean == pytest.approx(seed_only.mean)
        assert p.low <= seed_only.low + 1e-12 and p.high >= seed_only.high - 1e-12


def test_a_negative_moment_estimate_falls_back_to_the_larger_one_way_part():
    # d = [[1, 0], [0, 1], [1, 1]]: MS_seed = 1/6, MS_example = 0, MS_residual = 1/2, so the moment estimate
    # 1/6 + 0 - 1/2 < 0; V = MS_seed / (n m) = 1/36, paired_t's variance: the seed interval.
    p = stats.paired_with_test_sampling(["10", "01", "11"], ["00", "00", "00"])
    assert p.half_width == pytest.approx(stats.paired_t([0.5, 0.5, 1.0], [0.0] * 3).half_width)
    assert p.half_width == pytest.approx(4.3027 / 6, abs=1e-4)
    # Its transpose: MS_example = 1/6 is the larger part; V = 1/36, with n = 2 (t = 12.706, degenerate).
    q = stats.paired_with_test_sampling(["101", "011"], ["000", "000"])
    assert q.half_width == pytest.approx(12.7062 / 6, abs=1e-4) and q.degenerate


def test_identical_arms_gain_nothing_and_one_seed_has_no_interval():
    same = stats.paired_with_test_sampling(["1011", "0110", "1100"], ["1011", "0110", "1100"])
    assert same.mean == 0.0 and same.half_width == 0.0 and same.degenerate and not same.excludes_zero
    one = stats.paired_with_test_sampling(["1011"], ["0010"])
    assert one.mean == 0.5 and one.half_width is None and "no interval" in stats.format_paired(one)


def test_test_outcomes_of_different_test_sets_are_a_user_error():
    with pytest.raises(UserError, match="test outcomes of 3 and 4 examples"):
        stats.paired_with_test_sampling(["1011", "011"], ["1011", "0110"])
    with pytest.raises(UserError, match="must be 0 or 1"):
        stats.paired_with_test_sampling(["1021", "0110"], ["1011", "0110"])
    with pytest.raises(ValueError, match="needs pairs"):
        stats.paired_with_test_sampling(["1011", "0110"], ["1011"])


def test_seed_table_adds_the_interval_that_resamples_the_test_examples_where_runs_kept_them(tmp_path):
    rng = random.Random(0)

    def hits(p):  # 200 test examples, each right with probability p
        return "".join("1" if rng.random() < p else "0" for _ in range(200))

    seed_pairs = [pairs.Pair(s, None, None, spt_hits=hits(0.7), scratch_hits=hits(0.6)) for s in range(4)]
    for p in seed_pairs:  # each run's accuracy is its hits' mean, as a run writes them
        p.spt_test, p.scratch_test = p.spt_hits.count("1") / 200, p.scratch_hits.count("1") / 200
    text = pairs.table(seed_pairs, "accuracy")
    seeds_only = stats.paired_t([p.spt_test for p in seed_pairs], [p.scratch_test for p in seed_pairs])
    both = stats.paired_with_test_sampling([p.spt_hits for p in seed_pairs], [p.scratch_hits for p in seed_pairs])
    assert f"with test-set sampling (seeds and test examples resampled): {stats.format_paired(both, 100)}" in text
    assert both.mean == pytest.approx(seeds_only.mean) and both.half_width >= seeds_only.half_width
    assert "spt_hits" not in pairs.write_csv(seed_pairs, tmp_path / "s.csv").read_text()  # too long for a table
    # A run without outcomes (an R² task, an older run): no such line; two test sets: none, and why.
    assert "test-set sampling" not in pairs.table([*seed_pairs[:3], replace(seed_pairs[3], spt_hits=None)], "accuracy")
    short = replace(seed_pairs[3], spt_hits=seed_pairs[3].spt_hits[:100], scratch_hits=seed_pairs[3].scratch_hits[:100])
    assert "with test-set sampling: none (test outcomes of 100 and 200 examples" in pairs.table(
        [*seed_pairs[:3], short], "accuracy")
