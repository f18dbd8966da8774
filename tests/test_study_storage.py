"""A study outlives its cluster: mirrored to S3, its head's disk deleted, resumed from the bucket.

The storage is moto's S3-compatible server, started by the test on 127.0.0.1 (real HTTP, the S3 protocol as
pyarrow's S3 client speaks it to AWS). The study runs in a subprocess with `--storage s3://...` until a trial
has finished and the pretraining trial is mid-way; the driver is SIGKILLed (a lost head: nothing saved on the
way out) and its local folder deleted; `sptune resume s3://...` pulls the folder back and continues. The
finished trial must be kept byte for byte, every stage must end with a completed trial, and pretraining must
have continued from the checkpoint the mirror carried, not from step 0, to an uninterrupted run's numbers.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml
from ray_fixtures import sptune_env
from reproducibility import assert_pretraining_uninterrupted
from s3_server import S3Server
from s3_server import held as remote_files
from s3_server import mirrored_files

from sptune import files
from sptune.errors import UserError
from sptune.experiment.engine import session
from sptune.records import results, storage

CONFIG = {
    "task": {"name": "listops-mini", "max_val_examples": 32},
    "model": {"name": "transformer", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 16},
    "optim": {"batch_size": 8, "max_steps": 8, "eval_every": 4, "warmup_steps": 0},
    "stages": {"pretrain": {"optim": {"max_steps": 300, "eval_every": 10}}},  # ~8 s: long enough to catch mid-way
}
SPACE = {"task": "listops-mini", "model": "transformer", "num_samples": 1, "max_concurrent": 1,
         "stages": {stage: {"params": {"optim.lr": [1e-3], "optim.batch_size": [8]}}
                    for stage in ("pretrain", "finetune", "scratch")}}


@pytest.fixture
def s3_server():
    """An S3 server on 127.0.0.1 with one bucket (tests/s3_server.py: it can fail and restart)."""
    server = S3Server().start()
    server.reset()
    yield server
    server.fail(None)
    server.stop()


@pytest.fixture
def s3(s3_server):
    """The environment that points AWS clients at the test's S3 server; the mirror pushes every second."""
    return {**s3_server.env, "SPTUNE_MIRROR_SECONDS": "1"}


def outage(server, seconds=2.0):
    """The storage down (connections refused, the server stopped and started on its port), then failing its
    credentials (403), then throttling (503), each for `seconds`."""
    server.stop()
    time.sleep(seconds)
    server.start()
    for fault in ("credentials", "unavailable"):
        server.fail(fault)
        time.sleep(seconds)
    server.fail(None)


def sptune(env, *args, entry=("-m", "sptune.cli")):
    """`sptune <args>` in its own process group (`entry`: how Python starts the command line)."""
    return subprocess.Popen([sys.executable, *entry, *map(str, args)], env=sptune_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def finished(proc, timeout=420, study_dir=None):
    """The command's output once it exited 0; else a failure showing its output and the study log's end."""
    try:
        out = proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its process group (start_new_session): nothing it started outlives it
        proc.communicate()
        raise
    log = study_dir / files.STUDY_LOG if study_dir else None
    tail = "\nstudy.log:\n" + log.read_text()[-5000:] if log and log.is_file() else ""
    assert proc.returncode == 0, out[-3000:] + tail
    return out


def s3_client(env):
    import boto3

    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id="test",
                        aws_secret_access_key="test", region_name="us-east-1")


def stored_keys(client, uri):
    """The keys under `uri`, relative to it, as the storage lists them now."""
    bucket, prefix = uri[len("s3://"):].split("/", 1)
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return {item["Key"][len(prefix) + 1:] for page in pages for item in page.get("Contents", [])}


def wait_for_midway(study_dir, proc, env, uri, timeout=300):
    """Until the storage holds a finished scratch trial and a pretraining checkpoint past step 20 whose
    trial has no result yet; returns the pretraining run's name."""
    bucket, prefix = uri[len("s3://"):].split("/", 1)
    client, deadline = s3_client(env), time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        stored = stored_keys(client, uri)
        scratch_done = any(key.startswith("scratch/") and key.endswith("/result.json") for key in stored)
        for key in stored:
            stage, name, leaf = (key.split("/") + ["", ""])[:3]
            unfinished = f"pretrain/{name}/result.json" not in stored
            if (stage, leaf) == ("pretrain", files.PROGRESS) and scratch_done and unfinished:
                progress = json.loads(client.get_object(Bucket=bucket, Key=f"{prefix}/{key}")["Body"].read())
                if progress["step"] >= 20:
                    return name
        time.sleep(0.2)
    raise AssertionError("the storage never held a finished trial beside a checkpointed, unfinished pretraining")


