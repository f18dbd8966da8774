"""Pathfinder: the generator's images and labels, the LRA release reader, verifier and preparer."""

from __future__ import annotations

import dataclasses
import io
import math
import tarfile
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from sptune.errors import UserError
from sptune.tasks import pathfinder as pf
from sptune.tasks import pathfinder_release as pf_release

TASKS = {task.name: task for task in [*pf.TASKS, *pf_release.TASKS]}


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """Fresh data root and cache for one test."""
    data, cache = tmp_path / "data", tmp_path / "cache"
    monkeypatch.setenv("SPTUNE_DATA", str(data))
    monkeypatch.setenv("SPTUNE_CACHE", str(cache))
    return data, cache


# ----------------------------------------------------------------------------------------------
# Generator
# ----------------------------------------------------------------------------------------------

def test_same_seed_same_images_other_seed_other_images():
    a, labels_a = pf.generate(6, 32, seed=3)
    b, labels_b = pf.generate(6, 32, seed=3)
    c, _ = pf.generate(6, 32, seed=4)
    assert np.array_equal(a, b) and np.array_equal(labels_a, labels_b)
    assert not np.array_equal(a, c)
    # Image i depends only on (seed, i): a prefix of a larger set is the smaller set.
    assert np.array_equal(pf.generate(3, 32, seed=3)[0], a[:3])
    # ... so worker processes, each drawing a slice, give the same set.
    drawn, drawn_labels = pf.generate(6, 32, seed=3, workers=3)
    assert np.array_equal(drawn, a) and np.array_equal(drawn_labels, labels_a)


@pytest.mark.parametrize("resolution", [32, 64, 128, 256])
def test_shapes_range_and_balanced_labels(resolution):
    n = 8 if resolution <= 64 else 2
    images, labels = pf.generate(n, resolution, seed=0)
    assert images.shape == (n, resolution, resolution) and images.dtype == np.uint8
    assert labels.dtype == np.int64 and labels.sum() == n // 2
    for image in images:
        assert image.max() == 255  # the markers are drawn at full brightness
        assert 0.02 < (image > 0).mean() < 0.5  # paths are sparse strokes, not blobs


def _dilate(mask: np.ndarray, radius: int) -> np.ndarray:
    padded = np.pad(mask, radius)
    size = mask.shape[0]
    out = np.zeros_like(mask)
    for dy in range(2 * radius + 1):
        for dx in range(2 * radius + 1):
            out |= padded[dy:dy + size, dx:dx + size]
    return out


def connected(image: np.ndarray, a: np.ndarray, b: np.ndarray, bridge: int) -> bool:
    """Flood fill over inked pixels, dilated by `bridge` px to jump the gaps between dashes."""
    ink = _dilate(image > 0, bridge)
    reached = np.zeros_like(ink)
    reached[tuple(np.round(a).astype(int))] = True
    while True:
        grown = _dilate(reached, 1) & ink
        if grown[tuple(np.round(b).astype(int))]:
            return True
        if (grown == reached).all():
            return False
        reached = grown


def _examples(resolution: int, n: int, contour_length: int = 14) -> list[pf.Example]:
    return [pf.generate_example(np.random.default_rng([7, i]), i % 2, resolution, contour_length) for i in range(n)]


def test_connectivity_checker():
    image = np.zeros((20, 20), dtype=np.uint8)
    image[10, 2:5] = image[10, 7:10] = image[10, 12:15] = 200  # three dashes, 2 px gaps
    a, b = np.array([10.0, 2.0]), np.array([10.0, 14.0])
    assert connected(image, a, b, bridge=1)
    assert not connected(image, a, b, bridge=0)
    image[10, 7:10] = 0  # a missing dash breaks the path
    assert not connected(image, a, b, bridge=1)


@pytest.mark.parametrize("resolution", [32, 128])
def test_positive_markers_are_joined_by_path_pixels(resolution):
    positives = [e for e in _examples(resolution, 12 if resolution == 32 else 4) if e.label == 1]
    assert positives
    for example in positives:
        assert example.marker_paths[0] == example.marker_paths[1]
        assert connected(example.image, *example.markers, bridge=example.gap)


