"""`sptune data list | verify | prepare` on fixtures in the releases' formats."""

from __future__ import annotations

import argparse
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")

from sptune.cli import data as data_cli  # noqa: E402
from sptune.errors import UserError  # noqa: E402
from sptune.tasks import bidmc, hub_tasks, listops, lra  # noqa: E402
from lra_files import to_expression, write_tsv  # noqa: E402

MY_TASKS = [*lra.TASKS, *hub_tasks.TASKS, *bidmc.TASKS]


@pytest.fixture(autouse=True)
def roots(offline_roots, monkeypatch):
    tmp_path = offline_roots
    # The tasks of this module plus one generated task; the real registry is checked separately.
    tasks = {t.name: t for t in [*MY_TASKS, listops.LISTOPS_MINI]}
    monkeypatch.setattr(data_cli, "_registry", lambda: tasks)
    return tmp_path


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="sptune")
    data_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(list(argv))
    return args.func(args)


def write_listops_tsvs(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    examples = listops.generate(15, min_length=5, max_length=60, seed=5)
    for k, name in enumerate(lra.LISTOPS_FILES.values()):
        part = examples[5 * k:5 * k + 5]
        write_tsv(directory / name, [to_expression(listops.decode(ids)) for ids, _ in part],
                          [label for _, label in part])


def write_bidmc_ts(directory: Path, target: str = "HR") -> None:
    rng = np.random.default_rng(0)
    directory.mkdir(parents=True, exist_ok=True)
    for part, n in (("TRAIN", 7), ("TEST", 3)):
        with open(directory / f"BIDMC32{target}_{part}.ts", "w") as f:
            f.write(f"@problemName BIDMC32{target}\n@timeStamps false\n@univariate false\n@targetLabel true\n@data\n")
            for _ in range(n):
                f.write(":".join(",".join(f"{v:.2f}" for v in rng.normal(size=4000)) for _ in range(2)))
                f.write(f":{rng.uniform(60, 100):.1f}\n")


def truncate(path: Path, keep: float = 0.6) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


# --- list -------------------------------------------------------------------------------------


def test_list_shows_every_task_its_location_and_status(roots, capsys):
    write_listops_tsvs(roots / "data" / "lra_release" / "listops-1000")
    assert run("data", "list") == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()[1:] if line and not line.startswith(" ")}
    assert set(lines) == {t.name for t in MY_TASKS} | {"listops-mini"}
    assert "ok" in lines["listops-lra"] and str(roots / "data" / "lra_release" / "listops-1000") in lines["listops-lra"]
    assert "missing" in lines["retrieval"] and "sptune data prepare retrieval --from lra_release.gz" in out
    assert "generated on first use" in lines["listops-mini"]
    # A Hub task with no local copy points at the Hugging Face cache it would fall back to.
    assert "missing" in lines["text"] and "stanfordnlp___imdb" in lines["text"]


def test_real_registry_lists_these_tasks(monkeypatch):
    registry = pytest.importorskip("sptune.registry")
    monkeypatch.setattr(data_cli, "_registry", lambda: registry.TASKS)
    listing = data_cli.list_tasks()
    for task in MY_TASKS:
        assert task.name in registry.TASKS and task.name in listing


# --- verify -----------------------------------------------------------------------------------


def test_verify_listops_lra_finds_deleted_and_truncated_files(roots, capsys):
    directory = roots / "data" / "lra_release" / "listops-1000"
    write_listops_tsvs(directory)
    assert run("data", "verify", "listops-lra") == 0
    (directory / "basic_val.tsv").unlink()
    truncate(directory / "basic_test.tsv")
    assert run("data", "verify", "listops-lra") == 1
    problems = data_cli.verify_task("listops-lra")
    assert len(problems) == 2
    assert problems[0].startswith(f"missing {directory / 'basic_val.tsv'}")
    assert problems[1].startswith(f"truncated or corrupt file {directory / 'basic_test.tsv'}")
    assert all("sptune data prepare listops-lra" in p for p in problems)
    assert "2 problem(s)" in data_cli.list_tasks()


def test_verify_listops_lra_finds_a_corrupt_header(roots):
    directory = roots / "data" / "lra_release" / "listops-1000"
    write_listops_tsvs(directory)
    (directory / "basic_train.tsv").write_bytes(b"\x00\xff garbage\n")
    assert data_cli.verify_task("listops-lra") == [
        f"corrupt file {directory / 'basic_train.tsv'}: header is not 'Source<TAB>Target'; "
        f"run `sptune data prepare listops-lra --from lra_release.gz` (or see `sptune data list`)"]


