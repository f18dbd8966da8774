"""The architecture experiment: its plan (same grid and budget for finetune and scratch) and its report section."""

import json

import pytest

from study_scripts import load_study
from sptune import config
from sptune.cli import experiment as cli
from sptune.errors import UserError
from sptune.experiment import settings
from sptune.experiment.plan import plain_point
from sptune.report import architectures, tables as report



def test_plan_gives_finetune_and_scratch_the_same_grid_and_budget():
    plan = load_study("architectures").build(cli.parse_args("", []))
    assert [c.labels["model"] for c in plan.cells] == ["Transformer", "S4D"]
    for cell in plan.cells:
        finetune, scratch = cell.space["finetune"]["params"], cell.space["scratch"]["params"]
        assert finetune == scratch and len(finetune["optim.lr"]) >= 3
        budgets = {stage: config.load(None, list(cell.overrides) + plain_point(cell.space, stage), stage=stage)
                   .optim.max_steps for stage in ("finetune", "scratch")}
        assert budgets["finetune"] == budgets["scratch"] > 0
    models = [config.load(None, list(c.overrides)).model for c in plan.cells]
    assert [m.name for m in models] == ["transformer", "s4d-legs"]
    assert len({(m.d_model, m.n_layers, m.d_ff) for m in models}) == 1  # same backbone, different sequence layer


def arm(model, arm_name, seed, test, **labels):
    return {"model": model, "arm": arm_name, "seed": seed, "test": test, **labels}


LAYOUT = {"architectures": {"transformer": "Transformer", "ssm": "S4D"}}


def test_section_reports_gains_gaps_and_baselines(monkeypatch):
    rows = [arm("Transformer", "scratch", 0, 0.40), arm("Transformer", "masked", 0, 0.50),
            arm("S4D", "scratch", 0, 0.60), arm("S4D", "masked", 0, 0.62),
            arm("Transformer", "scratch", 1, 0.42), arm("Transformer", "masked", 1, 0.54),
            arm("S4D", "scratch", 1, 0.58), arm("S4D", "masked", 1, None)]
    text = "\n".join(architectures.lines(rows, {**LAYOUT, "baselines_task": "ucr-osuleaf"}))
    assert "- Transformer: scratch 41.00, SPT 52.00, SPT gain +11.00 ± " in text
    assert "n=2, degenerate: n=2" in text  # two seeds: the interval is flagged
    assert "- S4D: scratch 59.00, SPT 62.00, SPT gain +2.00 (n=1, no interval)" in text
    # gaps are paired by seed: under SPT only seed 0 has both architectures
    assert "under scratch: +18.00 ± " in text and "under SPT: +12.00 (n=1, no interval)" in text
    assert "gap under SPT minus gap under scratch (< 0: SPT closes the gap): -8.00 (n=1" in text
    assert "1nn" in text and "majority" in text
    assert "| 0 |  | Transformer | masked | 50.00 |" in text  # the per-seed convergence table


def test_selection_and_confirmation_seeds_are_reported_apart_with_the_compute_tied_arm():
    rows = [arm("Transformer", "scratch", 0, 0.40, role="selection"), arm("Transformer", "masked", 0, 0.50,
                                                                        role="selection")]
    for seed, (scratch, spt, tied) in enumerate([(0.40, 0.45, 0.41), (0.30, 0.40, 0.35), (0.50, 0.52, 0.50)], 1):
        rows += [arm("Transformer", "scratch", seed, scratch, role="confirmation"),
                 arm("Transformer", "masked", seed, spt, role="confirmation"),
                 arm("Transformer", "scratch", seed, tied, role="confirmation", compute="tied")]
    text = "\n".join(architectures.lines(rows, LAYOUT))
    selection, confirmation = text.split("### Seeds 1, 2, 3")
    assert "### Seed 0 (selection seeds" in selection and "SPT gain +10.00 (n=1, no interval)" in selection
    assert "confirmation seeds: they chose nothing" in confirmation
    # confirmation only: SPT - scratch = 5, 10, 2 (mean 5.67); SPT - tied = 4, 5, 2 (mean 3.67)
    assert "SPT gain +5.67 ± " in confirmation and "compute-tied SPT gain +3.67 ± " in confirmation
    assert "scratch at SPT's total steps 42.00" in confirmation


def test_selection_table_gives_each_arms_modal_lr_its_share_and_the_test_spread():
    rows = [arm("S4D", "scratch", seed, test, role="confirmation", lr=lr)
            for seed, (test, lr) in enumerate([(0.70, 1e-3), (0.74, 3e-3), (0.78, 1e-3)], 1)]
    rows += [arm("S4D", "masked", seed, 0.75, role="confirmation", lr=3e-3) for seed in (1, 2, 3)]
    text = "\n".join(architectures.lines(rows, LAYOUT))
    assert "| S4D | scratch | 0.001 | 2 of 3 | 0.001 0.003 0.001 | 4.00 |" in text  # SD of 70, 74, 78
    assert "| S4D | masked | 0.003 | 3 of 3 | 0.003 0.003 0.003 | 0.00 |" in text
    one_seed = [arm("S4D", "scratch", 1, 0.7, lr=1e-3)]
    assert "modal lr" not in "\n".join(architectures.lines(one_seed, LAYOUT))  # nothing to compare on one seed