def study_files(tmp_path):
    config, space = tmp_path / "config.yaml", tmp_path / "space.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    space.write_text(yaml.safe_dump(SPACE))
    return config, space


def wait_for_driver(study_dir, timeout=120):
    """Until the driver has attached the storage and is starting Ray."""
    deadline = time.monotonic() + timeout
    while not (study_dir / files.DRIVER).is_file() and time.monotonic() < deadline:
        time.sleep(0.1)


def assert_finished_as_uninterrupted(study_dir, uri, s3, tmp_path, monkeypatch):
    """Every stage of the study ended with a completed trial, pretraining with an uninterrupted run's numbers;
    and the storage holds the finished study: pulled elsewhere, it is the study folder file for file."""
    rows = results.collect(study_dir)
    assert sorted(row["stage"] for row in rows) == ["finetune", "pretrain", "scratch"]
    assert all(row["status"] == "completed" for row in rows)
    assert_pretraining_uninterrupted(study_dir, rows, tmp_path / "plain")
    for key, value in s3.items():
        monkeypatch.setenv(key, value)
    assert mirrored_files(storage.pull(uri, tmp_path / "copy")) == mirrored_files(study_dir)


def assert_resumed_as_uninterrupted(study_dir, pretraining, kept, uri, s3, tmp_path, monkeypatch):
    """A study resumed after a lost driver, finished as above: the trials finished before the loss are kept byte
    for byte, not rerun, and pretraining continued from the checkpoint it had reached (its second attempt
    starts past step 0)."""
    assert kept and {path: (study_dir / path).read_bytes() for path in kept} == kept
    trial = files.read_json(study_dir / "pretrain" / pretraining / "trial.json")
    assert [a["start_step"] > 0 for a in trial["attempts"]] == [False, True]
    assert_finished_as_uninterrupted(study_dir, uri, s3, tmp_path, monkeypatch)


def finished_trials(study_dir):
    return {path.relative_to(study_dir): path.read_bytes() for path in study_dir.glob("scratch/*/result.json")}


@pytest.mark.slow  # ~50 s: a study through a storage outage, killed mid-way, its resume from the storage
def test_a_study_resumed_from_s3_after_its_head_is_gone_keeps_its_trials_and_continues_the_others(
        tmp_path, s3_server, s3, monkeypatch):
    config, space = study_files(tmp_path)
    study_dir, uri = tmp_path / "head" / "study", "s3://studies/team"

    tag = session.ray_tag(study_dir)
    driver = sptune(s3, "study", config, "--search-space", space, "--dir", study_dir, "--storage", uri, "--quiet")
    try:
        wait_for_driver(study_dir)
        outage(s3_server)  # while Ray starts and the first trials run: the study goes on, its pushes retried
        pretraining = wait_for_midway(study_dir, driver, s3, f"{uri}/study")
        log = (study_dir / files.STUDY_LOG).read_text()
        assert "failed (" in log and "takes pushes again" in log, log[-3000:]
        os.killpg(driver.pid, signal.SIGKILL)  # the head is lost: driver, Ray and trials at once
        driver.wait(timeout=60)
        session.stop_processes(session.ray_processes(tag))
        kept = finished_trials(study_dir)
        shutil.rmtree(tmp_path / "head")  # and its disk

        out = finished(sptune(s3, "resume", f"{uri}/study", "--quiet"), study_dir=study_dir)
        assert results.RULE in out and study_dir.is_dir()
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        session.stop_processes(session.ray_processes(tag))
    assert_resumed_as_uninterrupted(study_dir, pretraining, kept, f"{uri}/study", s3, tmp_path, monkeypatch)


