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

A mirror is consistent the way a killed driver's folder is. Tune's experiment state (the files directly under
tune/<run>/) is read first, until two reads agree (never half of a Tune snapshot, never a JSON file cut short),
and uploaded last as ONE object, TUNE_STATE: an S3 PUT replaces an object whole or not at all, so the storage
holds a whole Tune snapshot at every moment, never newer than the run directories it describes (the case a
resume already handles, sptune.trials.trainable.adopt_orphan). A snapshot that never reads the same twice
is not uploaded: the storage keeps the last consistent one.
Each other file is uploaded whole (written locally by rename, read once), many at a time, but for the files that
grow in place (GROWING: the study log, the Optuna journal, TensorBoard events, Tune's per-trial logs): those are
stored in parts of PART_BYTES (`<file>.part-00000`, ...), and a push uploads the part the file ended in and the
new ones, not the whole file; a file whose earlier bytes changed (its last TAIL_BYTES before the old end differ)
is uploaded in full again. Files removed locally (Tune's rotated checkpoints) are removed from the storage.
The manifest (what the storage holds) is written after the uploads and again after the deletes, and a delete of
what is already gone succeeds: a push cut at any point (a kill, a storage error) leaves the next one able to
finish. The manifest is a log, each push appending what it changed (a line cut short by a kill is ignored: its
file is uploaded again), compacted once it is twice what it describes; the mirror keeps it in memory, so a push
writes what changed, not the whole study.

The cost of a push, as a study grows (benchmarks/storage_scale.py): the driver's periodic pushes
(`whole=False`) re-read a folder only when its mtime changed (a file added, renamed over or removed) or it changed
at one of its last QUIET_ROUNDS reads; a quiet folder is re-read one push in QUIET_ROUNDS, so a file appended in
place there (a log, TensorBoard events) reaches the storage within QUIET_ROUNDS pushes. Tune's snapshot, which
grows with the trials, goes when TUNE_STATE_SHARE of the time since the last one covers what that one took (Tune's
own rule for its snapshots: at most 5% of the run). Any other push (attach, the driver's last) is whole.
A push raises what the storage raised; the driver pushes from its own thread
(sptune.experiment.engine.mirroring), which retries. Filesystems come from pyarrow
(`pyarrow.fs.FileSystem.from_uri`); S3 reads the usual AWS settings (credentials, AWS_ENDPOINT_URL for an
S3-compatible server).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import tarfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sptune import atomic, files
from sptune.errors import UserError

log = logging.getLogger("sptune.engine")

STORAGE = files.STORAGE  # {"uri": <this folder's location>, "local": <the path it had>}: mirrored too
# What the storage holds: lines [relative path, stamp or null]; a stamp is [size, mtime_ns], a growing file's
# [size, mtime_ns, crc32 of its last TAIL_BYTES, parts].
MANIFEST = ".storage-manifest.jsonl"
COMPACT_AFTER = 1000  # lines a small manifest's log may grow by before it is rewritten
LOCAL_ONLY = {MANIFEST, files.DRIVER}  # the driver record names processes of this machine
TUNE_STATE = "tune-state.tar"  # Tune's experiment state: one object, replaced whole or not at all
PUSH_SECONDS = float(os.environ.get("SPTUNE_MIRROR_SECONDS", 30))  # between pushes while trials run
QUIET_ROUNDS = 10  # periodic pushes a folder must read unchanged before it is re-read only one push in as many
TUNE_STATE_SHARE = 0.05  # of the time between periodic pushes of Tune's snapshot that uploading it may take
UPLOADS_AT_ONCE = 16  # S3 answers each request in tens of ms: uploads overlap their round trips
SCHEMES = ("s3://", "gs://", "gcs://")
GROWING = (files.STUDY_LOG, files.OPTUNA_JOURNAL, "progress.csv")  # appended in place (and TensorBoard's events)
PART_BYTES = 1 << 20  # a growing file's parts
PART = ".part-"  # <file>.part-00000, <file>.part-00001, ...
TAIL_BYTES = 64  # what a growing file must still end with at its old size to be taken as appended to


def is_remote(location: str | Path) -> bool:
    return str(location).startswith(SCHEMES)


def filesystem(uri: str) -> tuple[Any, str]:
    """(pyarrow filesystem, path inside it) of a storage URI; a one-line UserError when it cannot be opened."""
    import pyarrow.fs

    if not is_remote(uri):
        raise UserError(f"--storage {uri!r} is not an object-storage URI; use s3://bucket/prefix or gs://bucket/prefix")
    try:
        # allow_delayed_open: an object smaller than a part is one PutObject, not a three-request multipart upload
        options = "?allow_delayed_open=true" if uri.startswith("s3://") else ""
        fs, path = pyarrow.fs.FileSystem.from_uri(uri.rstrip("/") + options)
        bucket = fs.get_file_info(path.split("/")[0])
    except Exception as exc:  # noqa: BLE001 - pyarrow's own message names the problem
        raise UserError(f"cannot open storage {uri} ({describe(exc)}); check the bucket and the AWS/GCS "
                        f"credentials") from None
    if bucket.type == pyarrow.fs.FileType.NotFound:
        raise UserError(f"cannot open storage {uri}: bucket {bucket.path!r} does not exist; create it or pass "
                        f"another --storage")
    return fs, path


def describe(exc: BaseException) -> str:
    """A storage error on one line: its type and the first line of its message (pyarrow's names the cause)."""
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0]}" if first else type(exc).__name__


def attach(results_dir: Path, prefix: str) -> str:
    """Record that `results_dir` is mirrored under `prefix` and push it once; returns its URI."""
    uri = f"{prefix.rstrip('/')}/{results_dir.name}"
    fs, path = filesystem(uri)
    if _listing(fs, path):
        raise UserError(f"{uri} already holds files; resume it with `sptune resume {uri}` or pass another --dir")
    atomic.write_json(results_dir / STORAGE, {"uri": uri, "local": str(results_dir.resolve())})
    try:
        Mirror(results_dir, uri).push()
    except Exception as exc:  # noqa: BLE001 - any storage error: the folder is kept, a resume pushes it
        raise UserError(f"the first upload to {uri} failed ({describe(exc)}); {results_dir} is kept: continue "
                        f"with `sptune resume {results_dir}` once the storage answers") from exc
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
    mirrored = _stored_files(set(listing) - {TUNE_STATE})
    for relative, objects in mirrored.items():
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        with _local_fs().open_output_stream(str(destination)) as writer:
            for key in objects:  # a growing file's parts in order, any other file's one object
                _copy_into(fs, f"{path}/{key}", writer)
    if TUNE_STATE in listing:
        with fs.open_input_stream(f"{path}/{TUNE_STATE}") as reader:
            _unpack(reader.read(), target)
    held = {relative: _stamp(target / relative, len(objects) if objects != [relative] else None)
            for relative, objects in mirrored.items()}
    atomic.write_text(target / MANIFEST, _manifest_lines(held))
    log.info("pulled %d files of %s into %s", len(listing), uri, target)
    return target


class Mirror:
    """Incremental uploads of one folder to its URI (see the module docstring for the order)."""

    def __init__(self, local: Path, uri: str):
        self.local, self.uri = Path(local), uri
        self._fs: tuple[Any, str] | None = None  # opened once; again after a failed push (credentials renewed)
        self._tune_digest = ""  # of the Tune snapshot the storage holds, when this mirror uploaded it
        self._held: dict[str, list[int]] | None = None  # the manifest: read once, then kept with the log
        self._logged = 0  # lines in the manifest's log
        self._folders: dict[str, _Folder] = {}  # by relative path ('' the root): what the last read found
        self._rounds = 0  # periodic pushes so far
        self._tune_due = 0.0  # time.monotonic() from which a periodic push takes Tune's snapshot again

    def push(self, whole: bool = True) -> int:
        """Upload what changed since the last push, delete what is gone; returns the files uploaded. Raises
        what the storage raised (nothing is lost: the next push starts from what the storage is known to hold).
        `whole=False`: a periodic push (quiet folders and Tune's snapshot in turn: the module docstring)."""
        if self._fs is None:
            self._fs = filesystem(self.uri)
        try:
            return self._push(*self._fs, whole)
        except BaseException:
            self._fs = None
            raise

    def _push(self, fs: Any, root: str, whole: bool) -> int:
        held = self._manifest()
        started = time.monotonic()
        tune_due = whole or started >= self._tune_due
        tune_state = self._tune_state() if tune_due else None  # read first, uploaded last
        tune_seconds = time.monotonic() - started
        now = self._files(whole)
        changed = [rel for rel, stamp in now.items() if held.get(rel, [])[:2] != stamp]
        uploaded = self._upload_all(fs, root, changed, now, held)
        self._record(uploaded)  # before the deletes: a cut push keeps what it uploaded
        gone = sorted(set(held) - set(now))
        _delete_each(fs, root, [key for rel in gone for key in _objects(rel, held[rel])])
        self._record(dict.fromkeys(gone))
        if not tune_due:
            return len(uploaded)
        started = time.monotonic()
        uploaded_state = self._push_tune_state(fs, root, tune_state)
        tune_seconds += time.monotonic() - started
        self._tune_due = time.monotonic() + tune_seconds / TUNE_STATE_SHARE
        return len(uploaded) + uploaded_state

    def _manifest(self) -> dict[str, list[int]]:
        """What the storage holds, replayed from the manifest's log on the first push."""
        if self._held is None:
            self._held, self._logged = {}, 0
            path = self.local / MANIFEST
            text = path.read_text() if path.is_file() else ""
            for line in text.splitlines():
                try:
                    relative, stamp = json.loads(line)
                except ValueError:  # cut short by a kill: that file is uploaded again
                    continue
                self._logged += 1
                _apply(self._held, {relative: stamp})
            if text and not text.endswith("\n"):
                self._write_manifest()  # a cut line at the end: the next append must not run into it
        return self._held

    def _write_manifest(self) -> None:
        atomic.write_text(self.local / MANIFEST, _manifest_lines(self._held))
        self._logged = len(self._held)

    def _record(self, changes: dict[str, list[int] | None]) -> None:
        """Append `changes` ({relative: stamp, or None for deleted}) to the manifest; compact a log grown to
        twice what it describes."""
        if not changes:
            return
        _apply(self._held, changes)
        self._logged += len(changes)
        if self._logged > 2 * len(self._held) + COMPACT_AFTER:
            self._write_manifest()
            return
        with open(self.local / MANIFEST, "a") as log_file:
            log_file.write(_manifest_lines(changes))

    def _upload_all(self, fs: Any, root: str, relatives: list[str], stamps: dict[str, list[int]],
                    held: dict[str, list[int]]) -> dict[str, list[int]]:
        """Upload many at a time; {relative: stamp} of those uploaded (a file removed meanwhile is skipped)."""
        def upload(relative: str) -> list[int] | None:
            if _grows(relative):
                return self._upload_parts(fs, root, relative, held.get(relative))
            return stamps[relative] if self._upload(fs, root, relative) else None
        if not relatives:
            return {}
        with ThreadPoolExecutor(min(UPLOADS_AT_ONCE, len(relatives))) as pool:
            done = list(pool.map(upload, relatives))
        return {rel: stamp for rel, stamp in zip(relatives, done) if stamp is not None}

    def _upload_parts(self, fs: Any, root: str, relative: str, held: list[int] | None) -> list[int] | None:
        """A growing file's parts from the one its held size ended in (from the first when its earlier bytes
        changed), up to the first part read short (every part before the last is whole); then the deletion of
        what no longer belongs to it. Its new stamp (the size read), None when it is gone."""
        try:
            with open(self.local / relative, "rb") as reader:
                mtime = os.fstat(reader.fileno()).st_mtime_ns  # appended to later: the next scan sees it
                parts = _appended_from(reader, held)
                size = parts * PART_BYTES
                reader.seek(size)
                while True:
                    chunk = reader.read(PART_BYTES)
                    with fs.open_output_stream(f"{root}/{_part(relative, parts)}") as writer:
                        writer.write(chunk)
                    size, parts = size + len(chunk), parts + 1
                    if len(chunk) < PART_BYTES:
                        break
                stamp = [size, mtime, _tail_crc(reader, size), parts]
        except FileNotFoundError:
            return None
        _delete_each(fs, root, sorted(set(_objects(relative, held)) - set(_objects(relative, stamp))))
        return stamp

    def _push_tune_state(self, fs: Any, root: str, state: dict[str, bytes] | None) -> int:
        """Tune's snapshot as one object, when it changed since this mirror last uploaded it."""
        if not state:
            return 0
        packed = _pack(state)
        digest = hashlib.sha256(packed).hexdigest()
        if digest == self._tune_digest:
            return 0
        with fs.open_output_stream(f"{root}/{TUNE_STATE}") as out:
            out.write(packed)
        self._tune_digest = digest
        return 1

    def _files(self, whole: bool = True) -> dict[str, list[int]]:
        """{relative path: stamp} of every file mirrored one by one (Tune's state travels in TUNE_STATE)."""
        if not whole:
            self._rounds += 1
        found: dict[str, list[int]] = {}
        self._scan("", whole, found)
        return {relative: stamp for relative, stamp in found.items()
                if relative not in LOCAL_ONLY and not _is_tune_state(relative)}

    def _scan(self, relative: str, whole: bool, found: dict[str, list[int]]) -> None:
        """Add the files under folder `relative` to `found`, from the last read where it is quiet and unchanged."""
        try:
            mtime = os.stat(self.local / relative).st_mtime_ns
        except FileNotFoundError:  # removed while scanned (a temporary checkpoint folder)
            self._folders.pop(relative, None)
            return
        last = self._folders.get(relative)
        if whole or last is None or last.mtime != mtime or not last.skippable(self._rounds):
            self._folders[relative] = last = _read_folder(self.local, relative, mtime, last)
        prefix = f"{relative}/" if relative else ""
        found.update((prefix + name, stamp) for name, stamp in last.files.items())
        for name in last.folders:
            self._scan(prefix + name, whole, found)

    def _tune_state(self, attempts: int = 20) -> dict[str, bytes] | None:
        """The bytes of Tune's experiment state now, once two reads in a row agree and every JSON file parses;
        None when no read is whole (the storage then keeps its last snapshot). Tune writes its trial list
        and then its searcher, file by file: a single read can pair a trial list with the searcher of the
        next snapshot, a state no resume can reconcile."""
        state = self._read_tune_state()
        for _ in range(attempts):
            time.sleep(0.01)
            again = self._read_tune_state()
            if again == state and _whole(state):
                return state
            state = again
        log.warning("Tune's state under %s changed at every read; the storage keeps its last snapshot", self.local)
        return None

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


# ----------------------------------------------------------------------------- the folder's files
@dataclass
class _Folder:
    """One folder as last read: its mtime, its files' stamps, its subfolders, and how many reads in a row found
    it unchanged."""
    mtime: int
    files: dict[str, list[int]]
    folders: list[str]
    quiet: int = 0

    def skippable(self, rounds: int) -> bool:
        """Quiet long enough to be re-read only one periodic push in QUIET_ROUNDS (which one: by its mtime)."""
        return self.quiet >= QUIET_ROUNDS and (rounds + self.mtime) % QUIET_ROUNDS != 0


def _read_folder(root: Path, relative: str, mtime: int, last: _Folder | None) -> _Folder:
    """os.scandir, one stat a file."""
    files_now: dict[str, list[int]] = {}
    folders: list[str] = []
    try:
        entries = list(os.scandir(root / relative))
    except FileNotFoundError:
        entries = []
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            elif entry.is_file(follow_symlinks=False):
                stat = entry.stat(follow_symlinks=False)
                files_now[entry.name] = [stat.st_size, stat.st_mtime_ns]
        except FileNotFoundError:
            continue
    same = last is not None and last.mtime == mtime and last.files == files_now
    return _Folder(mtime, files_now, folders, last.quiet + 1 if same else 0)


def _is_tune_state(relative: str) -> bool:
    """A file directly under tune/<run>/: Tune's experiment state (its trials' folders hold the rest)."""
    parts = relative.split("/")
    return len(parts) == 3 and parts[0] == "tune"


def _grows(relative: str) -> bool:
    """A file appended in place, stored in parts (GROWING, TensorBoard's events, Tune's per-trial result.json)."""
    name = relative.rsplit("/", 1)[-1]
    return (name in GROWING or name.startswith("events.out.tfevents.")
            or (relative.startswith("tune/") and not _is_tune_state(relative) and name == files.RESULT))


def _part(relative: str, index: int) -> str:
    return f"{relative}{PART}{index:05d}"


def _objects(relative: str, stamp: list[int] | None) -> list[str]:
    """The storage's objects of a manifest entry: a growing file's parts, any other file's one object."""
    if stamp is not None and len(stamp) == 4:
        return [_part(relative, index) for index in range(stamp[3])]
    return [relative] if stamp is not None else []


def _stored_files(keys: set[str]) -> dict[str, list[str]]:
    """{relative path: its objects in order} of a storage listing: a growing file's parts joined into it."""
    stored: dict[str, list[str]] = {}
    for key in sorted(keys):
        relative, _, index = key.rpartition(PART)
        if relative and index.isdigit() and _grows(relative):
            if stored.get(relative) == [relative]:
                stored[relative] = []  # parts uploaded, the whole object of an earlier version not yet deleted
            stored.setdefault(relative, []).append(key)
        else:
            stored[key] = [key]
    return stored


def _tail_crc(reader: Any, size: int) -> int:
    reader.seek(max(0, size - TAIL_BYTES))
    return zlib.crc32(reader.read(min(size, TAIL_BYTES)))


def _appended_from(reader: Any, held: list[int] | None) -> int:
    """The first part to upload: the one the held size ended in, when the file still has the bytes it had
    there (appended to since); else 0 (new, rewritten, cut shorter, or held whole by an earlier version)."""
    if held is None or len(held) != 4:
        return 0
    size = held[0]
    reader.seek(0, os.SEEK_END)
    if reader.tell() < size or _tail_crc(reader, size) != held[2]:
        return 0
    return size // PART_BYTES


def _apply(held: dict[str, list[int]], changes: dict[str, list[int] | None]) -> None:
    for relative, stamp in changes.items():
        if stamp is None:
            held.pop(relative, None)
        else:
            held[relative] = stamp


def _manifest_lines(entries: dict[str, list[int] | None]) -> str:
    return "".join(json.dumps([relative, stamp]) + "\n" for relative, stamp in entries.items())


def _whole(state: dict[str, bytes]) -> bool:
    """Tune's trial list (experiment_state*.json) parses and every pickle ends with pickle's STOP opcode: one
    read while Tune rewrote a file in place may not. (Tune's search_gen_state*.json is a pickle too.)"""
    for relative, data in state.items():
        name = relative.rsplit("/", 1)[-1]
        if name.endswith(".pkl") and not data.endswith(b"."):
            return False
        if name.startswith("experiment_state") and name.endswith(".json"):
            try:
                json.loads(data)
            except ValueError:
                return False
    return True


def _pack(state: dict[str, bytes]) -> bytes:
    """A tar of the snapshot, byte-identical for the same files (no times, no owners)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for relative in sorted(state):
            info = tarfile.TarInfo(relative)
            info.size = len(state[relative])
            tar.addfile(info, io.BytesIO(state[relative]))
    return buffer.getvalue()


def _unpack(packed: bytes, target: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r") as tar:
        for member in tar.getmembers():
            if not member.isfile() or not _is_tune_state(member.name):
                raise UserError(f"{TUNE_STATE} holds {member.name!r}, not a Tune state file; the storage was "
                                f"written by something else")
            destination = target / member.name
            destination.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(destination, tar.extractfile(member).read())


# ----------------------------------------------------------------------------- pyarrow helpers
def _local_fs() -> Any:
    import pyarrow.fs

    return pyarrow.fs.LocalFileSystem()


def _copy(source_fs: Any, source: str, destination_fs: Any, destination: str) -> None:
    with source_fs.open_input_stream(source) as reader, destination_fs.open_output_stream(destination) as writer:
        _pump(reader, writer)


def _copy_into(source_fs: Any, source: str, writer: Any) -> None:
    with source_fs.open_input_stream(source) as reader:
        _pump(reader, writer)


def _pump(reader: Any, writer: Any) -> None:
    while chunk := reader.read(1 << 22):
        writer.write(chunk)


def _delete_each(fs: Any, root: str, relatives: list[str]) -> None:
    """Delete many at a time; what is already gone counts as deleted (a push cut before its manifest)."""
    def delete(relative: str) -> None:
        try:
            fs.delete_file(f"{root}/{relative}")
        except FileNotFoundError:
            pass
    if relatives:
        with ThreadPoolExecutor(min(UPLOADS_AT_ONCE, len(relatives))) as pool:
            list(pool.map(delete, relatives))


def _listing(fs: Any, root: str) -> dict[str, Any]:
    """{relative path: FileInfo} of every file under root (empty when root does not exist)."""
    import pyarrow.fs

    selector = pyarrow.fs.FileSelector(root, recursive=True, allow_not_found=True)
    return {info.path[len(root):].lstrip("/"): info for info in fs.get_file_info(selector)
            if info.type == pyarrow.fs.FileType.File}


def _read_json(fs: Any, path: str) -> dict[str, Any]:
    with fs.open_input_stream(path) as reader:
        return json.loads(reader.read())


def _stamp(path: Path, parts: int | None = None) -> list[int] | None:
    """[size, mtime_ns]; a growing file stored in `parts` parts: [size, mtime_ns, crc32 of its tail, parts]."""
    try:
        stat = path.stat()
        if parts is None:
            return [stat.st_size, stat.st_mtime_ns]
        with open(path, "rb") as reader:
            return [stat.st_size, stat.st_mtime_ns, _tail_crc(reader, stat.st_size), parts]
    except FileNotFoundError:
        return None
