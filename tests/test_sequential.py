"""Group-sequential looks at the seeds (sptune.report.sequential, `sptune design`, `sptune report` with a design): the
bounds against published ones, the error rates by simulation, and the decision on the kept confirmations."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from sptune.cli.main import main
from sptune.errors import UserError
from sptune.experiment import endpoints, looks, pilots
from sptune.report import sequential, tables as report

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / "docs" / "records"
SINUSOIDAL = [RECORDS / f"architectures-confirm-{s}" for s in ("50-59", "60-64", "65-69")]
ROTARY = [RECORDS / f"architectures-rotary-{s}" for s in ("70-74", "75-79", "80-84", "85-89")]
QUARTERS = [0.25, 0.5, 0.75, 1.0]


def test_the_classical_boundaries_are_the_textbook_ones():
    """K = 4 equally spaced looks, two-sided alpha 0.05 (Jennison & Turnbull 2000, Tables 2.1 and 2.3): O'Brien &
    Fleming 4.049, 2.863, 2.337, 2.024; Pocock 2.361 at every look."""
    assert sequential.classical_bounds(4, 0.05, 0.0) == pytest.approx([4.049, 2.863, 2.337, 2.024], abs=2e-3)
    assert sequential.classical_bounds(4, 0.05, 0.5) == pytest.approx([2.361] * 4, abs=2e-3)


def test_the_spending_boundaries_are_the_published_ones():
    """Lan-DeMets spending, two-sided alpha 0.05 (gsDesign's sfLDOF / sfLDPocock, ldbounds): O'Brien-Fleming-type at
    K = 4 4.333, 2.963, 2.359, 2.014; Pocock-type at K = 5 2.438, 2.427, 2.410, 2.397, 2.386."""
    assert sequential.spending_bounds(QUARTERS, 0.05, "obrien-fleming") == pytest.approx(
        [4.333, 2.963, 2.359, 2.014], abs=2e-3)
    assert sequential.spending_bounds([0.2, 0.4, 0.6, 0.8, 1.0], 0.05, "pocock") == pytest.approx(
        [2.438, 2.427, 2.410, 2.397, 2.386], abs=2e-3)


def test_the_bounds_spend_alpha_look_by_look():
    bounds = sequential.spending_bounds(QUARTERS, 0.05, "obrien-fleming")
    first = [up + down for up, down in sequential.crossings(bounds, QUARTERS)]
    assert np.cumsum(first) == pytest.approx([sequential.spent(t, 0.05, "obrien-fleming") for t in QUARTERS],
                                              abs=1e-6)


def test_a_monte_carlo_brownian_motion_crosses_the_bounds_with_probability_alpha():
    """The integration against simulation: 200 000 score processes observed at the four looks."""
    rng = np.random.default_rng(7)
    scores = np.cumsum(rng.standard_normal((200_000, 4)) * math.sqrt(0.25), axis=1)
    z = scores / np.sqrt(QUARTERS)
    for family in sequential.SPENDING:
        bounds = np.array(sequential.spending_bounds(QUARTERS, 0.05, family))
        assert (np.abs(z) >= bounds).any(axis=1).mean() == pytest.approx(0.05, abs=0.0025)  # 5 MC SE


@pytest.mark.parametrize("spending", sequential.SPENDING)
def test_the_design_keeps_its_type_i_error_on_t_statistics(spending):
    """20 000 simulated experiments, 5 / 10 / 15 / 20 seeds: about 5% (MC SE 0.15%); the z bounds applied to
    the t statistics, ignoring that the SD is estimated from 4 to 19 degrees of freedom, reject far more often."""
    design = sequential.Design(4, 20, spending)
    assert sequential.simulate(design, 0.0, 20_000, seed=11)["reject"] == pytest.approx(0.05, abs=0.006)
    assert sequential.simulate(design, 0.0, 20_000, seed=11, t_bounds=design.z_bounds())["reject"] > 0.075


def test_a_non_binding_futility_rule_only_lowers_the_type_i_error_and_saves_seeds():
    plain, futile = sequential.Design(4, 20), sequential.Design(4, 20, futility=0.1)
    assert futile.t_bounds() == plain.t_bounds()  # the efficacy bounds ignore it
    null = sequential.simulate(futile, 0.0, 4000, seed=3)
    assert null["reject"] <= sequential.simulate(plain, 0.0, 4000, seed=3)["reject"]
    assert null["futility"] > 0.5 and null["mean_seeds"] < 14


def test_obrien_fleming_keeps_the_fixed_design_s_power_and_saves_seeds():
    design = sequential.Design(4, 20)
    alternative = sequential.simulate(design, 0.75, 20_000, seed=5)  # fixed 20-seed paired t-test: 88.9%
    assert alternative["reject"] == pytest.approx(0.889, abs=0.015) and alternative["mean_seeds"] < 17


def gap_change(dirs):
    plan, arm_rows = pilots.read(dirs)
    return endpoints.find(endpoints.endpoints(arm_rows, plan.layout, "confirmation"), "gap change")


def test_the_sinusoidal_confirmation_would_have_stopped_for_efficacy_at_15_seeds():
    """Declared O'Brien-Fleming, 4 looks of 5 seeds: at 10 seeds t = -3.42, past the classical z bound 2.86 but
    not the critical t at 9 degrees of freedom (4.02); at 15 seeds t = -5.04 < -2.67: stop."""
    found = gap_change(SINUSOIDAL)
    assert found.seeds == tuple(range(50, 70))
    steps = sequential.run_looks(sequential.Design(4, 20), found.values)
    assert [k.verdict for k in steps] == ["continue", "continue", "efficacy"]
    assert steps[1].t == pytest.approx(-3.42, abs=0.005) and abs(steps[1].t) > sequential.classical_bounds(4)[1]
    assert steps[1].t_bound == pytest.approx(4.02, abs=0.03) and steps[2].t == pytest.approx(-5.04, abs=0.005)
    assert steps[2].mean == pytest.approx(-8.82, abs=0.005)
    assert steps[2].low == pytest.approx(-13.48, abs=0.05) and steps[2].high == pytest.approx(-4.15, abs=0.05)


def test_the_rotary_confirmation_would_have_met_the_futility_rule_at_10_seeds():
    steps = sequential.run_looks(sequential.Design(4, 20, futility=0.1), gap_change(ROTARY).values)
    assert [k.verdict for k in steps] == ["continue", "futility", "continue", "final: no efficacy"]
    assert steps[1].conditional_power < 0.02 and steps[3].low < 0 < steps[3].high


def test_a_design_file_round_trips_with_its_bounds(tmp_path):
    design = sequential.Design(4, 20, "pocock", 0.05, 0.2, "S4D SPT gain")
    path = sequential.write_design(tmp_path, design)
    data = json.loads(path.read_text())
    assert path.name == "design.json" and data["look_sizes"] == [5, 10, 15, 20]
    back = sequential.read_design(tmp_path)
    assert back.declared() == design.declared()
    assert back.t_bounds() == pytest.approx(design.t_bounds(), abs=1e-4)


def without_baselines(monkeypatch):
    """The pooled report's sections but the architecture section (its trivial baselines take 20 s to fit)."""
    monkeypatch.setattr(report, "grid_sections", lambda arm_rows, layout: ([], []))


def test_sptune_report_decides_at_the_current_look(tmp_path, monkeypatch, capsys):
    """The design declared in the first batch's directory, the batches pooled: stop at look 3. The first batch
    alone (10 seeds): continue to the look at 15."""
    without_baselines(monkeypatch)
    batches = [shutil.copytree(d, tmp_path / d.name) for d in SINUSOIDAL]
    assert main(["design", str(batches[0]), "--looks", "4", "--seeds-planned", "20"]) == 0
    assert "| 2 | 10 | 0.00305 | 2.963 |" in capsys.readouterr().out
    assert main(["report", *map(str, batches)]) == 0
    out = capsys.readouterr().out
    assert "**Decision: stop for efficacy** at look 3 of 4 (15 of 20 planned seeds)" in out
    assert main(["report", str(batches[0])]) == 0
    assert "**Decision: continue** to look 3 at 15 seeds" in capsys.readouterr().out
    other = tmp_path / "pocock.json"
    assert main(["design", str(other), "--looks", "4", "--seeds-planned", "20", "--spending", "pocock"]) == 0
    assert main(["report", *map(str, batches), "--design", str(other)]) == 0
    assert "**Decision: stop for efficacy** at look 2 of 4" in capsys.readouterr().out


def test_batches_that_declare_different_designs_are_refused(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    sequential.write_design(first, sequential.Design(4, 20))
    sequential.write_design(second, sequential.Design(2, 20))
    with pytest.raises(UserError, match="declare different designs"):
        looks.find_design([first, second])


@pytest.mark.parametrize("flags, message", [
    (["--looks", "4", "--seeds-planned", "20", "--spending", "linear"], "unknown spending function 'linear'"),
    (["--looks", "10", "--seeds-planned", "20"], "fewer than 3 seeds"),
    (["--looks", "4", "--seeds-planned", "20", "--futility", "1.5"], "conditional power in (0, 1)"),
    (["--looks", "4", "--seeds-planned", "20", "--alpha", "0.7"], "alpha must be in (0, 0.5)"),
])
def test_a_bad_design_flag_is_one_line_naming_it(flags, message, tmp_path, capsys):
    assert main(["design", str(tmp_path / "x"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_a_declared_design_is_not_silently_replaced(tmp_path, capsys):
    assert main(["design", str(tmp_path), "--looks", "4", "--seeds-planned", "20"]) == 0
    assert main(["design", str(tmp_path), "--looks", "4", "--seeds-planned", "20"]) == 0  # the same: fine
    assert main(["design", str(tmp_path), "--looks", "2", "--seeds-planned", "20"]) == 2
    assert "already declares another design" in capsys.readouterr().err
    assert main(["design", str(tmp_path), "--looks", "2", "--seeds-planned", "20", "--replace"]) == 0
    assert sequential.read_design(tmp_path).looks == 2
