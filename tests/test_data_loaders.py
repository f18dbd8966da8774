"""Loaders of the real-data tasks, each on a small fixture written in the release's own format."""

from __future__ import annotations

import io
import os
import pickle
import tarfile
import time
import wave
from pathlib import Path

import numpy as np
import pytest
import torch

datasets = pytest.importorskip("datasets")
from PIL import Image  # noqa: E402

from sptune.errors import UserError  # noqa: E402
from sptune.tasks import bidmc, cache, hub, hub_convert, hub_prepare, hub_tasks, listops, lra  # noqa: E402
from sptune.tasks.base import PAD_ID  # noqa: E402
from lra_files import to_expression, write_tsv  # noqa: E402


@pytest.fixture(autouse=True)
def roots(offline_roots):
    return offline_roots


# --- fixture writers (the releases' formats) --------------------------------------------------


def write_listops_release(root: Path, n: int = 12) -> dict[str, tuple[list[str], list[int]]]:
    directory = root / "lra_release" / "listops-1000"
    directory.mkdir(parents=True, exist_ok=True)
    examples = listops.generate(3 * n, min_length=5, max_length=60, seed=3)
    written = {}
    for k, (split, name) in enumerate(lra.LISTOPS_FILES.items()):
        part = examples[k * n:(k + 1) * n]
        expressions = [to_expression(listops.decode(ids)) for ids, _ in part]
        labels = [label for _, label in part]
        write_tsv(directory / name, expressions, labels)
        written[split] = (expressions, labels)
    return written


def write_aan_release(root: Path, n: int = 6) -> Path:
    directory = root / "lra_release" / "tsv_data"
    directory.mkdir(parents=True, exist_ok=True)
    for name in lra.AAN_FILES.values():
        with open(directory / name, "w", encoding="utf-8") as f:
            for i in range(n):
                # A quote and a non-ASCII character: split on tabs only, encode as UTF-8 bytes.
                f.write(f"{float(i % 2)}\tpaper{i}\tpaper{i + 100}\tsays \"hi\" é {i}\t{'z' * 4500}\n")
    return directory


def png(rgb: np.ndarray) -> dict:
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    return {"bytes": buffer.getvalue(), "path": None}


def wav_bytes(samples: np.ndarray, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return buffer.getvalue()


def save_imdb(root: Path, texts: dict[str, list[str]]) -> None:
    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    dd = datasets.DatasetDict({split: datasets.Dataset.from_dict(
        {"text": rows, "label": [i % 2 for i in range(len(rows))]}, features=features) for split, rows in texts.items()})
    dd.save_to_disk(str(root / "imdb"))


def save_cifar(root: Path, n_train: int = 20, n_test: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)})
    pixels, splits = {}, {}
    for split, n in (("train", n_train), ("test", n_test)):
        pixels[split] = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        splits[split] = datasets.Dataset.from_dict(
            {"img": [png(p) for p in pixels[split]], "label": [i % 10 for i in range(n)]}, features=features)
    datasets.DatasetDict(splits).save_to_disk(str(root / "cifar10"))
    return pixels


def write_ts(path: Path, n: int, rng: np.random.Generator) -> None:
    with open(path, "w") as f:
        f.write("# BIDMC32 fixture\n@problemName BIDMC32RR\n@timeStamps false\n@missing false\n@univariate false\n"
                "@dimensions 2\n@equalLength true\n@seriesLength 4000\n@targetLabel true\n@data\n")
        for _ in range(n):
            x = rng.normal(size=(2, 4000)).round(3)
            f.write(":".join(",".join(map(str, d)) for d in x) + f":{rng.uniform(5, 30):.2f}\n")


# --- LRA release ------------------------------------------------------------------------------


def test_listops_lra_reads_the_release_tsv(roots):
    written = write_listops_release(roots / "data")
    splits = lra.LISTOPS_LRA.load()
    assert set(splits) == {"train", "val", "test"}
    for split, (expressions, labels) in written.items():
        s = splits[split]
        assert s.inputs.shape == (len(labels), 2000) and s.inputs.dtype == torch.int64
        assert s.targets.tolist() == labels
        for i, expression in enumerate(expressions):
            ids = listops.encode(listops.tokenize(expression))
            assert s.lengths[i] == len(ids)
            assert s.inputs[i, : len(ids)].tolist() == ids
            assert (s.inputs[i, len(ids):] == PAD_ID).all()
        assert int(s.inputs.max()) < lra.LISTOPS_LRA.vocab_size == 18


