"""The fast parts of the studies: sizing, K_max, the paper's tables, nested fractions, plans, reports."""

import argparse
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from study_scripts import load_study
from sptune import atomic, config, files
from sptune.cli import experiment as cli
from sptune.errors import UserError
from sptune.experiment import paper, settings, sizing
from sptune.experiment.plan import Cell, Plan, load_plan, plain_point, repo_space, save_plan
from sptune.models.s4 import S4Layer
from sptune.records import results
from sptune.report import kernel_analysis, tables as report
from sptune.run import train
from sptune.run.data import train_fraction
from sptune.tasks.base import Split

# ----------------------------------------------------------------------------- sizing (Appendix E)
IMAGE_MODELS = {"transformer": paper.RECIPES[("image", "rotary")].model, "s4": paper.RECIPES[("image", "s4")].model}


@pytest.mark.parametrize("budget", paper.MODEL_SIZES)
@pytest.mark.parametrize("model", sorted(IMAGE_MODELS))
def test_sizing_lands_within_10_percent_of_each_table9_budget(model, budget):
    base = ["task.name=image", *settings.as_overrides(IMAGE_MODELS[model])]
    fit = sizing.fit(base, budget, depths=(6, 4, 8, 5, 7, 3, 2))
    assert abs(fit.rel_error) <= 0.10
    # The reported count is the trainer's own: rebuild the task model from the chosen overrides.
    cfg = config.load(None, base + fit.overrides())
    from sptune.build import build_task_model, count_parameters
    from sptune.registry import get_task

    assert count_parameters(build_task_model(cfg.model, get_task("image"))) == fit.n_params
    assert fit.d_model % sizing.width_quantum(cfg) == 0


def test_sizing_says_which_depths_failed():
    with pytest.raises(Exception, match="within 10%"):
        sizing.fit(["task.name=image", *settings.as_overrides(IMAGE_MODELS["s4"])], 1_000, depths=(6,))


# ----------------------------------------------------------------------------- K_max (§3.6)
def test_kmax_is_the_max_over_channels_and_both_directions():
    torch.manual_seed(0)
    layer = S4Layer(8, d_state=16, bidirectional=True)
    kernel = layer.kernel(128).detach()  # (2, H, L)
    kmax = kernel_analysis.layer_kmax(layer, 128)
    assert kmax.shape == (128,)
    assert torch.all(kmax[None, None] >= kernel.abs() - 1e-7)  # bounds every channel and direction ...
    assert torch.allclose(kmax, kernel.abs().flatten(0, 1).max(0).values)  # ... and is attained
    # The reverse direction counts: make its kernel dominate and K_max follows it.
    with torch.no_grad():
        layer.C[1] *= 100.0
    assert torch.allclose(kernel_analysis.layer_kmax(layer, 128), layer.kernel(128)[1].abs().amax(0), rtol=1e-5)


def test_hippo_kernel_decays_and_mass_radius():
    torch.manual_seed(0)
    kmax = kernel_analysis.layer_kmax(S4Layer(16, d_state=64), 1024)
    assert kmax[:16].mean() > 10 * kmax[-16:].mean()  # HiPPO-LegS kernels decay with the lag
    assert kernel_analysis.mass_radius(torch.tensor([1.0] + [0.0] * 9)) == 0
    assert kernel_analysis.mass_radius(torch.ones(100)) == 89


def test_pretrained_vs_init_rebuilds_the_initial_model(tmp_path):
    overrides = ["task.name=listops-mini", "model.name=s4", "model.d_model=8", "model.n_layers=2", "model.d_ff=0",
                 "model.d_state=8", "optim.max_steps=4", "optim.eval_every=2", "optim.batch_size=8", "optim.lr=0.05",
                 "task.max_val_examples=16", "run.progress=false", "run.seed=3"]
    train.run_stage(config.load(None, overrides), "pretrain", run_dir=tmp_path / "pre")
    data = kernel_analysis.pretrained_vs_init(tmp_path / "pre")
    assert data["seq_len"] == 256 and len(data["layers"]) == 2
    torch.manual_seed(3)  # the run's seed: the same init as the run started from
    fresh = kernel_analysis._backbone(config.load(tmp_path / "pre" / "config.yaml"))
    expected = kernel_analysis.model_kmax(fresh, 256)
    for layer, curve in zip(data["layers"], expected):
        assert torch.allclose(torch.tensor(layer["init"]), curve, rtol=1e-5)
        assert not torch.allclose(torch.tensor(layer["pretrained"]), curve, rtol=1e-3)  # training moved it


