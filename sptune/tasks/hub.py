"""Tasks whose data comes from the Hugging Face Hub: text (IMDb), image / scifar (CIFAR-10) and
speech-commands (Speech Commands v0.02).

Where the data is looked for, in order:

1. A local copy: a `datasets` DatasetDict saved with `save_to_disk` at

       <data root>/imdb/             splits train, test;             columns text, label
       <data root>/cifar10/          splits train, test;             columns img, label
       <data root>/speech_commands/  splits train, validation, test; columns audio, label

   `sptune data prepare <task> --from <source>` writes it from the original release archive
   (aclImdb_v1.tar.gz, cifar-10-python.tar.gz, speech_commands_v0.02.tar.gz), from a directory
   saved with `save_to_disk`, from the Hub's parquet files, or with `--from hub` from the Hub.
2. The Hub through `datasets.load_dataset` and its cache (HF_HOME / HF_DATASETS_CACHE), honouring
   HF_HUB_OFFLINE. Without those flags `load_dataset` retries an unreachable Hub for ~25 s, so a
   3 s connection probe runs first and, when the Hub is unreachable, the call runs offline: it then
   succeeds from the cache or fails at once, and the failure says how to place the data locally.

Converted arrays are kept in the memory-mapped array cache (sptune/tasks/cache.py).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import socket
import tempfile
import threading
import urllib.parse
import wave
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

import numpy as np

from sptune.errors import UserError
from sptune.tasks import cache
from sptune.tasks.base import Split, Task
from sptune.tasks.lra import BYTE_VOCAB_SIZE, encode_bytes

PROBE_TIMEOUT_S = 3.0

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

LOCAL_SPLITS = {"imdb": ("train", "test"), "cifar10": ("train", "test"),
                "speech_commands": ("train", "validation", "test")}
COLUMNS = {"imdb": ("text", "label"), "cifar10": ("img", "label"), "speech_commands": ("audio", "label")}
RELEASES = {"imdb": "aclImdb_v1.tar.gz", "cifar10": "cifar-10-python.tar.gz",
            "speech_commands": "speech_commands_v0.02.tar.gz"}


def _how_to_place(task: Task) -> str:
    release = RELEASES[task.data_subdir]
    return (f"run `sptune data prepare {task.name} --from <{release} | save_to_disk dir | parquet dir>` "
            f"(or `--from hub` with network), or point HF_DATASETS_CACHE at a cache holding {task.extras['hub_id']}")


# --- reaching the Hub -------------------------------------------------------------------------


def hub_reachable(timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Can a TCP connection to the Hub (or the HTTPS proxy) open within `timeout` seconds?

    Runs in a daemon thread so a hanging DNS lookup, which the socket timeout does not cover,
    cannot stretch the wait either.
    """
    import datasets

    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    url = urllib.parse.urlsplit(proxy or datasets.config.HF_ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    done, reached = threading.Event(), threading.Event()

    def connect() -> None:
        try:
            socket.create_connection((url.hostname, port), timeout=timeout).close()
            reached.set()
        except OSError:
            pass
        done.set()

    threading.Thread(target=connect, daemon=True).start()
    done.wait(timeout)
    return reached.is_set()


@contextmanager
def _offline() -> Iterator[None]:
    """Run `datasets` / `huggingface_hub` in offline mode for the block.

    Both read HF_HUB_OFFLINE once at import, so the module attributes they consult are set here
    (and restored after) rather than the environment.
    """
    import datasets
    from huggingface_hub import constants

    saved = (datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE, constants.HF_HUB_OFFLINE)
    datasets.config.HF_HUB_OFFLINE = datasets.config.HF_DATASETS_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, datasets.config.HF_DATASETS_OFFLINE, constants.HF_HUB_OFFLINE = saved


def load_from_hub(task: Task):
    """The task's DatasetDict through `load_dataset` (cache first when offline); UserError if unavailable."""
    import datasets

    x = task.extras
    flagged = datasets.config.HF_HUB_OFFLINE
    offline = flagged or not hub_reachable()
    try:
        with _offline() if offline else nullcontext():
            return datasets.load_dataset(x["hub_id"], x.get("hub_config"), revision=x.get("hub_revision"))
    except (OSError, ValueError, RuntimeError) as err:  # ConnectionError, DatasetNotFoundError, ...
        where = ("offline mode (HF_HUB_OFFLINE) is on" if flagged else
                 "the Hub is unreachable" if offline else "the Hub download failed")
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(f"{task.name}: no local copy at {task.data_dir()} and {where}: {reason}; "
                        f"{_how_to_place(task)}") from None


def hf_cache_dir(task: Task) -> Path:
    """Where `load_dataset` keeps the task's prepared arrow files (whether or not it exists)."""
    import datasets

    return Path(datasets.config.HF_DATASETS_CACHE) / task.extras["hub_id"].replace("/", "___")


def _open(task: Task, data_dir: Path):
    """(DatasetDict, source paths for the cache key, a tag naming where it came from)."""
    import datasets

    if (data_dir / "dataset_dict.json").is_file():
        try:
            return datasets.load_from_disk(str(data_dir)), [data_dir], "local"
        except (OSError, ValueError, KeyError) as err:
            raise UserError(f"{task.name}: corrupt dataset at {data_dir} ({err}); {_how_to_place(task)}") from None
    if data_dir.exists():  # e.g. raw files copied there by hand: convert them rather than ignore them
        raise UserError(f"{task.name}: {data_dir} is not a `save_to_disk` DatasetDict (no dataset_dict.json); "
                        f"move it aside and run `sptune data prepare {task.name} --from <it>`")
    dd = load_from_hub(task)
    files = [Path(f["filename"]) for split in dd.values() for f in split.cache_files]
    return dd, files, "hub"


def _split(task: Task, dd, name: str):
    if name not in dd:
        raise UserError(f"{task.name}: the dataset has no '{name}' split (has {', '.join(dd)}); {_how_to_place(task)}")
    ds = dd[name]
    missing = [c for c in _columns(task, ds) if c not in ds.column_names]
    if missing:
        raise UserError(f"{task.name}: the '{name}' split lacks column(s) {', '.join(missing)}; {_how_to_place(task)}")
    return ds


def _columns(task: Task, ds) -> tuple[str, str]:
    """(input column, label column); the CIFAR image column is `img` on the Hub, `image` in some copies."""
    data_col, label_col = COLUMNS[task.data_subdir]
    if data_col == "img" and "img" not in ds.column_names and "image" in ds.column_names:
        data_col = "image"
    return data_col, label_col


def _rows(ds, columns: tuple[str, ...], batch_size: int = 1000) -> Iterator[tuple]:
    """Rows as plain Python values, read as raw arrow: images and audio come back undecoded
    ({"bytes", "path"}), so neither Pillow's decoder hooks nor torchcodec are involved."""
    for batch in ds.select_columns(list(columns)).with_format("arrow").iter(batch_size=batch_size):
        yield from zip(*(batch.column(c).to_pylist() for c in columns))


def _payload(value: dict, what: str) -> bytes:
    if value.get("bytes"):
        return value["bytes"]
    if value.get("path") and os.path.isfile(value["path"]):
        return Path(value["path"]).read_bytes()
    raise UserError(f"a {what} has neither bytes nor a readable path ({value.get('path')}); re-prepare the data")


# --- text -------------------------------------------------------------------------------------


def _text_arrays(task: Task, dd, writer: cache.ArrayWriter) -> None:
    """IMDb as UTF-8 bytes truncated to seq_len; 10 % of train held out as val (fixed seed)."""
    train, test = _split(task, dd, "train"), _split(task, dd, "test")
    keep, held = cache.holdout(len(train), task.extras["val_fraction"], task.extras["split_seed"])
    for split, ds in (("train", train.select(keep)), ("val", train.select(held)), ("test", test)):
        inputs = writer.create(f"{split}_inputs", (len(ds), task.seq_len), np.int64)
        lengths = np.zeros(len(ds), dtype=np.int64)
        targets = np.zeros(len(ds), dtype=np.int64)
        for i, (text, label) in enumerate(_rows(ds, _columns(task, ds))):
            ids = encode_bytes(text.encode("utf-8"), task.seq_len)
            inputs[i, : len(ids)] = ids
            lengths[i], targets[i] = len(ids), label
        _check_labels(task, split, targets)
        writer.save(f"{split}_lengths", lengths)
        writer.save(f"{split}_targets", targets)


def _check_labels(task: Task, split: str, targets: np.ndarray) -> None:
    if targets.size and not (targets.min() >= 0 and targets.max() < task.num_classes):
        raise UserError(f"{task.name}: {split} labels outside 0..{task.num_classes - 1}; {_how_to_place(task)}")


# --- image / scifar ---------------------------------------------------------------------------


def _pixels(task: Task, ds) -> tuple[np.ndarray, np.ndarray]:
    """(N, 32, 32, 3) uint8 RGB images and (N,) labels of a CIFAR split."""
    from PIL import Image

    images = np.zeros((len(ds), 32, 32, 3), dtype=np.uint8)
    labels = np.zeros(len(ds), dtype=np.int64)
    for i, (img, label) in enumerate(_rows(ds, _columns(task, ds))):
        with Image.open(io.BytesIO(_payload(img, "CIFAR image"))) as im:
            rgb = np.asarray(im.convert("RGB"))
        if rgb.shape != (32, 32, 3):
            raise UserError(f"{task.name}: image {i} is {rgb.shape[1]}x{rgb.shape[0]}, not 32x32; {_how_to_place(task)}")
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
    train_images, train_labels = _pixels(task, _split(task, dd, "train"))
    keep, held = cache.holdout(len(train_labels), task.extras["val_fraction"], task.extras["split_seed"])
    test_images, test_labels = _pixels(task, _split(task, dd, "test"))
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
    audio_col, label_col = _columns(task, ds)
    names = getattr(ds.features[label_col], "names", None)
    if names is None:
        raise UserError(f"{task.name}: the '{label_col}' column is not a ClassLabel with word names; {_how_to_place(task)}")
    word_index = {word: i for i, word in enumerate(SC_CLASSES)}
    rows = [i for i, label in enumerate(ds[label_col]) if names[label] in word_index]
    ds = ds.select(rows)
    inputs = writer.create(f"{split}_inputs", (len(ds), task.seq_len, 1), np.float32)
    targets = np.zeros(len(ds), dtype=np.int64)
    for i, (audio, label) in enumerate(_rows(ds, (audio_col, label_col), batch_size=256)):
        clip = read_wav(_payload(audio, "clip"), audio.get("path") or f"{split} clip {i}")[: task.seq_len]
        inputs[i, : len(clip), 0] = clip  # a few clips are shorter than 1 s: zero-padded, as in S4
        targets[i] = word_index[names[label]]
    writer.save(f"{split}_targets", targets)
    writer.save(f"{split}_lengths", np.full(len(ds), task.seq_len, dtype=np.int64))
    return inputs


def _speech_arrays(task: Task, dd, writer: cache.ArrayWriter) -> None:
    """Raw waveforms (N, 16000, 1), standardised with the train split's mean and std (S4)."""
    splits = {"train": "train", "val": "validation", "test": "test"}
    inputs = {ours: _speech_split(task, _split(task, dd, theirs), ours, writer) for ours, theirs in splits.items()}
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
    dd, sources, origin = _open(task, data_dir)
    settings = {**task.extras, "seq_len": task.seq_len, "channels": task.channels, "origin": origin}
    arrays = cache.cached_arrays(task.name, sources, settings,
                                 lambda writer: CONVERTERS[task.data_subdir](task, dd, writer))
    return {split: cache.to_split(arrays, split) for split in ("train", "val", "test")}


# --- verify -----------------------------------------------------------------------------------


def _arrow_problem(path: Path) -> str:
    """'' if the arrow stream file reads to its end, else why not."""
    import pyarrow as pa

    try:
        with pa.memory_map(str(path)) as source:
            pa.ipc.open_stream(source).read_all()
    except (pa.ArrowException, OSError, ValueError) as err:
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return ""


def verify_hub_task(task: Task, data_dir: Path) -> list[str]:
    """The local copy's layout and every arrow file in it; without a local copy, the Hub cache's
    arrow files (a task whose data is in neither place is reported missing)."""
    fix = _how_to_place(task)
    if not data_dir.exists():
        cached = sorted(hf_cache_dir(task).rglob("*.arrow")) if hf_cache_dir(task).is_dir() else []
        if not cached:
            return [f"missing {data_dir} (and {task.extras['hub_id']} is not in the Hugging Face cache); {fix}"]
        return [f"corrupt file {p} in the Hugging Face cache ({why}); delete it and {fix}"
                for p in cached if (why := _arrow_problem(p))]
    try:
        listed = json.loads((data_dir / "dataset_dict.json").read_text())["splits"]
    except (OSError, ValueError, KeyError):
        return [f"{data_dir} is not a `save_to_disk` DatasetDict (missing or corrupt dataset_dict.json); {fix}"]
    problems = [f"{data_dir} has no '{split}' split; {fix}" for split in LOCAL_SPLITS[task.data_subdir]
                if split not in listed]
    for split in listed:
        try:
            state = json.loads((data_dir / split / "state.json").read_text())
            files = [data_dir / split / f["filename"] for f in state["_data_files"]]
        except (OSError, ValueError, KeyError):
            problems.append(f"missing or corrupt {data_dir / split / 'state.json'}; {fix}")
            continue
        for path in files:
            if not path.is_file():
                problems.append(f"missing {path}; {fix}")
            elif why := _arrow_problem(path):
                problems.append(f"truncated or corrupt file {path} ({why}); {fix}")
    return problems


# --- prepare ----------------------------------------------------------------------------------


def _from_parquet(root: Path, cache_dir: Path):
    """A DatasetDict of the parquet files below `root`, split by their names: the Hub's layouts
    `<config>/train-00000-of-00001.parquet` and `<config>/train/0000.parquet` both work."""
    import datasets

    files: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.parquet")):
        split = next((part for part in (path.parent.name, path.name.split("-")[0].split(".")[0])
                      if part in ("train", "validation", "test")), None)
        if split:
            files.setdefault(split, []).append(str(path))
    if not files:
        return None
    return datasets.load_dataset("parquet", data_files=files, cache_dir=str(cache_dir))


def _imdb_release(root: Path):
    """aclImdb/{train,test}/{neg,pos}/*.txt (label 0 = neg, 1 = pos, as on the Hub)."""
    import datasets

    base = next((p.parent.parent for p in sorted(root.rglob("train/pos")) if p.is_dir()), None)
    if base is None:
        return None
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["neg", "pos"])})
    splits = {}
    for split in ("train", "test"):
        texts, labels = [], []
        for label, polarity in enumerate(("neg", "pos")):
            for path in sorted((base / split / polarity).glob("*.txt")):
                texts.append(path.read_text(encoding="utf-8"))
                labels.append(label)
        splits[split] = datasets.Dataset.from_dict({"text": texts, "label": labels}, features=features)
    return datasets.DatasetDict(splits)