def test_retrieval_pairs_are_bytes_truncated_to_4000(roots):
    write_aan_release(roots / "data")
    splits = lra.RETRIEVAL.load()
    s = splits["val"]  # read from new_aan_pairs.eval.tsv
    assert s.inputs.shape == (6, 2, 4000) and s.lengths.shape == (6, 2)
    first = 'says "hi" é 0'.encode()
    assert s.lengths[0].tolist() == [len(first), 4000]
    assert s.inputs[0, 0, : len(first)].tolist() == [b + 3 for b in first]
    assert s.inputs[0, 1, :4000].eq(ord("z") + 3).all()
    assert s.targets.tolist() == [0, 1, 0, 1, 0, 1]
    assert int(s.inputs.max()) < lra.RETRIEVAL.vocab_size == 259


def test_retrieval_malformed_row_names_file_and_line(roots):
    directory = write_aan_release(roots / "data")
    with open(directory / "new_aan_pairs.test.tsv", "a") as f:
        f.write("1.0\tonly-three\tcolumns\n")
    with pytest.raises(UserError, match=r"new_aan_pairs\.test\.tsv:7: 3 tab-separated columns"):
        lra.RETRIEVAL.load()


def test_missing_release_is_a_user_error_naming_the_fix():
    with pytest.raises(UserError, match="sptune data prepare listops-lra --from lra_release.gz"):
        lra.LISTOPS_LRA.load()


# --- array cache ------------------------------------------------------------------------------


def test_second_load_hits_the_array_cache(roots, monkeypatch):
    write_listops_release(roots / "data")
    first = lra.LISTOPS_LRA.load()

    def fail(path):
        raise AssertionError("parsed the TSV again instead of using the cache")

    monkeypatch.setattr(listops, "read_tsv", fail)
    second = lra.LISTOPS_LRA.load()
    assert torch.equal(first["train"].inputs, second["train"].inputs)
    entries = list((roots / "cache" / "arrays").iterdir())
    assert len(entries) == 1 and (entries[0] / "train_inputs.npy").is_file()

    # A changed source file is a new cache key: it is parsed again.
    path = roots / "data" / "lra_release" / "listops-1000" / "basic_val.tsv"
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    with pytest.raises(AssertionError, match="parsed the TSV again"):
        lra.LISTOPS_LRA.load()