# ----------------------------------------------------------------------------- data fractions (C.1.4)
def test_data_fraction_subsets_are_nested():
    n = 4000
    split = Split(inputs=torch.arange(n)[:, None], targets=torch.zeros(n, dtype=torch.long),
                  lengths=torch.ones(n, dtype=torch.long))
    subsets = [set(train_fraction(split, f).inputs[:, 0].tolist()) for f in paper.DATA_FRACTIONS]
    for fraction, subset in zip(paper.DATA_FRACTIONS, subsets):
        assert len(subset) == max(1, round(n * fraction))
    for smaller, bigger in zip(subsets, subsets[1:]):
        assert smaller < bigger


# ----------------------------------------------------------------------------- the paper's tables
def mean(values):
    return sum(values) / len(values)


def test_paper_averages_follow_the_stated_rules():
    # Table 1: six tasks, a chance-level PathX ("x") counted as 50.
    for row, values in paper.TABLE_1.rows.items():
        cells = [50.0 if v is None else v for v in values[:-1]]
        assert mean(cells) == pytest.approx(values[-1], abs=0.01), row  # the paper rounds or truncates
    # Table 2: PathX-256 left out; an infeasible "x" left out too (Pythia averages five tasks).
    mismatched = set()
    for row, values in paper.TABLE_2.rows.items():
        cells = [v for v in values[:6] if v is not None]
        if abs(mean(cells) - values[-1]) > 0.01:
            mismatched.add(row)
    for row, values in paper.TABLE_7.rows.items():
        if abs(mean(values[:-1]) - values[-1]) > 0.01:
            mismatched.add(row)
    # Exactly the rows the notes name (typos in the paper's Avg. column).
    assert mismatched == {"S4 + Masked SPT", "Pythia 70M", "S4 + Rand Init + SPT", "DLR + Rand Init + SPT", "DLR + SPT"}


def test_paper_cite_names_table_row_and_column():
    cited = paper.TABLE_9.cite("S4 + Masked SPT", "1M")
    assert cited == {"value": 88.67, "source": "paper Table 9, row 'S4 + Masked SPT', column '1M'"}
    assert paper.TABLE_2.cite("Transformers + Rotary", "PathX-256")["value"] is None


# ----------------------------------------------------------------------------- plans and search spaces
def test_recipe_space_puts_the_papers_best_first_and_in_the_grid():
    space = paper.RECIPES[("image", "s4")].space()
    # Table 5 (S4 + SPT, Image): finetuning lr 1e-3 / batch 512, then Appendix C.1.4's 2e-3 / 50
    assert space["finetune"]["points"] == [{"optim.lr": 1e-3, "optim.batch_size": 512},
                                           {"optim.lr": 2e-3, "optim.batch_size": 50}]
    assert space["finetune"]["params"] == {"optim.lr": [2e-3, 1e-3, 5e-4, 1e-4],
                                           "optim.batch_size": [8, 32, 50, 128, 512]}
    # From scratch: Gu et al.'s s4-lra-cifar.yaml (lr 1e-2, batch 50) first, Appendix C.1 grid around it
    assert space["scratch"]["points"][0] == {"optim.lr": 1e-2, "optim.batch_size": 50}
    assert {1e-2, 1e-3, 5e-4, 1e-4} <= set(space["scratch"]["params"]["optim.lr"])
    assert plain_point(space, "finetune") == ["optim.lr=0.001", "optim.batch_size=512"]
    assert plain_point({"scratch": {"params": {"optim.lr": [1e-3, 1e-4], "optim.batch_size": [8]}}},
                              "scratch") == ["optim.lr=0.001", "optim.batch_size=8"]


