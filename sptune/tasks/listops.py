"""ListOps (LRA, Tay et al. 2020; after Nangia & Bowman 2018), generated locally.

A clean-room reimplementation of the LRA generator (`lra_benchmarks/data/listops.py`), written
from its specification:

* Operators MIN, MAX, MED (median, truncated to an int) and SM (sum mod 10) over digits 0-9.
* A node at depth < max_depth is an operator with probability VALUE_P = 0.25 and a leaf (a uniform
  digit) otherwise; at max_depth it is always a leaf. The root has depth 1. An operator takes
  randint(2, max_args) arguments. Checked against the official code: it draws r = random() and
  makes a *leaf* when r > VALUE_P, so "a node is a leaf with probability 0.75 below the depth cap"
  is the official behaviour (an operator with probability 0.75 would be a different data set).
* A tree's length is its number of tokens without parentheses (a leaf counts 1, an operator 2 plus
  its arguments: the operator token and `]`), and trees with min_length < length < max_length
  are kept, without duplicates. Official LRA: 96k/2k/2k, 500 < length < 2000, depth 10, 10 args.
* The written form (the TSV "Source" column) prints the official nested pairs
  (((op, a1), a2), ..., "]") with parentheses: `( ( ( [MAX 2 ) 9 ) ] )` has label 9.

Models see the tokens without parentheses but with `]` (`tokenize`), as in the S4 code base's
ListOps loader that the SPT paper builds on. (LRA's own pipeline used tfds' alphanumeric tokenizer,
which also drops `]` and the brackets of the operators.)
"""

from __future__ import annotations

import csv
import os
import random
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Sequence

import torch

from sptune import atomic
from sptune.errors import UserError
from sptune.tasks.base import PAD_ID, SPECIAL_TOKENS, Split, Task

MIN, MAX, MED, SUM_MOD, END = "[MIN", "[MAX", "[MED", "[SM", "]"
OPERATORS = (MIN, MAX, MED, SUM_MOD)
DIGITS = tuple(str(d) for d in range(10))
VOCAB: list[str] = [*SPECIAL_TOKENS, *DIGITS, *OPERATORS, END]
TOKEN_ID = {token: i for i, token in enumerate(VOCAB)}

VALUE_P = 0.25  # probability that a node below the depth cap is an operator (official constant)

# Bump when the generator's output changes, so caches written by an older version are not reused.
GENERATOR_VERSION = 1

_DIGIT0_ID = TOKEN_ID["0"]  # the digits' ids are consecutive
_OPERATOR_IDS = tuple(TOKEN_ID[op] for op in OPERATORS)
_END_ID = TOKEN_ID[END]


def apply_operator(op: str, args: Sequence[int]) -> int:
    """The value of `op` over its arguments (digits)."""
    if op == MIN:
        return min(args)
    if op == MAX:
        return max(args)
    if op == MED:
        # int(median): for an even count, the mean of the two middle values, truncated; the
        # values are non-negative, so floor division truncates the same way without floats.
        ordered = sorted(args)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) // 2
    if op == SUM_MOD:
        return sum(args) % 10
    raise ValueError(f"unknown ListOps operator {op!r}")


# --- generation -----------------------------------------------------------------------------


class _TooLong(Exception):
    """Raised inside a tree as soon as it reaches max_length: it would be rejected anyway, and
    trees only grow, so stopping early changes nothing but the time spent."""


def _grow(rng: random.Random, depth: int, max_depth: int, max_args: int, max_length: int,
          ids: list[int]) -> int:
    """Append one random subtree to `ids` in prefix order (operator, arguments, `]`); return its value."""
    # Uniform choices are int(random() * n) rather than randrange/randint: the same distribution
    # (up to float granularity, ~1e-16) without randrange's overhead, which dominated the profile.
    random_ = rng.random
    if depth < max_depth and random_() <= VALUE_P:
        # The official code draws the operator after the arguments; drawing it first is the same
        # distribution and lets the prefix form be written in one pass.
        op_index = int(random_() * len(OPERATORS))
        ids.append(_OPERATOR_IDS[op_index])
        num_args = 2 + int(random_() * (max_args - 1))  # uniform on 2..max_args
        args = [_grow(rng, depth + 1, max_depth, max_args, max_length, ids) for _ in range(num_args)]
        ids.append(_END_ID)
        if len(ids) >= max_length:
            raise _TooLong
        return apply_operator(OPERATORS[op_index], args)
    digit = int(random_() * 10)
    ids.append(_DIGIT0_ID + digit)
    return digit


