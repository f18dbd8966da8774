"""The LRA Pathfinder release (`lra_release.gz`): read, verify and prepare `pathfinder`, `pathx` and
`pathx-256`, laid out as `<data root>/lra_release/pathfinder{32,128,256}/curv_contour_length_14/{imgs,metadata}`.

The generator of the embedded tasks (and the settings both share) is sptune/tasks/pathfinder.py.
"""

from __future__ import annotations

import io
import itertools
import re
import shutil
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch
from PIL import Image

from sptune import atomic
from sptune.errors import UserError
from sptune.tasks import cache
from sptune.tasks.base import Split, Task
from sptune.tasks.pathfinder import TOKEN_OFFSET

LRA_DIFFICULTY = "curv_contour_length_14"  # the LRA "hard" split, the one LRA reports

def _metadata_files(root: Path) -> list[Path]:
    # Numeric order (0, 1, 2, ..., 10), the order S4 uses, which fixes the example order.
    files = [p for p in (root / "metadata").glob("*.npy") if p.is_file()]
    return sorted(files, key=lambda p: (0, int(p.stem), "") if p.stem.isdigit() else (1, 0, p.stem))


def _metadata_rows(meta: Path) -> list[list[str]]:
    """The fields of each row. The release's .npy files are plain text lines; the original
    generator's np.save of a string array is read too."""
    data = meta.read_bytes()
    if data.startswith(b"\x93NUMPY"):
        return [[str(field) for field in row] for row in np.load(io.BytesIO(data), allow_pickle=False)]
    return [line.split() for line in data.decode().splitlines()]


def _read_metadata(root: Path) -> Iterator[tuple[int, Path, str | None]]:
    """(label, image path, problem or None) for every image the metadata lists."""
    for meta in _metadata_files(root):
        try:
            rows = _metadata_rows(meta)
        except (ValueError, UnicodeDecodeError) as e:
            yield -1, meta, f"corrupt {meta} ({e})"
            continue
        for number, fields in enumerate(rows, start=1):
            if not fields:
                continue
            if len(fields) < 4 or fields[3] not in ("0", "1"):
                yield -1, meta, f"{meta} line {number}: expected '<imgs/b> <sample_i.png> <i> <label 0/1> ...'"
                continue
            yield int(fields[3]), root / fields[0] / fields[1], None


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


def _fix(task: Task) -> str:
    return f"re-extract it with `sptune data prepare {task.name} --from lra_release.gz`"


def verify_release(task: Task, data_dir: Path) -> list[str]:
    """Check the release layout: metadata present, every listed PNG there and decodable at size."""
    root = data_dir / LRA_DIFFICULTY
    if not (root / "metadata").is_dir():
        return [f"missing {root / 'metadata'}; {task.data_hint}"]
    if not _metadata_files(root):
        return [f"{root / 'metadata'} has no <batch>.npy files; {_fix(task)}"]
    problems, shown, count = [], 20, 0
    for _, image, problem in _read_metadata(root):
        if problem is None:
            try:
                _decode(image, task.extras["resolution"])
            except ValueError as e:
                problem = f"{e}; {_fix(task)}"
        if problem is not None:
            count += 1
            if len(problems) < shown:
                problems.append(problem)
    if count > shown:
        problems.append(f"... and {count - shown} more problems under {root}; {_fix(task)}")
    return problems


def _names_other_resolution(parts: Sequence[str], resolution: int) -> bool:
    """Whether a path goes through pathfinder<N> for another N (the full release has them all)."""
    return any((m := re.fullmatch(r"pathfinder(\d+)", part)) and int(m.group(1)) != resolution for part in parts)


def _wanted(name: str, resolution: int) -> bool:
    """Whether an archive member lies below curv_contour_length_14 of this resolution."""
    parts = Path(name).parts
    if LRA_DIFFICULTY not in parts[:-1]:
        return False
    return not _names_other_resolution(parts[: parts.index(LRA_DIFFICULTY)], resolution)


