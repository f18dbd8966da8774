"""Pathfinder and Path-X (Linsley et al. 2018; LRA "hard" = contour length 14).

An image holds two marker dots and several dashed, smoothly curving paths. The label is 1 when
both markers are the two ends of one path, 0 when each sits on a different path. Sequence models
read the image as a flat sequence of pixel intensities (1024 tokens at 32x32, 16384 for Path-X).

Two sources:
- `pathfinder-mini` is generated here by a clean-room reimplementation of the original generator
  (drewlinsley/pathfinder) with the per-resolution settings of the LRA release, so the whole
  pipeline runs without any download.
- `pathfinder`, `pathx` and `pathx-256` read the LRA release (`lra_release.gz`):
  sptune/tasks/pathfinder_release.py.

How a generated image is built (the original's algorithm, our code):
- A path is a chain of short straight dashes. After each dash the chain moves on by
  `dash_length + 2 * gap` and turns by at most 90° / continuity, turns drawn with weight
  cos²(continuity * turn), so paths bend smoothly and dashes are separated by ~2 * gap.
- No dash comes closer than `2 * gap + dash_width` to any other dash except its predecessor
  on the same path, so paths never touch or cross: whether two markers are connected is
  decided only by following the dashes, never by local proximity.
- The two target paths start `seed_distance` apart near the centre and grow outwards in turns;
  the markers sit on the start of path i and on the end of path i (label 1) or of the other
  path (label 0), so marker distance carries little label information.
- Short distractor paths (a third of the target length) fill the rest of the image.

Difficulty is the number of dashes per target path, `contour_length`: 14 is the LRA "hard"
setting used everywhere (and here by default), 9 the original's "intermediate". From a few
thousand examples only very short paths are learnable by a small model: a tiny CNN reaches
~87% at contour_length 3 with 2000 examples in seconds, and stays at chance at 14.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from sptune import atomic
from sptune.errors import UserError
from sptune.tasks.base import SPECIAL_TOKENS, Split, Task

# Bump when the generator's output changes, so stale cached datasets are regenerated.
GENERATOR_VERSION = 1
TOKEN_OFFSET = len(SPECIAL_TOKENS)  # pixel value v becomes token id v + 3


@dataclass(frozen=True)
class Style:
    """Drawing settings of one resolution, as in the LRA release (original names in brackets)."""

    dash_length: float  # length of one dash in pixels [paddle_length]
    dash_width: float  # stroke width in pixels [paddle_thickness]
    gaps: tuple[int, ...]  # half the spacing between dashes, one drawn per image [paddle_margin_list]
    marker_radius: float  # [marker_radius]
    seed_distance: float  # distance between the start points of the two target paths [seed_distance]
    continuity: float  # the largest turn between dashes is 90° / continuity [continuity]
    intensity: float  # path brightness, markers are 1.0; > 1 saturates thin strokes [snake_contrast]
    distractor_budget: float  # distractor paths = ceil(budget / distractor length) [num_distractor_snakes]


# From the LRA generation settings (google-research/long-range-arena TFDS builder docstrings); the
# 32 px intensity is the product of its snake and paddle contrasts, 2 * 0.75, and the budgets are
# the original's num_distractor_snakes numerators (20, 22, 35, 30).
STYLES = {
    # 16 px is not an LRA resolution (sptune's addition, for a CPU-sized Transformer: 256 tokens): the
    # 32 px strokes (dash 2, width 0.5, gap 1) on a quarter of the area, so the marker radius, the seed
    # distance and the distractor budget are scaled down (radius 1, 4 px, 20 / 4).
    16: Style(2, 1.0, (1,), 1.0, 4, 1.0, 0.6, 5),
    32: Style(2, 0.5, (1,), 1.5, 7, 1.0, 1.5, 20),
    64: Style(5, 1.0, (1,), 2.5, 12, 1.8, 0.8, 22),
    128: Style(5, 1.5, (2, 3), 3.0, 20, 1.8, 0.9, 35),
    256: Style(5, 2.0, (3,), 5.0, 27, 1.8, 1.0, 30),
}

CANDIDATE_TURNS = 24  # turns tried at once for each new dash
MAX_DISTRACTOR_TRIES = 5  # a distractor that cannot be placed is dropped, as in the original
MAX_RETREATS_PER_DASH = 1  # dead-end budget of the target-path search before starting over
MAX_IMAGE_TRIES = 1000  # target paths are regrown until they fit; failing this often is a bug


@dataclass
class Example:
    """One generated image with the bookkeeping the tests use.

    paths[k] is an (n_dashes, 2, 2) array of dash endpoints in (y, x) pixel coordinates; paths[0]
    and paths[1] are the target paths, the rest distractors. markers[0] is the start of
    paths[marker_paths[0]], markers[1] the end of paths[marker_paths[1]].
    """

    image: np.ndarray  # (size, size) uint8
    label: int
    markers: np.ndarray  # (2, 2) (y, x)
    marker_paths: tuple[int, int]
    paths: list[np.ndarray]
    gap: int  # half the spacing between consecutive dashes in this image


def _unit(angle: float) -> np.ndarray:
    return np.array([math.sin(angle), math.cos(angle)])  # (y, x), like image indexing


def _point_segment_distance(points: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance of every point (..., 2) to every segment a[i]-b[i]: shape (..., n_segments)."""
    ab = b - a
    rel = points[..., None, :] - a
    t = np.clip((rel * ab).sum(-1) / np.maximum((ab * ab).sum(-1), 1e-12), 0.0, 1.0)
    return np.linalg.norm(rel - t[..., None] * ab, axis=-1)