@pytest.mark.slow  # ~90 s: the storage refuses the credentials for a minute while a study runs
def test_a_study_run_while_the_storage_refuses_its_credentials_for_a_minute_loses_nothing(
        tmp_path, s3_server, s3, monkeypatch):
    """The study goes on through the refusal, its pushes retried; it ends before the storage answers again, so
    its driver stops with the storage behind (exit 75, the cause and the resume command); the resume, once the
    credentials work again, pushes what the storage missed."""
    config, space = study_files(tmp_path)
    study_dir, uri = tmp_path / "study", "s3://studies/team"
    tag = session.ray_tag(study_dir)
    driver = sptune(s3, "study", config, "--search-space", space, "--dir", study_dir, "--storage", uri, "--quiet")
    try:
        wait_for_driver(study_dir)
        s3_server.fail("credentials")
        refused_at = time.monotonic()
        while driver.poll() is None or time.monotonic() - refused_at < 60:
            time.sleep(0.5)
        out = driver.stdout.read()
        s3_server.fail(None)
        assert driver.returncode == 75, out[-3000:]
        assert f"stopped: the last push to {uri}/study failed (" in out and f"sptune resume {study_dir}" in out
        log = (study_dir / files.STUDY_LOG).read_text()
        assert "retrying in" in log and "ACCESS_DENIED" in log, log[-3000:]
        assert not any(key.endswith("/result.json") for key in stored_keys(s3_client(s3), f"{uri}/study"))  # all missed
        finished(sptune(s3, "resume", study_dir, "--quiet"), study_dir=study_dir)
    finally:
        s3_server.fail(None)
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        session.stop_processes(session.ray_processes(tag))
    assert_finished_as_uninterrupted(study_dir, f"{uri}/study", s3, tmp_path, monkeypatch)


# A driver that loses itself (SIGKILL to its process group: driver, Ray and trials at once) inside the first
# push past a trigger file: after that push's deletes, before its manifest records them; or with Tune's
# snapshot half uploaded.
KILLED_MID_PUSH = """
import os, signal, sys
from pathlib import Path
from sptune.cli.main import main
from sptune.records import storage

where, trigger = sys.argv[1], Path(sys.argv[2])

def lost():
    os.killpg(os.getpgrp(), signal.SIGKILL)

if where == "after_deletes":
    delete_each = storage._delete_each
    def deleting_then_killed(fs, root, relatives):
        delete_each(fs, root, relatives)
        if relatives and trigger.exists():
            lost()
    storage._delete_each = deleting_then_killed
else:
    push_tune_state = storage.Mirror._push_tune_state
    def uploading_then_killed(self, fs, root, state):
        if state and trigger.exists():
            packed = storage._pack(state)
            with fs.open_output_stream(f"{root}/{storage.TUNE_STATE}") as out:
                out.write(packed[:len(packed) // 2])
                lost()
        return push_tune_state(self, fs, root, state)
    storage.Mirror._push_tune_state = uploading_then_killed
sys.exit(main(sys.argv[3:]))
"""


@pytest.mark.slow  # ~50 s: a study whose driver is killed inside a push, resumed
@pytest.mark.parametrize("where", ["after_deletes", "tune_state_half_uploaded"])
def test_a_study_whose_driver_is_killed_mid_push_resumes_to_an_uninterrupted_runs_numbers(
        tmp_path, s3, where, monkeypatch):
    """After its deletes the local disk is kept and the study resumed from it: the manifest still lists what
    the storage no longer holds, and the resumed mirror must finish that push. With Tune's snapshot half
    uploaded the disk is lost too and the study resumed from the storage, whose Tune snapshot is older than
    its run directories."""
    config, space = study_files(tmp_path)
    study_dir, uri, trigger = tmp_path / "head" / "study", "s3://studies/team", tmp_path / "trigger"
    tag = session.ray_tag(study_dir)
    driver = sptune(s3, "study", config, "--search-space", space, "--dir", study_dir, "--storage", uri, "--quiet",
                    entry=("-c", KILLED_MID_PUSH, where, str(trigger)))
    try:
        wait_for_driver(study_dir)
        (study_dir / "notes.txt").write_text("a file the researcher keeps beside the study, removed later")
        pretraining = wait_for_midway(study_dir, driver, s3, f"{uri}/study")
        assert "notes.txt" in stored_keys(s3_client(s3), f"{uri}/study")
        (study_dir / "notes.txt").unlink()  # the next push deletes it from the storage
        trigger.touch()
        assert driver.wait(timeout=60) == -signal.SIGKILL, driver.stdout.read()[-3000:]
        session.stop_processes(session.ray_processes(tag))
        kept = finished_trials(study_dir)
        if where == "after_deletes":
            assert "notes.txt" not in stored_keys(s3_client(s3), f"{uri}/study")
            assert "notes.txt" in storage.mirror_of(study_dir)._manifest()  # the cut push never recorded the delete
            resumed = study_dir
        else:
            shutil.rmtree(tmp_path / "head")
            resumed = f"{uri}/study"
        out = finished(sptune(s3, "resume", resumed, "--quiet"), study_dir=study_dir)
        assert results.RULE in out
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
        session.stop_processes(session.ray_processes(tag))
    assert_resumed_as_uninterrupted(study_dir, pretraining, kept, f"{uri}/study", s3, tmp_path, monkeypatch)


