"""Is data loading ever the bottleneck? Loader throughput vs a trainer's consumption rate.

For a few real-data tasks, synthetic data is written in the release's own format (IMDb and CIFAR-10
as `save_to_disk` copies, AAN pairs as the LRA TSV, BIDMC as Monash .ts files), loaded once to
fill the array cache and once more from it, and then

* loader rate:  samples/s of a shuffled torch DataLoader over the cached, memory-mapped train split;
* trainer rate: samples/s of one forward + backward + optimizer step of a small model (embedding or
  linear encoder, 2-layer nn.TransformerEncoder, mean pooling, linear head) on one batch.

A ratio (loader / trainer) well above 1 means the loader keeps up. Usage:

    python benchmarks/data_loading.py [--batch-size 8] [--scale 1.0]
"""

from __future__ import annotations

import argparse
import io
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn


def write_fixtures(data: Path, scale: float) -> None:
    import datasets
    from PIL import Image

    rng = np.random.default_rng(0)
    datasets.disable_progress_bars()
    n_docs, n_pairs, n_images, n_series = (max(8, int(k * scale)) for k in (1000, 500, 2000, 100))

    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz  ", dtype=np.uint8)
    def text(n: int) -> str:
        return rng.choice(letters, size=n).tobytes().decode()

    features = datasets.Features({"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["neg", "pos"])})
    docs = {"text": [text(int(rng.integers(1000, 6000))) for _ in range(n_docs)], "label": [i % 2 for i in range(n_docs)]}
    split = datasets.Dataset.from_dict(docs, features=features)
    datasets.DatasetDict(train=split, test=split).save_to_disk(str(data / "imdb"))

    def png(rgb: np.ndarray) -> dict:
        buffer = io.BytesIO()
        Image.fromarray(rgb).save(buffer, format="PNG")
        return {"bytes": buffer.getvalue(), "path": None}

    features = datasets.Features({"img": datasets.Image(), "label": datasets.ClassLabel(num_classes=10)})
    images = rng.integers(0, 256, (n_images, 32, 32, 3), dtype=np.uint8)
    split = datasets.Dataset.from_dict({"img": [png(p) for p in images], "label": [i % 10 for i in range(n_images)]},
                                       features=features)
    datasets.DatasetDict(train=split, test=split).save_to_disk(str(data / "cifar10"))

    aan = data / "lra_release" / "tsv_data"
    aan.mkdir(parents=True)
    for name in ("train", "eval", "test"):
        with open(aan / f"new_aan_pairs.{name}.tsv", "w") as f:
            for i in range(n_pairs):
                f.write(f"{i % 2}\ta{i}\tb{i}\t{text(int(rng.integers(2000, 8000)))}\t{text(int(rng.integers(2000, 8000)))}\n")

    monash = data.parent / "monash"
    monash.mkdir()
    for part, n in (("TRAIN", n_series), ("TEST", max(4, n_series // 2))):
        with open(monash / f"BIDMC32RR_{part}.ts", "w") as f:
            f.write("@problemName BIDMC32RR\n@timeStamps false\n@univariate false\n@targetLabel true\n@data\n")
            for _ in range(n):
                f.write(":".join(",".join(f"{v:.3f}" for v in rng.normal(size=4000)) for _ in range(2)))
                f.write(f":{rng.uniform(5, 30):.2f}\n")
    from sptune.tasks import bidmc

    bidmc.prepare_bidmc(bidmc.TASKS[0], monash, bidmc.TASKS[0].data_dir())


class SmallModel(nn.Module):
    """Embedding / linear encoder, 2-layer TransformerEncoder, mean pooling, linear head."""

    def __init__(self, task, d_model: int = 64):
        super().__init__()
        if task.input_kind == "tokens":
            self.encode = nn.Embedding(task.vocab_size, d_model)
        else:
            self.encode = nn.Linear(task.channels, d_model)
        # dropout=0: with dropout, CPU attention falls back to the kernel that materialises the
        # L x L scores (2 GB per layer at L = 4096, batch 8) and a step gets ~10x slower.
        layer = nn.TransformerEncoderLayer(d_model, nhead=4, dim_feedforward=2 * d_model, dropout=0.0,
                                           batch_first=True)
        self.body = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, max(task.num_classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3 and x.dtype == torch.int64:  # paired documents (B, 2, L): encode each, pool the pair
            pooled = self.body(self.encode(x.flatten(0, 1))).mean(dim=1)
            return self.head(pooled.view(x.shape[0], 2, -1).mean(dim=1))
        return self.head(self.body(self.encode(x)).mean(dim=1))


def loader_rate(split, batch_size: int, max_batches: int) -> float:
    dataset = torch.utils.data.TensorDataset(split.inputs, split.targets, split.lengths)
    loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True)
    start, seen = time.perf_counter(), 0
    for i, (inputs, _, _) in enumerate(loader):
        seen += inputs.shape[0]
        if i + 1 == max_batches:
            break
    return seen / (time.perf_counter() - start)


def trainer_rate(task, split, batch_size: int, steps: int = 2) -> float:
    model = SmallModel(task)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs, targets = split.inputs[:batch_size].clone(), split.targets[:batch_size].clone()

    def step() -> None:
        out = model(inputs)
        loss = (nn.functional.mse_loss(out.squeeze(-1), targets) if task.is_regression
                else nn.functional.cross_entropy(out, targets))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * inputs.shape[0] / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--scale", type=float, default=1.0, help="fixture size multiplier")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds: checks the benchmark runs (the test suite uses it); its figures mean nothing")
    args = parser.parse_args()
    if args.quick:
        args.scale, args.batch_size = 0.02, 1
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SPTUNE_DATA"], os.environ["SPTUNE_CACHE"] = f"{tmp}/data", f"{tmp}/cache"
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from sptune.tasks import bidmc, hub_tasks, lra

        write_fixtures(Path(tmp) / "data", args.scale)
        print(f"{'task':<10} {'N train':>8} {'build s':>8} {'reload s':>8} {'loader/s':>10} {'trainer/s':>10} {'ratio':>8}")
        for task in (hub_tasks.TEXT, lra.RETRIEVAL, hub_tasks.IMAGE, bidmc.TASKS[0]):
            start = time.perf_counter()
            task.load()
            build = time.perf_counter() - start
            start = time.perf_counter()
            train = task.load()["train"]
            reload = time.perf_counter() - start
            loads = loader_rate(train, args.batch_size, max_batches=50)
            trains = trainer_rate(task, train, args.batch_size)
            print(f"{task.name:<10} {len(train):>8} {build:>8.2f} {reload:>8.3f} {loads:>10.0f} {trains:>10.1f} "
                  f"{loads / trains:>8.0f}x", flush=True)


if __name__ == "__main__":
    main()
