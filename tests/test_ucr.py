"""UCR tasks on the real files of the sktime wheel, and the trivial baselines on their splits."""

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

from sptune import baselines, registry
from sptune.errors import UserError
from sptune.tasks import ts_format, ucr


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPTUNE_CACHE", str(tmp_path / "cache"))


def test_osuleaf_archive_shapes_and_class_counts():
    parts = ucr.read_parts("OSULeaf")
    (x_train, y_train), (x_test, y_test) = parts["TRAIN"], parts["TEST"]
    assert x_train.shape == (200, 427, 1) and x_test.shape == (242, 427, 1)
    assert len(np.unique(y_train)) == 6 and set(np.unique(y_test)) == set(range(6))
    # z-normalised per series
    assert np.allclose(x_test.mean(axis=1), 0.0, atol=1e-5) and np.allclose(x_test.std(axis=1), 1.0, atol=1e-4)


def test_task_splits_are_stratified_deterministic_and_test_is_the_archive_test():
    task = registry.get_task("ucr-osuleaf")
    assert (task.input_kind, task.num_classes, task.pretrain_loss, task.channels) == ("continuous", 6, "l1", 1)
    splits = task.load(seed=0)
    assert len(splits["train"]) + len(splits["val"]) == 200 and len(splits["test"]) == 242
    train_counts = np.bincount(ucr.read_parts("OSULeaf")["TRAIN"][1])
    assert np.array_equal(splits["val"].targets.bincount().numpy(), np.round(train_counts * 0.2).astype(int))
    labels = ucr.read_parts("OSULeaf")["TRAIN"][1]
    keep, held = ucr.stratified_holdout(labels, 0.2, 0)
    assert np.array_equal(held, ucr.stratified_holdout(labels, 0.2, 0)[1]) and not set(keep) & set(held)
    assert not np.array_equal(held, ucr.stratified_holdout(labels, 0.2, 1)[1])
    assert bool((task.load(seed=5)["val"].inputs == splits["val"].inputs).all())  # the run seed keeps the split
    assert splits["train"].inputs.dtype.is_floating_point and splits["train"].lengths.eq(427).all()


def test_missing_sktime_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"not installed; install it with `pip install \"sktime>=1.2,<1.3\"`"):
        ucr.archive_file("OSULeaf", "TRAIN")


def test_ts_reader_rejects_a_malformed_row(tmp_path):
    path = tmp_path / "x.ts"
    path.write_text("@problemName x\n@data\n1,2,3:a\n1,2,oops:b\n")
    with pytest.raises(UserError, match=r"x\.ts:4: not a \.ts data row"):
        ts_format.read_ts(path, "fix it")
    path.write_text("@data\n1,2,3:a\n4,5,6:b\n")
    x, labels = ts_format.read_ts(path, "fix it")
    assert x.shape == (2, 3, 1) and labels == ["a", "b"]


def test_one_nn_on_the_full_osuleaf_train_matches_the_archive():
    parts = ucr.read_parts("OSULeaf")
    (x_train, y_train), (x_test, y_test) = parts["TRAIN"], parts["TEST"]
    flat = lambda a: a.reshape(len(a), -1).astype(np.float64)  # noqa: E731
    accuracy = (baselines.one_nn(flat(x_train), y_train, flat(x_test)) == y_test).mean()
    assert accuracy == pytest.approx(0.521, abs=0.001)  # UCR archive: 1-NN Euclidean error 0.479


def test_baselines_on_the_task_splits():
    rows = {r["baseline"]: r for r in baselines.evaluate(registry.get_task("ucr-osuleaf").load())}
    assert set(rows) == {"majority", "1nn", "logistic"}
    assert rows["majority"]["test"] == pytest.approx(44 / 242)  # train's largest class (3) has 44 TEST series
    assert rows["1nn"]["test"] > rows["majority"]["test"] + 0.2 and rows["logistic"]["test"] > 0.3
    assert "1nn" in baselines.format_rows(list(rows.values()))


def test_the_logistic_baseline_does_not_depend_on_the_blas_kernel():
    """The same predictions under two OpenBLAS kernels (x86; elsewhere the variable is ignored): fit to its
    optimum, the baseline's number is the problem's, not the machine's rounding."""
    script = ("from sptune import baselines, registry; s = registry.get_task('ucr-osuleaf').load(); "
              "print(baselines.accuracy(baselines.logistic, s['train'], s['test']))")
    printed = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                              env={**os.environ, "OPENBLAS_CORETYPE": core, "OPENBLAS_NUM_THREADS": "1"}).stdout
               for core in ("Sandybridge", "Haswell")}
    assert len(printed) == 1, printed
