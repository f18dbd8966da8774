"""One source for the paper's hyper-parameters: every config and search space agrees with paper.RECIPES."""

import argparse
from pathlib import Path

import pytest

from study_scripts import load_study
from sptune import config
from sptune.config import STAGES
from sptune.experiment import paper, paper_files, sizing
from sptune.records import studies
from sptune.registry import TASKS
from sptune.search import spaces

REPO = Path(__file__).resolve().parents[1]
SHIPPED = paper_files.shipped()
DEMO = {"configs/listops_mini_transformer.yaml", "search_spaces/listops-mini/transformer.yaml",
        "search_spaces/listops-mini/s4.yaml",  # the embedded demo tasks' hand-written files
        "configs/shapes_tiny_transformer.yaml", "search_spaces/shapes-tiny/transformer.yaml",
        "configs/pathfinder_tiny_transformer.yaml", "search_spaces/pathfinder-tiny/transformer.yaml",
        # the architecture experiment on UCR OSULeaf (experiments/architectures.py), chosen on validation
        "configs/ucr_osuleaf_transformer.yaml", "search_spaces/ucr-osuleaf/transformer.yaml",
        "configs/ucr_osuleaf_s4.yaml", "search_spaces/ucr-osuleaf/s4d-legs.yaml"}
IDS = [f"{task}/{model}" for task, model in SHIPPED]


def test_files_are_generated_from_the_table():
    wanted = paper_files.files()
    stale = [path for path, text in wanted.items() if not (REPO / path).is_file() or (REPO / path).read_text() != text]
    assert not stale, f"run `python -m sptune.experiment.paper_files` (differ from the table: {stale})"
    on_disk = {str(p.relative_to(REPO)) for p in [*(REPO / "configs").glob("*.yaml"),
                                                  *(REPO / "search_spaces").glob("*/*.yaml")]}
    assert on_disk - DEMO == set(wanted), "a hand-written paper config: put its values into sptune/experiment/paper.py"


def test_every_paper_task_and_model_has_a_config_and_a_search_space():
    """What the paper reports, read off its result tables, each has files (LRA release ListOps: a search space)."""
    reported = {("speech-commands", "transformer"), ("speech-commands", "s4")}  # Table 3, SC columns
    rows = [(paper.TABLE_1, "Transformer", "transformer"), (paper.TABLE_2, "Transformers + Rotary", "transformer"),
            (paper.TABLE_3, "Transformers", "transformer"),
            (paper.TABLE_2, "S4 (Gu et al., 2022a)", "s4"), (paper.TABLE_3, "S4", "s4"), (paper.TABLE_7, "DLR", "dlr")]
    for table, row, model in rows:
        for task, column in paper.TASK_COLUMN.items():
            if column in table.columns and table.value(row, column) is not None:
                reported.add((task, model))
    assert {task for task, _ in reported} <= set(TASKS)
    for task, model in reported:
        assert (REPO / paper_files.space_path(task, model)).is_file(), (task, model)
        recipe_task = paper_files.SAME_RECIPE.get(task, task)
        assert (REPO / paper_files.config_path(recipe_task, model)).is_file(), (task, model)
        assert (recipe_task, model) in SHIPPED


@pytest.mark.parametrize("task, model", SHIPPED, ids=IDS)
def test_config_values_equal_the_table(task, model):
    recipe = SHIPPED[(task, model)]
    path = REPO / paper_files.config_path(task, model)
    for stage in STAGES:
        cfg = config.load(path, stage=stage)
        values = {**recipe.shared(), **recipe.stage_values(stage)}
        for key, value in values.items():
            section, field = key.split(".")
            assert getattr(getattr(cfg, section), field) == value, (stage, key)
        assert cfg.task.name == task


@pytest.mark.parametrize("task, model", SHIPPED, ids=IDS)
def test_search_space_holds_the_papers_points_first(task, model):
    recipe = SHIPPED[(task, model)]
    space = spaces.load(REPO / paper_files.space_path(task, model))
    assert (space.task, space.model) == (task, model)
    for stage in STAGES:
        points = [p.values() for p in recipe.stages[stage].points]
        got = space.stages[stage]
        assert got.points[:len(points)] == points, stage  # evaluated first, in the table's order
        for key, grid in paper.APPENDIX_C1_GRID.items():
            assert set(grid) | {p[key] for p in points} <= set(got.params[key]), (stage, key)
        assert spaces.trial_count(got, space.num_samples) == got.grid_size  # the whole grid is searched


