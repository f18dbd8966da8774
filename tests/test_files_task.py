"""The `files` task: a directory of the researcher's own .npz, parquet or datasets files, what is
inferred from them, every problem `verify_dir` names, and `sptune data verify DIR`."""

from __future__ import annotations

import os
import re
from pathlib import Path

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from sptune.cli import main as cli  # noqa: E402
from sptune.config import STAGES  # noqa: E402
from sptune.errors import UserError  # noqa: E402
from sptune.records import studies  # noqa: E402
from sptune.tasks import files  # noqa: E402
from sptune.tasks.base import PAD_ID  # noqa: E402


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def write_npz(directory: Path, split: str, inputs, targets, lengths=None, **extra) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {"inputs": inputs, "targets": targets, **({} if lengths is None else {"lengths": lengths}), **extra}
    np.savez(directory / f"{split}.npz", **arrays)


def write_parquet(directory: Path, split: str, columns: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), directory / f"{split}.parquet")


def write_datasets(directory: Path, splits: dict[str, dict]) -> None:
    import datasets

    datasets.disable_progress_bars()
    datasets.DatasetDict({name: datasets.Dataset.from_dict(cols) for name, cols in splits.items()}).save_to_disk(
        str(directory))


def classes(n: int, k: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64) % k


def signals(n: int, length: int, seed: int = 0) -> np.ndarray:
    """(n, length) float32; row i starts with i so a row can be recognised after the val split."""
    x = np.random.default_rng(seed).normal(size=(n, length)).astype(np.float32)
    x[:, 0] = np.arange(n)
    return x


def good_npz(directory: Path) -> Path:
    write_npz(directory, "train", signals(10, 8), classes(10, 2))
    write_npz(directory, "test", signals(4, 8, seed=1), classes(4, 2))
    return directory


# --- each format and what is inferred ---------------------------------------------------------


def test_npz_tokens_are_shifted_padded_and_size_the_vocabulary(tmp_path):
    inputs = np.array([[0, 4, 9, -1], [5, 1, 7, 7], [2, 2, 99, 99]], dtype=np.int32)  # -1 / 99: padding
    lengths = np.array([3, 4, 2])
    write_npz(tmp_path, "train", inputs, np.array([0, 2, 1]), lengths)
    write_npz(tmp_path, "val", np.array([[3, 3, 3, 3]]), np.array([1]))
    write_npz(tmp_path, "test", np.array([[10, 0, 0, 0]]), np.array([2]), np.array([1]))
    task = files.load_files_task(tmp_path)
    assert (task.name, task.input_kind, task.seq_len, task.num_classes, task.metric) == \
        ("files", "tokens", 4, 3, "accuracy")
    assert (task.mask_ratio, task.pretrain_loss, task.channels) == (0.15, "ce", 0)
    assert task.vocab_size == 10 + 1 + 3  # largest id at a valid position (test's 10), never the padding's 99
    assert task.extras["format"] == "npz" and task.extras["val_from_train"] is False
    assert task.data_dir("/some/other/root") == tmp_path.resolve()
    splits = task.load("/some/other/root", seed=3)
    train = splits["train"]
    assert train.inputs.tolist() == [[3, 7, 12, PAD_ID], [8, 4, 10, 10], [5, 5, PAD_ID, PAD_ID]]
    assert train.targets.dtype == torch.int64 and train.targets.tolist() == [0, 2, 1]
    assert train.lengths.dtype == torch.int64 and train.lengths.tolist() == [3, 4, 2]
    assert splits["val"].lengths.tolist() == [4] and splits["test"].inputs.tolist() == [[13, PAD_ID, PAD_ID, PAD_ID]]
    assert task.split_sizes() == {"train": 3, "val": 1, "test": 1}