def test_a_rerun_may_add_cells_but_not_drop_or_change_one(tmp_path):
    plan = synthetic_plan([0])
    save_plan(tmp_path, plan)
    save_plan(tmp_path, plan)  # same grid: a resume
    save_plan(tmp_path, synthetic_plan([0, 1]))  # more seeds: an extension, recorded
    assert [c.key for c in load_plan(tmp_path).cells] == ["f0.1-s0", "f0.1-s1", "f1-s0", "f1-s1"]
    with pytest.raises(UserError, match="drop or change .*f0.1-s1"):
        save_plan(tmp_path, synthetic_plan([0]))
    changed = synthetic_plan([0, 1])
    changed.cells[0] = replace(changed.cells[0], overrides=changed.cells[0].overrides + ("optim.lr=1",))
    with pytest.raises(UserError, match="drop or change .*f0.1-s0"):
        save_plan(tmp_path, changed)


def test_each_variant_of_a_study_has_its_own_default_directory():
    plain = argparse.Namespace(smoke_test=False)
    assert str(cli.default_dir("spt_ratio", plain)) == "runs/experiments/spt_ratio"
    assert str(cli.default_dir("spt_ratio", argparse.Namespace(smoke_test=False, cpu=True))) == \
        "runs/experiments/spt_ratio-cpu"
    assert str(cli.default_dir("spt_ratio", argparse.Namespace(smoke_test=True, cpu=True))) == \
        "runs/experiments/spt_ratio-smoke"


def test_added_cells_get_a_new_tune_run_and_a_resume_restores_the_last(tmp_path):
    from sptune.experiment.engine.driver import tune_run_name

    assert tune_run_name(tmp_path, ["a", "b"]) == "experiment"
    assert tune_run_name(tmp_path, ["b"]) == "experiment"  # a resumes: a finished, b not yet
    assert tune_run_name(tmp_path, ["c", "d"]) == "experiment-2"  # cells added
    assert tune_run_name(tmp_path, ["d"]) == "experiment-2"
    assert files.read_json(tmp_path / "runs.json") == {"experiment": ["a", "b"], "experiment-2": ["c", "d"]}


def test_a_restored_run_places_the_trials_of_cells_that_finished_since_it_began(tmp_path):
    """Tune's restore re-adds every trial it recorded and asks each for its resources: a cell that finished
    after the run began (so the resume no longer passes it) still needs its placement (KeyError before)."""
    from sptune.experiment.engine.domain import open_experiment
    from sptune.experiment.engine.driver import served_cells, served_dirs, trial_placement, tune_run_name
    from sptune.records import studies
    from sptune.trials.trainable import LINEAGE_KEY

    cells, repo = tmp_path / "cells", Path(__file__).resolve().parents[1]
    for key, cpus in (("a", 1), ("b", 2)):
        studies.create(None, TINY, cells / key, space_path=str(repo / "search_spaces" / "listops-mini" / "s4.yaml"),
                       options=studies.Options(cpus_per_worker=cpus))
    name = tune_run_name(tmp_path / "tune", ["a", "b"])
    todo = {"b": cells / "b"}  # a finished
    experiment = open_experiment(tmp_path, todo, served_dirs(todo, served_cells(tmp_path / "tune", name)), {})
    placement = experiment.placements
    assert set(placement) == {"a", "b"} and placement["a"]["CPU"] == 1 and placement["b"]["CPU"] == 2
    assert experiment.todo == ("b",) and experiment.total_trials == experiment.cells["b"].bounds.trials + 1
    assert {key[1] for key in experiment.specs} == {"pretrain", "finetune", "scratch"} and len(experiment.specs) == 6
    assert trial_placement(placement, {LINEAGE_KEY: {"cell": "a"}}).bundles == [placement["a"]]