def test_verify_retrieval_finds_a_truncated_file(roots):
    directory = roots / "data" / "lra_release" / "tsv_data"
    directory.mkdir(parents=True)
    for name in lra.AAN_FILES.values():
        (directory / name).write_text("".join(f"1\ta{i}\tb{i}\t{'t' * 300}\t{'u' * 300}\n" for i in range(4)))
    assert data_cli.verify_task("retrieval") == []
    truncate(directory / "new_aan_pairs.train.tsv", keep=0.9)
    (problem,) = data_cli.verify_task("retrieval")
    assert problem.startswith(f"truncated file {directory / 'new_aan_pairs.train.tsv'}")


def test_verify_bidmc_finds_deleted_and_truncated_npy(roots):
    task = bidmc.TASKS[1]
    write_bidmc_ts(roots / "src")
    data_cli.prepare_task(task.name, str(roots / "src"))
    assert data_cli.verify_task(task.name) == []
    (task.data_dir() / "testy.npy").unlink()
    truncate(task.data_dir() / "trainx.npy")
    problems = data_cli.verify_task(task.name)
    assert len(problems) == 2
    assert problems[0].startswith(f"missing {task.data_dir() / 'testy.npy'}")
    assert problems[1].startswith(f"truncated or corrupt file {task.data_dir() / 'trainx.npy'}")


def test_verify_hub_copy_finds_a_truncated_arrow_file(roots):
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    split = datasets.Dataset.from_dict({"text": ["a" * 200] * 50, "label": [0, 1] * 25}, features=features)
    datasets.DatasetDict(train=split, test=split).save_to_disk(str(roots / "data" / "imdb"))
    assert data_cli.verify_task("text") == []
    arrow = next((roots / "data" / "imdb" / "test").glob("*.arrow"))
    truncate(arrow)
    (problem,) = data_cli.verify_task("text")
    assert problem.startswith(f"truncated or corrupt file {arrow}")
    (roots / "data" / "imdb" / "dataset_dict.json").unlink()
    (problem,) = data_cli.verify_task("text")
    assert "not a `save_to_disk` DatasetDict" in problem


# --- prepare ----------------------------------------------------------------------------------


def test_prepare_extracts_only_the_task_files_from_the_release_tarball(roots, capsys):
    release = roots / "src" / "lra_release"
    write_listops_tsvs(release / "listops-1000")
    (release / "pathfinder32").mkdir(parents=True)
    (release / "pathfinder32" / "huge.png").write_bytes(b"\x89PNG" + bytes(1000))
    archive = roots / "src" / "lra_release.gz"  # the release's name: a gzipped tar despite the suffix
    with tarfile.open(archive, "w:gz") as t:
        t.add(release, arcname="lra_release")
    assert run("data", "prepare", "listops-lra", "--from", str(archive)) == 0
    data_dir = roots / "data" / "lra_release" / "listops-1000"
    assert sorted(p.name for p in data_dir.iterdir()) == sorted(lra.LISTOPS_FILES.values())
    assert not (roots / "data" / "lra_release" / "pathfinder32").exists()
    assert not [p for p in (roots / "data").rglob(".*")]  # no scratch directories left behind
    assert len(lra.LISTOPS_LRA.load()["train"]) == 5
    assert "prepared in" in capsys.readouterr().out


def test_prepare_bidmc_from_a_zip(roots):
    write_bidmc_ts(roots / "src" / "monash", target="SpO2")
    archive = roots / "src" / "bidmc.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for path in (roots / "src" / "monash").iterdir():
            z.write(path, arcname=f"BIDMC/{path.name}")
    data_cli.prepare_task("bidmc-spo2", str(archive))
    splits = bidmc.TASKS[2].load()
    assert sum(len(s) for s in splits.values()) == 10


@pytest.mark.parametrize("name, source, message", [
    ("nope", "x", "unknown task 'nope'"),
    ("listops-mini", "x", "generated locally on first use"),
    ("listops-lra", "/does/not/exist.tar.gz", "no such file or directory"),
])
def test_prepare_usage_errors(name, source, message):
    with pytest.raises(UserError, match=message):
        data_cli.prepare_task(name, source)


def test_prepare_rejects_archives_without_the_files_or_unreadable(roots):
    (roots / "empty").mkdir()
    with pytest.raises(UserError, match="no basic_test.tsv, basic_train.tsv, basic_val.tsv inside"):
        data_cli.prepare_task("listops-lra", str(roots / "empty"))
    bad = roots / "bad.tar.gz"
    bad.write_bytes(b"this is not an archive")
    with pytest.raises(UserError, match="not a readable tar or zip archive"):
        data_cli.prepare_task("listops-lra", str(bad))
    with pytest.raises(UserError, match="found no aclImdb_v1.tar.gz contents"):
        data_cli.prepare_task("text", str(roots / "empty"))


def test_prepare_requires_from(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run("data", "prepare", "text")
    assert exit_info.value.code == 2