class _Canvas:
    """The dashes placed so far and the clearance rule every new dash must respect.

    Called for every candidate dash, so it keeps y and x in separate arrays and works with
    squared distances: a few whole-array operations per call instead of many small ones.
    """

    def __init__(self, size: int, style: Style, gap: int):
        self.style, self.gap = style, gap
        self.clearance2 = (2 * gap + style.dash_width) ** 2
        self.low, self.high = 1.0, size - 2.0  # keep strokes off the border pixels
        # Per dash: start (y, x), direction vector (y, x) and 1 / length^2.
        self.dashes = np.zeros((5, 64))
        self.removed = np.zeros(64, dtype=bool)  # dashes taken back while searching
        self.count = 0
        # Points along a candidate dash, spaced <= 0.5 px so a crossing cannot slip between them.
        self.along = np.linspace(0.0, 1.0, int(math.ceil(style.dash_length / 0.5)) + 1)

    def fits(self, pivot: np.ndarray, starts: np.ndarray, ends: np.ndarray, predecessor: int) -> np.ndarray:
        """Which candidate dashes (K, 2), all starting one gap from `pivot`, stay inside the image
        and clear of every placed dash.

        `predecessor` (an index into the placed dashes, or -1) is exempt: a dash always sits
        one gap from the dash before it on its own path.
        """
        inside = ((starts >= self.low) & (starts <= self.high) & (ends >= self.low) & (ends <= self.high)).all(-1)
        # Only dashes starting within reach of the pivot can come near a candidate.
        reach = 2 * self.style.dash_length + self.gap + math.sqrt(self.clearance2)
        ay, ax = self.dashes[:2, : self.count]
        near = ((ay - pivot[0]) ** 2 + (ax - pivot[1]) ** 2 <= reach * reach) & ~self.removed[: self.count]
        if predecessor >= 0:
            near[predecessor] = False
        if not (near.any() and inside.any()):
            return inside
        ay, ax, dy, dx, inv = self.dashes[:, : self.count][:, near, None, None]  # (M, 1, 1): broadcast over P, K
        points = starts + self.along[:, None, None] * (ends - starts)  # (P, K, 2)
        ry, rx = points[..., 0] - ay, points[..., 1] - ax  # (M, P, K)
        t = np.clip((ry * dy + rx * dx) * inv, 0.0, 1.0)
        ry -= t * dy
        rx -= t * dx
        return inside & ((ry * ry + rx * rx).min(axis=(0, 1)) >= self.clearance2)

    def add(self, start: np.ndarray, end: np.ndarray) -> int:
        if self.count == self.removed.size:
            self.dashes = np.concatenate([self.dashes, np.zeros_like(self.dashes)], axis=1)
            self.removed = np.concatenate([self.removed, np.zeros_like(self.removed)])
        direction = end - start
        self.dashes[:, self.count] = (*start, *direction, 1.0 / max(direction[0] ** 2 + direction[1] ** 2, 1e-12))
        self.removed[self.count] = False
        self.count += 1
        return self.count - 1

    def remove(self, index: int) -> None:
        self.removed[index] = True

    def start(self, index: int | list[int]) -> np.ndarray:
        return self.dashes[:2, index].T

    def end(self, index: int | list[int]) -> np.ndarray:
        return (self.dashes[:2, index] + self.dashes[2:4, index]).T

    def segments(self) -> np.ndarray:
        """(n, 2, 2) endpoints of the dashes still in the image."""
        keep = list(np.flatnonzero(~self.removed[: self.count]))
        return np.stack([self.start(keep), self.end(keep)], axis=1)