def test_the_engine_proposes_seed_by_seed_so_a_stopped_batch_keeps_whole_seeds(tmp_path):
    """Cells in the plan's model-major order are run seed by seed, and each cell's scratch trials are proposed
    before the next cell's, its pretraining `lookahead` cells early: a batch stopped part-way has whole seeds
    but for a few cells' pretraining, not every cell part-way. (Stage-major proposal, before: every pretraining
    trial, then every scratch trial.)"""
    from sptune.experiment.backends import seed_rank
    from sptune.experiment.engine.driver import CellsSearcher, proposal_order
    from sptune.records import studies
    from sptune.trials.trainable import LINEAGE_KEY

    plan_order = [Cell(f"{model}-s{seed}", {"model": model, "seed": seed}, ()) for model in ("t", "s4")
                  for seed in (2, 1)] + [Cell("no-seed", {}, ())]
    assert [c.key for c in sorted(plan_order, key=seed_rank)] == ["t-s1", "s4-s1", "t-s2", "s4-s2", "no-seed"]
    finetuning = [(cell, "finetune") for cell in "abcd"]
    assert list(proposal_order(list("abcd"), lookahead=1)) == finetuning + [
        ("a", "pretrain"), ("b", "pretrain"), ("a", "scratch"), ("c", "pretrain"), ("b", "scratch"),
        ("d", "pretrain"), ("c", "scratch"), ("d", "scratch")]
    assert list(proposal_order(list("abcd"), lookahead=2)) == finetuning + [
        ("a", "pretrain"), ("b", "pretrain"), ("c", "pretrain"), ("a", "scratch"), ("d", "pretrain"),
        ("b", "scratch"), ("c", "scratch"), ("d", "scratch")]
    repo = Path(__file__).resolve().parents[1]
    cells = {key: tmp_path / key for key in ("t-s1", "s4-s1")}
    for path in cells.values():
        studies.create(None, TINY, path, space_path=str(repo / "search_spaces" / "listops-mini" / "s4.yaml"),
                       options=studies.Options(max_concurrent=1))
    searcher = CellsSearcher(cells)
    proposed = [searcher.suggest(f"t{i}") for i in range(5)]
    assert [(p[LINEAGE_KEY]["cell"], p[LINEAGE_KEY]["stage"]) for p in proposed[:4]] == [
        ("t-s1", "pretrain"), ("s4-s1", "pretrain"), ("t-s1", "scratch"), ("s4-s1", "scratch")]
    assert proposed[4] is None  # each stage at its max_concurrent of 1: waiting, not finished


def test_pretraining_is_proposed_as_many_cells_early_as_one_wave_of_the_clusters_slots_holds():
    """The SPT arm is the longer chain: with 8 one-CPU slots and 2 pretraining trials a cell at once, 4 cells'
    pretraining fill a wave; a GPU-packed trial counts slots by its scarcest resource; never less than 1."""
    from sptune.experiment.engine.driver import cells_ahead

    assert cells_ahead({"CPU": 8.0}, {"CPU": 1.0}, max_concurrent=2) == 4
    assert cells_ahead({"CPU": 2.0}, {"CPU": 1.0}, max_concurrent=2) == 1
    assert cells_ahead({"CPU": 16.0, "GPU": 1.0}, {"CPU": 1.0, "GPU": 0.0625}, max_concurrent=4) == 4
    assert cells_ahead({"CPU": 16.0, "GPU": 1.0}, {"CPU": 4.0, "GPU": 0.0625}, max_concurrent=4) == 1
    assert cells_ahead({"CPU": 9.0}, {"CPU": 1.0}, max_concurrent=2) == 5  # a part-filled wave counts
    assert cells_ahead({}, {"CPU": 1.0}, max_concurrent=2) == 1  # an autoscaler's cluster with no workers yet


def test_pending_trials_start_in_proposal_order_so_a_cells_finetuning_does_not_wait_for_other_cells():
    """Every cell's pretraining and scratch trials are pending from the start; a cell's finetuning, proposed
    when its pretraining ended, starts next, before later cells' trials (FIFO made it wait behind them all)."""
    from functools import partial
    from types import SimpleNamespace

    from ray.tune.experiment import Trial

    from sptune.experiment.engine.driver import proposal_order, start_rank
    from sptune.experiment.engine.routing import GroupScheduler
    from sptune.trials.trainable import LINEAGE_KEY

    def trial(cell, stage, status=Trial.PENDING):
        return SimpleNamespace(config={LINEAGE_KEY: {"cell": cell, "stage": stage}}, status=status)

    order = {pair: index for index, pair in enumerate(proposal_order(["s1", "s2"]))}
    added = [trial("s1", "pretrain", Trial.TERMINATED), trial("s1", "scratch", Trial.RUNNING),
             trial("s2", "scratch"), trial("s2", "pretrain"), trial("s1", "finetune")]  # in the order Tune added them
    controller = SimpleNamespace(get_trials=lambda: added)
    scheduler = GroupScheduler(lambda group: None, partial(start_rank, order))
    assert scheduler.choose_trial_to_run(controller) is added[4]  # s1's finetuning, added last
    added[4].status = Trial.RUNNING
    assert scheduler.choose_trial_to_run(controller) is added[3]  # then s2: pretraining before scratch
    del scheduler.rank  # a scheduler pickled before it ranked: FIFO
    assert scheduler.choose_trial_to_run(controller) is added[2]