def test_cache_entries_are_memory_mapped_and_rebuilt_when_damaged(roots):
    calls = []

    def build(writer):
        calls.append(1)
        writer.save("x_inputs", np.arange(6, dtype=np.int64).reshape(2, 3))

    arrays = cache.cached_arrays("demo", [], {"a": 1}, build)
    assert isinstance(arrays["x_inputs"], np.memmap) and arrays["x_inputs"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert cache.cached_arrays("demo", [], {"a": 1}, build)["x_inputs"].sum() == 15 and len(calls) == 1
    cache.cached_arrays("demo", [], {"a": 2}, build)  # other settings, other entry
    assert len(calls) == 2
    entry = next(p for p in (roots / "cache" / "arrays").iterdir() if p.name.startswith("demo-"))
    npy = entry / "x_inputs.npy"
    npy.write_bytes(npy.read_bytes()[:-8])  # truncated
    arrays = cache.cached_arrays("demo", [], {"a": 1}, build)
    assert len(calls) == 3 and arrays["x_inputs"].sum() == 15
    assert not any(p.name.startswith(".") for p in (roots / "cache" / "arrays").iterdir())  # no temp dirs left


# --- Hugging Face tasks -----------------------------------------------------------------------


def test_text_reads_a_save_to_disk_copy(roots):
    train = [f"review {i} caf\u00e9" for i in range(19)] + ["x" * 5000]
    save_imdb(roots / "data", {"train": train, "test": ["good", "bad", "ok"]})
    splits = hub_tasks.TEXT.load()
    assert [len(splits[s]) for s in ("train", "val", "test")] == [18, 2, 3]  # 10 % of train held out
    decoded = set()
    for name in ("train", "val"):
        s = splits[name]
        assert s.inputs.shape[1:] == (4096,) and s.inputs.dtype == torch.int64
        for row, length in zip(s.inputs, s.lengths):
            decoded.add(bytes((row[:length] - 3).tolist()).decode())
    assert decoded == {t[:4096] for t in train}
    assert int(splits["test"].inputs.max()) < hub_tasks.TEXT.vocab_size == 259


def test_text_prepare_from_the_aclimdb_archive(roots):
    src = roots / "src" / "aclImdb"
    for split in ("train", "test"):
        for polarity in ("neg", "pos", "unsup"):
            (src / split / polarity).mkdir(parents=True)
            for i in range(5):
                (src / split / polarity / f"{i}_7.txt").write_text(f"{polarity} {i}")
    archive = roots / "src" / "aclImdb_v1.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(src, arcname="aclImdb")
    hub_prepare.prepare_hub_task(hub_tasks.TEXT, archive, hub_tasks.TEXT.data_dir())
    assert hub.verify_hub_task(hub_tasks.TEXT, hub_tasks.TEXT.data_dir()) == []
    splits = hub_tasks.TEXT.load()
    assert len(splits["train"]) + len(splits["val"]) == 10 and len(splits["test"]) == 10
    test = splits["test"]
    texts = [bytes((r[:n] - 3).tolist()).decode() for r, n in zip(test.inputs, test.lengths)]
    assert {(t.split()[0], y) for t, y in zip(texts, test.targets.tolist())} == {("neg", 0), ("pos", 1)}


def test_image_and_scifar_are_normalised_pixel_sequences(roots):
    pixels = save_cifar(roots / "data")
    gray, rgb = hub_tasks.IMAGE.load(), hub_tasks.SCIFAR.load()
    assert [len(gray[s]) for s in ("train", "val", "test")] == [18, 2, 5]
    assert gray["test"].inputs.shape == (5, 1024, 1) and rgb["test"].inputs.shape == (5, 1024, 3)
    assert gray["test"].inputs.dtype == rgb["test"].inputs.dtype == torch.float32
    luma = np.asarray(Image.fromarray(pixels["test"][0]).convert("L"), dtype=np.float32).reshape(-1)
    np.testing.assert_allclose(gray["test"].inputs[0, :, 0].numpy(), (luma - 122.6) / 61.0, atol=1e-5)
    expected = (pixels["test"][0].reshape(1024, 3) / 255.0 - [0.4914, 0.4822, 0.4465]) / [0.247, 0.243, 0.261]
    np.testing.assert_allclose(rgb["test"].inputs[0].numpy(), expected, atol=1e-5)
    assert rgb["test"].targets.tolist() == [0, 1, 2, 3, 4]
    assert (gray["train"].lengths == 1024).all()


def test_cifar_prepare_from_the_python_batches(roots):
    src = roots / "src" / "cifar-10-batches-py"
    src.mkdir(parents=True)
    rng = np.random.default_rng(1)
    for name, n in [*[(f"data_batch_{i}", 2) for i in range(1, 6)], ("test_batch", 3)]:
        with open(src / name, "wb") as f:
            pickle.dump({b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), b"labels": [7] * n}, f)
    archive = roots / "src" / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as t:
        t.add(src, arcname="cifar-10-batches-py")
    hub_prepare.prepare_hub_task(hub_tasks.SCIFAR, archive, hub_tasks.SCIFAR.data_dir())
    splits = hub_tasks.SCIFAR.load()
    assert len(splits["train"]) + len(splits["val"]) == 10 and len(splits["test"]) == 3
    with open(src / "test_batch", "rb") as f:
        row = pickle.load(f)[b"data"][0]
    expected = (row.reshape(3, 1024).T / 255.0 - [0.4914, 0.4822, 0.4465]) / [0.247, 0.243, 0.261]
    np.testing.assert_allclose(splits["test"].inputs[0].numpy(), expected, atol=1e-5)


def test_speech_commands_from_the_release_uses_the_official_lists(roots):
    base = roots / "src" / "speech_commands_v0.02"
    for k, word in enumerate(("yes", "zero", "_background_noise_")):
        (base / word).mkdir(parents=True)
        for i in range(4):
            length = 12000 if i == 3 else 16000  # a short clip is zero-padded
            (base / word / f"spk{i}_nohash_0.wav").write_bytes(wav_bytes(np.full(length, 1000 * (k + 1) + i)))
    (base / "validation_list.txt").write_text("yes/spk0_nohash_0.wav\nzero/spk0_nohash_0.wav\n")
    (base / "testing_list.txt").write_text("yes/spk1_nohash_0.wav\n")
    hub_prepare.prepare_hub_task(hub_tasks.SPEECH_COMMANDS, base, hub_tasks.SPEECH_COMMANDS.data_dir())
    splits = hub_tasks.SPEECH_COMMANDS.load()
    yes, zero = hub_convert.SC_CLASSES.index("yes"), hub_convert.SC_CLASSES.index("zero")
    assert sorted(splits["train"].targets.tolist()) == sorted([yes, yes, zero, zero, zero])
    assert sorted(splits["val"].targets.tolist()) == sorted([yes, zero])
    assert splits["test"].targets.tolist() == [yes]  # background noise is not one of the 35 words
    train = splits["train"].inputs
    assert train.shape == (5, 16000, 1) and train.dtype == torch.float32
    assert abs(float(train.mean())) < 1e-4 and abs(float(train.std()) - 1) < 1e-2  # train statistics
    short = [i for i in range(5) if float(train[i, -1, 0]) != float(train[i, 0, 0])]
    assert len(short) == 2  # the two short train clips end in padding