# ----------------------------------------------------------------------------- the mirror itself
@pytest.fixture
def aws(s3, monkeypatch):
    for key, value in s3.items():
        monkeypatch.setenv(key, value)
    return s3


def test_a_push_uploads_what_changed_and_removes_what_is_gone(tmp_path, aws):
    folder = tmp_path / "study"
    (folder / "pretrain" / "t1").mkdir(parents=True)
    (folder / "study.json").write_text("{}")
    (folder / "pretrain" / "t1" / "last.pt").write_bytes(b"step 1")
    (folder / "driver.json").write_text("{}")  # names this machine's processes: never mirrored
    uri = storage.attach(folder, "s3://studies/team")
    assert uri == "s3://studies/team/study"
    assert set(remote_files(uri)) == {"study.json", "storage.json", "pretrain/t1/last.pt"}

    mirror = storage.mirror_of(folder)
    assert mirror.push() == 0  # nothing changed
    (folder / "pretrain" / "t1" / "last.pt").write_bytes(b"step 2")
    (folder / "study.json").unlink()
    assert mirror.push() == 1
    assert remote_files(uri) == {"storage.json": (folder / "storage.json").read_bytes(),
                                 "pretrain/t1/last.pt": b"step 2"}


def test_the_manifest_is_a_log_of_each_push_s_changes_read_back_by_a_new_mirror(tmp_path, aws, monkeypatch):
    folder = tmp_path / "study"
    (folder / "runs").mkdir(parents=True)
    for index in range(5):
        (folder / "runs" / f"{index}.pt").write_bytes(b"v1")
    uri = storage.attach(folder, "s3://studies/log")
    log_path = folder / storage.MANIFEST
    lines = len(log_path.read_text().splitlines())
    mirror = storage.mirror_of(folder)
    (folder / "runs" / "0.pt").write_bytes(b"v2")
    (folder / "runs" / "1.pt").unlink()
    assert mirror.push() == 1
    assert len(log_path.read_text().splitlines()) == lines + 2  # one upload, one delete: not the whole study

    # A line cut short by a kill: a new mirror ignores it, so that file is uploaded again, and no later
    # line runs into it.
    (folder / "runs" / "2.pt").write_bytes(b"v2")
    log_path.write_text(log_path.read_text() + '["runs/2.pt", [2, ')
    again = storage.mirror_of(folder)
    assert again.push() == 1
    (folder / "runs" / "3.pt").write_bytes(b"v2")
    assert again.push() == 1 and storage.mirror_of(folder).push() == 0
    assert remote_files(uri)["runs/2.pt"] == b"v2" and "runs/1.pt" not in remote_files(uri)

    monkeypatch.setattr(storage, "COMPACT_AFTER", 0)  # a log grown to twice what it describes is rewritten
    sizes = []
    for version in range(12):
        (folder / "runs" / "4.pt").write_bytes(b"v%d" % version)
        assert again.push() == 1
        sizes.append(len(log_path.read_text().splitlines()))
    assert max(sizes) <= 2 * 5 + 1 and 5 in sizes
    assert storage.mirror_of(folder)._manifest() == again._manifest()


def test_a_growing_file_is_stored_in_parts_and_a_push_uploads_only_the_parts_it_grew_into(tmp_path, aws, monkeypatch):
    monkeypatch.setattr(storage, "PART_BYTES", 10)
    folder = tmp_path / "study"
    folder.mkdir()
    log_file = folder / files.STUDY_LOG
    log_file.write_bytes(b"a" * 25)
    uri = storage.attach(folder, "s3://studies/parts")
    parts = lambda: {rel: data for rel, data in remote_files(uri).items() if rel.startswith(files.STUDY_LOG)}  # noqa: E731
    assert parts() == {"study.log.part-00000": b"a" * 10, "study.log.part-00001": b"a" * 10,
                       "study.log.part-00002": b"a" * 5}
    fs, root = storage.filesystem(uri)
    with fs.open_output_stream(f"{root}/study.log.part-00000") as out:
        out.write(b"untouched!")  # a part the next push must not upload again

    mirror = storage.mirror_of(folder)
    with open(log_file, "ab") as appended:
        appended.write(b"b" * 12)
    assert mirror.push() == 1
    assert parts() == {"study.log.part-00000": b"untouched!", "study.log.part-00001": b"a" * 10,
                       "study.log.part-00002": b"aaaaabbbbb", "study.log.part-00003": b"b" * 7}
    with fs.open_output_stream(f"{root}/study.log.part-00000") as out:
        out.write(b"a" * 10)
    assert (storage.pull(uri, tmp_path / "copy") / files.STUDY_LOG).read_bytes() == log_file.read_bytes()

    log_file.write_bytes(b"c" * 12)  # rewritten shorter: every part again, the parts past its end deleted
    assert mirror.push() == 1 and parts() == {"study.log.part-00000": b"c" * 10, "study.log.part-00001": b"cc"}
    log_file.write_bytes(b"d" * 12)  # rewritten at the same size: its earlier bytes differ, so all of it again
    assert storage.mirror_of(folder).push() == 1 and parts()["study.log.part-00000"] == b"d" * 10
    log_file.unlink()
    assert mirror.push() == 0 and parts() == {}