def test_the_known_mismatches_stay_fixed():
    """Values the configs once got wrong, against the paper and the configs it defers to (each value's source is
    in the table)."""
    def first(recipe, stage):
        return recipe.stages[stage].points[0].values()

    listops_s4 = paper.RECIPES[("listops", "s4")]
    # S4 from scratch searches Gu et al.'s setting first (s4-lra-listops.yaml: lr 1e-2, batch 50), cosine
    assert first(listops_s4, "scratch") == {"optim.lr": 1e-2, "optim.batch_size": 50}
    assert listops_s4.stages["scratch"].schedule == "cosine"
    for task in ("listops", "text", "retrieval", "image", "pathfinder", "speech-commands", "scifar"):
        assert first(paper.RECIPES[(task, "s4")], "scratch")["optim.lr"] in (1e-2, 4e-3), task
    assert paper.RECIPES[("text", "s4")].model["model.prenorm"] is True  # s4-lra-imdb.yaml: prenorm true
    pathx = paper.RECIPES[("pathx", "s4")]  # s4-lra-pathx.yaml: ssm lr 5e-4, dt_min 1e-4, 5 epochs of warmup
    assert [pathx.model[f"model.{key}"] for key in ("ssm_lr", "dt_min", "pooling")] == [5e-4, 1e-4, "max"]
    assert pathx.stages["scratch"].warmup_steps == 50000
    pathx_256 = paper.RECIPES[("pathx-256", "s4")]  # Appendix C.1.2
    assert [first(pathx_256, s) for s in STAGES] == [
        {"optim.lr": 1e-3, "optim.batch_size": 8}, {"optim.lr": 1e-3, "optim.batch_size": 64},
        {"optim.lr": 1e-4, "optim.batch_size": 16}]
    assert pathx_256.model["model.pooling"] == "max"
    for task in ("listops", "text", "image", "pathx"):  # C.1.3 and the official layer's defaults
        dlr = paper.RECIPES[(task, "dlr")].model
        assert (dlr["model.norm"], dlr["model.d_state"], dlr["model.ssm_lr"], dlr["model.dt_min"],
                dlr["model.dt_max"]) == ("layer", 1024, 1e-4, 1e-4, 1e-1)
    # Pretraining at a constant lr after warmup (the paper's repository), except S4 on SC (s4-sc-lm.yaml: cosine)
    for (task, variant), recipe in paper.RECIPES.items():
        if (task, variant[:2]) != ("speech-commands", "s4"):
            assert recipe.stages["pretrain"].schedule == "constant", (task, variant)


def test_model_sizes_study_searches_its_own_table4_rotary_point(monkeypatch):
    """Table 4, Image, Transformer + Rotary: finetuning at batch 64, in the grid and first."""
    monkeypatch.setattr(sizing, "fit", lambda base, budget, depths: sizing.Fit(budget, budget, 64, 6, 128, 64, False))
    plan = load_study("model_sizes").build(argparse.Namespace(smoke_test=False, seeds=[0]))
    for cell in plan.cells:
        variant = "rotary" if cell.labels["model"].startswith("Transformer") else "s4"
        assert cell.space == paper.RECIPES[("image", variant)].space()
    rotary = next(c for c in plan.cells if c.labels["model"].startswith("Transformer"))
    assert rotary.space["finetune"]["points"][0] == {"optim.lr": 1e-3, "optim.batch_size": 64}


@pytest.mark.parametrize("present", [True, False])
def test_lra_table_runs_the_lra_release_listops_when_present(present, monkeypatch, capsys):
    from sptune.cli import data as data_cli

    monkeypatch.setattr(data_cli, "verify_task", lambda name: [] if present else [f"missing {name}"])
    plan = load_study("lra_table").build(argparse.Namespace(smoke_test=False, seeds=[0]))
    task = "listops-lra" if present else "listops"
    listops = [c for c in plan.cells if c.labels["paper_task"] == "listops"]
    assert listops and all(c.labels["task"] == task and f"task.name={task}" in c.overrides for c in listops)
    said = capsys.readouterr().out
    assert f"(task {task}" in said and f"(task {task}" in plan.notes[0]


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_starts_a_smoke_study_without_data(path, tmp_path, monkeypatch):
    """`sptune study <config> --smoke` resolves its config and default search space before any data is read."""
    monkeypatch.setenv("SPTUNE_DATA", str(tmp_path / "no-data"))
    monkeypatch.chdir(tmp_path)  # the search space comes from the package, not the working directory
    state = studies.create(str(path), [], tmp_path / "study", None, studies.Options(smoke=True))
    task, model = state.stages["scratch"]["task"]["name"], state.stages["scratch"]["model"]["name"]
    assert Path(state.space["path"]).resolve() == (REPO / "search_spaces" / task / f"{model}.yaml").resolve()
    assert set(state.space["stages"]) == set(STAGES)
