"""The boundary check: a selected value at the edge of its numeric grid gets one warning line per stage."""

from sptune.search import boundary

SPACE = {"stages": {
    "pretrain": {"params": {"optim.lr": [1e-3, 5e-4], "optim.batch_size": [32]}},
    "finetune": {"params": {"optim.lr": [1e-4, 1e-3], "optim.batch_size": [16, 32, 64]}},
    "scratch": {"params": {"optim.lr": [1e-4, 3e-4, 1e-3], "model.kind": ["a", "b"],
                           "optim.weight_decay": {"loguniform": [1e-4, 1e-1]}}},
}}


def test_edge_values_warn_once_per_stage_naming_the_grid():
    selected = {"pretrain": {"optim.lr": 5e-4, "optim.batch_size": 32},
                "finetune": {"optim.lr": 1e-3, "optim.batch_size": 16},
                "scratch": {"optim.lr": 3e-4, "model.kind": "b", "optim.weight_decay": 0.1}}
    lines = boundary.warnings(selected, SPACE)
    assert lines == [
        "warning: pretrain selected optim.lr=0.0005, the bottom of its grid [0.0005, 0.001]: extend the grid",
        "warning: finetune selected optim.lr=0.001, the top of its grid [0.0001, 0.001]; optim.batch_size=16, "
        "the bottom of its grid [16, 32, 64]: extend the grid",
    ]


def test_interior_fixed_and_non_numeric_values_do_not_warn():
    selected = {"finetune": {"optim.lr": 1e-3, "optim.batch_size": 32}, "scratch": None}
    space = {"stages": {"finetune": {"params": {"optim.lr": [1e-4, 1e-3, 1e-2], "optim.batch_size": [32]}}}}
    assert boundary.warnings(selected, space) == []
    assert boundary.edge_note("model.kind", "a", ["a", "b"]) is None
    assert boundary.edge_note("optim.lr", None, [1e-4, 1e-3]) is None
    assert boundary.warnings({}, {}) == []


def test_summary_prints_the_warning(tmp_path):
    from ray_fixtures import bare_study
    from sptune.records import results

    rows = [{"stage": "scratch", "trial_id": "t1", "status": "completed", "metric": "accuracy", "best_val": 0.5,
             "best_val_loss": 1.0, "val_targets": 100, "best_step": 10, "test_metric": 0.4, "wall_seconds": 1.0,
             "optim.lr": 1e-3, "selected": True, "selected_by": "val metric"}]  # as collect() marks a done stage
    bare_study(tmp_path, space={"path": "s.yaml", "stages": {"scratch": {"params": {"optim.lr": [1e-4, 1e-3]}}}})
    text = results.summary(tmp_path, rows)
    assert "warning: scratch selected optim.lr=0.001, the top of its grid [0.0001, 0.001]: extend the grid" in text