def _cifar_release(root: Path):
    """cifar-10-batches-py/{data_batch_1..5,test_batch}: pickled (N, 3072) channel-major rows."""
    import datasets
    from PIL import Image

    first = cache.find_file(root, "data_batch_1")
    if first is None:
        return None
    features = datasets.Features({"img": datasets.Image(),
                                  "label": datasets.ClassLabel(names=["airplane", "automobile", "bird", "cat", "deer",
                                                                      "dog", "frog", "horse", "ship", "truck"])})
    splits = {}
    for split, names in (("train", [f"data_batch_{i}" for i in range(1, 6)]), ("test", ["test_batch"])):
        images, labels = [], []
        for name in names:
            try:
                with open(first.parent / name, "rb") as f:
                    batch = pickle.load(f, encoding="bytes")
            except (OSError, pickle.UnpicklingError, EOFError) as err:
                raise UserError(f"cannot read {first.parent / name} ({err}); use an intact cifar-10-python.tar.gz") from None
            for row in batch[b"data"]:
                buffer = io.BytesIO()
                Image.fromarray(row.reshape(3, 32, 32).transpose(1, 2, 0)).save(buffer, format="PNG")
                images.append({"bytes": buffer.getvalue(), "path": None})
            labels.extend(batch[b"labels"])
        splits[split] = datasets.Dataset.from_dict({"img": images, "label": labels}, features=features)
    return datasets.DatasetDict(splits)


