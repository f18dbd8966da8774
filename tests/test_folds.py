"""Cross-validated selection (sptune.folds): stratified folds of train + val, selection by the mean over folds,
and a study that runs every setting on every fold, grid extensions included."""

from pathlib import Path

import pytest
import torch
from ray_fixtures import CONFIG, TINY, ray_instance  # noqa: F401 (fixture)
from test_bracketing import low_grid_study

from sptune import folds, protocol
from sptune.config import load as load_config
from sptune.errors import UserError
from sptune.experiment.engine import domain
from sptune.records import studies
from sptune.search import boundary, bracketing, spaces
from sptune.tasks.base import Split


def splits(n_train=23, n_val=9, classes=3):
    def split(n, offset):
        ids = torch.arange(offset, offset + n)
        return Split(ids[:, None].repeat(1, 4), ids % classes, torch.full((n,), 4))
    return {"train": split(n_train, 0), "val": split(n_val, n_train), "test": split(5, 1000)}


@pytest.mark.parametrize("k", [2, 3, 5])
def test_folds_partition_train_and_val_stratified_and_leave_test_alone(k):
    data = splits()
    seen = []
    for fold in range(k):
        out = folds.cross_validation(data, k, fold)
        assert out["test"] is data["test"]
        ids = out["train"].inputs[:, 0].tolist() + out["val"].inputs[:, 0].tolist()
        assert sorted(ids) == list(range(32))  # every pooled example once, train or val
        assert {s: len(out[s]) for s in ("train", "val", "test")} == folds.sizes(
            {s: len(data[s]) for s in data}, k, fold)
        for c in range(3):  # each class in proportion: within one example of its share
            in_class = int((out["val"].targets == c).sum())
            assert abs(in_class - int((torch.arange(32) % 3 == c).sum()) / k) < 1
        seen += out["val"].inputs[:, 0].tolist()
    assert sorted(seen) == list(range(32))  # the folds' validation sets partition the pool
    assert folds.cross_validation(data, 0, 0) is data
    # Fixed folds: the same whatever else is drawn in between.
    torch.manual_seed(123)
    assert torch.equal(folds.assignment(torch.arange(32) % 3, k), folds.assignment(torch.arange(32) % 3, k))


def row(lr, fold, val, loss=1.0, status="completed"):
    return {"optim.lr": lr, folds.FOLD_KEY: fold, "status": status, "metric": "accuracy", "best_val": val,
            "best_val_loss": loss, "val_targets": 40, "stage": "scratch"}


def test_selection_takes_the_best_mean_over_folds_and_its_lowest_fold_stands_for_it():
    rows = [row(1e-3, 0, 0.90), row(1e-3, 1, 0.50),   # the best single fold, a worse mean (0.70)
            row(3e-3, 0, 0.75), row(3e-3, 1, 0.75),   # the best mean
            row(1e-2, 1, 0.99)]                        # one fold only: fold 0 crashed, so it is not judged
    best, how = protocol.select(rows + [row(1e-2, 0, 0.99, status="failed")])
    assert (best["optim.lr"], best[folds.FOLD_KEY]) == (3e-3, 0)
    assert how == "val metric (mean 0.7500 over 2 folds)"
    # A tie of the means (within a target of 2 x 40) goes to the lower mean loss.
    tie = [row(1e-3, 0, 0.80, 0.5), row(1e-3, 1, 0.70, 0.5), row(3e-3, 0, 0.75, 0.9), row(3e-3, 1, 0.75, 0.9)]
    best, how = protocol.select(tie)
    assert best["optim.lr"] == 1e-3 and how.startswith("val metric, tie broken by val loss")


@pytest.mark.parametrize("folds_, fold", [(1, 0), (-2, 0), (3, 3), (0, 1), (2, -1)])
def test_a_bad_fold_setting_is_a_one_line_error(folds_, fold):
    with pytest.raises(UserError, match="val_folds is 0"):
        load_config(CONFIG, [f"task.val_folds={folds_}", f"task.val_fold={fold}"])


def test_a_study_with_folds_searches_every_setting_on_every_fold_without_asha():
    state = studies.resolve(str(CONFIG), TINY, options=studies.Options(val_folds=3))
    assert state.options.val_folds == 3 and state.options.asha is None
    for stage in folds.FOLDED_STAGES:
        assert state.stages[stage]["task"]["val_folds"] == 3
        assert state.space["stages"][stage]["params"][folds.FOLD_KEY] == [0, 1, 2]
        grid = spaces.grid_points(domain.stage_space(state, stage))
        assert domain.stage_of(Path(), state, stage).trials == len(grid) == 3 * len(
            state.space["stages"][stage]["params"]["optim.lr"])
    assert folds.FOLD_KEY not in state.space["stages"]["pretrain"]["params"]
    assert state.stages["pretrain"]["task"]["val_folds"] == 0
    assert not boundary.ordered_grid(folds.FOLD_KEY, [0, 1, 2])  # labels: never extended, no edge warning
    with pytest.raises(UserError, match="--asha"):
        studies.resolve(str(CONFIG), TINY, options=studies.Options(val_folds=3, asha=True))
    with pytest.raises(UserError, match="K >= 2"):
        studies.resolve(str(CONFIG), TINY, options=studies.Options(val_folds=1))


def test_a_setting_missing_a_fold_is_run_on_it_before_any_extension():
    """A killed driver's extension trial that the resumed engine never knew is left out of the rows
    (bracketing.extend's `known`): its setting's mean waits for that fold, which the next round runs."""
    params = {"optim.lr": [1e-3, 3e-3, 9e-3], "optim.batch_size": [8], folds.FOLD_KEY: [0, 1]}
    rows = [{"optim.lr": lr, "optim.batch_size": 8, folds.FOLD_KEY: f} for lr in (1e-3, 3e-3) for f in (0, 1)]
    assert bracketing.missing_folds(rows, params) == []
    rows.append({"optim.lr": 9e-3, "optim.batch_size": 8, folds.FOLD_KEY: 0})
    assert bracketing.missing_folds(rows, params) == [{"optim.lr": 9e-3, "optim.batch_size": 8, folds.FOLD_KEY: 1}]
    assert bracketing.missing_folds(rows, {"optim.lr": [1e-3, 3e-3, 9e-3]}) == []  # no folds: nothing to fill


@pytest.mark.slow  # ~1 min: 1 pretraining trial, then finetune and scratch on 2 folds, each extending its grid
def test_a_cross_validated_study_runs_each_extension_on_every_fold(tmp_path, ray_instance):  # noqa: F811
    rows = low_grid_study(tmp_path, [1e-5, 9e-5], 30, studies.Options(val_folds=2))
    for stage in folds.FOLDED_STAGES:
        mine = [r for r in rows if r["stage"] == stage]
        assert all(r["status"] == "completed" for r in mine)
        by_lr: dict[str, set[str]] = {}
        for r in mine:
            by_lr.setdefault(r["optim.lr"], set()).add(r[folds.FOLD_KEY])
        assert all(f == {"0", "1"} for f in by_lr.values()), by_lr  # every setting on both folds, no fold added
        assert [r["extension"] for r in mine if float(r["optim.lr"]) > 3e-5] == ["True", "True"], mine
        selected = [r for r in mine if r["selected"] == "True"]
        assert len(selected) == 1 and selected[0][folds.FOLD_KEY] == "0"
        assert selected[0]["selected_by"].endswith(" over 2 folds)")
    assert not [r for r in rows if r["stage"] == "pretrain" and r[folds.FOLD_KEY]]