def test_each_groups_callbacks_see_only_their_own_groups_trials():
    """GroupCallbacks routes every hook by the trial's (cell, stage): a stage's progress bar or tracker never
    counts another cell's or stage's trials, on per-step hooks (one pass over the trials) and per-trial ones."""
    from types import SimpleNamespace

    from ray.tune import Callback

    from sptune.experiment.engine.routing import GroupCallbacks
    from sptune.trials.trainable import LINEAGE_KEY

    seen = []

    class Recorder(Callback):
        def __init__(self, group):
            self.group = group

        def on_step_begin(self, iteration, trials, **info):
            seen.append(("step", self.group, sorted(t.name for t in trials)))

        def on_trial_result(self, iteration, trials, trial, result, **info):
            seen.append(("result", self.group, sorted(t.name for t in trials), trial.name))

    def trial(name, cell, stage):
        return SimpleNamespace(name=name, config={LINEAGE_KEY: {"study_dir": f"/x/{cell}", "stage": stage}})

    trials = [trial("a1", "a", "pretrain"), trial("b1", "b", "pretrain"), trial("a2", "a", "scratch"),
              trial("a3", "a", "pretrain")]
    callbacks = GroupCallbacks(lambda group: [Recorder(group)], [("/x/a", "pretrain"), ("/x/b", "pretrain")])
    callbacks.on_step_begin(0, trials)
    assert seen == [("step", ("/x/a", "pretrain"), ["a1", "a3"]), ("step", ("/x/b", "pretrain"), ["b1"])]
    seen.clear()
    callbacks.on_trial_result(1, trials, trials[2], result={})  # a group made on its first trial's hook
    assert seen == [("result", ("/x/a", "scratch"), ["a2"], "a2")]


# ----------------------------------------------------------------------------- reports
TINY = ["task.name=listops-mini", "model.name=s4", "model.d_model=8", "model.n_layers=1", "model.d_ff=0",
        "model.d_state=8"]


def synthetic_plan(seeds, layout=None):
    # Grid layouts: a column per fraction; the fraction layout: a column per task.
    column = (lambda f: "listops-mini (for Text)") if layout else (lambda f: f"fraction {f:g}")
    cells = [Cell(key=f"f{fraction:g}-s{seed}",
                  labels={"task": "listops-mini", "paper_task": "text", "model": "S4", "seed": seed,
                          "fraction": fraction, "budget": 1000 * (1 + i), "share": 0.2 * i,
                          "share_label": f"{20 * i}%", "column": column(fraction)},
                  overrides=tuple(TINY + [f"task.train_fraction={fraction}", f"run.seed={seed}"]),
                  paper={"scratch": {"value": 60.0, "source": "paper Table X"}})
             for i, fraction in enumerate((0.1, 1.0)) for seed in seeds]
    layout = layout or {"kind": "grid", "row": "row", "col": "column", "plots": ["bars", "sizes", "shares"],
                        "average": {"exclude": []}}
    return Plan(experiment="synthetic", title="Synthetic", axis="a", nuisance="n", fixed="f", layout=layout,
                cells=cells, smoke=True, backend="plain")


def fake_run(run_dir, stage, test_metric, seconds):
    """A finished stage run directory as run_stage leaves it (config.yaml + result.json)."""
    config.dump(config.load(None, TINY, stage=stage), run_dir / "config.yaml")
    atomic.write_json(run_dir / "result.json", {"status": "completed", "metric": "accuracy", "best_val": test_metric,
                                   "best_step": 10, "test_metric": test_metric, "steps": 10,
                                   "train_seconds": seconds, "eval_seconds": 0.0, "train_flops": 1e9 * seconds,
                                   "eval_flops": 0.0, "n_params": 1234})


def write_synthetic_study(study_dir, plan):
    save_plan(study_dir, plan)
    for cell in plan.cells:
        seed, fraction = cell.labels["seed"], cell.labels["fraction"]
        for stage, value, seconds in (("pretrain", 0.3, 5.0), ("finetune", 0.5 + 0.01 * seed + 0.1 * fraction, 2.0),
                                      ("scratch", 0.4 + 0.02 * seed, 3.0)):
            fake_run(study_dir / files.CELLS / cell.key / stage, stage, value, seconds)