def test_periodic_pushes_reread_a_quiet_folder_in_turn_and_a_changed_one_at_once(tmp_path, aws, monkeypatch):
    folder = tmp_path / "study"
    for trial in range(4):
        (folder / "runs" / f"t{trial}").mkdir(parents=True)
        (folder / "runs" / f"t{trial}" / "events").write_bytes(b"1")
    uri = storage.attach(folder, "s3://studies/quiet")
    mirror = storage.mirror_of(folder)
    reads = []
    read_folder = storage._read_folder
    monkeypatch.setattr(storage, "_read_folder", lambda root, rel, *args: reads.append(rel) or read_folder(root, rel, *args))
    for _ in range(storage.QUIET_ROUNDS + 1):  # every folder read unchanged QUIET_ROUNDS times: quiet
        mirror.push(whole=False)
    reads.clear()
    for _ in range(storage.QUIET_ROUNDS):
        mirror.push(whole=False)
    assert sorted(reads) == sorted(["", "runs"] + [f"runs/t{t}" for t in range(4)])  # each once in as many pushes

    # Appended in place (the folder's mtime unchanged): uploaded within QUIET_ROUNDS periodic pushes.
    with open(folder / "runs" / "t0" / "events", "ab") as events:
        events.write(b"2")
    pushes = next(n for n in range(1, storage.QUIET_ROUNDS + 1) if mirror.push(whole=False))
    assert remote_files(uri)["runs/t0/events"] == b"12" and pushes <= storage.QUIET_ROUNDS
    # Renamed over (the folder's mtime changes): the next periodic push has it.
    (folder / "runs" / "t1" / "new").write_bytes(b"x")
    os.replace(folder / "runs" / "t1" / "new", folder / "runs" / "t1" / "events")
    assert mirror.push(whole=False) == 1 and remote_files(uri)["runs/t1/events"] == b"x"
    # A whole push reads every folder.
    reads.clear()
    with open(folder / "runs" / "t2" / "events", "ab") as events:
        events.write(b"2")
    assert mirror.push() == 1 and len(reads) == 6


