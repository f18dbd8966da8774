"""Durable storage: a results folder mirrored to object storage (S3, GCS) so it outlives its cluster.

A study lives in a local folder on the head (shared with the workers over NFS: trials write their run
directories there), and `ray down` deletes the head's disk with it. With `--storage s3://bucket/prefix` the
driver mirrors the folder to `s3://bucket/prefix/<folder name>`: after every finished trial, at most every
PUSH_SECONDS while trials report, and once more when the driver ends (a finished study, Ctrl-C, a time
budget). `sptune resume s3://bucket/prefix/<name>` on a new cluster pulls the folder back to the path it had
(every record holds absolute paths, and `ray up cluster.yaml` recreates the same path) and continues: finished
trials are kept, unfinished ones continue from their last checkpoint.

Why a mirror and not Ray Tune's own `storage_path=s3://`: Tune would carry its experiment state and its
checkpoints, but a study's truth is sptune's own files (study.json, the Optuna journal, each trial's run
directory with last.pt, result.json, TensorBoard events), written by plain file I/O on every node; a mirror
carries all of them, one mechanism, without every writer learning a remote file system.

A mirror is consistent the way a killed driver's folder is: Tune's experiment state (the files directly
under tune/<run>/) is read first, until two reads agree (never half of a Tune snapshot), and uploaded last,
so the storage never holds a Tune state newer than the run directories it describes, the case a resume
already handles (sptune.tune.trials.trainable.adopt_orphan).
Each file is uploaded whole (written locally by rename, read once); files removed locally (Tune's rotated
checkpoints) are removed from the storage. Filesystems come from pyarrow (`pyarrow.fs.FileSystem.from_uri`);
S3 reads the usual AWS settings (credentials, AWS_ENDPOINT_URL for an S3-compatible server).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from sptune import atomic, files
from sptune.errors import UserError

log = logging.getLogger("sptune.tune")

STORAGE = files.STORAGE  # {"uri": <this folder's location>, "local": <the path it had>}: mirrored too
MANIFEST = ".storage-manifest.json"  # what the storage holds, by relative path: [size, mtime_ns]; local only
LOCAL_ONLY = {MANIFEST, files.DRIVER}  # the driver record names processes of this machine
PUSH_SECONDS = float(os.environ.get("SPTUNE_MIRROR_SECONDS", 30))  # between pushes while trials report
SCHEMES = ("s3://", "gs://", "gcs://")


def is_remote(location: str | Path) -> bool:
    return str(location).startswith(SCHEMES)


def filesystem(uri: str) -> tuple[Any, str]:
    """(pyarrow filesystem, path inside it) of a storage URI; a one-line UserError when it cannot be opened."""
    import pyarrow.fs

    if not is_remote(uri):
        raise UserError(f"--storage {uri!r} is not an object-storage URI; use s3://bucket/prefix or gs://bucket/prefix")
    try:
        fs, path = pyarrow.fs.FileSystem.from_uri(uri.rstrip("/"))
        bucket = fs.get_file_info(path.split("/")[0])
    except Exception as exc:  # noqa: BLE001 - pyarrow's own message names the problem
        raise UserError(f"cannot open storage {uri} ({type(exc).__name__}: {str(exc).splitlines()[0]}); "
                        f"check the bucket and the AWS/GCS credentials") from None
    if bucket.type == pyarrow.fs.FileType.NotFound:
        raise UserError(f"cannot open storage {uri}: bucket {bucket.path!r} does not exist; create it or pass "
                        f"another --storage")
    return fs, path


def attach(results_dir: Path, prefix: str) -> str:
    """Record that `results_dir` is mirrored under `prefix` and push it once; returns its URI."""
    uri = f"{prefix.rstrip('/')}/{results_dir.name}"
    fs, path = filesystem(uri)
    if _listing(fs, path):
        raise UserError(f"{uri} already holds files; resume it with `sptune resume {uri}` or pass another --dir")
    atomic.write_json(results_dir / STORAGE, {"uri": uri, "local": str(results_dir.resolve())})
    Mirror(results_dir, uri).push()
    return uri


def attach_or_pull(results_dir: Path, prefix: str) -> str:
    """A results folder a command reruns with --storage: attached on the first run, pulled back from the storage
    when the folder is gone (a lost head), kept as it is when it is already mirrored there. Returns its URI."""
    results_dir = Path(results_dir).resolve()
    mirror = mirror_of(results_dir)
    if mirror is not None:
        return mirror.uri
    uri = f"{prefix.rstrip('/')}/{results_dir.name}"
    fs, path = filesystem(uri)
    if _listing(fs, path) and not (results_dir.exists() and any(results_dir.iterdir())):
        pull(uri, results_dir)
        return uri
    results_dir.mkdir(parents=True, exist_ok=True)
    return attach(results_dir, prefix)


def mirror_of(results_dir: Path) -> Mirror | None:
    """The folder's mirror when it has durable storage, else None."""
    record = results_dir / STORAGE
    return Mirror(results_dir, files.read_json(record)["uri"]) if record.is_file() else None