@pytest.mark.parametrize("resolution", [32, 128])
def test_geometry_follows_the_original_rules(resolution):
    """Markers sit on path ends; dashes have the style's length, turn at most 90°/continuity,
    follow each other one gap apart, and no other dash comes within the clearance."""
    style = pf.STYLES[resolution]
    for example in _examples(resolution, 6):
        start_path, end_path = (example.paths[i] for i in example.marker_paths)
        assert np.allclose(example.markers[0], start_path[0, 0])
        assert np.allclose(example.markers[1], end_path[-1, 1])
        assert len(example.paths[0]) == len(example.paths[1]) == 14
        assert (example.marker_paths[0] == example.marker_paths[1]) == (example.label == 1)
        clearance = 2 * example.gap + style.dash_width
        for k, path in enumerate(example.paths):
            vectors = path[:, 1] - path[:, 0]
            assert np.allclose(np.linalg.norm(vectors, axis=1), style.dash_length)
            angles = np.arctan2(vectors[:, 0], vectors[:, 1])
            turns = np.abs((np.diff(angles) + np.pi) % (2 * np.pi) - np.pi)
            assert (turns <= np.pi / 2 / style.continuity + 1e-9).all()
            assert (np.linalg.norm(path[1:, 0] - path[:-1, 1], axis=1) <= 2 * example.gap + 1e-9).all()
            for j, other in enumerate(example.paths):
                for a in range(len(path)):
                    for b in range(len(other)):
                        if j == k and abs(a - b) <= 1:
                            continue
                        points = path[a, 0] + np.linspace(0, 1, 9)[:, None] * (path[a, 1] - path[a, 0])
                        distance = pf._point_segment_distance(points, other[b:b + 1, 0], other[b:b + 1, 1]).min()
                        assert distance >= clearance - 1e-6


def test_negative_markers_lie_on_two_separate_paths():
    for example in _examples(32, 10):
        if example.label == 0:
            first, second = (example.paths[i] for i in example.marker_paths)
            assert example.marker_paths[0] != example.marker_paths[1]
            points = first[:, 0][:, None] + np.linspace(0, 1, 9)[None, :, None] * (first[:, 1] - first[:, 0])[:, None]
            gap = pf._point_segment_distance(points.reshape(-1, 2), second[:, 0], second[:, 1]).min()
            assert gap >= 2 * example.gap + pf.STYLES[32].dash_width - 1e-6


def test_bad_generator_settings_are_user_errors():
    with pytest.raises(UserError, match="resolution 48"):
        pf.generate(1, 48)
    with pytest.raises(UserError, match="contour_length 1"):
        pf.generate(1, 32, contour_length=1)


def test_generation_is_fast_enough():
    start = time.process_time()
    pf.generate(100, 32, seed=5)
    assert time.process_time() - start < 5.0  # ~0.01 s per image; 5000 images well under a minute


def test_save_grid_writes_a_png(tmp_path):
    path = pf.save_grid(tmp_path / "grid.png", n=4, resolution=(32, 128), columns=4)
    with Image.open(path) as image:
        assert image.size[0] == 4 * 192 and image.size[1] > 2 * 192


# ----------------------------------------------------------------------------------------------
# The embedded task
# ----------------------------------------------------------------------------------------------

def _mini(**extras) -> pf.Task:
    task = TASKS["pathfinder-mini"]
    return dataclasses.replace(task, extras={**task.extras, **extras})


def test_mini_task_settings():
    task = TASKS["pathfinder-mini"]
    assert (task.seq_len, task.vocab_size, task.num_classes) == (1024, 259, 2)
    assert (task.mask_ratio, task.pretrain_loss, task.metric, task.embedded) == (0.5, "ce", "accuracy", True)