def test_late_best_steps_are_warned(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text('{"best_step": 190, "steps": 200, "history": [{"train_loss": 0.5}]}')
    rows = [arm("S4D", "scratch", 3, 0.6, **report.run_facts({"run_dir": str(run)}))]  # as report.arms() reads it
    text = "\n".join(architectures.lines(rows, LAYOUT))
    assert "| 3 |  | S4D | scratch | 60.00 | 190/200 | 0.500 |" in text
    assert "may not have converged): S4D scratch seed 3" in text


def test_missing_architecture_prints_a_dash():
    rows = [arm("Transformer", "scratch", 0, 0.4)]
    text = "\n".join(architectures.lines(rows, LAYOUT))
    assert "under scratch: —" in text and "- S4D: scratch —, SPT —, SPT gain —" in text


def test_compute_tied_cells_train_spt_total_steps_searched_on_the_scratch_grid():
    script = load_study("architectures")
    plan = script.build(cli.parse_args("", ["--seeds", "1", "6", "--compute-tied"], extra=script.add_flags))
    tied = [c for c in plan.cells if c.labels.get("compute") == "tied"]
    assert len(tied) == 4 and all(c.stages == ("scratch",) for c in tied)
    # Seeds 0-5 chose the grids or the budget (settings.MAIN_JOB_SELECTION_SEEDS); 6 chose nothing.
    assert {c.labels["role"] for c in plan.cells if c.labels["seed"] == 1} == {"selection"}
    assert {c.labels["role"] for c in plan.cells if c.labels["seed"] == 6} == {"confirmation"}
    for cell in tied:
        steps = config.load(None, list(cell.overrides), stage="scratch").optim.max_steps
        main = next(c for c in plan.cells if c.labels["seed"] == cell.labels["seed"]
                    and c.labels["model"] == cell.labels["model"] and "compute" not in c.labels)
        spt_steps = sum(config.load(None, list(main.overrides), stage=s).optim.max_steps
                        for s in ("pretrain", "finetune"))
        assert steps == spt_steps and cell.space["scratch"] == main.space["scratch"]  # the same grid
        assert len(cell.space["scratch"]["params"]["optim.lr"]) > 1
        patience = {config.load(None, list(c.overrides), stage="scratch").optim.patience for c in (cell, main)}
        assert len(patience) == 1  # the same stopping rule
        assert f"{steps} steps" in cell.labels["row"]


def test_fresh_seeds_are_a_budget_of_seeds_that_chose_nothing(capsys):
    script = load_study("architectures")
    args = cli.parse_args("", ["--fresh-seeds", "3"], extra=script.add_flags,
                          selection_seeds=settings.MAIN_JOB_SELECTION_SEEDS)
    assert args.seeds == [6, 7, 8]  # after seeds 0-5, which chose the grids and the budget
    roles = {c.labels["seed"]: c.labels["role"] for c in script.build(args).cells}
    assert roles == {6: "confirmation", 7: "confirmation", 8: "confirmation"}
    with pytest.raises(SystemExit) as exit_info:  # one way to name the seeds
        cli.parse_args("", ["--fresh-seeds", "3", "--seeds", "6"], extra=script.add_flags)
    assert exit_info.value.code == 2 and "not allowed with" in capsys.readouterr().err
    with pytest.raises(UserError, match="--fresh-seeds needs N >= 1, got 0"):
        cli.parse_args("", ["--fresh-seeds", "0"])


def test_learning_curves_put_the_compute_tied_scratch_on_its_architectures_panel(tmp_path, monkeypatch):
    from sptune.experiment.plan import Cell, Plan
    from sptune.report import curves, figures

    def run(name, steps):
        path = tmp_path / name
        path.mkdir()
        history = [{"step": s, "val_metric": s / 100} for s in range(5, steps + 1, 5)]
        (path / "result.json").write_text(json.dumps({"history": history, "steps": steps, "train_flops": 2.0 * steps}))
        return str(path)

    labels = {"model": "S4D", "seed": 1}
    plan = Plan("x", "t", "a", "n", "f", {}, [Cell("main", labels, ()), Cell("tied", {**labels, "compute": "tied"}, ()),
                                               Cell("other-seed", {"model": "S4D", "seed": 2}, ())])
    rows = [{"cell": "main", "stage": "pretrain", "selected": True, "trial_id": "p", "train_flops": 40.0},
            {"cell": "main", "stage": "finetune", "selected": True, "init_trial": "p", "metric": "accuracy",
             "run_dir": run("finetune", 10)},
            {"cell": "main", "stage": "scratch", "selected": True, "metric": "accuracy", "run_dir": run("scratch", 10)},
            {"cell": "tied", "stage": "scratch", "selected": True, "metric": "accuracy", "run_dir": run("tied", 20)}]
    seen = {}
    monkeypatch.setattr(curves, "save_panels", lambda path, panels, metric: seen.update(panels=panels, metric=metric))
    figures.learning_curves(plan, rows, tmp_path / "curves.png")
    (title, points), = seen["panels"]  # one panel: the lowest seed's main cell
    assert title.startswith("S4D, seed 1") and seen["metric"] == "accuracy"
    assert set(points) == {"finetune", "scratch", "tied"} and points["tied"]["step"][-1] == 20
    assert points["finetune"]["flops"][0] == 40.0 + 5 * 2.0  # SPT's curve starts after its pretraining FLOPs


def test_gains_get_the_interval_that_resamples_the_test_set_where_every_run_kept_its_outcomes():
    def run(model, arm_name, seed, hits):
        test = 0.5 if hits is None else hits.count("1") / len(hits)
        return arm(model, arm_name, seed, test, test_hits=hits)  # as report.arms() reads it from result.json

    def report(s4d_spt_hits, seeds=3):
        return "\n".join(architectures.lines([r for seed in range(seeds) for r in (
            run("Transformer", "masked", seed, "1110"), run("Transformer", "scratch", seed, "0010"),
            run("S4D", "masked", seed, s4d_spt_hits), run("S4D", "scratch", seed, "1111"))], LAYOUT))

    # Transformer: every seed's SPT - scratch is [1, 1, 0, 0] on the 4 test examples: no spread over seeds (the
    # seed interval has width 0), but V = MS_example / (n m) = 1 / 12, so ± t_{0.975, 2} sqrt(1/12) = ± 124.21.
    # S4D's SPT runs predate test_hits: the lines that use them print the seed interval only.
    text = report(None)
    assert ("- Transformer: scratch 25.00, SPT 75.00, SPT gain +50.00 ± 0.00 (95% CI [+50.00, +50.00], n=3, "
            "degenerate: zero variance); with test-set sampling ± 124.21 [-74.21, +174.21]\n") in text
    assert "- S4D: scratch 100.00, SPT 50.00, SPT gain -50.00 ± 0.00 (95% CI [-50.00, -50.00], n=3, " \
           "degenerate: zero variance)\n" in text
    assert "under scratch: +75.00 ± 0.00 (95% CI [+75.00, +75.00], n=3, degenerate: zero variance); with " \
           "test-set sampling ± " in text
    assert "with test-set sampling" not in text.split("under SPT")[1].split("\n\n")[0]  # SPT gap, gap change
    one_seed = report(None, seeds=1)
    assert "SPT gain +50.00 (n=1, no interval)\n" in one_seed and "with test-set sampling" not in one_seed
    # With S4D's SPT outcomes too, the gap change per example, 1111 - 1110 - 1111 + 0010 = [-1, -1, 0, 0] on every
    # seed, gets its interval: as the Transformer's gain mirrored, -50 ± 124.21.
    assert ("gap under SPT minus gap under scratch (< 0: SPT closes the gap): -50.00 ± 0.00 (95% CI [-50.00, -50.00], "
            "n=3, degenerate: zero variance); with test-set sampling ± 124.21 [-174.21, +74.21]") in report("1111")
    # S4D's SPT runs scored on 3 test examples, not 4: the lines that compare them say why they have none.
    assert "; with test-set sampling: none (test outcomes of 3 and 4 examples: the runs were not scored on one " \
           "test set" in report("111")


def test_positions_change_the_transformer_cells_only():
    """The main job's Transformer has the paper's rotary positions; --positions sinusoidal gives the cells of the
    first declared confirmation (the config's own positions), so its directories extend unchanged."""
    script = load_study("architectures")

    def cells(*flags):
        plan = script.build(cli.parse_args("", ["--seeds", "70", *flags], extra=script.add_flags))
        return plan, {c.labels["model"]: c for c in plan.cells}

    def encoding(cell):
        return config.load(None, list(cell.overrides)).model.pos_encoding

    (rotary_plan, default), (_, sinusoidal) = cells(), cells("--positions", "sinusoidal")
    assert encoding(default["Transformer"]) == "rotary"  # the paper's
    assert encoding(sinusoidal["Transformer"]) == "sinusoidal"
    assert "model.pos_encoding=rotary" not in sinusoidal["Transformer"].overrides  # the config's own
    assert sinusoidal["S4D"].overrides == default["S4D"].overrides  # S4D runs as in the main job
    assert "rotary positions" in rotary_plan.fixed