def pull(uri: str, local: str | Path | None = None) -> Path:
    """Bring a mirrored folder back: to `local`, else to the path it had. The folder must not exist (or be
    empty): a pull never mixes with another folder's files."""
    fs, path = filesystem(uri)
    listing = _listing(fs, path)
    if STORAGE not in listing:
        raise UserError(f"{uri} holds no sptune results folder (no {STORAGE}); pass the URI a study printed")
    record = _read_json(fs, f"{path}/{STORAGE}")
    target = Path(local or record["local"]).resolve()
    if target.exists() and any(target.iterdir()):
        raise UserError(f"{target} already exists; resume it with `sptune resume {target}`, or move it away to "
                        f"pull {uri} again")
    for relative in sorted(listing):
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        _copy(fs, f"{path}/{relative}", _local_fs(), str(destination))
    manifest = {relative: _stamp(target / relative) for relative in listing}
    atomic.write_json(target / MANIFEST, manifest)
    log.info("pulled %d files of %s into %s", len(listing), uri, target)
    return target


class Mirror:
    """Incremental uploads of one folder to its URI (see the module docstring for the order)."""

    def __init__(self, local: Path, uri: str):
        self.local, self.uri = Path(local), uri
        self.last_push = 0.0

    def push(self) -> int:
        """Upload what changed since the last push, delete what is gone; returns the files uploaded."""
        fs, root = filesystem(self.uri)
        manifest_path = self.local / MANIFEST
        manifest = files.read_json(manifest_path) if manifest_path.is_file() else {}
        tune_state = self._tune_state()  # read first, uploaded last
        now = self._files()
        changed = [rel for rel, stamp in now.items() if manifest.get(rel) != stamp and rel not in tune_state]
        for relative in changed:
            if not self._upload(fs, root, relative):
                now.pop(relative)  # removed while listed (a temporary checkpoint folder): not there now
        for relative, data in tune_state.items():
            with fs.open_output_stream(f"{root}/{relative}") as out:
                out.write(data)
        for relative in set(manifest) - set(now):
            fs.delete_file(f"{root}/{relative}")
        atomic.write_json(manifest_path, {rel: now[rel] for rel in now})
        self.last_push = time.monotonic()
        return len(changed) + len(tune_state)

    def push_if_due(self, seconds: float = PUSH_SECONDS) -> None:
        if time.monotonic() - self.last_push >= seconds:
            self.push()

    def _files(self) -> dict[str, list[int]]:
        found = {}
        for path in self.local.rglob("*"):
            relative = path.relative_to(self.local).as_posix()
            if relative not in LOCAL_ONLY and path.is_file() and not path.is_symlink():
                stamp = _stamp(path)
                if stamp is not None:
                    found[relative] = stamp
        return found

    def _tune_state(self, attempts: int = 20) -> dict[str, bytes]:
        """The bytes of Tune's experiment state now: the files directly under tune/<run>/, as two reads in a
        row agree. Tune writes its trial list and then its searcher, file by file: a single read can pair a
        trial list with the searcher of the next snapshot, a state no resume can reconcile."""
        state = self._read_tune_state()
        for _ in range(attempts):
            time.sleep(0.01)
            again = self._read_tune_state()
            if again == state:
                break
            state = again
        return state

    def _read_tune_state(self) -> dict[str, bytes]:
        state = {}
        for path in sorted((self.local / "tune").glob("*/*")):
            if path.is_file():
                try:
                    state[path.relative_to(self.local).as_posix()] = path.read_bytes()
                except FileNotFoundError:  # replaced by Tune between the listing and the read
                    continue
        return state

    def _upload(self, fs: Any, root: str, relative: str) -> bool:
        try:
            _copy(_local_fs(), str(self.local / relative), fs, f"{root}/{relative}")
        except FileNotFoundError:
            return False
        return True


# ----------------------------------------------------------------------------- pyarrow helpers
def _local_fs() -> Any:
    import pyarrow.fs

    return pyarrow.fs.LocalFileSystem()


def _copy(source_fs: Any, source: str, destination_fs: Any, destination: str) -> None:
    with source_fs.open_input_stream(source) as reader, destination_fs.open_output_stream(destination) as writer:
        while chunk := reader.read(1 << 22):
            writer.write(chunk)


def _listing(fs: Any, root: str) -> dict[str, Any]:
    """{relative path: FileInfo} of every file under root (empty when root does not exist)."""
    import pyarrow.fs

    selector = pyarrow.fs.FileSelector(root, recursive=True, allow_not_found=True)
    return {info.path[len(root):].lstrip("/"): info for info in fs.get_file_info(selector)
            if info.type == pyarrow.fs.FileType.File}


def _read_json(fs: Any, path: str) -> dict[str, Any]:
    import json

    with fs.open_input_stream(path) as reader:
        return json.loads(reader.read())


def _stamp(path: Path) -> list[int] | None:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return [stat.st_size, stat.st_mtime_ns]
