"""shapes-tiny: the generated 16x16 outline-shape task (the demo's embedded task)."""

import numpy as np
import torch

from sptune.registry import get_task
from sptune.tasks import shapes


def test_generator_is_deterministic_balanced_and_prefix_stable():
    a, la = shapes.generate(12, seed=3)
    b, lb = shapes.generate(8, seed=3)
    assert np.array_equal(a[:8], b) and np.array_equal(la[:8], lb)
    assert np.bincount(la, minlength=len(shapes.CLASSES)).tolist() == [3, 3, 3, 3]
    assert not np.array_equal(shapes.generate(4, seed=4)[0], a[:4])
    assert a.dtype == np.uint8 and a.shape == (12, 16, 16) and a.max() > 100


def test_shapes_differ_where_they_should():
    rng = lambda: np.random.default_rng(0)  # noqa: E731 - same centre, size and distractors for every class
    images = [shapes.generate_image(rng(), k) for k in range(len(shapes.CLASSES))]
    for i in range(len(images)):
        for j in range(i + 1, len(images)):
            assert np.abs(images[i] - images[j]).sum() > 3.0


def test_task_loads_tokens_in_the_vocabulary(tmp_path, monkeypatch):
    monkeypatch.setenv("SPTUNE_CACHE", str(tmp_path))
    task = get_task("shapes-tiny")
    monkeypatch.setitem(task.extras, "num_train", 8)
    monkeypatch.setitem(task.extras, "num_val", 4)
    monkeypatch.setitem(task.extras, "num_test", 4)
    splits = task.load()
    assert [len(splits[s]) for s in ("train", "val", "test")] == [8, 4, 4]
    x = splits["train"].inputs
    assert x.shape == (8, 256) and x.min() >= shapes.TOKEN_OFFSET and x.max() < task.vocab_size
    assert torch.equal(splits["val"].targets, torch.tensor([0, 1, 2, 3]))
