"""Fixture writers for the LRA release's file formats, so loaders are tested on files laid out as
the release lays them out."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

from sptune.tasks.listops import END, OPERATORS


def write_tsv(path: Path, expressions: Sequence[str], labels: Sequence[int]) -> None:
    """The official LRA ListOps TSV: header `Source<TAB>Target`, csv's default line endings."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["Source", "Target"])
        writer.writerows(zip(expressions, labels))


def to_expression(tokens: Sequence[str]) -> str:
    """The official written form of a tree given as tokens in prefix order.

    The official code nests an operator with k arguments as (((op, a1), a2), ..., ak), "]") and
    prints each pair as `( left right )`, so the operator is preceded by k + 1 open parentheses
    and every argument and the closing `]` are followed by `)`.
    """
    stack: list[tuple[str, list[str]]] = []  # open operators with their written arguments
    for token in tokens:
        if token in OPERATORS:
            stack.append((token, []))
            continue
        if token == END:
            op, args = stack.pop()
            token = "( " * (len(args) + 1) + op + "".join(f" {a} )" for a in args) + " ] )"
        if not stack:
            return token
        stack[-1][1].append(token)
    raise ValueError("incomplete ListOps expression")
