"""A stage that a time budget (or a stop) ended before its selection has no result: its best trial so far is
`leading`, never `selected`, so no report, seed pair or exit code counts it, and the experiment's command line
calls its cell unfinished (the same command continues it), not failed."""

import json

from sptune import api, files
from sptune.cli import experiment as cli
from sptune.experiment.backends import create_cell_study
from sptune.experiment.plan import Cell, Plan, save_plan
from sptune.records import results, seeds, study_state
from sptune.report import tables as report
from sptune.search.options import Options

OVERRIDES = ("task.name=listops-mini", "model.name=transformer")


def fake_trial(study_dir, stage, trial_id, lr, val, test, finished=True):
    """A trial's run directory as the engine leaves it: trial.json, and result.json once it finished
    (progress.json while it runs)."""
    run_dir = study_dir / stage / f"{stage}-{trial_id}-lr={lr:g}"
    run_dir.mkdir(parents=True)
    attempt = {"hostname": "h", "node_id": "n", "pid": 1, "start_step": 0, "started": 0.0}
    (run_dir / files.TRIAL).write_text(json.dumps({
        "attempts": [attempt], "devices": 1, "init": None, "params": {"optim.lr": lr}, "path": "direct",
        "stage": stage, "trial_id": trial_id}))
    outcome = {"best_val": val, "best_val_loss": 1.0 - val, "best_step": 10, "steps": 20, "train_seconds": 1.0,
               "eval_seconds": 0.1, "metric": "accuracy", "n_params": 1000}
    if finished:
        (run_dir / files.RESULT).write_text(json.dumps({**outcome, "status": "completed", "test_metric": test}))
    else:
        (run_dir / files.PROGRESS).write_text(json.dumps({**outcome, "step": 20}))


def budget_stopped_cell(experiment_dir):
    """One cell whose pretraining and scratch are done and whose finetuning was stopped mid-way: one of its
    trials completed (the best so far), another (a grid extension, say) was still running."""
    cell = Cell("c-s0", {"model": "Transformer", "seed": 0}, OVERRIDES)
    plan = Plan("x", "title", "axis", "nuisance", "fixed", {"kind": "grid", "col": "seed"},
                [cell], backend="tune")
    save_plan(experiment_dir, plan)
    study_dir = experiment_dir / files.CELLS / cell.key
    create_cell_study(cell, study_dir, Options())
    fake_trial(study_dir, "pretrain", "p1", 1e-3, 0.5, 0.5)
    fake_trial(study_dir, "finetune", "f1", 1e-3, 0.8, 0.75)
    fake_trial(study_dir, "finetune", "f2", 3e-3, 0.6, 0.55, finished=False)
    fake_trial(study_dir, "scratch", "s1", 1e-3, 0.7, 0.65)
    state = study_state.load(study_dir)
    state.stage_status.update(pretrain="done", scratch="done")  # finetune: not done
    study_state.save(study_dir, state)
    return study_dir


def test_an_unfinished_stage_has_a_leading_trial_not_a_selected_one(tmp_path):
    study_dir = budget_stopped_cell(tmp_path)
    rows = results.collect(study_dir)
    finetune = {r["trial_id"]: r for r in rows if r["stage"] == "finetune"}
    assert finetune["f1"]["leading"] and not finetune["f1"]["selected"]
    assert "so far, the stage has not finished" in finetune["f1"]["selected_by"]
    assert results.selected_row(rows, "finetune") is None
    assert results.selected_row(rows, "scratch")["trial_id"] == "s1"
    assert not api.succeeded(study_dir)  # `sptune study` exits 1, not 0
    pair, _ = seeds.study_pair(0, study_dir)
    assert pair.status != "completed" and "no selected finetune trial" in pair.status
    assert "stages: pretrain done, scratch done" in pair.status
    table = results.summary(study_dir, rows)
    assert "so far, the stage has not finished" in table
    assert "SPT (pretrain -> finetune) vs scratch" not in table  # no comparison with an unfinished arm

    state = study_state.load(study_dir)  # once the stage is done, the same trial is its selection
    state.stage_status["finetune"] = "done"
    study_state.save(study_dir, state)
    assert results.selected_row(results.collect(study_dir), "finetune")["trial_id"] == "f1"
    assert api.succeeded(study_dir)


def test_the_report_leaves_an_unfinished_arm_out_and_says_so(tmp_path):
    budget_stopped_cell(tmp_path)
    written = report.write(tmp_path)
    summary = {r["arm"]: r for r in results_csv_rows(written["summary"])}
    assert summary["masked"]["status"] == "finetune unfinished" and summary["masked"]["test"] == ""
    assert summary["scratch"]["status"] == "completed" and float(summary["scratch"]["test"]) == 0.65
    assert written["summary_lines"][-2] == ("Not completed (left out of every number above): "
                                            "c-s0/masked (finetune unfinished)")
    assert "not done (finetune unfinished)" in written["table"].read_text()  # not the leading trial's 75.00
    assert "75.00" not in written["table"].read_text()


def test_the_command_line_calls_a_budget_stopped_cell_unfinished_not_failed(tmp_path, capsys):
    budget_stopped_cell(tmp_path)
    assert cli.not_done_exit(tmp_path, ["c-s0"]) == 1
    err = capsys.readouterr().err
    assert "1 cell(s) unfinished, not failed: the same command continues them: c-s0" in err
    assert "failed (see" not in err
    (tmp_path / files.CELLS / "c-s0" / files.CELL_ERROR).write_text("ValueError: broken\n")
    assert cli.not_done_exit(tmp_path, ["c-s0"]) == 1
    assert f"1 cell(s) failed (see cells/<key>/{files.CELL_ERROR}): c-s0" in capsys.readouterr().err
    assert cli.not_done_exit(tmp_path, []) == 0


def results_csv_rows(path):
    import csv

    with open(path) as handle:
        return list(csv.DictReader(handle))
