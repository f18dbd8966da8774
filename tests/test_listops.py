import collections
import dataclasses

import pytest
import torch

from sptune.tasks import listops
from sptune.tasks.base import PAD_ID, SPECIAL_TOKENS
from sptune.tasks.listops import (LISTOPS, LISTOPS_MINI, VOCAB, decode, encode, generate, label_of,
                                  read_tsv, tokenize)
from lra_files import to_expression, write_tsv

# Short trees keep the tests fast; the generator is the same for every length range.
SMALL = dict(min_length=20, max_length=120)


@pytest.mark.parametrize("expression, label", [
    ("( ( ( [MAX 2 ) 9 ) ] )", 9),  # the example of the official TSV
    ("( ( ( ( [MIN 4 ) 7 ) 3 ) ] )", 3),
    ("( ( ( ( [MED 7 ) 1 ) 4 ) ] )", 4),  # odd count: the middle value
    ("( ( ( ( ( [MED 8 ) 1 ) 4 ) 3 ) ] )", 3),  # even count: (3 + 4) / 2 = 3.5 truncated
    ("( ( ( [MED 9 ) 8 ) ] )", 8),  # 8.5 truncated
    ("( ( ( ( [SM 9 ) 8 ) 7 ) ] )", 4),  # 24 mod 10
    ("( ( ( [MAX ( ( ( [MIN 5 ) 6 ) ] ) ) ( ( ( ( [SM 9 ) 9 ) 1 ) ] ) ) ] )", 9),  # max(5, 19 % 10)
    ("( ( ( [SM ( ( ( [MED 2 ) 5 ) ] ) ) ( ( ( [MAX 1 ) 7 ) ] ) ) ] )", 0),  # (3 + 7) % 10
    ("[MIN 3 [MAX 0 1 ] ]", 1),  # parentheses are optional
    ("7", 7),
])
def test_label_of_hand_written(expression, label):
    assert label_of(expression) == label


@pytest.mark.parametrize("expression", [
    "( ( [MAX 2 ) 9 ) ] )",  # unbalanced parentheses
    "( ( ( [MAX 2 ) 9 )",  # missing `]`
    "[MAX ]",  # an operator without arguments
    "[MAX 2 ] 3",  # tokens after the end
    "[FIRST 2 3 ]",  # not an LRA operator
])
def test_label_of_rejects_malformed(expression):
    with pytest.raises(ValueError):
        label_of(expression)


def test_written_form_matches_official_format():
    tokens = ["[MAX", "2", "9", "]"]
    assert to_expression(tokens) == "( ( ( [MAX 2 ) 9 ) ] )"
    assert tokenize("( ( ( [MAX 2 ) 9 ) ] )") == tokens
    nested = ["[SM", "[MIN", "1", "2", "]", "3", "]"]
    assert to_expression(nested) == "( ( ( [SM ( ( ( [MIN 1 ) 2 ) ] ) ) 3 ) ] )"
    assert tokenize(to_expression(nested)) == nested


def test_vocab_and_encode_round_trip():
    assert len(VOCAB) == 18 == LISTOPS.vocab_size == LISTOPS_MINI.vocab_size
    assert VOCAB[:3] == list(SPECIAL_TOKENS)
    tokens = tokenize("( ( ( [SM ( ( ( [MED 1 ) 2 ) ] ) ) ( ( ( [MIN 0 ) 9 ) ] ) ) ] )")
    ids = encode(tokens)
    assert min(ids) >= len(SPECIAL_TOKENS)
    assert decode(ids) == tokens
    with pytest.raises(ValueError):
        encode(["[FIRST"])


def test_generated_labels_lengths_and_uniqueness():
    examples = generate(300, seed=1, **SMALL)
    assert len(examples) == 300
    assert len({ids for ids, _ in examples}) == 300
    for ids, label in examples:
        assert SMALL["min_length"] < len(ids) < SMALL["max_length"]
        expression = to_expression(decode(ids))
        assert tokenize(expression) == decode(ids)
        assert label_of(expression) == label  # independent re-evaluation of the written form


def test_generation_is_deterministic_by_seed():
    assert generate(50, seed=3, **SMALL) == generate(50, seed=3, **SMALL)
    assert generate(50, seed=3, **SMALL) != generate(50, seed=4, **SMALL)