def _speech_release(root: Path, cache_dir: Path):
    """The extracted speech_commands_v0.02 archive: a folder per word, split by the official
    validation_list.txt / testing_list.txt (the split S4 uses; the rest is train)."""
    import datasets

    listing = cache.find_file(root, "testing_list.txt")
    if listing is None:
        return None
    base = listing.parent
    lists = {}
    for split, name in (("validation", "validation_list.txt"), ("test", "testing_list.txt")):
        path = base / name
        if not path.is_file():
            raise UserError(f"{path} is missing; use an intact speech_commands_v0.02.tar.gz")
        lists[split] = {line.strip() for line in path.read_text().splitlines() if line.strip()}
    assigned: dict[str, list[tuple[str, int]]] = {"train": [], "validation": [], "test": []}
    for label, word in enumerate(SC_CLASSES):
        for path in sorted((base / word).glob("*.wav")):
            rel = f"{word}/{path.name}"
            split = next((s for s in ("validation", "test") if rel in lists[s]), "train")
            assigned[split].append((rel, label))
    if not assigned["train"]:
        raise UserError(f"no <word>/*.wav files next to {listing}; use an intact speech_commands_v0.02.tar.gz")
    plain = datasets.Features({"audio": {"bytes": datasets.Value("binary"), "path": datasets.Value("string")},
                               "label": datasets.ClassLabel(names=list(SC_CLASSES))})

    def clips(items):
        for rel, label in items:
            yield {"audio": {"bytes": (base / rel).read_bytes(), "path": rel}, "label": label}

    splits = {}
    for split, items in assigned.items():
        ds = datasets.Dataset.from_generator(clips, gen_kwargs={"items": items}, features=plain,
                                             cache_dir=str(cache_dir))
        # A cast rather than writing through Audio(): encoding audio in `datasets` needs torchcodec.
        splits[split] = ds.cast_column("audio", datasets.Audio(sampling_rate=SC_RATE))
    return datasets.DatasetDict(splits)


