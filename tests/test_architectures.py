"""The architecture experiment: its plan (same grid and budget for finetune and scratch) and its report section."""

import importlib.util
from pathlib import Path

from sptune import config
from sptune import experiments_cli as cli
from sptune.experiments import architectures
from sptune.experiments.plan import plain_point

SCRIPT = Path(__file__).resolve().parents[1] / "studies" / "architectures.py"


def load_script():
    spec = importlib.util.spec_from_file_location("study_architectures", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plan_gives_finetune_and_scratch_the_same_grid_and_budget():
    plan = load_script().build(cli.parse_args("", []))
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


def arm(model, arm_name, seed, test):
    return {"model": model, "arm": arm_name, "seed": seed, "test": test}


def test_section_reports_gains_gaps_and_baselines(monkeypatch):
    rows = [arm("Transformer", "scratch", 0, 0.40), arm("Transformer", "masked", 0, 0.50),
            arm("S4D", "scratch", 0, 0.60), arm("S4D", "masked", 0, 0.62),
            arm("Transformer", "scratch", 1, 0.42), arm("Transformer", "masked", 1, 0.54),
            arm("S4D", "scratch", 1, 0.58), arm("S4D", "masked", 1, None)]
    layout = {"architectures": {"transformer": "Transformer", "ssm": "S4D"}, "baselines_task": "ucr-osuleaf"}
    text = "\n".join(architectures.lines(rows, layout))
    assert "- Transformer: scratch 41.00, SPT 52.00, SPT gain +11.00 ± " in text
    assert "n=2, degenerate: n=2" in text  # two seeds: the interval is flagged
    assert "- S4D: scratch 59.00, SPT 62.00, SPT gain +2.00 (n=1, no interval)" in text
    assert "under scratch: +18.00 points" in text and "under SPT: +10.00 points" in text
    assert "1nn" in text and "majority" in text
    assert architectures.gain_text([], "S4D") == "—"


def test_missing_architecture_prints_a_dash():
    rows = [arm("Transformer", "scratch", 0, 0.4)]
    text = "\n".join(architectures.lines(rows, {"architectures": {"transformer": "Transformer", "ssm": "S4D"}}))
    assert "under scratch: —" in text and "- S4D: scratch —, SPT —, SPT gain —" in text


def test_boundary_lines_name_the_cell_and_the_edge():
    plan = load_script().build(cli.parse_args("", []))
    rows = [{"cell": plan.cells[1].key, "stage": "finetune", "selected": True, "optim.lr": 1e-2,
             "optim.batch_size": 32},
            {"cell": plan.cells[0].key, "stage": "scratch", "selected": True, "optim.lr": 1e-3, "optim.batch_size": 32}]
    lines = architectures.boundary_lines(plan, rows)
    assert lines == [f"{plan.cells[1].key}: warning: finetune selected optim.lr=0.01, the top of its grid "
                     "[0.0003, 0.001, 0.003, 0.01]: extend the grid", ""]