def test_npz_continuous_one_channel(tmp_path):
    good_npz(tmp_path)
    write_npz(tmp_path, "val", signals(3, 8, seed=2), classes(3, 2))
    task = files.load_files_task(tmp_path)
    assert (task.input_kind, task.channels, task.seq_len, task.vocab_size) == ("continuous", 1, 8, 0)
    assert (task.mask_ratio, task.pretrain_loss) == (0.25, "l1")
    test = task.load(seed=0)["test"]
    assert test.inputs.shape == (4, 8, 1) and test.inputs.dtype == torch.float32
    assert torch.equal(test.inputs[..., 0], torch.from_numpy(signals(4, 8, seed=1)))
    assert test.lengths.tolist() == [8] * 4


def test_parquet_multichannel_regression(tmp_path):
    rng = np.random.default_rng(0)
    x = {split: rng.normal(size=(n, 5, 2)) for split, n in (("train", 6), ("val", 2), ("test", 3))}
    for split, values in x.items():
        write_parquet(tmp_path, split, {"inputs": values.tolist(), "targets": values[:, :, 0].sum(axis=1),
                                        "lengths": [5, 3] * (len(values) // 2) + [5] * (len(values) % 2)})
    task = files.load_files_task(tmp_path)
    assert (task.input_kind, task.channels, task.seq_len) == ("continuous", 2, 5)
    assert (task.num_classes, task.metric, task.is_regression) == (0, "r2", True)
    assert task.extras["format"] == "parquet"
    train = task.load(seed=0)["train"]
    assert train.inputs.shape == (6, 5, 2) and train.targets.dtype == torch.float32
    assert train.lengths.tolist() == [5, 3, 5, 3, 5, 3]
    assert np.allclose(train.inputs[0].numpy(), x["train"][0])
    assert np.allclose(train.inputs[1, :3].numpy(), x["train"][1, :3]) and not train.inputs[1, 3:].any()
    assert np.allclose(train.targets.numpy(), x["train"][:, :, 0].sum(axis=1))


def test_parquet_single_channel_list_column(tmp_path):
    for split, n in (("train", 5), ("test", 2)):
        write_parquet(tmp_path, split, {"inputs": signals(n, 7).tolist(), "targets": classes(n, 2)})
    task = files.load_files_task(tmp_path)
    assert (task.input_kind, task.channels, task.seq_len, task.num_classes) == ("continuous", 1, 7, 2)
    assert task.load(seed=0)["test"].inputs.shape == (2, 7, 1)


def test_a_study_keeps_a_relative_task_path_absolute_for_its_trials(tmp_path, monkeypatch):
    """Trials run in other directories (Tune's trial folders, other nodes): study.json holds the path resolved."""
    good_npz(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    state = studies.resolve(None, ["task.name=files", "task.path=data"], check_rungs=False)
    assert {stage: cfg["task"]["path"] for stage, cfg in state.stages.items()} == \
        dict.fromkeys(STAGES, str((tmp_path / "data").resolve()))


@pytest.mark.parametrize("val_name", ["validation", "val"])
def test_datasets_directory_tokens(tmp_path, val_name):
    write_datasets(tmp_path, {
        "train": {"inputs": [[1, 2, 3], [4, 5, 0]], "targets": [0, 1], "lengths": [3, 2]},
        val_name: {"inputs": [[6, 6, 6]], "targets": [1]},
        "test": {"inputs": [[7, 0, 0]], "targets": [0], "lengths": [1]},
    })
    task = files.load_files_task(tmp_path)
    assert (task.input_kind, task.seq_len, task.num_classes, task.vocab_size) == ("tokens", 3, 2, 7 + 1 + 3)
    assert task.extras["format"] == "datasets" and task.extras["val_from_train"] is False
    splits = task.load(seed=0)
    assert splits["train"].inputs.tolist() == [[4, 5, 6], [7, 8, PAD_ID]]
    assert splits["val"].inputs.tolist() == [[9, 9, 9]] and splits["val"].lengths.tolist() == [3]
    assert splits["test"].inputs.tolist() == [[10, PAD_ID, PAD_ID]]


# --- the val split drawn from train -----------------------------------------------------------


def test_missing_val_is_a_stratified_fixed_share_of_train_and_described(tmp_path):
    write_npz(tmp_path, "train", signals(60, 8), classes(60, 3))
    write_npz(tmp_path, "test", signals(9, 8, seed=1), classes(9, 3))
    task = files.load_files_task(tmp_path)
    assert task.extras["val_from_train"] is True and task.extras["val_split"] == "stratified"
    splits = task.load(seed=0)
    train, val = splits["train"], splits["val"]
    assert (len(train), len(val), len(splits["test"])) == (48, 12, 9)
    assert val.targets.bincount().tolist() == [4, 4, 4]  # 20% of each class's 20
    rows = sorted(train.inputs[:, 0, 0].long().tolist() + val.inputs[:, 0, 0].long().tolist())
    assert rows == list(range(60))  # a partition of train
    assert torch.equal(task.load(seed=7)["val"].inputs, val.inputs)  # the run seed keeps the split
    assert task.split_sizes() == {"train": 48, "val": 12, "test": 9}
    assert task.description == files.describe(task) == (
        f"files task {tmp_path.resolve()} (npz): continuous, 1 channel, length 8, 3 classes (accuracy); "
        f"train 48 / val 12 (drawn from train: stratified 20%, seed 0) / test 9; masked SPT default 25% with L1")


def test_the_drawn_val_split_is_the_same_in_a_fresh_cache(tmp_path, monkeypatch):
    write_npz(tmp_path / "data", "train", signals(30, 4), classes(30, 2))
    write_npz(tmp_path / "data", "test", signals(4, 4), classes(4, 2))
    first = files.load_files_task(tmp_path / "data").load(seed=0)["val"].inputs
    monkeypatch.setenv("SPTUNE_CACHE", str(tmp_path / "another-cache"))
    assert torch.equal(files.load_files_task(tmp_path / "data").load(seed=1)["val"].inputs, first)


def test_missing_val_of_a_regression_task_is_a_plain_share(tmp_path):
    write_npz(tmp_path, "train", signals(10, 4), np.linspace(0, 1, 10))
    write_npz(tmp_path, "test", signals(2, 4), np.array([0.5, 0.25]))
    task = files.load_files_task(tmp_path)
    assert task.extras["val_split"] == "random" and len(task.load(seed=0)["val"]) == 2
    assert "regression (r2); train 8 / val 2 (drawn from train: 20%, seed 0) / test 2" in task.description


def test_classes_too_small_to_stratify_fall_back_to_a_plain_share(tmp_path):
    write_npz(tmp_path, "train", signals(6, 4), np.array([0, 0, 0, 0, 0, 1]))
    write_npz(tmp_path, "test", signals(2, 4), np.array([0, 1]))
    task = files.load_files_task(tmp_path)
    assert task.extras["val_split"] == "random"
    assert "(drawn from train: 20%, seed 0; too few examples per class to stratify)" in task.description


def test_tokens_description(tmp_path):
    write_npz(tmp_path, "train", np.array([[1, 2], [3, 4]]), np.array([0, 1]))
    write_npz(tmp_path, "val", np.array([[1, 2]]), np.array([1]))
    write_npz(tmp_path, "test", np.array([[1, 2]]), np.array([0]))
    assert files.describe(files.load_files_task(tmp_path)) == (
        f"files task {tmp_path.resolve()} (npz): tokens, vocab 8 (incl. 3 special), length 2, 2 classes (accuracy); "
        f"train 2 / val 1 / test 1; masked SPT default 15% with cross-entropy")


def test_load_is_cached_until_a_file_changes(tmp_path):
    good_npz(tmp_path)
    task = files.load_files_task(tmp_path)
    assert files.load_files_task(str(tmp_path)) is task
    write_npz(tmp_path, "test", signals(4, 8, seed=1), classes(4, 3))  # a third class appears in test
    stat = (tmp_path / "test.npz").stat()
    os.utime(tmp_path / "test.npz", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10 ** 9))
    with pytest.raises(UserError, match=r"test\.npz: class labels 2 never occur in train"):
        files.load_files_task(tmp_path)
    with pytest.raises(UserError, match=r"class labels 2 never occur in train"):
        task.load(seed=0)  # a task read before the change refuses the changed files


def test_a_task_read_before_its_files_changed_shape_refuses_to_load(tmp_path):
    task = files.load_files_task(good_npz(tmp_path))
    write_npz(tmp_path, "train", signals(10, 9), classes(10, 2))
    write_npz(tmp_path, "test", signals(4, 9), classes(4, 2))
    with pytest.raises(UserError, match=r"the files in .* changed since the task was read \(.*length 9"):
        task.load(seed=0)
    assert files.load_files_task(tmp_path).load(seed=0)["train"].inputs.shape == (8, 9, 1)


def test_verifier_of_the_task_checks_its_directory(tmp_path):
    task = files.load_files_task(good_npz(tmp_path))
    assert task.verifier(task, task.data_dir()) == []
    (tmp_path / "test.npz").unlink()
    assert task.verifier(task, task.data_dir()) == [f"{tmp_path.resolve() / 'test.npz'}: missing test split; "
                                                    f"add it (arrays inputs, targets, optional lengths)"]


# --- every problem verify_dir names -----------------------------------------------------------


def _train_test(d: Path, train: dict, test: dict | None = None) -> None:
    base = {"inputs": signals(5, 6), "targets": classes(5, 2)}
    write_npz(d, "train", **{**base, **train})
    write_npz(d, "test", **{**base, **(test or {})})


def _ragged_npz(d: Path) -> None:
    ragged = np.empty(5, dtype=object)
    ragged[:] = [np.zeros(n, dtype=np.float32) for n in (3, 4, 5, 6, 6)]
    _train_test(d, {"inputs": ragged})


def _ragged_parquet(d: Path) -> None:
    write_parquet(d, "train", {"inputs": [[1.0, 2.0], [1.0, 2.0, 3.0]], "targets": [0, 1]})
    write_parquet(d, "test", {"inputs": [[1.0, 2.0, 3.0]], "targets": [0]})


def _missing_targets_parquet(d: Path) -> None:
    write_parquet(d, "train", {"inputs": signals(3, 4).tolist(), "label": [0, 1, 0]})
    write_parquet(d, "test", {"inputs": signals(3, 4).tolist(), "targets": [0, 1, 0]})


def _datasets_without_test(d: Path) -> None:
    two = {"inputs": [[1, 2], [3, 4]], "targets": [0, 1]}
    write_datasets(d, {"train": two, "valid": two})


def _missing_inputs(d: Path) -> None:
    write_npz(d, "train", signals(5, 6), classes(5, 2))
    np.savez(d / "test.npz", x=signals(5, 6), targets=classes(5, 2))


def _mixed_formats(d: Path) -> None:
    good_npz(d)
    write_parquet(d, "val", {"inputs": signals(3, 8).tolist(), "targets": [0, 1, 0]})


PROBLEMS = {
    "missing directory": (lambda d: None, r"^{d}: no such directory; point task\.path at a directory"),
    "not a directory": (lambda d: d.write_text("x"), r"^{d}: not a directory; point task\.path at"),
    "no recognised format": (lambda d: (d.mkdir(), (d / "data.csv").write_text("1,2")),
                             r"^{d}: no recognised data files; add train\.npz and test\.npz"),
    "two formats": (_mixed_formats, r"^{d}: holds npz and parquet splits; keep the files of one format only"),
    "missing test split": (lambda d: write_npz(d, "train", signals(5, 4), classes(5, 2)),
                           r"^{d}/test\.npz: missing test split; add it \(arrays inputs, targets"),
    "missing train split": (lambda d: write_parquet(d, "test", {"inputs": [[1, 2]], "targets": [0]}),
                            r"^{d}/train\.parquet: missing train split; add it \(columns inputs, targets"),
    "datasets split missing": (_datasets_without_test,
                               r"^{d}: the DatasetDict has no test split \(splits: train, valid\); save it with"),
    "missing inputs": (_missing_inputs,
                       r"^{d}/test\.npz: no `inputs` array \(found: targets\); add `inputs` holding the sequences"),
    "missing targets column": (_missing_targets_parquet,
                               r"^{d}/train\.parquet: no `targets` column \(found: inputs\); add `targets`"),
    "ragged object array": (_ragged_npz, r"^{d}/train\.npz: `inputs` is an object array .*; pad every sequence"),
    "ragged list column": (_ragged_parquet,
                           r"^{d}/train\.parquet: `inputs` rows differ in length \(2 to 3\); pad every sequence"),
    "inputs vs targets count": (lambda d: _train_test(d, {"targets": classes(4, 2)}),
                                r"^{d}/train\.npz: arrays of different lengths \(5 inputs, 4 targets\)"),
    "lengths count": (lambda d: _train_test(d, {}, {"lengths": np.array([6, 6])}),
                      r"^{d}/test\.npz: arrays of different lengths \(5 inputs, 5 targets, 2 lengths\)"),
    "sequence length differs": (lambda d: _train_test(d, {}, {"inputs": signals(5, 7)}),
                                r"^{d}/test\.npz: sequence length 7, but {d}/train\.npz has sequence length 6; pad"),
    "channels differ": (lambda d: _train_test(d, {"inputs": np.zeros((5, 6, 2))}, {"inputs": np.zeros((5, 6, 3))}),
                        r"^{d}/test\.npz: 3 channel\(s\), but {d}/train\.npz has 2 channel\(s\); give every"),
    "tokens vs floats": (lambda d: _train_test(d, {"inputs": np.ones((5, 6), dtype=np.int64)}),
                         r"^{d}/test\.npz: float \(continuous\) inputs, but {d}/train\.npz has integer \(token\) "
                         r"inputs; store every split's inputs with the same kind of dtype"),
    "NaN in inputs": (lambda d: _train_test(d, {"inputs": np.where(np.eye(5, 6) > 0, np.nan, 1.0)}),
                      r"^{d}/train\.npz: `inputs` holds NaN or inf \(5 value\(s\), first in example 0\); replace"),
    "inf in targets": (lambda d: _train_test(d, {"targets": np.array([0.5, np.inf, 1, 2, 3])},
                                             {"targets": np.zeros(5)}),
                       r"^{d}/train\.npz: `targets` holds NaN or inf \(1 value\(s\), first in example 1\); give"),
    "negative token ids": (lambda d: _train_test(d, {"inputs": -np.eye(5, 6, k=1, dtype=np.int64)},
                                                 {"inputs": np.ones((5, 6), dtype=np.int64)}),
                           r"^{d}/train\.npz: `inputs` holds negative token ids \(5 value\(s\), first in example 0, "
                           r"min -1\); give ids >= 0"),
    "lengths out of range": (lambda d: _train_test(d, {"lengths": np.array([6, 0, 3, 7, 1])}),
                             r"^{d}/train\.npz: `lengths` outside \[1, 6\] \(2 value\(s\), first in example 1, "
                             r"min 0, max 7\)"),
    "negative labels": (lambda d: _train_test(d, {}, {"targets": np.array([0, 1, -1, 0, 1])}),
                        r"^{d}/test\.npz: negative class labels \(1 value\(s\), first in example 2, min -1\); give "
                        r"class ids 0 \.\. K-1"),
    "label unseen in train": (lambda d: _train_test(d, {}, {"targets": np.array([0, 1, 2, 5, 1])}),
                              r"^{d}/test\.npz: class labels 2, 5 never occur in train \(classes 0 \.\. 1\); "
                              r"relabel them or add examples of them to train"),
    "one example to draw val from": (lambda d: _train_test(d, {"inputs": signals(1, 6), "targets": np.zeros(1, int)},
                                                           {"targets": np.zeros(5, int)}),
                                     r"^{d}/train\.npz: 1 example is too few to draw a validation split from; add a "
                                     r"val split"),
    "empty split": (lambda d: _train_test(d, {}, {"inputs": np.zeros((0, 6)), "targets": np.zeros(0, np.int64)}),
                    r"^{d}/test\.npz: empty split \(0 examples\); add examples or remove the file"),
}


@pytest.mark.parametrize("case", list(PROBLEMS))
def test_verify_names_each_problem_and_its_fix(tmp_path, case):
    make, pattern = PROBLEMS[case]
    directory = tmp_path / "data"
    make(directory)
    problems = files.verify_dir(directory)
    assert len(problems) == 1, problems  # one line per problem, no knock-on noise
    assert "\n" not in problems[0]
    assert re.search(pattern.format(d=directory), problems[0]), problems[0]
    with pytest.raises(UserError, match="^files task: "):
        files.load_files_task(directory)


def test_every_problem_is_listed_not_only_the_first(tmp_path):
    _train_test(tmp_path, {"inputs": np.full((5, 6), np.nan)}, {"targets": np.array([0, 1, 9, -1, 0])})
    problems = files.verify_dir(tmp_path)
    assert len(problems) == 3
    assert "train.npz: `inputs` holds NaN" in problems[0] and "test.npz: negative class labels" in problems[1]
    assert "test.npz: class labels 9 never occur in train" in problems[2]
    with pytest.raises(UserError, match=r"holds NaN .*\(and 2 more: `sptune data verify .*` lists them all\)$"):
        files.load_files_task(tmp_path)


def test_values_beyond_each_length_are_padding_and_not_checked(tmp_path):
    x = signals(5, 6)
    x[:, 4:] = np.nan
    _train_test(tmp_path, {"inputs": x, "lengths": np.full(5, 4)})
    assert files.verify_dir(tmp_path) == []
    train = files.load_files_task(tmp_path).load(seed=0)["train"]
    assert torch.isfinite(train.inputs).all() and not train.inputs[:, 4:].any()


# --- sptune data verify DIR -------------------------------------------------------------------


def test_cli_verify_a_good_directory(tmp_path, capsys):
    good_npz(tmp_path / "mine")
    assert cli.main(["data", "verify", str(tmp_path / "mine")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{(tmp_path / 'mine').resolve()}: ok"
    assert out[1].startswith(f"files task {(tmp_path / 'mine').resolve()} (npz): continuous, 1 channel, length 8, "
                             f"2 classes (accuracy); train 8 / val 2 (drawn from train: stratified 20%")


def test_cli_verify_prints_every_problem_and_exits_1(tmp_path, capsys):
    _train_test(tmp_path / "mine", {"lengths": np.array([6, 0, 3, 7, 1])}, {"inputs": signals(5, 9)})
    assert cli.main(["data", "verify", str(tmp_path / "mine")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2
    assert out[0].startswith(f"{tmp_path.resolve() / 'mine' / 'train.npz'}: `lengths` outside [1, 6]")
    assert out[1].startswith(f"{tmp_path.resolve() / 'mine' / 'test.npz'}: sequence length 9, but")


def test_cli_verify_a_directory_named_without_a_separator(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    assert cli.main(["data", "verify", "mine"]) == 1
    assert "no recognised data files" in capsys.readouterr().out


def test_cli_verify_still_takes_task_names(capsys):
    assert cli.main(["data", "verify", "listops-mini"]) == 0  # generated locally: nothing to check
    assert capsys.readouterr().out.startswith("listops-mini: ok")
