"""Storage can fail and the study goes on: faults injected into a real S3 server on 127.0.0.1 (tests/s3_server.py).

A push cut at any point (the driver killed between its deletes and its manifest, or mid-upload) is finished by
the next; a storage that refuses requests (503, expired credentials) or is gone (stopped, then restarted on its
port) only delays the mirror, from the uploader's thread, without an exception reaching the caller; one that
fails past the give-up time stops the run cleanly with its cause; Tune's state rewritten in place while pushed
never reaches the storage torn. Whole studies through these faults: tests/test_study_storage.py.
"""

import json
import os
import pickle
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from s3_server import S3Server, held as remote, mirrored_files as local

from sptune.errors import UserError
from sptune.experiment.engine import interrupts, mirroring, stopping
from sptune.records import storage

TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def server():
    s3 = S3Server().start()
    yield s3
    s3.stop()


@pytest.fixture
def s3(server, monkeypatch):
    server.fail(None)
    server.reset()
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    return server


def study_folder(tmp_path, trials=6):
    folder = tmp_path / "study"
    for index in range(trials):
        trial = folder / "pretrain" / f"t{index}"
        trial.mkdir(parents=True)
        (trial / "result.json").write_text(json.dumps({"trial": index}))
        (trial / "last.pt").write_bytes(os.urandom(20_000))
    (folder / "tune" / "run").mkdir(parents=True)
    (folder / "tune" / "run" / "experiment_state.json").write_text('{"trials": 6}')
    return folder


# ----------------------------------------------------------------------------- a push cut short
KILLED_PUSH = """
import os, signal, sys
from sptune.records import storage

where = sys.argv[2]
if where == "after_deletes":  # the storage has lost the files, the manifest still lists them
    delete_each = storage._delete_each
    def deleting_then_killed(fs, root, relatives):
        delete_each(fs, root, relatives)
        if relatives:
            os.kill(os.getpid(), signal.SIGKILL)
    storage._delete_each = deleting_then_killed
else:  # mid-upload: the third file's stream is open, half written
    copy, calls = storage._copy, []
    def copying_then_killed(source_fs, source, destination_fs, destination):
        calls.append(source)
        if len(calls) == 3:
            with destination_fs.open_output_stream(destination) as writer:
                writer.write(b"half a file")
                os.kill(os.getpid(), signal.SIGKILL)
        copy(source_fs, source, destination_fs, destination)
    storage._copy = copying_then_killed
    storage.UPLOADS_AT_ONCE = 1
storage.mirror_of(storage.Path(sys.argv[1])).push()
"""


@pytest.mark.parametrize("where", ["after_deletes", "mid_upload"])
def test_a_push_killed_midway_is_finished_by_the_next(tmp_path, s3, where):
    folder = study_folder(tmp_path)
    uri = storage.attach(folder, "s3://studies/team")
    for index in range(3):  # removed locally: the push deletes them from the storage
        (folder / "pretrain" / f"t{index}" / "last.pt").unlink()
    for index in range(3, 6):
        (folder / "pretrain" / f"t{index}" / "last.pt").write_bytes(os.urandom(30_000))
    killed = subprocess.run([sys.executable, "-c", KILLED_PUSH, str(folder), where], env={**os.environ},
                            capture_output=True, timeout=120)
    assert killed.returncode == -9, killed.stderr.decode()[-2000:]
    mirror = storage.mirror_of(folder)
    mirror.push()
    assert remote(uri) == local(folder)
    assert mirror.push() == 0  # and the manifest is true again: nothing left to do


# ----------------------------------------------------------------------------- a storage that refuses or is gone
def wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def outage(s3, kind):
    if kind == "stopped":
        s3.stop()
    else:
        s3.fail(kind)


def recover(s3, kind):
    if kind == "stopped":
        s3.start()
    else:
        s3.fail(None)


@pytest.mark.parametrize("kind", ["unavailable", "credentials"])
def test_a_storage_failing_at_the_first_upload_is_one_line_and_keeps_the_folder(tmp_path, s3, kind, monkeypatch):
    folder = study_folder(tmp_path)
    push = storage.Mirror.push
    monkeypatch.setattr(storage.Mirror, "push", lambda self, *args: s3.fail(kind) or push(self, *args))
    with pytest.raises(UserError, match=r"the first upload to s3://studies/x/study failed \(.+\); .* `sptune resume "):
        storage.attach(folder, "s3://studies/x")
    s3.fail(None)
    monkeypatch.setattr(storage.Mirror, "push", push)
    assert storage.mirror_of(folder).push() > 0  # what a resume's mirror does: the storage gets the folder
    assert set(remote("s3://studies/x/study")) >= {"storage.json"}


