"""tests/open_watch.py sees what it claims and fails where it should: another process's open is the watch's
alone, this process's is both counters', a stat is neither's, an atomic write opens only a temporary name, other
names and subfolders are ignored, merged events and an overflowed queue are reported rather than undercounted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from open_watch import OpenWatch, QueueOverflow, other_opens, own_opens
from sptune.atomic import write_json

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


@pytest.fixture
def study(tmp_path: Path) -> Path:
    """A study.json (written before any watch starts) in a folder of its own."""
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "study.json").write_text("{}")
    return folder / "study.json"


def key(path: Path) -> str:
    return os.path.join(os.path.realpath(path.parent), path.name)


def read_in_subprocess(path: Path, times: int = 1) -> None:
    code = f"for _ in range({times}): open({str(path)!r}).read()"
    subprocess.run([sys.executable, "-S", "-c", code], check=True, timeout=30)


def test_another_process_is_counted_by_the_watch_only(study):
    with OpenWatch([study.parent]) as watch, own_opens() as own:
        read_in_subprocess(study)
    assert watch.counts() == {key(study): 1}
    assert own.opens == [] and own.counts() == {}
    assert other_opens(watch, own) == {key(study): 1}


def test_opens_that_close_in_turn_are_counted_one_by_one(study):
    """Without the close events between them the kernel would merge the three opens into one."""
    with OpenWatch([study.parent]) as watch:
        read_in_subprocess(study, times=3)
    assert watch.counts() == {key(study): 3}


def test_this_process_is_counted_by_both_with_its_modes(study):
    with OpenWatch([study.parent]) as watch, own_opens() as own:
        study.read_text()
        with open(study, "a") as appended:
            appended.write(" ")
        os.close(os.open(study, os.O_RDONLY))
    assert watch.counts() == {key(study): 3}
    assert [(Path(o.path), o.mode, o.writes) for o in own.opens] == [(study, "r", False), (study, "a", True),
                                                                      (study, "r", False)]
    assert own.counts() == {key(study): 3}
    assert own.counts(writes=True) == {key(study): 1} and own.counts(writes=False) == {key(study): 2}
    assert other_opens(watch, own) == {}


def test_both_processes_together(study):
    with OpenWatch([study.parent]) as watch, own_opens() as own:
        study.read_text()
        read_in_subprocess(study, times=2)
        study.read_text()
    assert watch.counts() == {key(study): 4} and own.counts() == {key(study): 2}
    assert other_opens(watch, own) == {key(study): 2}


def test_a_stat_or_a_listing_opens_nothing(study):
    with OpenWatch([study.parent]) as watch, own_opens() as own:
        assert study.is_file() and study.exists()
        os.stat(study)
        os.path.getsize(study)
        assert "study.json" in os.listdir(study.parent)
        subprocess.run([sys.executable, "-S", "-c", f"import os; os.stat({str(study)!r})"], check=True, timeout=30)
    assert watch.counts() == {} and own.opens == []


def test_an_atomic_write_opens_only_a_temporary_name(study):
    with OpenWatch([study.parent]) as watch, OpenWatch([study.parent], names=None) as every, \
            own_opens() as own, own_opens(names=None) as own_every:
        write_json(study, {"trials": 1})
    assert watch.counts() == {} and own.opens == []
    # Not blindness: the write opened its temporary name in the same folder, and both counters saw it.
    temporary = [Path(p).name for p in every.counts()]
    assert temporary and all(n.startswith(".study.json.") for n in temporary), temporary
    assert any(Path(o.path).name.startswith(".study.json.") and o.writes for o in own_every.opens)
    with OpenWatch([study.parent]) as watch:  # the replaced file is opened like any other
        study.read_text()
    assert watch.counts() == {key(study): 1}


def test_other_names_and_subfolders_are_ignored(study):
    other = study.parent / "other.json"
    nested = study.parent / "trial" / "study.json"
    nested.parent.mkdir()
    other.write_text("{}")
    nested.write_text("{}")
    with OpenWatch([study.parent]) as watch, OpenWatch([study.parent], names="other.json") as others, \
            OpenWatch([study.parent, nested.parent]) as both, own_opens() as own:
        other.read_text()
        nested.read_text()
        read_in_subprocess(other)
    assert watch.counts() == {}  # not recursive, and other.json is not watched for
    assert others.counts() == {key(other): 2}
    assert both.counts() == {key(nested): 1}  # each folder named is watched, counted by path
    assert own.counts() == {key(nested): 1}
    assert other_opens(watch, own) == {}  # a path outside the watch is left out of the difference


def test_opens_held_at_once_merge_and_the_difference_says_so(study):
    """Two opens with no event between them reach inotify as one: other_opens refuses a negative count."""
    with OpenWatch([study.parent], background=False) as watch, own_opens() as own:
        with open(study) as first, open(study) as second:
            first.read(), second.read()
    assert watch.counts() == {key(study): 1} and own.counts() == {key(study): 2}
    with pytest.raises(AssertionError, match="fewer opens"):
        other_opens(watch, own)


def test_an_overflowed_queue_raises(study):
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip(f"max_queued_events is {limit}: too many opens to overflow it quickly")
    with pytest.raises(QueueOverflow):
        with OpenWatch([study.parent], background=False) as watch:
            for _ in range(limit // 2 + 10):  # an open and a close each, never merged
                os.close(os.open(study, os.O_RDONLY))
            watch.counts()
    with OpenWatch([study.parent]) as watch:  # drained as it goes, the same opens are all counted
        for _ in range(limit // 2 + 10):
            os.close(os.open(study, os.O_RDONLY))
    assert watch.counts() == {key(study): limit // 2 + 10}
