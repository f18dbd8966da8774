"""Seeds you can plan (sptune.report.power, `sptune power`): the paired t-test's power against textbook answers and the
kept confirmations' records, and the minimum detectable effect the architecture report prints beside an
undecided interval."""

from pathlib import Path

import pytest

from sptune.cli.main import main
from sptune.experiment import endpoints, pilots
from sptune.report import architectures, power, stats

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / "docs" / "records"
SINUSOIDAL = [RECORDS / f"architectures-confirm-{s}" for s in ("50-59", "60-64", "65-69")]
ROTARY = [RECORDS / f"architectures-rotary-{s}" for s in ("70-74", "75-79", "80-84", "85-89")]
METHODS = [power.EXACT, power.APPROXIMATE]


@pytest.mark.parametrize("how", METHODS)
@pytest.mark.parametrize("ratio, seeds", [(0.5, 34), (1.0, 10)])
def test_seeds_for_80_percent_power_are_the_textbook_ones(how, ratio, seeds):
    """Paired t-test, two-sided alpha 0.05, power 0.8: effect / SD 0.5 needs 34 pairs, 1.0 needs 10 (Cohen 1988;
    G*Power's "matched pairs"); scipy.stats.nct gives 0.8078 at 34 and 0.8031 at 10."""
    assert power.seeds_needed(ratio, 1.0, 0.8, 0.05, how) == seeds
    assert power.power(seeds, ratio, 1.0, 0.05, how) >= 0.8 > power.power(seeds - 1, ratio, 1.0, 0.05, how)


def test_the_exact_power_is_the_noncentral_t_and_the_approximation_stays_close():
    assert power.method() == power.EXACT  # scipy is installed here (scikit-learn requires it)
    assert power.power(10, 1.0, 1.0, how=power.EXACT) == pytest.approx(0.8031, abs=1e-4)
    assert power.power(34, 0.5, 1.0, how=power.EXACT) == pytest.approx(0.8078, abs=1e-4)
    for n, tolerance in ((5, 0.015), (10, 0.003), (20, 0.001)):  # its largest errors over effect / SD 0 to 3
        for ratio in (0.0, 0.3, 0.6, 1.0, 2.0):
            assert power.power(n, ratio, 1.0, how=power.APPROXIMATE) == pytest.approx(
                power.power(n, ratio, 1.0, how=power.EXACT), abs=tolerance)


@pytest.mark.parametrize("how", METHODS)
def test_the_detectable_effect_has_the_power_it_is_asked_for(how):
    effect = power.detectable_effect(20, 10.0, 0.8, 0.05, how)
    assert power.power(20, effect, 10.0, 0.05, how) == pytest.approx(0.8, abs=1e-6)
    assert power.detectable_effect(40, 10.0, 0.8, 0.05, how) < effect  # more seeds detect less


def gap_change(dirs):
    plan, arm_rows = pilots.read(dirs)
    return endpoints.find(endpoints.endpoints(arm_rows, plan.layout), "gap change")


def test_the_rotary_confirmation_needs_about_55_seeds_for_a_4_point_gap_change():
    """Its 20 seeds: per-seed SD of the gap change 10.34 points; 20 seeds detect a 4-point change with 38% power,
    80% needs 55 seeds."""
    found = gap_change(ROTARY)
    sd = stats.t_interval(found.values).sd
    assert len(found.values) == 20 and sd == pytest.approx(10.34, abs=0.01)
    assert power.power(20, 4.0, sd) == pytest.approx(0.376, abs=0.001)
    assert power.seeds_needed(4.0, sd) == 55


def test_the_sinusoidal_confirmation_had_64_percent_power_for_a_4_point_gap_change():
    found = gap_change(SINUSOIDAL)
    sd = stats.t_interval(found.values).sd
    assert sd == pytest.approx(7.33, abs=0.01)
    assert power.power(20, 4.0, sd) == pytest.approx(0.639, abs=0.001)
    assert power.seeds_needed(4.0, sd) == 29


def test_an_undecided_interval_says_what_its_seeds_could_detect():
    undecided = stats.t_interval([0.03, -0.05, 0.02, -0.01, 0.04])
    text = power.detectable_text(undecided, 100.0)
    assert text == f"; detectable at 80% power: ±{100 * power.detectable_effect(5, undecided.sd):.2f}"
    assert power.detectable_text(stats.t_interval([0.05, 0.06, 0.07]), 100.0) == ""  # excludes 0: decided
    assert power.detectable_text(stats.t_interval([0.05, -0.06]), 100.0) == ""  # n = 2: no test worth the name
    assert power.detectable_text(stats.t_interval([0.0, 0.0, 0.0]), 100.0) == ""  # zero variance


def test_the_architecture_section_quantifies_the_undecided_gains():
    """The sinusoidal confirmation: S4D's SPT gain includes 0 and gets its detectable effect; the Transformer's and
    the gap change exclude 0 and are printed as before."""
    plan, arm_rows = pilots.read(SINUSOIDAL)
    lines = architectures.role_lines(arm_rows, plan.layout)
    s4d = next(line for line in lines if line.startswith("- S4D:"))
    assert "SPT gain -0.97 ± 3.77 (95% CI [-4.74, +2.80], n=20); detectable at 80% power: ±5.32;" in s4d
    transformer = next(line for line in lines if line.startswith("- Transformer:"))
    change = next(line for line in lines if line.startswith("- gap under SPT minus"))
    assert "detectable" not in transformer and change.endswith("(95% CI [-11.18, -4.32], n=20)")


def test_sptune_power_prints_the_plan_from_records_and_from_a_stated_sd(capsys):
    assert main(["power", *map(str, ROTARY), "--effect", "4", "--seeds-planned", "20", "--endpoint", "gap change"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| gap change"))
    assert "| 20 | -1.90 | 10.34 | 37.6% (N=20) | 55 |" in row and "±6.83 (N=20)" in row
    assert "device-hours" in out and "noncentral t distribution" in out
    assert main(["power", "--sd", "10.3", "--effect", "4", "--seeds-planned", "20"]) == 0
    assert "| stated SD 10.3 | — | — | 10.30 | 37.8% (N=20) | 54 |" in capsys.readouterr().out


def test_device_hours_are_unknown_where_the_records_lack_them():
    plan, arm_rows = pilots.read(SINUSOIDAL[:1])  # rebuilt from a printed report: no costs
    hours, line = pilots.seed_hours(arm_rows)
    assert hours is None and "unknown" in line


@pytest.mark.parametrize("argv, message", [
    (["power", "--sd", "10", "--effect", "4", "--power", "1.5"], "--power must be in (0, 1)"),
    (["power", "--sd", "-1", "--effect", "4"], "--sd is a per-seed SD"),
    (["power", "--sd", "10", "--effect", "0"], "--effect is the size"),
    (["power"], "needs pilot runs"),
])
def test_a_bad_flag_is_one_line_naming_it(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