def test_speech_commands_hub_layout_maps_labels_by_word(roots):
    names = ["yes", "no", "backward", "_unknown_", "_silence_"]  # the Hub's ClassLabel order differs from S4's
    features = datasets.Features({"audio": {"bytes": datasets.Value("binary"), "path": datasets.Value("string")},
                                  "label": datasets.ClassLabel(names=names)})
    clips = {"audio": [{"bytes": wav_bytes(np.full(16000, i)), "path": f"{i}.wav"} for i in range(5)],
             "label": [0, 1, 2, 4, 4]}
    split = datasets.Dataset.from_dict(clips, features=features).cast_column("audio", datasets.Audio(sampling_rate=16000))
    datasets.DatasetDict(train=split, validation=split, test=split).save_to_disk(str(roots / "data" / "speech_commands"))
    splits = hub_tasks.SPEECH_COMMANDS.load()
    assert splits["test"].targets.tolist() == [hub_convert.SC_CLASSES.index(w) for w in ("yes", "no", "backward")]


def test_hub_task_offline_without_data_fails_fast_with_the_fix():
    start = time.monotonic()
    with pytest.raises(UserError, match=r"sptune data prepare text --from"):
        hub_tasks.TEXT.load()
    assert time.monotonic() - start < 5


def test_unreachable_hub_without_offline_flags_fails_fast(monkeypatch):
    # No offline flags: the probe finds nothing listening (port 9 on localhost) and the load
    # then runs offline instead of retrying for ~25 s.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    start = time.monotonic()
    with pytest.raises(UserError, match=r"unreachable.*sptune data prepare image --from"):
        hub_tasks.IMAGE.load()
    assert time.monotonic() - start < 5
    assert datasets.config.HF_HUB_OFFLINE is False  # the forced offline mode was undone


# --- BIDMC ------------------------------------------------------------------------------------


def test_bidmc_prepare_from_ts_and_load_normalised_targets(roots):
    rng = np.random.default_rng(0)
    src = roots / "src"
    src.mkdir()
    write_ts(src / "BIDMC32RR_TRAIN.ts", 14, rng)
    write_ts(src / "BIDMC32RR_TEST.ts", 6, rng)
    task = bidmc.TASKS[0]
    bidmc.prepare_bidmc(task, src, task.data_dir())
    assert sorted(os.listdir(task.data_dir())) == sorted(n for pair in bidmc.SPLIT_FILES.values() for n in pair)
    splits = task.load()
    assert [len(splits[s]) for s in ("train", "val", "test")] == [14, 3, 3]  # S4's 70 / 15 / 15
    assert splits["train"].inputs.shape == (14, 4000, 2) and splits["train"].inputs.dtype == torch.float32
    train_y = splits["train"].targets
    assert float(train_y.min()) == -1.0 and float(train_y.max()) == 1.0
    raw = np.load(task.data_dir() / "trainy.npy")
    assert splits["val"].target_range == (raw.min(), raw.max())
    lo, hi = splits["train"].target_range  # back to the original units
    np.testing.assert_allclose((train_y.double().numpy() + 1.0) * ((hi - lo) / 2.0) + lo, raw, atol=1e-4)


def test_bidmc_reshuffle_sizes_match_s4():
    # BIDMC32: 5550 train + 2399 test series; sklearn's ceil rule gives S4's 5564 / 1192 / 1193.
    x = np.zeros((7949, 1, 1))
    sizes = {k: len(v[1]) for k, v in bidmc.reshuffle_split(x[:5550], np.zeros(5550), x[5550:], np.zeros(2399)).items()}
    assert sizes == {"train": 5564, "val": 1192, "test": 1193}


def test_bidmc_without_val_files_holds_out_part_of_train(roots):
    task = bidmc.TASKS[1]
    directory = task.data_dir()
    directory.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for x_name, y_name in (bidmc.SPLIT_FILES["train"], bidmc.SPLIT_FILES["test"]):
        np.save(directory / x_name, rng.normal(size=(10, 4000, 2)))
        np.save(directory / y_name, rng.uniform(60, 100, size=(10, 1)))
    splits = task.load()
    assert [len(splits[s]) for s in ("train", "val", "test")] == [9, 1, 10]


def test_bidmc_wrong_shape_is_a_user_error(roots):
    task = bidmc.TASKS[2]
    directory = task.data_dir()
    directory.mkdir(parents=True)
    for x_name, y_name in bidmc.SPLIT_FILES.values():
        np.save(directory / x_name, np.zeros((3, 2, 4000)))
        np.save(directory / y_name, np.zeros(3))
    with pytest.raises(UserError, match=r"expected \(N, 4000, 2\)"):
        task.load()
