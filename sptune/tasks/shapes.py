"""shapes-tiny: a generated image-classification task read as a pixel sequence (an embedded stand-in for LRA Image).

Each 16x16 gray image holds one outline shape of a class in CLASSES (ring, square, plus, X) at a
random centre, size and brightness, drawn with anti-aliased strokes, plus short random distractor
strokes. A sequence model reads the 256 pixels row by row as tokens (gray level quantized to LEVELS
values), so, as in LRA Image (sCIFAR), the 2D neighbourhood of a pixel is 1 and 16 positions away and a
Transformer has no built-in locality: whatever 2D structure it uses it must learn. Masked SPT (50% of the
pixels, the paper's visual ratio) is where it can learn it from the training images themselves.

Image i depends only on (seed, i), like the Pathfinder generator: any prefix of a larger set is the smaller
set, and classes cycle 0, 1, 2, 3, 0, ... so every split is balanced.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import torch

from sptune import atomic
from sptune.tasks.base import SPECIAL_TOKENS, Split, Task

GENERATOR_VERSION = 1
CLASSES = ("ring", "square", "plus", "x")
LEVELS = 8  # gray levels of the tokens
TOKEN_OFFSET = len(SPECIAL_TOKENS)
SIZE = 16
DISTRACTORS = 2  # short random strokes per image
HALF_WIDTH = 0.5  # stroke half width in pixels


def _segment_distance(py: np.ndarray, px: np.ndarray, a: tuple[float, float], b: tuple[float, float]) -> np.ndarray:
    ay, ax = a
    dy, dx = b[0] - ay, b[1] - ax
    t = np.clip(((py - ay) * dy + (px - ax) * dx) / max(dy * dy + dx * dx, 1e-12), 0.0, 1.0)
    return np.hypot(py - ay - t * dy, px - ax - t * dx)


def _shape_distance(kind: int, py: np.ndarray, px: np.ndarray, cy: float, cx: float, r: float) -> np.ndarray:
    """Distance of every pixel centre to the outline of shape `kind` (centre cy, cx; half-extent r)."""
    y, x = py - cy, px - cx
    if CLASSES[kind] == "ring":
        return np.abs(np.hypot(y, x) - r)
    if CLASSES[kind] == "square":
        return np.abs(np.maximum(np.abs(y), np.abs(x)) - r)
    if CLASSES[kind] == "plus":
        return np.minimum(_segment_distance(y, x, (-r, 0), (r, 0)), _segment_distance(y, x, (0, -r), (0, r)))
    s = r / math.sqrt(2) * 1.2  # x: diagonals reaching about as far as the other shapes
    return np.minimum(_segment_distance(y, x, (-s, -s), (s, s)), _segment_distance(y, x, (-s, s), (s, -s)))


def generate_image(rng: np.random.Generator, label: int) -> np.ndarray:
    """One (SIZE, SIZE) float image in [0, 1] of class `label`."""
    py, px = np.meshgrid(np.arange(SIZE) + 0.5, np.arange(SIZE) + 0.5, indexing="ij")
    image = np.zeros((SIZE, SIZE))
    for _ in range(DISTRACTORS):  # short strokes anywhere, at most as bright as the shape
        a = rng.uniform(1, SIZE - 1, 2)
        angle, length = rng.uniform(0, math.pi), rng.uniform(2.0, 4.0)
        b = a + length * np.array([math.sin(angle), math.cos(angle)])
        value = np.clip(HALF_WIDTH + 0.5 - _segment_distance(py, px, tuple(a), tuple(b)), 0, 1) * rng.uniform(0.4, 0.8)
        np.maximum(image, value, out=image)
    r = rng.uniform(3.0, 6.0)
    cy, cx = rng.uniform(r + 1, SIZE - r - 1, 2)
    value = np.clip(HALF_WIDTH + 0.5 - _shape_distance(label, py, px, cy, cx, r), 0, 1) * rng.uniform(0.6, 1.0)
    np.maximum(image, value, out=image)
    return image


def generate(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n images (n, SIZE, SIZE) uint8 and labels (n,) int64 cycling through the classes."""
    labels = np.arange(n, dtype=np.int64) % len(CLASSES)
    images = np.empty((n, SIZE, SIZE), dtype=np.uint8)
    for i in range(n):
        images[i] = np.round(generate_image(np.random.default_rng([seed, i]), int(labels[i])) * 255)
    return images, labels


def load_generated(task: Task, data_dir: Path, seed: int) -> dict[str, Split]:
    """Generate once into data_dir/<settings hash>.pt; the data seed is the task's, not the run's."""
    x = task.extras
    sizes = (x["num_train"], x["num_val"], x["num_test"])
    settings = {"seed": x["seed"], "sizes": sizes, "version": GENERATOR_VERSION, "size": SIZE,
                "distractors": DISTRACTORS, "classes": CLASSES}
    path = data_dir / f"{hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]}.pt"
    if path.exists():
        data = torch.load(path, weights_only=True)
    else:
        images, labels = generate(sum(sizes), x["seed"])
        data = {"pixels": torch.from_numpy(images.reshape(len(images), -1)), "labels": torch.from_numpy(labels)}
        atomic.write_torch(path, data)
    tokens = torch.div(data["pixels"].long() * (LEVELS - 1) + 127, 255, rounding_mode="floor") + TOKEN_OFFSET
    out, first = {}, 0
    for name, size in zip(("train", "val", "test"), sizes):
        out[name] = Split(tokens[first:first + size], data["labels"][first:first + size],
                          torch.full((size,), SIZE * SIZE, dtype=torch.int64))
        first += size
    return out


SHAPES_TINY = Task(
    name="shapes-tiny", seq_len=SIZE * SIZE, input_kind="tokens", num_classes=len(CLASSES), metric="accuracy",
    mask_ratio=0.5, pretrain_loss="ce", loader=load_generated, vocab_size=TOKEN_OFFSET + LEVELS,
    description="Generated 16x16 outline shapes (ring/square/plus/x) with distractor strokes, 256 pixel tokens; "
                "no download",
    extras={"seed": 0, "num_train": 4000, "num_val": 1000, "num_test": 1000},
)

TASKS: list[Task] = [SHAPES_TINY]