def test_mini_task_generates_once_then_reads_the_cache(dirs):
    _, cache = dirs
    task = _mini(num_train=20, num_val=6, num_test=6)
    splits = task.load()
    assert {k: len(v) for k, v in splits.items()} == {"train": 20, "val": 6, "test": 6}
    for split in splits.values():
        assert split.inputs.dtype == torch.int64 and split.inputs.shape[1] == 1024
        assert split.inputs.min() >= 3 and split.inputs.max() <= 258
        assert split.targets.sum() == len(split) // 2
        assert (split.lengths == 1024).all()
    cached = list((cache / "pathfinder-mini").glob("*.pt"))
    assert len(cached) == 1
    again = task.load()
    assert torch.equal(again["test"].inputs, splits["test"].inputs)
    images, _ = pf.generate(32, 32, seed=0)
    assert torch.equal(splits["train"].inputs[3], torch.from_numpy(images[3].reshape(-1)).long() + 3)


# ----------------------------------------------------------------------------------------------
# The LRA release
# ----------------------------------------------------------------------------------------------

def write_release(directory: Path, images: np.ndarray, labels: np.ndarray, contour_length: int = 14,
                  per_batch: int = 1000) -> Path:
    """A test fixture: images (n, s, s) uint8 in the LRA layout under `directory` (a pathfinder{s} folder).

    Produces curv_contour_length_14/imgs/<b>/sample_<i>.png and metadata/<b>.npy, the latter
    plain text like the release: `imgs/<b> sample_<i>.png <i> <label> <continuity> ...`.
    """
    resolution = images.shape[-1]
    style = pf.STYLES[resolution]
    root = Path(directory) / pf_release.LRA_DIFFICULTY
    (root / "metadata").mkdir(parents=True, exist_ok=True)
    for batch, first in enumerate(range(0, len(images), per_batch)):
        (root / "imgs" / str(batch)).mkdir(parents=True, exist_ok=True)
        lines = []
        for i, (image, label) in enumerate(zip(images[first:first + per_batch], labels[first:first + per_batch])):
            Image.fromarray(np.asarray(image, dtype=np.uint8)).save(root / "imgs" / str(batch) / f"sample_{i}.png")
            lines.append(f"imgs/{batch} sample_{i}.png {i} {int(label)} {style.continuity} {contour_length} "
                         f"{contour_length // 3} {style.dash_length} {style.dash_width} {style.gaps[0]} 1")
        (root / "metadata" / f"{batch}.npy").write_text("\n".join(lines) + "\n")
    return root


def _release(data: Path, n: int, resolution: int = 32, per_batch: int = 12) -> tuple[np.ndarray, np.ndarray, Path]:
    images, labels = pf.generate(n, resolution, seed=1)
    root = write_release(data / "lra_release" / f"pathfinder{resolution}", images, labels, per_batch=per_batch)
    return images, labels, root


def test_release_round_trip_and_split(dirs):
    data, cache = dirs
    images, labels, root = _release(data, 30)
    assert (root / "metadata" / "2.npy").read_text().splitlines()[0].split()[:4] == ["imgs/2", "sample_0.png", "0", "0"]
    task = TASKS["pathfinder"]
    splits = task.load()
    assert {k: len(v) for k, v in splits.items()} == {"train": 24, "val": 3, "test": 3}
    order = torch.randperm(30, generator=torch.Generator().manual_seed(42))  # S4's split
    tokens = torch.cat([splits[k].inputs for k in ("train", "val", "test")]).long()
    targets = torch.cat([splits[k].targets for k in ("train", "val", "test")])
    assert torch.equal(tokens, torch.from_numpy(images.reshape(30, -1)).long()[order] + 3)
    assert torch.equal(targets, torch.from_numpy(labels)[order])
    # The second load reads the decoded cache, not the PNGs.
    (root / "imgs" / "0" / "sample_0.png").unlink()
    assert torch.equal(task.load()["val"].inputs, splits["val"].inputs)
    assert splits["train"].inputs.dtype == torch.int16  # compact; batches are cast to int64
    assert len(list((cache / "arrays").glob("pathfinder-*/train_inputs.npy"))) == 1


