"""Trivial baselines of a classification task, on the splits its loader returns: what any trained
model has to beat before its number means something.

    majority      the most frequent training class
    1nn           1-nearest neighbour, Euclidean distance on the raw (flattened) inputs: the UCR
                  archive's reference classifier
    logistic      a linear classifier on the raw inputs (scikit-learn's L2 logistic regression, C=1)

    rows = baselines.evaluate(task.load())    # [{"baseline", "val", "test"}, ...] accuracies

Each is fit on the train split and scored on val and test, so it sits beside a model trained on the
same train split and selected on the same val split.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from sptune.tasks.base import Split

Classifier = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]  # (train x, train y, x) -> predictions


def flat(split: Split) -> tuple[np.ndarray, np.ndarray]:
    """(N, features) float64 inputs and (N,) int labels of a split."""
    x = split.inputs.numpy().astype(np.float64)
    return x.reshape(len(x), -1), split.targets.numpy().astype(np.int64)


def majority(train_x: np.ndarray, train_y: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.full(len(x), np.bincount(train_y).argmax())


def one_nn(train_x: np.ndarray, train_y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The label of each row's nearest training row (squared Euclidean distance; the first on a tie)."""
    distances = (x * x).sum(1)[:, None] - 2.0 * x @ train_x.T + (train_x * train_x).sum(1)[None, :]
    return train_y[distances.argmin(axis=1)]


def logistic(train_x: np.ndarray, train_y: np.ndarray, x: np.ndarray) -> np.ndarray:
    from sklearn.linear_model import LogisticRegression

    # Fit to the optimum: the L2-regularised loss is strictly convex, so it has one minimiser whatever the
    # floating-point path. At scikit-learn's default tol (1e-4) lbfgs stopped early on OSULeaf, and a test
    # series flipped with the BLAS kernel (45.45% under OpenBLAS's Sandybridge kernels, 45.87% under Haswell).
    model = LogisticRegression(C=1.0, tol=1e-10, max_iter=20_000)
    return model.fit(train_x, train_y).predict(x)


BASELINES: dict[str, Classifier] = {"majority": majority, "1nn": one_nn, "logistic": logistic}


def accuracy(classifier: Classifier, train: Split, split: Split) -> float:
    train_x, train_y = flat(train)
    x, y = flat(split)
    return float((classifier(train_x, train_y, x) == y).mean())


def evaluate(splits: dict[str, Split]) -> list[dict[str, Any]]:
    """Every baseline fit on train, its accuracy on val and test."""
    return [{"baseline": name, "val": accuracy(fn, splits["train"], splits["val"]),
             "test": accuracy(fn, splits["train"], splits["test"])} for name, fn in BASELINES.items()]


def format_rows(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'baseline':10s} {'val acc':>8s} {'test acc':>9s}"]
    lines += [f"{r['baseline']:10s} {100 * r['val']:8.2f} {100 * r['test']:9.2f}" for r in rows]
    return "\n".join(lines)
