"""Atomic writes: the whole file or the old one, with the mode a plain open() would give."""

import os

import pytest

from sptune import atomic


def test_written_files_get_the_umask_mode_not_mkstemps_0600(tmp_path):
    path, plain = tmp_path / "table.md", tmp_path / "plain.md"
    atomic.write_text(path, "x")
    plain.write_text("x")
    assert path.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "result.json"
    atomic.write_json(path, {"a": 1})
    with pytest.raises(RuntimeError):
        with atomic.replacing(path) as tmp:
            tmp.write_text("half")
            raise RuntimeError("crash")
    assert path.read_text().strip().startswith("{") and os.listdir(tmp_path) == ["result.json"]