def prepare_hub_task(task: Task, source: Path, data_dir: Path) -> None:
    """Write the task's local copy (a `save_to_disk` DatasetDict) from `source`."""
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    # Scratch space (unpacked archives, `datasets` caches) next to the data: same file system,
    # and nothing left in the user's Hugging Face cache.
    scratch = Path(tempfile.mkdtemp(dir=data_dir.parent, prefix=".prepare-"))
    try:
        with _source_dataset(task, source, scratch) as dd:
            with cache.staged_dir(data_dir) as tmp:
                _keep(task, dd).save_to_disk(str(tmp))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@contextmanager
def _source_dataset(task: Task, source: Path, scratch: Path):
    if str(source) == "hub":
        yield load_from_hub(task)
        return
    with cache.unpacked(source, scratch) as root:  # kept open while saving: rows may point at its files
        dd = _read_source(task, root, scratch)
        if dd is None:
            raise UserError(f"--from {source}: found no {RELEASES[task.data_subdir]} contents, save_to_disk "
                            f"directory or parquet files; {_how_to_place(task)}")
        yield dd


def _read_source(task: Task, root: Path, scratch: Path):
    import datasets

    saved = cache.find_file(root, "dataset_dict.json")
    if saved is not None:
        return datasets.load_from_disk(str(saved.parent))
    release = {"imdb": lambda: _imdb_release(root), "cifar10": lambda: _cifar_release(root),
               "speech_commands": lambda: _speech_release(root, scratch)}[task.data_subdir]()
    return release if release is not None else _from_parquet(root, scratch)


