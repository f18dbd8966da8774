"""The search checks under every tune-backed experiment's table (sptune.report.search_checks): grid extensions,
selections at an edge of the grid each study searched, and selected trials whose best step came late."""

from study_scripts import load_study
from sptune import atomic, files
from sptune.cli import experiment as cli
from sptune.experiment.backends import create_cell_study
from sptune.records import study_state
from sptune.report import search_checks
from sptune.search.options import Options


def architectures_cells(tmp_path, backend="tune"):
    plan = load_study("architectures").build(cli.parse_args("", []))
    plan.backend = backend
    for cell in plan.cells:
        create_cell_study(cell, tmp_path / files.CELLS / cell.key, Options())
    return plan


def row(cell, stage, lr, **marks):
    return {"cell": cell.key, "stage": stage, "optim.lr": lr, "optim.batch_size": 32, **marks}


def test_the_edge_is_that_of_the_grid_each_study_searched(tmp_path):
    """study.json's grid (declared + extended), not the plan's declared one: a best at the declared top that an
    extension bracketed is no warning; a best at the top of the searched grid is. The best so far of an
    unfinished stage is not a selection and is not checked."""
    plan = architectures_cells(tmp_path)
    transformer, s4d = plan.cells
    s4_dir = tmp_path / files.CELLS / s4d.key
    state = study_state.load(s4_dir)
    state.space["stages"]["finetune"]["params"]["optim.lr"].append(9.5e-3)  # what bracketing records
    study_state.save(s4_dir, state)
    rows = [row(s4d, "finetune", 3e-3, selected=True), row(transformer, "scratch", 3e-3, selected=True),
            row(transformer, "finetune", 1e-4, leading=True)]
    lines = search_checks.lines(plan, rows, tmp_path)
    assert "- selections at an edge of the grid their study searched: 1 of 2 searched" in lines
    assert [line for line in lines if "warning" in line] == [
        f"- {transformer.key}: warning: scratch selected optim.lr=0.003, the top of its grid "
        "[0.0001, 0.0003, 0.001, 0.003]: extend the grid"]
    assert lines[-1] == ""


def test_extensions_and_late_best_steps_are_counted_from_study_json_and_result_json(tmp_path):
    plan = architectures_cells(tmp_path)
    transformer, s4d = plan.cells
    s4_dir = tmp_path / files.CELLS / s4d.key
    state = study_state.load(s4_dir)
    state.extensions = {"scratch": [{"param": "optim.lr", "side": "above", "value": 9.5e-3},
                                    {"param": "optim.lr", "side": "above", "stopped": "the limit 0.01"}]}
    study_state.save(s4_dir, state)
    late_run, early_run = tmp_path / "late", tmp_path / "early"
    for run_dir, best in ((late_run, 390), (early_run, 100)):
        run_dir.mkdir()
        atomic.write_json(run_dir / files.RESULT, {"best_step": best, "max_steps": 400, "steps": 400})
    rows = [row(s4d, "scratch", 3e-3), row(s4d, "scratch", 9.5e-3, extension=True, selected=True,
                                           run_dir=str(late_run)),
            row(s4d, "finetune", 1e-3, selected=True, run_dir=str(early_run)),
            row(transformer, "scratch", 1e-3, selected=True)]
    lines = search_checks.lines(plan, rows, tmp_path)
    assert ("- grid extensions: 1 of 4 trials in 1 of 3 stages; selections that are extension values: 1"
            in lines), lines
    assert (f"- {s4d.key}: scratch grid extension: optim.lr above to 0.0095; optim.lr above: stopped at the limit "
            "0.01") in lines
    assert ("- selected trials whose best step is in the last 20% of their step budget (may not have converged): "
            "finetune 0 of 1, scratch 1 of 2") in lines
    assert "- selections at an edge of the grid their study searched: 0 of 3 searched" in lines


def test_the_plain_backend_searches_nothing_and_gets_no_checks(tmp_path):
    plan = architectures_cells(tmp_path, backend="plain")
    assert search_checks.lines(plan, [row(plan.cells[0], "scratch", 3e-3, selected=True)], tmp_path) == []