def test_generator_respects_depth_and_argument_caps():
    for ids, _ in generate(200, seed=0, min_length=10, max_length=200, max_depth=4, max_args=3):
        depth = max_depth = 0
        arg_counts = [0]
        for token in decode(ids):
            if token == "]":
                depth -= 1
                assert 2 <= arg_counts.pop() <= 3
            else:
                arg_counts[-1] += 1
                if token in listops.OPERATORS:
                    depth += 1
                    arg_counts.append(0)
            max_depth = max(max_depth, depth)
        # Root at depth 1 and leaves forced at depth 4: at most 3 nested operators.
        assert max_depth <= 3


def test_label_skew_like_official_data():
    # MIN and MAX push labels to 0 and 9: in the official data both are about twice as frequent
    # as each of 1..8.
    counts = collections.Counter(label for _, label in generate(3000, seed=0, **SMALL))
    middle = sum(counts[d] for d in range(1, 9)) / 8
    assert counts[0] / middle > 1.5
    assert counts[9] / middle > 1.5


def test_tsv_round_trip(tmp_path):
    expressions = ["( ( ( [MAX 2 ) 9 ) ] )", "( ( ( [SM 4 ) 8 ) ] )"]
    labels = [9, 2]
    path = tmp_path / "basic_test.tsv"
    write_tsv(path, expressions, labels)
    assert path.read_text().splitlines()[0] == "Source\tTarget"
    assert read_tsv(path) == (expressions, labels)


def small_task(**extras):
    return dataclasses.replace(LISTOPS_MINI, name="listops-test", seq_len=64, extras={
        "num_train": 40, "num_val": 10, "num_test": 10, "min_length": 10, "max_length": 64,
        "max_depth": 10, "max_args": 10, **extras})


def test_load_splits_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPTUNE_CACHE", str(tmp_path))
    task = small_task(seed=5)
    splits = task.load(seed=0)
    assert {name: len(split) for name, split in splits.items()} == {"train": 40, "val": 10, "test": 10}
    seen = set()
    for split in splits.values():
        assert split.inputs.shape == (len(split), 64) and split.inputs.dtype == torch.int64
        assert split.targets.dtype == torch.int64 and split.lengths.dtype == torch.int64
        for row, length, target in zip(split.inputs, split.lengths, split.targets):
            assert (row[length:] == PAD_ID).all()
            tokens = decode(row[:length].tolist())
            assert label_of(to_expression(tokens)) == target
            seen.add(tuple(tokens))
    assert len(seen) == 60  # no example in two splits

    cached = list((tmp_path / "listops-test").glob("*.pt"))
    assert [p.name for p in cached] == [listops.cache_file(task, task.data_dir()).name]
    assert "seed5" in cached[0].name

    # Second load: read from the cache, no generation; the run seed does not change the data.
    def fail(*args, **kwargs):
        raise AssertionError("generated again instead of reading the cache")

    monkeypatch.setattr(listops, "generate", fail)
    again = task.load(seed=123)
    for name in splits:
        assert torch.equal(again[name].inputs, splits[name].inputs)
        assert torch.equal(again[name].targets, splits[name].targets)


def test_generator_seed_changes_the_data(tmp_path, monkeypatch):
    monkeypatch.setenv("SPTUNE_CACHE", str(tmp_path))
    a, b = small_task(seed=0).load(), small_task(seed=1).load()
    assert not torch.equal(a["train"].inputs, b["train"].inputs)
    assert len(list((tmp_path / "listops-test").glob("*.pt"))) == 2


def test_task_definitions():
    assert LISTOPS.seq_len == 2000 and LISTOPS.mask_ratio == 0.10 and LISTOPS.num_classes == 10
    assert LISTOPS.extras["min_length"] == 500 and LISTOPS.extras["max_length"] == 2000
    assert (LISTOPS.extras["num_train"], LISTOPS.extras["num_val"], LISTOPS.extras["num_test"]) == (96_000, 2_000, 2_000)
    assert LISTOPS.embedded and LISTOPS_MINI.embedded
    assert LISTOPS_MINI.extras["max_length"] <= LISTOPS_MINI.seq_len