def test_metadata_saved_by_the_original_generator_is_read_too(dirs):
    data, _ = dirs
    images, labels, root = _release(data, 4)
    rows = [line.split() for line in (root / "metadata" / "0.npy").read_text().splitlines()]
    with open(root / "metadata" / "0.npy", "wb") as f:
        np.save(f, np.array(rows))  # binary .npy of strings, as snakes2.py writes it
    task = TASKS["pathfinder"]
    assert task.verifier(task, task.data_dir()) == []
    splits = task.load()
    assert sorted(torch.cat([s.targets for s in splits.values()]).tolist()) == sorted(labels.tolist())


def test_missing_release_is_a_quick_user_error(dirs):
    start = time.time()
    with pytest.raises(UserError, match=r"lra_release\.gz.*sptune data prepare pathx --from"):
        TASKS["pathx"].load()
    assert time.time() - start < 1.0
    assert TASKS["pathx"].verifier(TASKS["pathx"], TASKS["pathx"].data_dir())[0].endswith(TASKS["pathx"].data_hint)


def test_release_tasks_settings():
    for name, resolution in [("pathfinder", 32), ("pathx", 128), ("pathx-256", 256)]:
        task = TASKS[name]
        assert task.seq_len == resolution ** 2 and task.vocab_size == 259
        assert task.data_subdir == f"lra_release/pathfinder{resolution}"
        assert (task.mask_ratio, task.pretrain_loss) == (0.5, "ce")


def test_verifier_names_missing_and_broken_pngs(dirs):
    data, _ = dirs
    _, _, root = _release(data, 10, per_batch=5)
    task = TASKS["pathfinder"]
    assert task.verifier(task, task.data_dir()) == []
    missing = root / "imgs" / "0" / "sample_2.png"
    missing.unlink()
    truncated = root / "imgs" / "1" / "sample_4.png"
    truncated.write_bytes(truncated.read_bytes()[:40])
    resized = root / "imgs" / "1" / "sample_0.png"
    Image.new("L", (16, 16)).save(resized)
    problems = task.verifier(task, task.data_dir())
    assert len(problems) == 3
    assert any(str(missing) in p and "missing" in p for p in problems)
    assert any(str(truncated) in p and "corrupt" in p for p in problems)
    assert any(str(resized) in p and "16x16" in p for p in problems)
    assert all("sptune data prepare pathfinder" in p for p in problems)
    with pytest.raises(UserError, match="sample_2.png"):
        task.load()