def test_report_from_synthetic_results_builds_table_csv_and_pngs(tmp_path):
    plan = synthetic_plan([0, 1])
    write_synthetic_study(tmp_path, plan)
    paths = report.write(tmp_path)
    table = paths["table"].read_text()
    # Scratch over seeds 0, 1: 40 and 42 -> 41.00 ± 1.41, 3 device-seconds, the paper's value beside it;
    # SPT at fraction 0.1: 51 and 52; its seconds and FLOPs include pretraining (5 + 2). Avg. over the two columns.
    assert "| S4 | 41.00 ± 1.41 · 3.0 s · 3.0 GFLOP [paper 60] | 41.00 ± 1.41 · 3.0 s · 3.0 GFLOP [paper 60] | " \
           "41.00 |" in table
    assert ("| S4 + Masked SPT | 51.50 ± 0.71 · 7.0 s · 7.0 GFLOP | 60.50 ± 0.71 · 7.0 s · 7.0 GFLOP | "
            "56.00 |") in table
    for png in paths["plots"]:
        assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"
    assert {p.name for p in paths["plots"]} == {"bars.png", "sizes.png", "shares.png"}
    lines = paths["results"].read_text().splitlines()
    assert len(lines) == 1 + 4 * 3  # every trial: 4 cells x 3 stages
    # One results schema: the cell's columns, then a study's (stage, trial, searched params, the rest).
    header = lines[0].split(",")
    labels = len(plan.cells[0].labels)
    assert header[:2] == ["experiment", "cell"] and set(header[2:2 + labels]) == set(plan.cells[0].labels)
    assert header[2 + labels:] == [*results.COLUMNS[:2], "optim.batch_size", "optim.lr", *results.COLUMNS[2:]]


def test_fraction_report_computes_relative_gain(tmp_path):
    plan = synthetic_plan([0], layout={"kind": "fraction"})
    write_synthetic_study(tmp_path, plan)
    paths = report.write(tmp_path)
    table = paths["table"].read_text()
    # fraction 1.0: SPT 0.6 vs scratch 0.4 -> +20 points paired (one seed: no interval), +50.0% relative
    assert ("| 1 | 40.00 · 3.0 s · 3.0 GFLOP [paper 60] | 60.00 · 7.0 s · 7.0 GFLOP | "
            "+20.00 (n=1, no interval) · +50.0% rel. | >1x |") in table
    # scratch is flat (0.40 at both fractions): it never reaches SPT's 51% at 0.1 within the measured range
    assert "+11.00 (n=1, no interval) · +27.5% rel. | >10x |" in table and "data ×" in table
    assert [p.name for p in paths["plots"]] == ["fractions.png"]


def test_fraction_report_gain_is_paired_by_seed_with_a_t_interval(tmp_path):
    plan = synthetic_plan([0, 1, 2], layout={"kind": "fraction"})
    write_synthetic_study(tmp_path, plan)
    table = report.write(tmp_path)["table"].read_text()
    # fraction 1.0, seeds 0..2: SPT 0.60/0.61/0.62, scratch 0.40/0.42/0.44 -> gains 20, 19, 18 points:
    # mean 19, sd 1, t_{0.975,2} = 4.3027 -> half-width 4.3027 / sqrt(3) = 2.48
    assert "+19.00 ± 2.48 (95% CI [+16.52, +21.48], n=3)" in table
    # read together with the other fraction's gain: each interval at 97.5%, t_{0.9875,2} = 6.2053 -> 19 +- 3.58
    assert "(Bonferroni: each at 97.50%)" in table and "1 +19.00 [+15.42, +22.58]" in table


def test_gains_over_a_reference_row_are_paired_by_seed(tmp_path):
    # spt_ratio's shape: the "0%" row is scratch alone (fraction 0.1 cells), the "20%" row SPT alone (fraction 1.0)
    plan = synthetic_plan([0, 1, 2], layout={"kind": "grid", "row": "share_label", "col": "column",
                                             "gains_over": "0%"})
    plan.cells = [replace(c, stages=("scratch",) if c.labels["fraction"] == 0.1 else ("pretrain", "finetune"))
                  for c in plan.cells]
    write_synthetic_study(tmp_path, plan)
    table = report.write(tmp_path)["table"].read_text()
    # SPT at fraction 1.0 (0.60 + 0.01 seed) over scratch (0.40 + 0.02 seed): 20, 19, 18 points, paired by seed
    assert "Paired gain over 0%" in table and "| 20% | +19.00 ± 2.48 (95% CI [+16.52, +21.48], n=3)" in table


