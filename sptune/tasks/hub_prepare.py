"""`sptune data prepare` for the Hub tasks: write a task's local copy (a `save_to_disk` DatasetDict)
from the original release archive, a `save_to_disk` directory, the Hub's parquet files or the Hub."""

from __future__ import annotations

import io
import pickle
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from sptune import atomic
from sptune.errors import UserError
from sptune.tasks import cache
from sptune.tasks.base import Task
from sptune.tasks.hub import LOCAL_SPLITS, RELEASES, columns_of, how_to_place, load_from_hub, split_of
from sptune.tasks.hub_convert import SC_CLASSES, SC_RATE


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
            with atomic.replacing_dir(data_dir) as tmp:
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
                            f"directory or parquet files; {how_to_place(task)}")
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
        ds = split_of(task, dd, split)
        kept[split] = ds.select_columns(list(columns_of(task, ds)))
    return datasets.DatasetDict(kept)