def _keep(task: Task, dd):
    """Only the splits and columns the task reads (drops e.g. IMDb's 50k `unsupervised` reviews)."""
    import datasets

    kept = {}
    for split in LOCAL_SPLITS[task.data_subdir]:
        ds = _split(task, dd, split)
        kept[split] = ds.select_columns(list(_columns(task, ds)))
    return datasets.DatasetDict(kept)


# --- tasks ------------------------------------------------------------------------------------


def _hint(name: str, subdir: str, hub_id: str) -> str:
    return (f"`sptune data prepare {name} --from {RELEASES[subdir]}` (or a save_to_disk dir, parquet files, "
            f"or `--from hub`) writes <data root>/{subdir}/; without it the loader uses {hub_id} from the "
            f"Hugging Face cache / Hub")


TEXT = Task(
    name="text",
    seq_len=4096,
    input_kind="tokens",
    num_classes=2,
    metric="accuracy",
    mask_ratio=0.15,  # paper §2
    pretrain_loss="ce",
    loader=load_hub_task,
    vocab_size=BYTE_VOCAB_SIZE,
    data_subdir="imdb",
    data_hint=_hint("text", "imdb", "stanfordnlp/imdb"),
    description="LRA Text: IMDb sentiment at byte level, truncated to 4096 bytes; val = 10% of train.",
    extras={"hub_id": "stanfordnlp/imdb", "val_fraction": 0.1, "split_seed": 0},
    verifier=verify_hub_task,
    preparer=prepare_hub_task,
)