def generate(num_examples: int, *, min_length: int, max_length: int, max_depth: int = 10,
             max_args: int = 10, seed: int = 0) -> list[tuple[bytes, int]]:
    """Sample `num_examples` distinct ListOps trees with min_length < tokens < max_length.

    Returns (token ids, label) pairs; the ids are a `bytes` (every id is < 256), which is compact
    and hashable for deduplication; `decode` turns them into tokens. Deterministic given the arguments.
    """
    if not 0 <= min_length < max_length - 1:
        raise UserError(f"listops: need 0 <= min_length < max_length - 1, got {min_length}, {max_length}")
    rng = random.Random(seed)
    examples: dict[bytes, int] = {}  # insertion-ordered: the split order follows the seed
    while len(examples) < num_examples:
        ids: list[int] = []
        try:
            label = _grow(rng, 1, max_depth, max_args, max_length, ids)
        except _TooLong:
            continue
        if len(ids) > min_length:
            examples.setdefault(bytes(ids), label)
    return list(examples.items())


# --- text forms -----------------------------------------------------------------------------


def tokenize(expression: str) -> list[str]:
    """Tokens of a written expression without its parentheses: `( ( ( [SM 2 ) 9 ) ] )` -> [SM 2 9 ]."""
    return [token for token in expression.split() if token not in ("(", ")")]


def encode(tokens: Iterable[str]) -> list[int]:
    """Token ids; an unknown token is an error rather than <unk>, since ListOps has a closed vocabulary."""
    try:
        return [TOKEN_ID[token] for token in tokens]
    except KeyError as err:
        raise ValueError(f"not a ListOps token: {err.args[0]!r}") from None


def decode(ids: Iterable[int]) -> list[str]:
    return [VOCAB[i] for i in ids]


def label_of(expression: str) -> int:
    """Evaluate an expression in the official written form (parentheses optional).

    Independent of the generator: a stack of open operators over the tokens. Raises ValueError
    on a malformed expression.
    """
    stack: list[tuple[str, list[int]]] = []
    result: int | None = None
    depth = 0  # parenthesis balance, checked so that truncated written forms are caught
    for token in expression.split():
        if token == "(":
            depth += 1
            continue
        if token == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced parentheses in {expression!r}")
            continue
        if result is not None:
            raise ValueError(f"tokens after the end of {expression!r}")
        if token in OPERATORS:
            stack.append((token, []))
            continue
        if token == END:
            if not stack or not stack[-1][1]:
                raise ValueError(f"`]` without an operator and arguments in {expression!r}")
            op, args = stack.pop()
            value = apply_operator(op, args)
        elif token in DIGITS:
            value = int(token)
        else:
            raise ValueError(f"not a ListOps token: {token!r}")
        if stack:
            stack[-1][1].append(value)
        else:
            result = value
    if result is None or depth != 0:
        raise ValueError(f"incomplete ListOps expression {expression!r}")
    return result


def read_tsv(path: str | os.PathLike) -> tuple[list[str], list[int]]:
    """Read an official LRA ListOps TSV (e.g. basic_train.tsv): expressions and labels."""
    with open(path, newline="") as f:
        rows = csv.reader(f, delimiter="\t")
        header = next(rows, None)
        if header != ["Source", "Target"]:
            raise UserError(f"{path}: expected the ListOps header 'Source<TAB>Target', got {header}")
        expressions, labels = [], []
        for row in rows:
            expressions.append(row[0])
            labels.append(int(row[1]))
    return expressions, labels


# --- task loader ----------------------------------------------------------------------------

SPLITS = ("train", "val", "test")


def cache_file(task: Task, data_dir: Path) -> Path:
    """The cache file of a task's generated splits, named by every setting that shapes the data."""
    x = task.extras
    return data_dir / (
        f"listops_v{GENERATOR_VERSION}_seed{x.get('seed', 0)}"
        f"_n{x['num_train']}-{x['num_val']}-{x['num_test']}"
        f"_len{x['min_length']}-{x['max_length']}_depth{x['max_depth']}_args{x['max_args']}.pt"
    )