def test_periodic_pushes_take_tunes_snapshot_when_its_share_of_the_time_allows(tmp_path, aws, monkeypatch):
    folder = tmp_path / "study"
    (folder / "tune" / "run").mkdir(parents=True)
    state = folder / "tune" / "run" / "experiment_state.json"
    state.write_text('"1"')
    uri = storage.attach(folder, "s3://studies/share")
    mirror = storage.mirror_of(folder)
    clock = [1000.0]
    monkeypatch.setattr(storage.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(storage.time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    assert mirror.push(whole=False) == 1  # due: the first; its two agreeing reads took 0.01 s of the clock
    state.write_text('"2"')
    assert mirror.push(whole=False) == 0  # 0.01 s is 5% of 0.2 s: not due yet
    clock[0] += 0.2
    assert mirror.push(whole=False) == 1 and remote_files(uri)["tune/run/experiment_state.json"] == b'"2"'
    state.write_text('"3"')
    assert mirror.push() == 1  # a whole push takes it whatever the time


def test_tune_state_is_uploaded_as_it_was_before_the_run_directories(tmp_path, aws, monkeypatch):
    """The storage never holds a Tune state newer than the trials it describes: a trial that finishes while
    a push runs is in the storage's run directories, not yet in its Tune state."""
    folder = tmp_path / "study"
    (folder / "tune" / "run").mkdir(parents=True)
    (folder / "tune" / "run" / "experiment_state.json").write_text('"trial running"')
    uri = storage.attach(folder, "s3://studies/team")
    upload = storage.Mirror._upload

    def finishing_meanwhile(self, fs, root, relative):
        (folder / "tune" / "run" / "experiment_state.json").write_text('"trial finished"')
        (folder / "pretrain" / "t1").mkdir(parents=True, exist_ok=True)
        (folder / "pretrain" / "t1" / "result.json").write_text("{}")
        return upload(self, fs, root, relative)

    (folder / "pretrain").mkdir()
    (folder / "pretrain" / "log.txt").write_text("x")
    monkeypatch.setattr(storage.Mirror, "_upload", finishing_meanwhile)
    storage.mirror_of(folder).push()
    assert remote_files(uri)["tune/run/experiment_state.json"] == b'"trial running"'


def test_tune_state_read_while_tune_writes_it_is_read_again(tmp_path, aws, monkeypatch):
    """Tune writes its trial list, then its searcher: a read between the two writes is torn, and not pushed."""
    folder = tmp_path / "study"
    run = folder / "tune" / "run"
    run.mkdir(parents=True)
    (run / "experiment_state.json").write_text('"snapshot 1"')
    (run / "searcher-state.pkl").write_bytes(b"snapshot 1.")
    uri = storage.attach(folder, "s3://studies/team")
    read = storage.Mirror._read_tune_state
    calls = []

    def tune_writing_meanwhile(self):
        calls.append(1)
        if len(calls) == 1:  # Tune's next snapshot lands while this read runs: the list read before it, the
            state = read(self)  # searcher after it
            (run / "experiment_state.json").write_text('"snapshot 2"')
            (run / "searcher-state.pkl").write_bytes(b"snapshot 2.")
            return {**state, "tune/run/searcher-state.pkl": b"snapshot 2."}
        return read(self)

    monkeypatch.setattr(storage.Mirror, "_read_tune_state", tune_writing_meanwhile)
    storage.mirror_of(folder).push()
    stored = remote_files(uri)
    assert stored["tune/run/experiment_state.json"] == b'"snapshot 2"'
    assert stored["tune/run/searcher-state.pkl"] == b"snapshot 2."


@pytest.mark.parametrize("uri, words", [("/tmp/x", "not an object-storage URI"),
                                        ("s3://no-such-bucket/x", "cannot open storage")])
def test_a_bad_storage_is_a_one_line_error_before_anything_is_made(tmp_path, aws, uri, words, capsys):
    from sptune.cli.main import main

    code = main(["study", "configs/listops_mini_transformer.yaml", "--smoke", "--dir", str(tmp_path / "s"),
                 "--storage", uri])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and words in err and not (tmp_path / "s").exists()


def test_pulling_refuses_to_mix_folders(tmp_path, aws):
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "study.json").write_text("{}")
    uri = storage.attach(folder, "s3://studies/team")
    with pytest.raises(UserError, match="already exists"):
        storage.pull(uri)  # to the path it had, which is still there
    assert (storage.pull(uri, tmp_path / "elsewhere") / "study.json").read_text() == "{}"
    with pytest.raises(UserError, match="already holds files"):  # a second study of the same name
        storage.attach(folder, "s3://studies/team")
    with pytest.raises(UserError, match="holds no sptune results folder"):
        storage.pull("s3://studies/nothing-here")


@pytest.mark.slow  # ~40 s: an evaluation at smoke size twice, the second after its folder was lost
def test_an_evaluation_is_mirrored_and_pulled_back_when_its_folder_is_gone(s3, tmp_path):
    """`sptune evaluate --storage`: the experiment's folder is mirrored as it runs; rerun after the folder was
    deleted (a lost head), the same command pulls it back and finds every cell finished, training nothing."""
    uri = "s3://studies/team"
    folder = tmp_path / "evaluated"
    command = ["evaluate", "--model", "s4d-legs", "--baselines", "transformer", "--task", "ucr-osuleaf", "--smoke",
               "--dir", folder, "--storage", uri]
    first = finished(sptune(s3, *command), study_dir=folder)
    assert "mirrored to s3://studies/team/evaluated" in first
    kept = {p.relative_to(folder): p.read_bytes() for p in folder.rglob("result.json")}
    assert len(kept) == 2 * 3  # two models, three stages
    shutil.rmtree(folder)
    second = finished(sptune(s3, *command), study_dir=folder)
    assert "resuming: 2 of 2 cells already finished, skipped" in second
    assert {p.relative_to(folder): p.read_bytes() for p in folder.rglob("result.json")} == kept
