"""Hub datasets to arrays: the three converters (IMDb bytes, CIFAR pixels, Speech Commands waveforms)
that turn a task's DatasetDict into the memory-mapped array cache, and the loader that runs them."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np

from sptune.errors import UserError
from sptune.tasks import cache
from sptune.tasks.base import Split, Task
from sptune.tasks.hub import columns_of, how_to_place, open_dataset, payload, row_values, split_of
from sptune.tasks.lra import encode_bytes

# S4's 35 Speech Commands classes in S4's label order (src/dataloaders/datasets/sc.py ALL_CLASSES);
# the label of a clip is the index of its word here, whatever order a source's ClassLabel uses.
SC_CLASSES = (
    "bed", "cat", "down", "five", "forward", "go", "house", "left", "marvin", "no", "on", "right",
    "sheila", "tree", "up", "visual", "yes", "backward", "bird", "dog", "eight", "follow", "four",
    "happy", "learn", "nine", "off", "one", "seven", "six", "stop", "three", "two", "wow", "zero",
)
SC_RATE = 16000

# Pixel normalisation of S4's CIFAR loaders: grayscale (LRA Image) and per-channel RGB (sCIFAR).
GRAY_MEAN, GRAY_STD = 122.6, 61.0  # in 0..255 units
RGB_MEAN = np.array([0.4914, 0.4822, 0.4465]) * 255.0
RGB_STD = np.array([0.247, 0.243, 0.261]) * 255.0


# --- text -------------------------------------------------------------------------------------


def _text_arrays(task: Task, dd, writer: cache.ArrayWriter) -> None:
    """IMDb as UTF-8 bytes truncated to seq_len; 10 % of train held out as val (fixed seed)."""
    train, test = split_of(task, dd, "train"), split_of(task, dd, "test")
    keep, held = cache.holdout(len(train), task.extras["val_fraction"], task.extras["split_seed"])
    for split, ds in (("train", train.select(keep)), ("val", train.select(held)), ("test", test)):
        inputs = writer.create(f"{split}_inputs", (len(ds), task.seq_len), np.int64)
        lengths = np.zeros(len(ds), dtype=np.int64)
        targets = np.zeros(len(ds), dtype=np.int64)
        for i, (text, label) in enumerate(row_values(ds, columns_of(task, ds))):
            ids = encode_bytes(text.encode("utf-8"), task.seq_len)
            inputs[i, : len(ids)] = ids
            lengths[i], targets[i] = len(ids), label
        _check_labels(task, split, targets)
        writer.save(f"{split}_lengths", lengths)
        writer.save(f"{split}_targets", targets)


def _check_labels(task: Task, split: str, targets: np.ndarray) -> None:
    if targets.size and not (targets.min() >= 0 and targets.max() < task.num_classes):
        raise UserError(f"{task.name}: {split} labels outside 0..{task.num_classes - 1}; {how_to_place(task)}")


# --- image / scifar ---------------------------------------------------------------------------


def _pixels(task: Task, ds) -> tuple[np.ndarray, np.ndarray]:
    """(N, 32, 32, 3) uint8 RGB images and (N,) labels of a CIFAR split."""
    from PIL import Image

    images = np.zeros((len(ds), 32, 32, 3), dtype=np.uint8)
    labels = np.zeros(len(ds), dtype=np.int64)
    for i, (img, label) in enumerate(row_values(ds, columns_of(task, ds))):
        with Image.open(io.BytesIO(payload(img, "CIFAR image"))) as im:
            rgb = np.asarray(im.convert("RGB"))
        if rgb.shape != (32, 32, 3):
            raise UserError(f"{task.name}: image {i} is {rgb.shape[1]}x{rgb.shape[0]}, not 32x32; {how_to_place(task)}")
        images[i], labels[i] = rgb, label
    return images, labels


def _to_sequence(task: Task, images: np.ndarray) -> np.ndarray:
    """Row-major pixel sequences (N, 1024, C), normalised as S4 does."""
    n = images.shape[0]
    if task.channels == 1:
        # ITU-R 601-2 luma in Pillow's integer arithmetic, so values equal Image.convert("L").
        r, g, b = (images[..., c].astype(np.uint32) for c in range(3))
        gray = ((r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16).astype(np.float32)
        return ((gray - GRAY_MEAN) / GRAY_STD).reshape(n, 1024, 1).astype(np.float32)
    return ((images.reshape(n, 1024, 3) - RGB_MEAN) / RGB_STD).astype(np.float32)


def _image_arrays(task: Task, dd, writer: cache.ArrayWriter) -> None:
    train_images, train_labels = _pixels(task, split_of(task, dd, "train"))
    keep, held = cache.holdout(len(train_labels), task.extras["val_fraction"], task.extras["split_seed"])
    test_images, test_labels = _pixels(task, split_of(task, dd, "test"))
    parts = {"train": (train_images[keep], train_labels[keep]), "val": (train_images[held], train_labels[held]),
             "test": (test_images, test_labels)}
    for split, (images, labels) in parts.items():
        _check_labels(task, split, labels)
        writer.save(f"{split}_inputs", _to_sequence(task, images))
        writer.save(f"{split}_targets", labels)
        writer.save(f"{split}_lengths", np.full(len(labels), task.seq_len, dtype=np.int64))


# --- speech commands --------------------------------------------------------------------------


def read_wav(data: bytes, name: str) -> np.ndarray:
    """16-bit mono 16 kHz PCM as float32 in [-1, 1) (S4 divides by 2**15 the same way)."""
    try:
        with wave.open(io.BytesIO(data)) as w:
            if (w.getnchannels(), w.getsampwidth(), w.getframerate()) != (1, 2, SC_RATE):
                raise UserError(f"{name}: expected 16-bit mono {SC_RATE} Hz PCM, got {w.getnchannels()} channel(s), "
                                f"{8 * w.getsampwidth()} bit, {w.getframerate()} Hz")
            frames = w.readframes(w.getnframes())
    except (wave.Error, EOFError) as err:
        raise UserError(f"{name}: not a readable wav file ({err}); re-prepare speech-commands") from None
    return np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0


def _speech_split(task: Task, ds, split: str, writer: cache.ArrayWriter) -> np.memmap:
    """Write one split's padded waveforms; clips whose word is not one of the 35 (e.g. _silence_)
    are dropped, as in S4's 35-class task."""
    audio_col, label_col = columns_of(task, ds)
    names = getattr(ds.features[label_col], "names", None)
    if names is None:
        raise UserError(f"{task.name}: the '{label_col}' column is not a ClassLabel with word names; {how_to_place(task)}")
    word_index = {word: i for i, word in enumerate(SC_CLASSES)}
    rows = [i for i, label in enumerate(ds[label_col]) if names[label] in word_index]
    ds = ds.select(rows)
    inputs = writer.create(f"{split}_inputs", (len(ds), task.seq_len, 1), np.float32)
    targets = np.zeros(len(ds), dtype=np.int64)
    for i, (audio, label) in enumerate(row_values(ds, (audio_col, label_col), batch_size=256)):
        clip = read_wav(payload(audio, "clip"), audio.get("path") or f"{split} clip {i}")[: task.seq_len]
        inputs[i, : len(clip), 0] = clip  # a few clips are shorter than 1 s: zero-padded, as in S4
        targets[i] = word_index[names[label]]
    writer.save(f"{split}_targets", targets)
    writer.save(f"{split}_lengths", np.full(len(ds), task.seq_len, dtype=np.int64))
    return inputs