@pytest.mark.parametrize("kind", ["unavailable", "credentials", "stopped"])
def test_a_storage_outage_delays_the_mirror_and_loses_nothing(tmp_path, s3, kind):
    folder = study_folder(tmp_path)
    uri = storage.attach(folder, "s3://studies/team")
    uploader = mirroring.Uploader(storage.mirror_of(folder), period=0.2, give_up_after=3600).start()
    try:
        outage(s3, kind)
        (folder / "pretrain" / "t6").mkdir()
        (folder / "pretrain" / "t6" / "result.json").write_text('{"trial": 6}')  # finished during the outage
        uploader.request()
        wait_for(lambda: uploader.status().startswith("storage failing for"))
        assert uploader.error and not uploader.given_up
        recover(s3, kind)
        wait_for(lambda: uploader.status() == "")
    finally:
        assert uploader.close() == ""
    assert remote(uri) == local(folder)


def test_a_storage_failing_past_the_give_up_time_stops_the_run_with_its_cause(tmp_path, s3, capsys):
    folder = study_folder(tmp_path)
    storage.attach(folder, "s3://studies/team")
    stop = stopping.register("run-a", None)
    uploader = mirroring.Uploader(storage.mirror_of(folder), period=0.1, give_up_after=0.5).start()
    try:
        s3.fail("credentials")
        uploader.request()
        wait_for(lambda: stop.event.is_set())
    finally:
        stopping.unregister("run-a")
        s3.fail(None)
        uploader.close()
    assert "ACCESS_DENIED" in stop.failure and stop.failure.startswith("storage s3://studies/team/study failed")
    code = interrupts.stopped(interrupts.StorageStopped(stop.failure))
    err = capsys.readouterr().err
    assert code == 75 and err.count("\n") == 1 and "stopped: storage s3://studies/team/study failed" in err


def test_a_run_that_ended_well_says_when_its_last_push_failed(tmp_path, s3, monkeypatch):
    folder = study_folder(tmp_path)
    storage.attach(folder, "s3://studies/team")
    monkeypatch.setattr(mirroring, "FIRST_RETRY_SECONDS", 0.01)
    with pytest.raises(interrupts.StorageStopped, match="the last push to s3://studies/team/study failed"):
        with mirroring.mirrored(folder):
            s3.fail("unavailable")
    s3.fail(None)
    with mirroring.mirrored(folder):  # the resume's driver pushes what the storage missed
        pass
    assert remote("s3://studies/team/study") == local(folder)


# ----------------------------------------------------------------------------- Tune's state, torn in place
def test_tune_state_rewritten_in_place_while_pushed_never_reaches_the_storage_torn(tmp_path, s3):
    """A writer rewrites both of Tune's state files in place (truncate, then write: a reader can see a file
    empty or cut short), snapshot after snapshot; every Tune state the storage ever holds is one snapshot."""
    folder = study_folder(tmp_path)
    run = folder / "tune" / "run"
    uri = storage.attach(folder, "s3://studies/team")
    writing = threading.Event()
    writing.set()

    def tune_writing() -> None:
        snapshot = 0
        while writing.is_set():
            snapshot += 1
            (run / "experiment_state.json").write_text(json.dumps({"snapshot": snapshot, "pad": "x" * 5000}))
            (run / "searcher-state.pkl").write_bytes(pickle.dumps([snapshot] * 1000))

    writer = threading.Thread(target=tune_writing)
    writer.start()
    mirror, seen = storage.mirror_of(folder), set()
    try:
        for _ in range(15):
            mirror.push()
            held = remote(uri)
            if "tune/run/searcher-state.pkl" in held:
                snapshot = json.loads(held["tune/run/experiment_state.json"])["snapshot"]
                assert held["tune/run/searcher-state.pkl"] == pickle.dumps([snapshot] * 1000)
                seen.add(snapshot)
    finally:
        writing.clear()
        writer.join()
    mirror.push()  # Tune at rest: its last snapshot reaches the storage
    assert remote(uri)["tune/run/searcher-state.pkl"] == (run / "searcher-state.pkl").read_bytes()