def _generate_splits(task: Task) -> dict[str, torch.Tensor]:
    """Generate all splits as flat tensors: tokens (uint8, concatenated), lengths and targets.

    Flat uint8 keeps the cache small (~100 MB for the canonical set instead of 1.5 GB padded).
    """
    x = task.extras
    sizes = {"train": x["num_train"], "val": x["num_val"], "test": x["num_test"]}
    # One stream for all splits with dedup across them, as in the official generator, so no
    # expression is in two splits.
    examples = generate(sum(sizes.values()), min_length=x["min_length"], max_length=x["max_length"],
                        max_depth=x["max_depth"], max_args=x["max_args"], seed=x.get("seed", 0))
    arrays: dict[str, torch.Tensor] = {}
    start = 0
    for split in SPLITS:
        part = examples[start:start + sizes[split]]
        start += sizes[split]
        arrays[f"{split}/tokens"] = torch.frombuffer(bytearray(b"".join(ids for ids, _ in part)),
                                                     dtype=torch.uint8)
        arrays[f"{split}/lengths"] = torch.tensor([len(ids) for ids, _ in part], dtype=torch.int64)
        arrays[f"{split}/targets"] = torch.tensor([label for _, label in part], dtype=torch.int64)
    return arrays


def _pad(tokens: torch.Tensor, lengths: torch.Tensor, seq_len: int) -> torch.Tensor:
    """(N, seq_len) int64 with each sequence left-aligned and PAD_ID after it."""
    inputs = torch.full((lengths.shape[0], seq_len), PAD_ID, dtype=torch.int64)
    # Row-major order of the mask is the concatenation order of `tokens`.
    inputs[torch.arange(seq_len) < lengths[:, None]] = tokens.to(torch.int64)
    return inputs


def load_listops(task: Task, data_dir: Path, seed: int) -> dict[str, Split]:
    """Generated ListOps splits, cached under `data_dir`.

    The data set is fixed per task by `extras["seed"]`; the run seed `seed` does not change it
    (every run of a task must see the same data).
    """
    if task.extras["max_length"] - 1 > task.seq_len:
        raise UserError(f"{task.name}: max_length {task.extras['max_length']} does not fit seq_len {task.seq_len}")
    path = cache_file(task, data_dir)
    if path.exists():
        arrays = torch.load(path, weights_only=True)
    else:
        arrays = _generate_splits(task)
        atomic.write_torch(path, arrays)
    return {
        split: Split(
            inputs=_pad(arrays[f"{split}/tokens"], arrays[f"{split}/lengths"], task.seq_len),
            targets=arrays[f"{split}/targets"],
            lengths=arrays[f"{split}/lengths"],
        )
        for split in SPLITS
    }


LISTOPS = Task(
    name="listops",
    seq_len=2000,
    input_kind="tokens",
    num_classes=10,
    metric="accuracy",
    mask_ratio=0.10,  # paper §2
    pretrain_loss="ce",
    loader=load_listops,
    vocab_size=len(VOCAB),
    extras={"num_train": 96_000, "num_val": 2_000, "num_test": 2_000, "min_length": 500,
            "max_length": 2000, "max_depth": 10, "max_args": 10, "seed": 0},
    description="LRA ListOps: evaluate nested MIN/MAX/MED/SM expressions over digits, "
                "500 < tokens < 2000 (generated locally with the official generator's settings).",
)

# Same generator and tree settings, shorter trees: 64 < tokens < 256 keeps the official ratio of
# min_length to max_length (1/4) and max_length == seq_len. The official depth cap and argument
# count still reach these lengths quickly (about 3% of sampled trees are kept), so they are kept.
LISTOPS_MINI = replace(
    LISTOPS,
    name="listops-mini",
    seq_len=256,
    extras={**LISTOPS.extras, "num_train": 4_000, "num_val": 500, "num_test": 500, "min_length": 64,
            "max_length": 256},
    description="ListOps with short trees (64 < tokens < 256), 4000/500/500: a quick ListOps.",
)
