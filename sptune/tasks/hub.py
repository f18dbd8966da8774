"""Where the Hugging Face Hub tasks (sptune/tasks/hub_tasks.py) find their data, and its checks.

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

Converting a dataset to arrays: sptune/tasks/hub_convert.py (kept in the memory-mapped array cache,
sptune/tasks/cache.py); writing the local copy: sptune/tasks/hub_prepare.py.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import urllib.parse
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Iterator

from sptune.errors import UserError
from sptune.tasks.base import Task

PROBE_TIMEOUT_S = 3.0

LOCAL_SPLITS = {"imdb": ("train", "test"), "cifar10": ("train", "test"),
                "speech_commands": ("train", "validation", "test")}
COLUMNS = {"imdb": ("text", "label"), "cifar10": ("img", "label"), "speech_commands": ("audio", "label")}
RELEASES = {"imdb": "aclImdb_v1.tar.gz", "cifar10": "cifar-10-python.tar.gz",
            "speech_commands": "speech_commands_v0.02.tar.gz"}


def how_to_place(task: Task) -> str:
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
                        f"{how_to_place(task)}") from None


def hf_cache_dir(task: Task) -> Path:
    """Where `load_dataset` keeps the task's prepared arrow files (whether or not it exists)."""
    import datasets

    return Path(datasets.config.HF_DATASETS_CACHE) / task.extras["hub_id"].replace("/", "___")


def open_dataset(task: Task, data_dir: Path):
    """(DatasetDict, source paths for the cache key, a tag naming where it came from)."""
    import datasets

    if (data_dir / "dataset_dict.json").is_file():
        try:
            return datasets.load_from_disk(str(data_dir)), [data_dir], "local"
        except (OSError, ValueError, KeyError) as err:
            raise UserError(f"{task.name}: corrupt dataset at {data_dir} ({err}); {how_to_place(task)}") from None
    if data_dir.exists():  # e.g. raw files copied there by hand: convert them rather than ignore them
        raise UserError(f"{task.name}: {data_dir} is not a `save_to_disk` DatasetDict (no dataset_dict.json); "
                        f"move it aside and run `sptune data prepare {task.name} --from <it>`")
    dd = load_from_hub(task)
    files = [Path(f["filename"]) for split in dd.values() for f in split.cache_files]
    return dd, files, "hub"


def split_of(task: Task, dd, name: str):
    if name not in dd:
        raise UserError(f"{task.name}: the dataset has no '{name}' split (has {', '.join(dd)}); {how_to_place(task)}")
    ds = dd[name]
    missing = [c for c in columns_of(task, ds) if c not in ds.column_names]
    if missing:
        raise UserError(f"{task.name}: the '{name}' split lacks column(s) {', '.join(missing)}; {how_to_place(task)}")
    return ds


def columns_of(task: Task, ds) -> tuple[str, str]:
    """(input column, label column); the CIFAR image column is `img` on the Hub, `image` in some copies."""
    data_col, label_col = COLUMNS[task.data_subdir]
    if data_col == "img" and "img" not in ds.column_names and "image" in ds.column_names:
        data_col = "image"
    return data_col, label_col


def row_values(ds, columns: tuple[str, ...], batch_size: int = 1000) -> Iterator[tuple]:
    """Rows as plain Python values, read as raw arrow: images and audio come back undecoded
    ({"bytes", "path"}), so neither Pillow's decoder hooks nor torchcodec are involved."""
    for batch in ds.select_columns(list(columns)).with_format("arrow").iter(batch_size=batch_size):
        yield from zip(*(batch.column(c).to_pylist() for c in columns))


def payload(value: dict, what: str) -> bytes:
    if value.get("bytes"):
        return value["bytes"]
    if value.get("path") and os.path.isfile(value["path"]):
        return Path(value["path"]).read_bytes()
    raise UserError(f"a {what} has neither bytes nor a readable path ({value.get('path')}); re-prepare the data")


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
    fix = how_to_place(task)
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