def test_spt_gains_per_model_and_column_are_paired_by_seed(tmp_path):
    # model_sizes --cpu's shape: rows "M" and "M + Masked SPT", a column per budget (here per fraction)
    plan = synthetic_plan([0, 1, 2], layout={"kind": "grid", "col": "fraction", "spt_gains": True})
    write_synthetic_study(tmp_path, plan)
    table = report.write(tmp_path)["table"].read_text()
    # fraction 1.0: SPT 0.60 + 0.01 seed over scratch 0.40 + 0.02 seed: 20, 19, 18 points
    assert "Paired SPT gain per model" in table and "+19.00 ± 2.48 (95% CI [+16.52, +21.48], n=3)" in table
    assert "S4 0.1 +10.00 [+6.42, +13.58]" in table and table.count("Excluding 0 after the correction: S4 0.1, S4 1.0.") == 1


def test_model_sizes_at_cpu_scale_is_the_main_jobs_setting_at_three_sizes():
    from sptune.experiment import settings

    module = load_study("model_sizes")
    plan = module.build(cli.parse_args("", ["--cpu"], extra=module.add_flags))
    assert {c.labels["seed"] for c in plan.cells} == set(range(6, 16))  # ten seeds that chose nothing
    assert {c.labels["role"] for c in plan.cells} == {"confirmation"} and plan.layout["spt_gains"]
    for cell in plan.cells:
        model = "transformer" if cell.labels["model"] == "Transformer" else "s4"
        assert cell.space == settings.cpu_space(model)  # the main job's grids
        cfg = config.load(None, list(cell.overrides), stage="pretrain")
        assert cfg.task.name == "ucr-osuleaf" and cfg.optim.max_steps == 1000 and cfg.optim.patience == 100
        assert config.load(None, list(cell.overrides), stage="scratch").optim.max_steps == 400
        assert abs(cell.labels["budget"] - model_params(cell)) <= 0.1 * cell.labels["budget"]


def test_data_fractions_at_cpu_scale_is_the_main_jobs_setting_and_the_first_report_stays_reproducible():
    from sptune.experiment import settings

    module = load_study("data_fractions")
    plan = module.build(cli.parse_args("", ["--cpu"], extra=module.add_flags))
    assert {c.labels["seed"] for c in plan.cells} == set(range(6, 16))  # ten seeds that chose nothing
    assert {c.labels["role"] for c in plan.cells} == {"confirmation"}
    for cell in plan.cells:
        assert cell.space == settings.cpu_space("s4")  # the main job's current S4D grid
        cfg = config.load(None, list(cell.overrides), stage="pretrain")
        assert cfg.optim.max_steps == 1000 and cfg.optim.patience == 100  # pretraining: a 1000-step budget, patience 100
        assert config.load(None, list(cell.overrides), stage="finetune").optim.max_steps == 400
    first = module.build(cli.parse_args("", ["--cpu", "--first-budget"], extra=module.add_flags))
    assert {c.labels["seed"] for c in first.cells} == {1, 2, 3}
    for cell in first.cells:  # the overrides it ran with (so the same run fingerprints)
        fraction, seed = cell.labels["fraction"], cell.labels["seed"]
        assert cell.overrides == tuple(settings.first_budget_overrides("s4") + [f"task.train_fraction={fraction}",
                                                                                f"run.seed={seed}"])
        assert config.load(None, list(cell.overrides), stage="scratch").optim.max_steps == 200
    dirs = {str(cli.default_dir("data_fractions", argparse.Namespace(smoke_test=False, cpu=True, first_budget=first)))
            for first in (False, True)}
    assert dirs == {"runs/experiments/data_fractions-cpu", "runs/experiments/data_fractions-cpu-first-budget"}


