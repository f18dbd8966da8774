"""Pathfinder and Path-X (Linsley et al. 2018; LRA "hard" = contour length 14).

An image holds two marker dots and several dashed, smoothly curving paths. The label is 1 when
both markers are the two ends of one path, 0 when each sits on a different path. Sequence models
read the image as a flat sequence of pixel intensities (1024 tokens at 32x32, 16384 for Path-X).

Two sources:
- `pathfinder-mini` is generated here by a clean-room reimplementation of the original generator
  (drewlinsley/pathfinder) with the per-resolution settings of the LRA release, so the whole
  pipeline runs without any download.
- `pathfinder`, `pathx` and `pathx-256` read the LRA release (`lra_release.gz`) laid out as
  `<data root>/lra_release/pathfinder{32,128,256}/curv_contour_length_14/{imgs,metadata}`.

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
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import shutil
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw

from ..errors import UserError
from .base import SPECIAL_TOKENS, Split, Task, cache_root

# Bump when the generator's output changes, so stale cached datasets are regenerated.
GENERATOR_VERSION = 1
LRA_DIFFICULTY = "curv_contour_length_14"  # the LRA "hard" split, the one LRA reports
TOKEN_OFFSET = len(SPECIAL_TOKENS)  # pixel value v becomes token id v + 3
SPLIT_SEED = 42  # the seed S4 and later LRA papers use for the 80/10/10 split


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


STYLES = {
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
    and paths[1] are the target paths, the rest distractors. markers[m] lies on an end of
    paths[marker_paths[m]].
    """

    image: np.ndarray  # (size, size) uint8
    label: int
    markers: np.ndarray  # (2, 2) (y, x)
    marker_paths: tuple[int, int]
    paths: list[np.ndarray]


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
        self.states: list[tuple[np.ndarray, float]] = [(tail - canvas.gap * _unit(angle), angle)]  # (pivot, angle) per dash

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
    border, the other path or itself) takes dashes back and turns differently; the original
    restarts the whole image instead, which gives the same kind of paths far more slowly.
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


def _coverage(image: np.ndarray, centre_distance, box: tuple[float, float, float, float], radius: float,
              scale: float) -> None:
    """Paint a shape of the given radius into image (in place, keeping the brighter value).

    A pixel gets the fraction of it the shape covers, approximated by radius + 0.5 - distance
    clipped to [0, 1]: anti-aliasing without supersampling. Only the shape's bounding box is
    computed, so large images cost no more per dash than small ones.
    """
    size = image.shape[0]
    y0, x0 = max(int(box[0] - radius - 1), 0), max(int(box[1] - radius - 1), 0)
    y1, x1 = min(int(box[2] + radius + 2), size), min(int(box[3] + radius + 2), size)
    ys, xs = np.meshgrid(np.arange(y0, y1, dtype=np.float32), np.arange(x0, x1, dtype=np.float32), indexing="ij")
    value = np.clip(radius + 0.5 - centre_distance(ys, xs), 0.0, 1.0) * scale
    np.maximum(image[y0:y1, x0:x1], value, out=image[y0:y1, x0:x1])


def _render(size: int, style: Style, segments: np.ndarray, markers: np.ndarray) -> np.ndarray:
    """The image: dashes at the style's intensity, then the two markers at full brightness."""
    image = np.zeros((size, size), dtype=np.float32)
    for (ay, ax), (by, bx) in segments:
        dy, dx = by - ay, bx - ax
        inv = 1.0 / max(dy * dy + dx * dx, 1e-12)

        def to_dash(ys, xs, ay=ay, ax=ax, dy=dy, dx=dx, inv=inv):
            t = np.clip(((ys - ay) * dy + (xs - ax) * dx) * inv, 0.0, 1.0)
            return np.hypot(ys - ay - t * dy, xs - ax - t * dx)

        box = (min(ay, by), min(ax, bx), max(ay, by), max(ax, bx))
        _coverage(image, to_dash, box, style.dash_width / 2, style.intensity)
    for cy, cx in markers:
        _coverage(image, lambda ys, xs, cy=cy, cx=cx: np.hypot(ys - cy, xs - cx), (cy, cx, cy, cx),
                  style.marker_radius, 1.0)
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
    )