def prepare_release(task: Task, source: Path, data_dir: Path) -> None:
    """Put curv_contour_length_14 of this resolution from `source` into data_dir.

    `source` is the LRA release (lra_release.gz, any tar or zip) or a directory holding it
    unpacked: lra_release/, pathfinder<N>/ or curv_contour_length_14/ itself. Only this
    resolution is unpacked, and the result replaces data_dir's copy atomically.
    """
    resolution = task.extras["resolution"]
    with cache.unpacked(source, data_dir.parent, wanted=lambda name: _wanted(name, resolution)) as root:
        # The usual layouts first; walking a whole unpacked release (~1M files) is the last resort.
        usual = [root / "lra_release" / f"pathfinder{resolution}" / LRA_DIFFICULTY,
                 root / f"pathfinder{resolution}" / LRA_DIFFICULTY, root / LRA_DIFFICULTY, root]
        candidates = itertools.chain(usual, root.rglob(LRA_DIFFICULTY))
        found = next((c for c in candidates if c.name == LRA_DIFFICULTY and (c / "metadata").is_dir()
                      and not _names_other_resolution(c.resolve().parts, resolution)), None)
        if found is None:
            raise UserError(f"--from {source}: no pathfinder{resolution}/{LRA_DIFFICULTY}/metadata inside; pass "
                            f"lra_release.gz from https://github.com/google-research/long-range-arena or its "
                            f"unpacked directory")
        with atomic.replacing_dir(data_dir / LRA_DIFFICULTY) as staged:
            shutil.copytree(found, staged, dirs_exist_ok=True)


def load_release(task: Task, data_dir: Path, seed: int) -> dict[str, Split]:
    """Read the LRA release: every PNG is decoded once into the memory-mapped array cache.

    The split is S4's: torch.randperm(n) with seed 42, the first 80% train, then 10% val and
    10% test. It does not depend on `seed`, so all runs share one test set. Tokens are stored
    as int16 (ids <= 258; Path-X is 200k x 16384) and cast per batch. The cache entry is keyed
    on the metadata files, not on the 200k images.
    """
    resolution = task.extras["resolution"]
    root = data_dir / LRA_DIFFICULTY
    if not ((root / "metadata").is_dir() and _metadata_files(root)):
        raise UserError(f"{task.name}: no LRA Pathfinder metadata in {root}; {task.data_hint}")
    entries = []
    for label, image, problem in _read_metadata(root):
        if problem is not None:
            raise UserError(f"{problem}; {_fix(task)}")
        entries.append((image, label))
    n = len(entries)
    val = test = int(0.1 * n)
    sizes = (n - val - test, val, test)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(task.extras["split_seed"])).numpy()

    def build(writer: cache.ArrayWriter) -> None:
        first = 0
        for split, size in zip(("train", "val", "test"), sizes):
            inputs = writer.create(f"{split}_inputs", (size, resolution ** 2), np.int16)
            targets = np.empty(size, dtype=np.int64)
            for row, index in enumerate(order[first:first + size]):
                image, targets[row] = entries[index]
                try:
                    inputs[row] = _decode(image, resolution).reshape(-1).astype(np.int16) + TOKEN_OFFSET
                except ValueError as e:
                    raise UserError(f"{e}; {_fix(task)}") from None
            writer.save(f"{split}_targets", targets)
            writer.save(f"{split}_lengths", np.full(size, resolution ** 2, dtype=np.int64))
            first += size

    settings = {"resolution": resolution, "split_seed": task.extras["split_seed"]}
    arrays = cache.cached_arrays(task.name, [root / "metadata"], settings, build)
    return {split: cache.to_split(arrays, split) for split in ("train", "val", "test")}


def _release_task(name: str, resolution: int, description: str) -> Task:
    hint = (f"download lra_release.gz (https://storage.googleapis.com/long-range-arena/lra_release.gz) and run "
            f"`sptune data prepare {name} --from lra_release.gz`, which unpacks "
            f"pathfinder{resolution}/{LRA_DIFFICULTY} into <data root>/lra_release/pathfinder{resolution}")
    return Task(
        name=name, seq_len=resolution ** 2, input_kind="tokens", num_classes=2, metric="accuracy",
        mask_ratio=0.5, pretrain_loss="ce", loader=load_release, vocab_size=TOKEN_OFFSET + 256,
        data_subdir=f"lra_release/pathfinder{resolution}", data_hint=hint, description=description,
        extras={"resolution": resolution, "split_seed": 42}, verifier=verify_release, preparer=prepare_release,
    )


TASKS: list[Task] = [
    _release_task("pathfinder", 32, "LRA Pathfinder 32x32 (curv_contour_length_14), 1024 pixel tokens"),
    _release_task("pathx", 128, "LRA Path-X 128x128 (curv_contour_length_14), 16384 pixel tokens"),
    _release_task("pathx-256", 256, "Path-256 256x256 (curv_contour_length_14), 65536 pixel tokens"),
]
