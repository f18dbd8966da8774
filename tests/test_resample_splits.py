"""task.resample_splits: each run draws its train / val split from its seed, the test set stays fixed."""

import argparse

import numpy as np
import pytest

from sptune import config, registry
from sptune.cli import experiment as experiments_cli
from sptune.errors import UserError
from sptune.experiment.plan import Cell, Plan
from sptune.run import fingerprint


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPTUNE_CACHE", str(tmp_path / "cache"))


def rows(split) -> set[bytes]:
    return {row.tobytes() for row in split.inputs.numpy()}


def same(a, b) -> bool:
    return a.inputs.shape == b.inputs.shape and bool((a.inputs == b.inputs).all()) and bool((a.targets == b.targets).all())


def test_resampling_draws_train_and_val_from_the_seed_and_keeps_test():
    task = registry.get_task("ucr-osuleaf")
    fixed = [task.load(seed=seed) for seed in (1, 2)]
    assert same(fixed[0]["train"], fixed[1]["train"]) and same(fixed[0]["val"], fixed[1]["val"])

    drawn = [task.load(seed=seed, resample=True) for seed in (1, 2)]
    assert not same(drawn[0]["val"], drawn[1]["val"]) and not same(drawn[0]["train"], drawn[1]["train"])
    assert same(drawn[0]["test"], fixed[0]["test"]) and same(drawn[1]["test"], fixed[0]["test"])
    pooled = rows(fixed[0]["train"]) | rows(fixed[0]["val"])
    for splits in drawn:
        assert rows(splits["train"]) | rows(splits["val"]) == pooled and not rows(splits["train"]) & rows(splits["val"])
        assert len(splits["val"]) == len(fixed[0]["val"])  # the same stratified share, other series
    assert same(task.load(seed=1, resample=True)["val"], drawn[0]["val"])  # one seed, one split (cached by it)


def test_a_files_task_redraws_val_only_when_it_draws_val_from_train(tmp_path):
    rng = np.random.default_rng(0)
    data = tmp_path / "data"
    data.mkdir()
    for split, n in (("train", 40), ("test", 10)):
        np.savez(data / f"{split}.npz", inputs=rng.normal(size=(n, 8)).astype(np.float32),
                 targets=np.arange(n) % 2)
    task = registry.get_task("files", str(data))
    assert task.resamplable
    a, b = (task.load(seed=seed, resample=True) for seed in (3, 4))
    assert not same(a["val"], b["val"]) and same(a["test"], b["test"])
    assert same(task.load(seed=3)["val"], task.load(seed=4)["val"])

    np.savez(data / "val.npz", inputs=rng.normal(size=(6, 8)).astype(np.float32), targets=np.arange(6) % 2)
    given = registry.get_task("files", str(data))
    with pytest.raises(UserError, match=r"task 'files' \(.*\) has its train / val / test splits fixed by its source"):
        given.load(seed=3, resample=True)


def test_a_task_with_fixed_splits_refuses_resampling_in_one_line():
    cfg = config.load(None, ["task.name=listops-mini", "task.resample_splits=true"])
    with pytest.raises(UserError) as caught:
        registry.check_names(cfg)
    message = str(caught.value)
    assert "\n" not in message and "'listops-mini'" in message and "fixed by its source" in message
    with pytest.raises(UserError, match="fixed by its source"):
        registry.get_task("listops-mini").load(seed=1, resample=True)
    registry.check_names(config.load(None, ["task.name=ucr-osuleaf", "task.resample_splits=true"]))  # accepted
    with pytest.raises(UserError, match="val_folds"):
        config.load(None, ["task.name=ucr-osuleaf", "task.resample_splits=true", "task.val_folds=3"])
    with pytest.raises(UserError, match="run.seed"):
        config.load(None, ["task.name=ucr-osuleaf", "task.resample_splits=true", "run.seed=-1"])


def test_the_fingerprint_changes_only_when_resampling_is_set():
    base = fingerprint.of(config.load(None, ["task.name=ucr-osuleaf"]), "scratch")
    off = fingerprint.of(config.load(None, ["task.name=ucr-osuleaf", "task.resample_splits=false"]), "scratch")
    on = fingerprint.of(config.load(None, ["task.name=ucr-osuleaf", "task.resample_splits=true"]), "scratch")
    assert "task.resample_splits" not in base.fields and base.digest == off.digest
    assert on.fields["task.resample_splits"] is True and on.digest != base.digest


def plan_of(task: str) -> Plan:
    cells = [Cell(key=f"{task}-s{seed}", labels={"seed": seed}, overrides=(f"task.name={task}", f"run.seed={seed}"))
             for seed in (0, 1)]
    return Plan(experiment="x", title="x", axis="x", nuisance="", fixed="", layout={}, cells=cells)


def test_the_flag_appends_the_override_to_every_cell_and_has_its_own_directory():
    args = experiments_cli.build_parser("x").parse_args(["--resample-splits"])
    assert args.resample_splits
    plan = experiments_cli.resampled(plan_of("ucr-osuleaf"))
    assert all(cell.overrides[-1] == "task.resample_splits=true" for cell in plan.cells)
    assert any("--resample-splits" in note for note in plan.notes)
    assert plan_of("ucr-osuleaf").cells[0].overrides[-1] == "run.seed=0"  # the plan it came from is unchanged
    with pytest.raises(UserError, match="'listops-mini'.*fixed by its source"):
        experiments_cli.resampled(plan_of("listops-mini"))
    flags = argparse.Namespace(smoke_test=False, resample_splits=True)
    assert str(experiments_cli.default_dir("spt_ratio", flags)) == "runs/experiments/spt_ratio-resampled"