def generate(n: int, resolution: int = 32, seed: int = 0, contour_length: int = 14) -> tuple[np.ndarray, np.ndarray]:
    """n images (n, resolution, resolution) uint8 and labels (n,) int64, alternating 0, 1, 0, ...

    Image i depends only on (seed, i), so any prefix of a larger set is the smaller set, and
    every even-sized slice is exactly balanced.
    """
    images = np.empty((n, resolution, resolution), dtype=np.uint8)
    labels = np.arange(n, dtype=np.int64) % 2
    for i in range(n):
        images[i] = generate_example(np.random.default_rng([seed, i]), int(labels[i]), resolution, contour_length).image
    return images, labels


def save_grid(path: str | os.PathLike, n: int = 16, resolution: int | Sequence[int] = 32, seed: int = 0,
              contour_length: int = 14, columns: int = 8) -> Path:
    """Write a PNG of n generated examples per resolution, each captioned with its label."""
    resolutions = [resolution] if isinstance(resolution, int) else list(resolution)
    tile, caption = 192, 18
    rows_per_block = math.ceil(n / columns)
    sheet = Image.new("L", (columns * tile, len(resolutions) * rows_per_block * (tile + caption)), 255)
    draw = ImageDraw.Draw(sheet)
    for block, res in enumerate(resolutions):
        images, labels = generate(n, res, seed, contour_length)
        for i in range(n):
            x = (i % columns) * tile
            y = (block * rows_per_block + i // columns) * (tile + caption)
            # Nearest-neighbour scaling keeps the pixels a sequence model actually sees.
            sheet.paste(Image.fromarray(images[i]).resize((tile - 4, tile - 4), Image.NEAREST), (x + 2, y + 2))
            text = f"{res}px  label {labels[i]}: {'connected' if labels[i] else 'not connected'}"
            draw.text((x + 4, y + tile), text, fill=0)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(path)
    return path


# ----------------------------------------------------------------------------------------------
# The LRA release layout
# ----------------------------------------------------------------------------------------------

def write_release(directory: str | os.PathLike, images: np.ndarray, labels: np.ndarray,
                  contour_length: int = 14, per_batch: int = 1000) -> Path:
    """Write images (n, s, s) uint8 in the LRA layout under `directory` (a pathfinder{s} folder).

    Produces curv_contour_length_14/imgs/<b>/sample_<i>.png and metadata/<b>.npy, the latter
    plain text like the release: `imgs/<b> sample_<i>.png <i> <label> <continuity> ...`.
    """
    resolution = images.shape[-1]
    style = STYLES[resolution]
    root = Path(directory) / LRA_DIFFICULTY
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


def _metadata_files(root: Path) -> list[Path]:
    # Numeric order (0, 1, 2, ..., 10), the order S4 uses, which fixes the example order.
    files = [p for p in (root / "metadata").glob("*.npy") if p.is_file()]
    return sorted(files, key=lambda p: (0, int(p.stem), "") if p.stem.isdigit() else (1, 0, p.stem))


def _read_metadata(root: Path) -> Iterator[tuple[Path, int, int, Path, str | None]]:
    """(metadata file, line number, label, image path, problem) for every listed image."""
    for meta in _metadata_files(root):
        for number, line in enumerate(meta.read_text().splitlines(), start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 4 or fields[3] not in ("0", "1"):
                yield meta, number, -1, meta, f"{meta} line {number}: expected '<imgs/b> <sample_i.png> <i> <label 0/1> ...'"
                continue
            yield meta, number, int(fields[3]), root / fields[0] / fields[1], None


def _decode(path: Path, resolution: int) -> np.ndarray:
    """Grayscale pixels of one release PNG; raises ValueError naming what is wrong."""
    try:
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("L"))
    except FileNotFoundError:
        raise ValueError(f"missing {path}") from None
    except (OSError, SyntaxError, Image.DecompressionBombError) as e:
        raise ValueError(f"corrupt {path} ({e})") from None
    if pixels.shape != (resolution, resolution):
        raise ValueError(f"{path} is {pixels.shape[1]}x{pixels.shape[0]}, expected {resolution}x{resolution}")
    return pixels


def _prepare_command(task: Task) -> str:
    return f"sptune data prepare {task.name} --from lra_release.gz"


def verify_release(task: Task, data_dir: Path) -> list[str]:
    """Check the release layout: metadata present, every listed PNG there and decodable at size."""
    root = data_dir / LRA_DIFFICULTY
    fix = f"re-extract it with `{_prepare_command(task)}`"
    if not (root / "metadata").is_dir():
        return [f"{root / 'metadata'} is missing; {task.data_hint}"]
    if not _metadata_files(root):
        return [f"{root / 'metadata'} has no <batch>.npy files; {fix}"]
    problems, shown = [], 20
    count = 0
    for _, _, _, image, problem in _read_metadata(root):
        if problem is None:
            try:
                _decode(image, task.extras["resolution"])
            except ValueError as e:
                problem = f"{e}; {fix}"
        if problem is not None:
            count += 1
            if len(problems) < shown:
                problems.append(problem)
    if count > shown:
        problems.append(f"... and {count - shown} more problems under {root}; {fix}")
    return problems


_MEMBER = re.compile(rf"^(?:.*/)?(?:pathfinder(\d+)/)?{LRA_DIFFICULTY}/(.+)$")


def _release_member(name: str, resolution: int) -> str | None:
    """Path below curv_contour_length_14 for an archive member of this resolution, else None."""
    match = _MEMBER.match(name.replace("\\", "/"))
    if match is None or (match.group(1) is not None and int(match.group(1)) != resolution):
        return None
    relative = match.group(2)
    parts = relative.split("/")
    return None if ".." in parts or relative.startswith("/") else relative


def prepare_release(task: Task, source: Path, data_dir: Path) -> None:
    """Put curv_contour_length_14 of this resolution from `source` (the LRA release archive
    .tar/.tar.gz/.gz/.zip, or an extracted folder) into data_dir; only that part is unpacked."""
    resolution = task.extras["resolution"]
    source = Path(source).expanduser()
    target = data_dir / LRA_DIFFICULTY
    if not source.exists():
        raise UserError(f"{source} does not exist; pass the LRA release archive (lra_release.gz) or its extracted folder")
    if target.exists():
        raise UserError(f"{target} already exists; delete it first to prepare {task.name} again")
    partial = data_dir / f".{LRA_DIFFICULTY}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        if source.is_dir():
            found = _copy_folder(source, resolution, partial)
        elif zipfile.is_zipfile(source):
            found = _extract_zip(source, resolution, partial)
        else:
            found = _extract_tar(source, resolution, partial)
        if found == 0:
            raise UserError(f"{source} has no pathfinder{resolution}/{LRA_DIFFICULTY} files; "
                            f"pass the LRA release archive (lra_release.gz) or its extracted folder")
        partial.rename(target)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _write_member(partial: Path, relative: str, data: io.BufferedIOBase) -> None:
    destination = partial / relative
    destination.parent.mkdir(parents=True, exist_ok=True)
    with open(destination, "wb") as out:
        shutil.copyfileobj(data, out)


def _extract_tar(source: Path, resolution: int, partial: Path) -> int:
    found = 0
    try:
        # Streaming mode reads the multi-GB release once, front to back.
        with tarfile.open(source, "r|*") as archive:
            for member in archive:
                relative = _release_member(member.name, resolution)
                if member.isfile() and relative is not None:
                    _write_member(partial, relative, archive.extractfile(member))
                    found += 1
    except tarfile.TarError as e:
        raise UserError(f"{source} is not a readable .tar/.tar.gz/.zip archive ({e}); "
                        f"download lra_release.gz again or pass its extracted folder") from None
    return found


def _extract_zip(source: Path, resolution: int, partial: Path) -> int:
    found = 0
    with zipfile.ZipFile(source) as archive:
        for info in archive.infolist():
            relative = _release_member(info.filename, resolution)
            if not info.is_dir() and relative is not None:
                with archive.open(info) as data:
                    _write_member(partial, relative, data)
                found += 1
    return found


def _copy_folder(source: Path, resolution: int, partial: Path) -> int:
    """Accept the lra_release folder, a pathfinder{res} folder or curv_contour_length_14 itself."""
    for candidate in (source / "lra_release" / f"pathfinder{resolution}" / LRA_DIFFICULTY,
                      source / f"pathfinder{resolution}" / LRA_DIFFICULTY,
                      source / LRA_DIFFICULTY, source):
        if candidate.name == LRA_DIFFICULTY and candidate.is_dir():
            shutil.copytree(candidate, partial, dirs_exist_ok=True)
            return sum(1 for p in partial.rglob("*") if p.is_file())
    return 0


# ----------------------------------------------------------------------------------------------
# Loaders
# ----------------------------------------------------------------------------------------------

def _splits_from_tokens(tokens: torch.Tensor, labels: torch.Tensor, sizes: Sequence[int]) -> dict[str, Split]:
    """Contiguous train/val/test blocks (views, so memory-mapped data stays on disk)."""
    out, first = {}, 0
    for name, size in zip(("train", "val", "test"), sizes):
        inputs = tokens[first:first + size]
        lengths = torch.full((size,), tokens.shape[1], dtype=torch.int64)
        out[name] = Split(inputs, labels[first:first + size], lengths)
        first += size
    return out


def _settings_key(settings: dict) -> str:
    return hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def load_generated(task: Task, data_dir: Path, seed: int) -> dict[str, Split]:
    """Generate (once, then read the cache) the embedded task.

    The data seed lives in task.extras, not in `seed`: every training seed sees the same
    benchmark, as with the real release.
    """
    x = task.extras
    sizes = (x["num_train"], x["num_val"], x["num_test"])
    settings = {k: x[k] for k in ("resolution", "contour_length", "seed")} | {"sizes": sizes, "version": GENERATOR_VERSION}
    cache = data_dir / f"{_settings_key(settings)}.pt"
    if cache.exists():
        data = torch.load(cache, weights_only=True)
    else:
        images, labels = generate(sum(sizes), x["resolution"], x["seed"], x["contour_length"])
        data = {"images": torch.from_numpy(images.reshape(len(images), -1)), "labels": torch.from_numpy(labels)}
        data_dir.mkdir(parents=True, exist_ok=True)
        partial = cache.with_suffix(f".partial{os.getpid()}")
        torch.save(data, partial)
        os.replace(partial, cache)  # atomic: a crashed run never leaves a half-written cache
    return _splits_from_tokens(data["images"].long() + TOKEN_OFFSET, data["labels"], sizes)


def load_release(task: Task, data_dir: Path, seed: int) -> dict[str, Split]:
    """Read the LRA release: decode every PNG once into a memory-mapped cache, then split 80/10/10.

    The split is S4's (torch.randperm with seed 42, train first, then 10% val, 10% test) and does
    not depend on `seed`, so all runs share one test set. The cache stores tokens as int16
    (ids <= 258) in split order, so the splits are views of one memory-mapped file: Path-X
    (200k x 16384) would not fit in memory as int64. Cast batches with .long() before embedding.
    """
    resolution = task.extras["resolution"]
    root = data_dir / LRA_DIFFICULTY
    metadata = _metadata_files(root) if (root / "metadata").is_dir() else []
    if not metadata:
        raise UserError(f"{task.name}: no LRA Pathfinder data at {root}; {task.data_hint}")
    fingerprint = hashlib.sha1()
    for meta in metadata:
        fingerprint.update(meta.name.encode() + meta.read_bytes())
    key = _settings_key({"root": str(root.resolve()), "metadata": fingerprint.hexdigest(),
                         "resolution": resolution, "split_seed": SPLIT_SEED, "format": 1})
    cache = cache_root() / "pathfinder" / f"{task.name}-{key}"
    tokens_file, labels_file = cache.with_suffix(".tokens.npy"), cache.with_suffix(".labels.npy")
    if not (tokens_file.exists() and labels_file.exists()):
        _build_release_cache(task, root, tokens_file, labels_file)
    # Copy-on-write mapping: torch wants a writable array, and nothing is ever written back.
    tokens = torch.from_numpy(np.load(tokens_file, mmap_mode="c"))
    labels = torch.from_numpy(np.load(labels_file))
    n = len(labels)
    val = test = int(0.1 * n)
    return _splits_from_tokens(tokens, labels, (n - val - test, val, test))


def _build_release_cache(task: Task, root: Path, tokens_file: Path, labels_file: Path) -> None:
    resolution = task.extras["resolution"]
    entries = []
    for _, _, label, image, problem in _read_metadata(root):
        if problem is not None:
            raise UserError(f"{problem}; re-extract it with `{_prepare_command(task)}`")
        entries.append((image, label))
    order = torch.randperm(len(entries), generator=torch.Generator().manual_seed(SPLIT_SEED)).numpy()
    tokens_file.parent.mkdir(parents=True, exist_ok=True)
    partial = tokens_file.with_name(tokens_file.name + f".partial{os.getpid()}")
    tokens = np.lib.format.open_memmap(partial, mode="w+", dtype=np.int16, shape=(len(entries), resolution ** 2))
    labels = np.empty(len(entries), dtype=np.int64)
    try:
        for row, index in enumerate(order):
            image, labels[row] = entries[index]
            try:
                tokens[row] = _decode(image, resolution).reshape(-1).astype(np.int16) + TOKEN_OFFSET
            except ValueError as e:
                raise UserError(f"{e}; re-extract it with `{_prepare_command(task)}`") from None
        tokens.flush()
        del tokens
        labels_partial = labels_file.with_name(labels_file.name + f".partial{os.getpid()}.npy")
        np.save(labels_partial, labels)
        os.replace(labels_partial, labels_file)
        os.replace(partial, tokens_file)
    finally:
        partial.unlink(missing_ok=True)


def _release_task(name: str, resolution: int, description: str) -> Task:
    hint = (f"download lra_release.gz (https://storage.googleapis.com/long-range-arena/lra_release.gz) and run "
            f"`sptune data prepare {name} --from lra_release.gz`, which unpacks "
            f"pathfinder{resolution}/{LRA_DIFFICULTY} into <data root>/lra_release/pathfinder{resolution}")
    return Task(
        name=name, seq_len=resolution ** 2, input_kind="tokens", num_classes=2, metric="accuracy",
        mask_ratio=0.5, pretrain_loss="ce", loader=load_release, vocab_size=TOKEN_OFFSET + 256,
        data_subdir=f"lra_release/pathfinder{resolution}", data_hint=hint, description=description,
        extras={"resolution": resolution}, verifier=verify_release, preparer=prepare_release,
    )


TASKS: list[Task] = [
    Task(
        name="pathfinder-mini", seq_len=32 * 32, input_kind="tokens", num_classes=2, metric="accuracy",
        mask_ratio=0.5, pretrain_loss="ce", loader=load_generated, vocab_size=TOKEN_OFFSET + 256,
        description="Generated Pathfinder, 32x32, LRA hard settings (contour length 14); no download",
        extras={"resolution": 32, "contour_length": 14, "seed": 0, "num_train": 4000, "num_val": 500, "num_test": 500},
    ),
    _release_task("pathfinder", 32, "LRA Pathfinder 32x32 (curv_contour_length_14), 1024 pixel tokens"),
    _release_task("pathx", 128, "LRA Path-X 128x128 (curv_contour_length_14), 16384 pixel tokens"),
    _release_task("pathx-256", 256, "Path-256 256x256 (curv_contour_length_14), 65536 pixel tokens"),
]