class _Path:
    """A growing chain of dashes. Dash k spans pivot_k + [gap, gap + length] * direction_k; the
    next pivot lies length + 2 * gap further along direction_k."""

    def __init__(self, canvas: _Canvas, tail: np.ndarray, angle: float):
        self.canvas = canvas
        self.origin = tail  # the free end of the first dash, where a marker may go
        self.dashes: list[int] = []  # canvas indices
        # (pivot, angle) of each dash; the first dash's pivot lies one gap behind its tail.
        self.states: list[tuple[np.ndarray, float]] = [(tail - canvas.gap * _unit(angle), angle)]

    def _dashes_at(self, pivot: np.ndarray, angles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        direction = np.empty((len(angles), 2))
        direction[:, 0], direction[:, 1] = np.sin(angles), np.cos(angles)
        starts = pivot + self.canvas.gap * direction
        return starts, starts + self.canvas.style.dash_length * direction

    def place_first(self) -> bool:
        pivot, angle = self.states[0]
        start, end = self._dashes_at(pivot, np.array([angle]))
        if not self.canvas.fits(pivot, start, end, -1)[0]:
            return False
        self.dashes.append(self.canvas.add(start[0], end[0]))
        return True

    def extend(self, rng: np.random.Generator) -> bool:
        """Add one dash, turning smoothly; False when no turn leads to free space."""
        style = self.canvas.style
        last_pivot, angle = self.states[-1]
        pivot = last_pivot + (style.dash_length + 2 * self.canvas.gap) * _unit(angle)
        max_turn = math.pi / 2 / style.continuity
        turns = rng.uniform(-max_turn, max_turn, CANDIDATE_TURNS)
        starts, ends = self._dashes_at(pivot, angle + turns)
        weight = np.cos(style.continuity * turns) ** 2 * self.canvas.fits(pivot, starts, ends, self.dashes[-1])
        if weight.sum() <= 0:
            return False
        pick = int(np.searchsorted(np.cumsum(weight), rng.random() * weight.sum(), side="right"))
        self.dashes.append(self.canvas.add(starts[pick], ends[pick]))
        self.states.append((pivot, angle + turns[pick]))
        return True

    def retreat(self) -> None:
        """Take the last dash back (a dead end), so the search can turn differently."""
        self.canvas.remove(self.dashes.pop())
        self.states.pop()

    def remove(self) -> None:
        while self.dashes:
            self.retreat()

    @property
    def terminal(self) -> np.ndarray:
        return self.canvas.end(self.dashes[-1])

    def segments(self) -> np.ndarray:
        return np.stack([self.canvas.start(self.dashes), self.canvas.end(self.dashes)], axis=1)


def _grow_targets(rng: np.random.Generator, canvas: _Canvas, size: int, contour_length: int) -> list[_Path] | None:
    """The two target paths, or None when they got stuck (the caller starts over).

    They grow in turns so neither gets the free space first. A path that hits a dead end (the
    border, the other path or itself) takes its last dash back and tries other turns; the
    original restarts the whole image instead. Same rules, several times faster.
    """
    style = canvas.style
    # The first start keeps 2 * seed_distance from the border, like the original, so both paths
    # begin near the centre and have room to grow.
    margin = min(2 * style.seed_distance, size / 2 - 1)
    first = _Path(canvas, rng.uniform(margin, size - margin, 2), rng.uniform(-math.pi, math.pi))
    second_tail = first.origin + style.seed_distance * _unit(rng.uniform(-math.pi, math.pi))
    second = _Path(canvas, second_tail, rng.uniform(-math.pi, math.pi))
    if not (first.place_first() and second.place_first()):
        return None
    retreats = int(MAX_RETREATS_PER_DASH * contour_length)
    while len(first.dashes) < contour_length or len(second.dashes) < contour_length:
        for path in (first, second):
            if len(path.dashes) < contour_length and not path.extend(rng):
                if retreats == 0 or len(path.dashes) == 1:
                    return None
                retreats -= 1
                path.retreat()
    return [first, second]


def _distractor_plan(style: Style, contour_length: int) -> tuple[int, int]:
    """(number of distractor paths, dashes per distractor): a third of the target length, and as
    many as the resolution's budget allows (e.g. 5 at 32 px and 8 at 128 px for length 14)."""
    return math.ceil(style.distractor_budget / (contour_length / 3)), max(1, contour_length // 3)


def _add_distractors(rng: np.random.Generator, canvas: _Canvas, size: int, contour_length: int) -> list[_Path]:
    count, length = _distractor_plan(canvas.style, contour_length)
    paths: list[_Path] = []
    for _ in range(count):
        for _ in range(MAX_DISTRACTOR_TRIES):
            path = _Path(canvas, rng.uniform(1, size - 2, 2), rng.uniform(-math.pi, math.pi))
            if path.place_first() and all(path.extend(rng) for _ in range(length - 1)):
                paths.append(path)
                break
            path.remove()  # forget the partial path and try elsewhere
    return paths


def _paint(image: np.ndarray, box: tuple[float, float, float, float], radius: float, scale: float,
           distance) -> None:
    """Paint a shape of the given radius into image, in place, keeping the brighter value.

    `distance(points)` maps pixel centres (h, w, 2) to their distance from the shape's core.
    A pixel gets the fraction of it the shape covers, approximated by radius + 0.5 - distance
    clipped to [0, 1]: anti-aliasing without supersampling. Only the bounding box `box`
    (y0, x0, y1, x1) plus the radius is computed, so a dash costs the same in any image size.
    """
    size = image.shape[0]
    y0, x0 = max(int(box[0] - radius - 1), 0), max(int(box[1] - radius - 1), 0)
    y1, x1 = min(int(box[2] + radius + 2), size), min(int(box[3] + radius + 2), size)
    points = np.stack(np.meshgrid(np.arange(y0, y1), np.arange(x0, x1), indexing="ij"), axis=-1).astype(float)
    value = np.clip(radius + 0.5 - distance(points), 0.0, 1.0) * scale
    np.maximum(image[y0:y1, x0:x1], value, out=image[y0:y1, x0:x1])


def _render(size: int, style: Style, segments: np.ndarray, markers: np.ndarray) -> np.ndarray:
    """The image: dashes at the style's intensity, then the two markers at full brightness."""
    image = np.zeros((size, size))
    for a, b in segments:
        box = (*np.minimum(a, b), *np.maximum(a, b))
        _paint(image, box, style.dash_width / 2, style.intensity,
               lambda points: _point_segment_distance(points, a[None], b[None])[..., 0])
    for centre in markers:
        _paint(image, (*centre, *centre), style.marker_radius, 1.0,
               lambda points: np.linalg.norm(points - centre, axis=-1))
    return np.round(np.clip(image, 0.0, 1.0) * 255).astype(np.uint8)


def generate_example(rng: np.random.Generator, label: int, resolution: int = 32, contour_length: int = 14) -> Example:
    """Draw one image with the given label (1 = the markers are the two ends of one path)."""
    if resolution not in STYLES:
        raise UserError(f"pathfinder resolution {resolution} is not supported; use one of {sorted(STYLES)}")
    if contour_length < 2:
        raise UserError(f"pathfinder contour_length {contour_length} is too short; use 2 or more dashes")
    style = STYLES[resolution]
    for _ in range(MAX_IMAGE_TRIES):
        gap = int(rng.choice(style.gaps))
        canvas = _Canvas(resolution, style, gap)
        targets = _grow_targets(rng, canvas, resolution, contour_length)
        if targets is not None:
            break
    else:
        raise RuntimeError(f"pathfinder generator could not place two paths of {contour_length} dashes")
    paths = targets + _add_distractors(rng, canvas, resolution, contour_length)
    start_on = int(rng.integers(2))
    end_on = start_on if label == 1 else 1 - start_on
    markers = np.stack([targets[start_on].origin, targets[end_on].terminal])
    return Example(
        image=_render(resolution, style, canvas.segments(), markers),
        label=int(label),
        markers=markers,
        marker_paths=(start_on, end_on),
        paths=[p.segments() for p in paths],
        gap=canvas.gap,
    )


def generate(n: int, resolution: int = 32, seed: int = 0, contour_length: int = 14,
             workers: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """n images (n, resolution, resolution) uint8 and labels (n,) int64, alternating 0, 1, 0, ...

    Image i depends only on (seed, i), so any prefix of a larger set is the smaller set, and
    every even-sized slice is exactly balanced. For the same reason the images do not depend on
    `workers`, the processes that draw them (default: one per CPU this process may use, at most one
    per 1000 images, since a process costs ~2 s to start): pathfinder-mini's 5000 images take
    ~45 s in one process on a 2-core CPU.
    """
    # The CPUs this process may run on (macOS has no affinity call: all of them).
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = workers or min(cpus, n // 1000)
    if workers <= 1:
        images = _draw(0, n, resolution, seed, contour_length)
    else:
        bounds = np.linspace(0, n, workers + 1).astype(int).tolist()
        # spawn, not fork: the caller may be a threaded process (a Ray worker, a Tune driver)
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            chunks = pool.map(partial(_draw, resolution=resolution, seed=seed, contour_length=contour_length),
                              bounds[:-1], bounds[1:])
            images = np.concatenate(list(chunks))
    return images, np.arange(n, dtype=np.int64) % 2


def _draw(first: int, stop: int, resolution: int, seed: int, contour_length: int) -> np.ndarray:
    """Images first..stop-1 of generate(seed): (stop - first, resolution, resolution) uint8."""
    images = np.empty((stop - first, resolution, resolution), dtype=np.uint8)
    for i in range(first, stop):
        images[i - first] = generate_example(np.random.default_rng([seed, i]), i % 2, resolution, contour_length).image
    return images


def save_grid(path: str | os.PathLike, n: int = 16, resolution: int | Sequence[int] = 32, seed: int = 0,
              contour_length: int = 14, columns: int = 8) -> Path:
    """Write a PNG of n generated examples per resolution, each captioned with its label: how the
    README's docs/pathfinder_examples.png is drawn (n=16, resolution=(32, 128))."""
    resolutions = [resolution] if isinstance(resolution, int) else list(resolution)
    tile, caption = 192, 24
    rows_per_block = math.ceil(n / columns)
    sheet = Image.new("L", (columns * tile, len(resolutions) * rows_per_block * (tile + caption)), 255)
    draw = ImageDraw.Draw(sheet)
    font = ImageFont.load_default(size=13)
    for block, res in enumerate(resolutions):
        images, labels = generate(n, res, seed, contour_length)
        for i in range(n):
            x = (i % columns) * tile
            y = (block * rows_per_block + i // columns) * (tile + caption)
            # Nearest-neighbour scaling shows the pixels a sequence model actually reads.
            sheet.paste(Image.fromarray(images[i]).resize((tile - 4, tile - 4), Image.NEAREST), (x + 2, y + 2))
            text = f"{res}px  label {labels[i]}: {'connected' if labels[i] else 'not connected'}"
            draw.text((x + 4, y + tile + 2), text, fill=0, font=font)
    with atomic.replacing(path) as tmp:
        sheet.save(tmp, format="PNG")
    return Path(path)


def _splits(inputs: torch.Tensor, targets: torch.Tensor, sizes: Sequence[int]) -> dict[str, Split]:
    """Consecutive train/val/test blocks of one array."""
    out, first = {}, 0
    for name, size in zip(("train", "val", "test"), sizes):
        lengths = torch.full((size,), inputs.shape[1], dtype=torch.int64)
        out[name] = Split(inputs[first:first + size], targets[first:first + size], lengths)
        first += size
    return out


def load_generated(task: Task, data_dir: Path, seed: int) -> dict[str, Split]:
    """Generate the embedded task once, then read it from data_dir/<settings hash>.pt.

    The data seed lives in task.extras, not in `seed`: every training seed sees the same
    benchmark, as with the real release.
    """
    x = task.extras
    sizes = (x["num_train"], x["num_val"], x["num_test"])
    settings = {"resolution": x["resolution"], "contour_length": x["contour_length"], "seed": x["seed"],
                "sizes": sizes, "version": GENERATOR_VERSION}
    if x["resolution"] == 16:  # not an LRA style: key its drawing settings, so an edit regenerates the data
        settings["style"] = [*STYLES[16].__dict__.values()]
    path = data_dir / f"{hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]}.pt"
    if path.exists():
        data = torch.load(path, weights_only=True)
    else:
        images, labels = generate(sum(sizes), x["resolution"], x["seed"], x["contour_length"])
        data = {"pixels": torch.from_numpy(images.reshape(len(images), -1)), "labels": torch.from_numpy(labels)}
        atomic.write_torch(path, data)
    pixels = data["pixels"].long()
    levels = x.get("levels", 256)
    if levels != 256:  # fewer gray levels: token = round(v * (levels - 1) / 255)
        pixels = torch.div(pixels * (levels - 1) + 127, 255, rounding_mode="floor")
    return _splits(pixels + TOKEN_OFFSET, data["labels"], sizes)


PATHFINDER_MINI = Task(
    name="pathfinder-mini", seq_len=32 * 32, input_kind="tokens", num_classes=2, metric="accuracy",
    mask_ratio=0.5, pretrain_loss="ce", loader=load_generated, vocab_size=TOKEN_OFFSET + 256,
    description="Generated Pathfinder, 32x32, the LRA hard setting (contour length 14); no download",
    extras={"resolution": 32, "contour_length": 14, "seed": 0, "num_train": 4000, "num_val": 500, "num_test": 500},
)

TASKS: list[Task] = [
    PATHFINDER_MINI,
    # The same generator with 3-dash paths: what a small model learns from a few thousand examples in
    # minutes on a CPU (a tiny CNN: ~87% test), for demos; at 14 dashes it needs LRA-scale data.
    replace(PATHFINDER_MINI, name="pathfinder-mini-easy",
            description="Generated Pathfinder, 32x32, easy setting (contour length 3); no download",
            extras={**PATHFINDER_MINI.extras, "contour_length": 3}),
    # 16x16 (256 pixel tokens) with 3-dash paths: the embedded setting in which a small CPU Transformer
    # can be pretrained and finetuned in minutes (the demo study, configs/pathfinder_tiny_transformer.yaml).
    # 1000 validation and 1000 test images keep the accuracy's sampling noise near +-1.5 points (1 sd).
    replace(PATHFINDER_MINI, name="pathfinder-tiny", seq_len=16 * 16, vocab_size=TOKEN_OFFSET + 4,
            description="Generated Pathfinder, 16x16 (256 pixel tokens), contour length 3; no download",
            extras={**PATHFINDER_MINI.extras, "resolution": 16, "contour_length": 3, "num_train": 4000,
                    "num_val": 1000, "num_test": 1000, "levels": 4}),
]