def test_spt_ratio_at_cpu_scale_splits_the_main_jobs_spt_total_and_searches_every_stage():
    from sptune.experiment import settings

    module = load_study("spt_ratio")
    plan = module.build(cli.parse_args("", ["--cpu"], extra=module.add_flags))
    assert {c.labels["seed"] for c in plan.cells} == set(range(6, 16))
    assert {c.labels["role"] for c in plan.cells} == {"confirmation"}
    for cell in plan.cells:
        model = "transformer" if cell.labels["model"] == "Transformer" else "s4"
        assert cell.space == settings.cpu_space(model)  # searched: the main job's grids
        steps = {stage: config.load(None, list(cell.overrides), stage=stage).optim for stage in cell.stages}
        assert sum(optim.max_steps for optim in steps.values()) == 600  # the main job's 200 + 400
        assert {optim.patience for optim in steps.values()} == {100}  # one stopping rule for every arm
        share = cell.labels["share"]
        assert steps.get("pretrain", steps.get("scratch")).max_steps == (600 if share == 0 else round(600 * share))
    first = module.build(cli.parse_args("", ["--cpu", "--first-budget"], extra=module.add_flags))
    assert {c.labels["seed"] for c in first.cells} == {1, 2, 3, 4, 5}
    for cell in first.cells:  # the overrides it ran with
        model = "transformer" if cell.labels["model"] == "Transformer" else "s4"
        assert cell.overrides == tuple(settings.first_budget_overrides(model)
                                       + module.split_steps(cell.labels["share"], 400) + [f"run.seed={cell.labels['seed']}"])


def model_params(cell) -> int:
    from sptune.build import build_task_model, count_parameters
    from sptune.registry import get_task

    cfg = config.load(None, list(cell.overrides), stage="scratch")
    return count_parameters(build_task_model(cfg.model, get_task(cfg.task.name)))


def test_report_marks_missing_runs(tmp_path):
    plan = synthetic_plan([0])
    write_synthetic_study(tmp_path, plan)
    (tmp_path / files.CELLS / "f1-s0" / "finetune" / "result.json").unlink()
    table = report.write(tmp_path)["table"].read_text()
    assert "not done (finetune missing)" in table


def test_report_command_is_registered():
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", "some/dir"])
    assert args.func is cli.cmd_report and args.study_dirs == ["some/dir"]


def test_accuracy_prints_in_percent_and_r2_as_is():
    assert report.fmt_value(0.6125, "accuracy") == "61.25"
    assert report.fmt_value(0.9987, "r2") == "0.999"
    assert report.fmt_value(math.nan, "accuracy") == "—"


# ----------------------------------------------------------------------------- the real grids
STUDY_SCRIPTS = ("lra_table", "data_fractions", "model_sizes", "spt_ratio", "kernels", "modalities", "architectures")
REAL_CELLS = {"lra_table": 111, "data_fractions": 36, "model_sizes": 30, "spt_ratio": 48, "kernels": 4,
              "modalities": 36, "architectures": 2, "data_fractions --cpu": 40, "data_fractions --cpu --first-budget": 12,
              "spt_ratio --cpu": 80, "spt_ratio --cpu --first-budget": 40, "architectures --compute-tied --seeds 1 2": 8,
              "model_sizes --cpu": 60}


@pytest.mark.parametrize("study", [*STUDY_SCRIPTS, "data_fractions --cpu", "data_fractions --cpu --first-budget",
                                   "spt_ratio --cpu", "spt_ratio --cpu --first-budget",
                                   "architectures --compute-tied --seeds 1 2", "model_sizes --cpu"])
def test_real_grid_builds_valid_configs_and_search_spaces(study):
    """The paper's grid of every script resolves: every stage's config validates, every space parses."""
    from sptune.search import spaces

    script, *argv = study.split()
    module = load_study(script)
    plan = module.build(cli.parse_args("", argv, extra=getattr(module, "add_flags", None)))
    assert len(plan.cells) == REAL_CELLS[study] and len({c.key for c in plan.cells}) == len(plan.cells)
    for cell in plan.cells:
        assert not cell.labels["task"].endswith("-mini")
        space = cell.space if cell.space is not None else repo_space(cell)
        assert space is not None, f"{cell.key}: no search space"
        spaces.parse({"stages": space})
        for stage in cell.stages:
            config.load(None, list(cell.overrides) + plain_point(space, stage), stage=stage)
