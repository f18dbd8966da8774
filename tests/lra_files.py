"""Fixture writers for the LRA release's file formats, so loaders are tested on files laid out as
the release lays them out."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence


def write_tsv(path: Path, expressions: Sequence[str], labels: Sequence[int]) -> None:
    """The official LRA ListOps TSV: header `Source<TAB>Target`, csv's default line endings."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["Source", "Target"])
        writer.writerows(zip(expressions, labels))
