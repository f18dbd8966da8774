"""The .ts text format of the UCR/UEA and Monash archives, read without sktime's loaders.

    # comments, then @key value header lines (@problemName, @seriesLength, @classLabel true 1 2 ...),
    @data
    v,v,v,...:v,v,v,...:label        one series per line: its dimensions separated by ':', the label last

Only equal-length series without timestamps are read (every task here); '?' is a missing value (NaN).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sptune.errors import UserError


def read_ts(path: Path, fix: str) -> tuple[np.ndarray, list[str]]:
    """x (N, length, dims) float32 and the N labels as written; `fix` ends every error message."""
    xs, labels = [], []
    in_data = False
    with open(path, encoding="latin-1") as f:
        for line_no, line in enumerate(f, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if not in_data:
                in_data = line.lower() == "@data"
                continue
            *dims, label = line.split(":")
            try:
                series = [np.array(d.replace("?", "nan").split(","), dtype=np.float32) for d in dims]
                if not series or len({len(s) for s in series}) != 1:
                    raise ValueError("no values, or dimensions of unequal length")
            except ValueError as err:
                raise UserError(f"{path}:{line_no}: not a .ts data row ({err}); {fix}") from None
            xs.append(np.stack(series, axis=-1))
            labels.append(label.strip())
    if not xs:
        raise UserError(f"{path}: no @data rows; {fix}")
    if len({x.shape for x in xs}) != 1:
        raise UserError(f"{path}: series of different lengths; {fix}")
    return np.stack(xs), labels
