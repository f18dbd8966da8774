"""Write a small long-range token task in sptune's "files" format (numpy only).

    python make_dataset.py OUT_DIR [--seed 0] [--length 256] [--train 600 --val 100 --test 200]

writes OUT_DIR/train.npz, val.npz and test.npz, each with
    inputs  (N, length) int64  token ids; 0 is padding, after the valid length only
    targets (N,)        int64  class 0..3
    lengths (N,)        int64  valid length, uniform in [length / 2, length]

Task "marker order": a valid sequence of random noise tokens 1..13 holds four markers, two A (id 14) and
two B (id 15). The class is (first marker, last marker): 0 = A..A, 1 = A..B, 2 = B..A, 3 = B..B. The first
marker lies in the first quarter of the valid sequence and the last one in the last quarter, so the two are
at least length / 4 positions apart. Every sequence holds the same markers, so token counts say nothing
about the class: a bag-of-tokens classifier is at chance (25%); the class is in the positions alone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

NOISE = np.arange(1, 14)  # noise token ids 1..13 (0 is padding)
A, B = 14, 15  # marker ids; vocabulary 0..15
# Orders of the markers (two A, two B) by class (first, last): AA, AB, BA, BB.
ORDERS = {0: ["ABBA"], 1: ["AABB", "ABAB"], 2: ["BABA", "BBAA"], 3: ["BAAB"]}


def make_split(rng: np.random.Generator, n: int, length: int):
    inputs = np.zeros((n, length), dtype=np.int64)
    targets = rng.integers(0, 4, size=n).astype(np.int64)
    lengths = rng.integers(length // 2, length + 1, size=n).astype(np.int64)
    for i in range(n):
        valid = int(lengths[i])
        inputs[i, :valid] = rng.choice(NOISE, size=valid)
        quarter = valid // 4
        first = rng.integers(0, quarter)  # first quarter
        last = rng.integers(valid - quarter, valid)  # last quarter
        middle = rng.choice(np.arange(first + 1, last), size=2, replace=False)  # strictly between them
        positions = np.sort(np.concatenate([[first], middle, [last]]))
        order = ORDERS[int(targets[i])][rng.integers(len(ORDERS[int(targets[i])]))]
        inputs[i, positions] = [A if m == "A" else B for m in order]
    return inputs, targets, lengths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--length", type=int, default=256, help="padded sequence length (at least 16)")
    parser.add_argument("--train", type=int, default=600)
    parser.add_argument("--val", type=int, default=100)
    parser.add_argument("--test", type=int, default=200)
    args = parser.parse_args()
    if args.length < 16:
        parser.error("--length must be at least 16")
    rng = np.random.default_rng(args.seed)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    sizes = {"train": args.train, "val": args.val, "test": args.test}
    for split, n in sizes.items():
        inputs, targets, lengths = make_split(rng, n, args.length)
        np.savez(args.out_dir / f"{split}.npz", inputs=inputs, targets=targets, lengths=lengths)
    print(f"wrote {', '.join(f'{s}.npz ({n})' for s, n in sizes.items())} to {args.out_dir}: marker-order task, "
          f"4 classes, vocabulary 0..15, length {args.length}, seed {args.seed}")


if __name__ == "__main__":
    main()