def _speech_arrays(task: Task, dd, writer: cache.ArrayWriter) -> None:
    """Raw waveforms (N, 16000, 1), standardised with the train split's mean and std (S4)."""
    splits = {"train": "train", "val": "validation", "test": "test"}
    inputs = {ours: _speech_split(task, split_of(task, dd, theirs), ours, writer) for ours, theirs in splits.items()}
    train = inputs["train"]
    total, total_sq, count = 0.0, 0.0, train.size
    for start in range(0, len(train), 1024):  # in chunks: the train split is ~5 GB
        chunk = train[start:start + 1024].astype(np.float64)
        total, total_sq = total + chunk.sum(), total_sq + np.square(chunk).sum()
    mean = total / max(count, 1)
    std = np.sqrt(max(total_sq - count * mean * mean, 0.0) / max(count - 1, 1))
    for array in inputs.values():
        for start in range(0, len(array), 1024):
            array[start:start + 1024] = (array[start:start + 1024] - mean) / (std + 1e-5)
        array.flush()


CONVERTERS = {"imdb": _text_arrays, "cifar10": _image_arrays, "speech_commands": _speech_arrays}


def load_hub_task(task: Task, data_dir: Path, seed: int) -> dict[str, Split]:
    """The task's splits; the held-out val split depends on the task's split seed, not the run seed."""
    dd, sources, origin = open_dataset(task, data_dir)
    settings = {**task.extras, "seq_len": task.seq_len, "channels": task.channels, "origin": origin}
    arrays = cache.cached_arrays(task.name, sources, settings,
                                 lambda writer: CONVERTERS[task.data_subdir](task, dd, writer))
    return {split: cache.to_split(arrays, split) for split in ("train", "val", "test")}