def _archive_source(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """An extracted 'release' with pathfinder32 and a decoy pathfinder128."""
    source = tmp_path / "src"
    images, labels = pf.generate(6, 32, seed=2)
    write_release(source / "lra_release" / "pathfinder32", images, labels, per_batch=3)
    big, big_labels = pf.generate(2, 128, seed=2)
    write_release(source / "lra_release" / "pathfinder128", big, big_labels)
    return source, images


@pytest.mark.parametrize("kind", ["tar.gz", "zip", "release folder", "difficulty folder"])
def test_preparer_unpacks_only_this_resolution(dirs, tmp_path, kind):
    source, images = _archive_source(tmp_path)
    if kind == "tar.gz":
        archive = tmp_path / "lra_release.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(source / "lra_release", arcname="lra_release")
    elif kind == "zip":
        archive = tmp_path / "lra_release.zip"
        with zipfile.ZipFile(archive, "w") as z:
            for path in (source / "lra_release").rglob("*"):
                z.write(path, path.relative_to(source))
    elif kind == "release folder":
        archive = source
    else:
        archive = source / "lra_release" / "pathfinder32" / pf_release.LRA_DIFFICULTY
    task = TASKS["pathfinder"]
    task.preparer(task, archive, task.data_dir())
    assert task.verifier(task, task.data_dir()) == []
    assert sorted(p.name for p in task.data_dir().iterdir()) == [pf_release.LRA_DIFFICULTY]  # no leftovers
    splits = task.load()
    assert sum(len(s) for s in splits.values()) == 6
    assert sorted(p.name for p in (task.data_dir() / pf_release.LRA_DIFFICULTY / "metadata").iterdir()) == ["0.npy", "1.npy"]
    # Preparing again replaces the copy.
    task.preparer(task, archive, task.data_dir())
    assert task.verifier(task, task.data_dir()) == []


def test_preparer_rejects_bad_sources(dirs, tmp_path):
    task = TASKS["pathfinder"]
    with pytest.raises(UserError, match="no such file"):
        task.preparer(task, tmp_path / "nope.gz", task.data_dir())
    junk = tmp_path / "junk.gz"
    junk.write_bytes(b"not an archive at all")
    with pytest.raises(UserError, match="not a readable"):
        task.preparer(task, junk, task.data_dir())
    other = tmp_path / "other.tar"
    with tarfile.open(other, "w") as tar:
        info = tarfile.TarInfo("lra_release/listops-1000/basic_test.tsv")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(UserError, match="no pathfinder32/curv_contour_length_14/metadata inside"):
        task.preparer(task, other, task.data_dir())
    only_128 = tmp_path / "src"
    write_release(only_128 / "pathfinder128", *pf.generate(1, 128))
    with pytest.raises(UserError, match="no pathfinder32"):
        task.preparer(task, only_128 / "pathfinder128", task.data_dir())
    assert not (task.data_dir() / pf_release.LRA_DIFFICULTY).exists()


# ----------------------------------------------------------------------------------------------
# Learnability
# ----------------------------------------------------------------------------------------------

# contour_length 3 with 2000 examples: a tiny CNN reaches ~0.87 here (seed 11) in ~15 s of one core.
EASY_CONTOUR, EASY_TRAIN, EASY_EPOCHS = 3, 2000, 15


@pytest.fixture
def one_thread():
    """Small convolutions run faster on one thread, and far faster on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow  # ~45 s on 2 cores: it trains a CNN
def test_a_small_conv_net_learns_the_easy_setting(one_thread):
    """The labels carry the signal: a tiny CNN beats chance on the easy setting within seconds.

    (At the LRA hard setting, contour length 14, 2000 examples are far too few for any small
    model; that is what the long-range sequence models are for.)
    """
    torch.manual_seed(0)
    images, labels = pf.generate(EASY_TRAIN + 400, 32, seed=11, contour_length=EASY_CONTOUR)
    x = torch.from_numpy(images).float().div(255).unsqueeze(1)
    y = torch.from_numpy(labels)
    x_train, y_train, x_test, y_test = x[:EASY_TRAIN], y[:EASY_TRAIN], x[EASY_TRAIN:], y[EASY_TRAIN:]

    def block(cin, cout):
        return [torch.nn.Conv2d(cin, cout, 3, padding=1), torch.nn.BatchNorm2d(cout), torch.nn.ReLU()]

    net = torch.nn.Sequential(*block(1, 16), torch.nn.MaxPool2d(2), *block(16, 32), torch.nn.MaxPool2d(2),
                              *block(32, 32), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(512, 2))
    optimizer = torch.optim.Adam(net.parameters())
    # One-cycle: warm-up gets the net off the initial plateau, the decay settles it.
    steps = EASY_EPOCHS * math.ceil(EASY_TRAIN / 32)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, 4e-3, total_steps=steps)
    for _ in range(EASY_EPOCHS):
        net.train()
        for batch in torch.randperm(EASY_TRAIN).split(32):
            # Rotations and flips keep the label: 8x the data for free.
            xb = torch.rot90(x_train[batch], int(torch.randint(4, ())), (2, 3))
            xb = xb.flip(3) if torch.rand(()) < 0.5 else xb
            loss = torch.nn.functional.cross_entropy(net(xb), y_train[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    net.eval()
    with torch.no_grad():
        accuracy = (net(x_test).argmax(1) == y_test).float().mean().item()
    assert accuracy > 0.6, accuracy
