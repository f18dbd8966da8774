"""sptune.stats: the paired Student-t interval every multi-seed output uses, against hand-computed values."""

import math

import pytest

from sptune import pairs, stats


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