IMAGE = Task(
    name="image",
    seq_len=1024,
    input_kind="continuous",
    num_classes=10,
    metric="accuracy",
    mask_ratio=0.5,  # paper §2
    pretrain_loss="l1",
    loader=load_hub_task,
    channels=1,
    data_subdir="cifar10",
    data_hint=_hint("image", "cifar10", "uoft-cs/cifar10"),
    description="LRA Image: grayscale CIFAR-10 as 1024 normalised pixels; val = 10% of train.",
    extras={"hub_id": "uoft-cs/cifar10", "val_fraction": 0.1, "split_seed": 0},
    verifier=verify_hub_task,
    preparer=prepare_hub_task,
)

SCIFAR = Task(
    name="scifar",
    seq_len=1024,
    input_kind="continuous",
    num_classes=10,
    metric="accuracy",
    mask_ratio=0.5,  # Appendix C.3
    pretrain_loss="l1",
    loader=load_hub_task,
    channels=3,
    data_subdir="cifar10",
    data_hint=_hint("scifar", "cifar10", "uoft-cs/cifar10"),
    description="sCIFAR: CIFAR-10 as 1024 normalised RGB pixels; val = 10% of train.",
    extras={"hub_id": "uoft-cs/cifar10", "val_fraction": 0.1, "split_seed": 0},
    verifier=verify_hub_task,
    preparer=prepare_hub_task,
)

SPEECH_COMMANDS = Task(
    name="speech-commands",
    seq_len=SC_RATE,
    input_kind="continuous",
    num_classes=len(SC_CLASSES),
    metric="accuracy",
    mask_ratio=0.25,  # Appendix C.3
    pretrain_loss="l1",
    loader=load_hub_task,
    channels=1,
    data_subdir="speech_commands",
    data_hint=_hint("speech-commands", "speech_commands", "google/speech_commands v0.02"),
    description="Speech Commands v0.02, 35 words, raw 16 kHz waveforms (16000 x 1). The release archive "
                "gives S4's split (validation_list / testing_list); the Hub copy's test split is the "
                "separate v0.02 test-set archive instead.",
    # The Hub repository is a loading script, which `datasets` >= 4 no longer runs; its parquet
    # conversion branch holds the same splits.
    extras={"hub_id": "google/speech_commands", "hub_config": "v0.02", "hub_revision": "refs/convert/parquet"},
    verifier=verify_hub_task,
    preparer=prepare_hub_task,
)

TASKS: list[Task] = [TEXT, IMAGE, SCIFAR, SPEECH_COMMANDS]
