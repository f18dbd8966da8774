"""Training throughput of Transformer, S4 and DLR backbones at the sizes a user runs (d_model 256, batch 4).

    python benchmarks/throughput.py                                   # all models, L = 1024 4096
    python benchmarks/throughput.py --models transformer --lengths 1024 4096 16384 --steps 5

For each (model, L): training tokens/s (forward + backward + AdamW step), peak memory of the
process that ran it (each point runs in its own subprocess, so peaks do not mix), and achieved
FLOP/s as a fraction of a dense matmul peak measured in the same run on the same device.
FLOPs are those of sptune.flops: torch.utils.flop_counter on the real step (matmuls, attention,
FFTs) plus the SSM kernel generation priced analytically (forward + backward). Transformers at
L >= 16K use block-local attention with blocks of 4096, as the paper does (§2).
Transformer lines print the target, >= 50% of the matmul peak on CPU, and PASS / MISS.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

TRANSFORMER_PEAK_TARGET = 0.50  # fraction of the measured fp32 matmul peak a Transformer step should reach


def matmul_peak(device: torch.device, n: int = 2048, repeats: int = 5) -> float:
    """FLOP/s of a large square fp32 matmul: the reference peak of this device."""
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync(device)
    return 2 * n**3 * repeats / (time.perf_counter() - start)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def one_point(model_name: str, L: int, steps: int, d_model: int, n_layers: int, batch: int, device: str) -> dict:
    from sptune import config, flops as flop_count
    from sptune.build import build_backbone
    from sptune.tasks.base import Task

    dev = torch.device(device)
    overrides = [f"model.name={model_name}", f"model.d_model={d_model}", f"model.n_layers={n_layers}",
                 f"model.d_ff={2 * d_model}", "model.n_heads=4", "model.d_state=64"]
    if model_name == "transformer" and L >= 16384:
        overrides += ["model.attention=block", "model.block_size=4096"]
    cfg = config.load(None, overrides)
    task = Task(name="bench", seq_len=L, input_kind="tokens", num_classes=2, metric="accuracy", mask_ratio=0.15,
                pretrain_loss="ce", loader=lambda *a: {}, vocab_size=259)
    torch.manual_seed(0)
    model = build_backbone(cfg.model, task, mask_channel=False).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(3, 259, (batch, L), device=dev)

    def step() -> None:
        out = model(x)  # (B, L, D)
        out.float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    step()  # warm-up (kernels, allocator)
    flops = flop_count.count(step) + (1 + flop_count.BACKWARD_FACTOR) * flop_count.kernel_flops(model, L)
    sync(dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    # Steps alternate with matmul-peak probes in this process, so on a shared machine both see the same load;
    # the medians are compared.
    step_times, peaks = [], []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync(dev)
        step_times.append(time.perf_counter() - start)
        peaks.append(matmul_peak(dev))
    seconds, matmul = statistics.median(step_times), statistics.median(peaks)
    peak = (torch.cuda.max_memory_allocated() if dev.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    return {"model": model_name, "L": L, "tokens_per_s": batch * L / seconds, "step_s": seconds,
            "peak_mem_mb": peak / 2**20, "flops_per_s": flops / seconds, "matmul_peak": matmul}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["transformer", "s4", "dlr"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[1024, 4096])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--n-layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch intra-op threads in every point (default: torch's)")
    parser.add_argument("--point", help=argparse.SUPPRESS)  # internal: run one point, print JSON
    parser.add_argument("--quick", action="store_true", help="tiny sizes, seconds: checks the benchmark runs (the test suite uses it); its figures mean nothing")
    args = parser.parse_args()
    if args.quick:
        args.lengths, args.steps, args.d_model, args.n_layers, args.batch = [64], 1, 16, 1, 1
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.point:
        model_name, L = args.point.split(":")
        print(json.dumps(one_point(model_name, int(L), args.steps, args.d_model, args.n_layers, args.batch,
                                   args.device)))
        return

    print(f"device {args.device}, threads {torch.get_num_threads()}, d_model {args.d_model}, {args.n_layers} layers, "
          f"batch {args.batch}; medians of {args.steps} steps, each followed by an fp32 2048^3 matmul-peak probe")
    print(f"{'model':12s} {'L':>6s} {'tokens/s':>10s} {'step s':>8s} {'peak MB':>9s} {'GFLOP/s':>8s} "
          f"{'mm peak':>8s} {'of peak':>8s} {'target':>8s}")
    for model_name in args.models:
        for L in args.lengths:
            cmd = [sys.executable, __file__, "--point", f"{model_name}:{L}", "--steps", str(args.steps),
                   "--d-model", str(args.d_model), "--n-layers", str(args.n_layers), "--batch", str(args.batch),
                   "--device", args.device] + (["--threads", str(args.threads)] if args.threads else [])
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                reason = (proc.stderr.strip().splitlines() or ["killed"])[-1]
                print(f"{model_name:12s} {L:6d} failed: {reason}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            share = r["flops_per_s"] / r["matmul_peak"]
            target = ""
            if model_name == "transformer":
                verdict = "PASS" if share >= TRANSFORMER_PEAK_TARGET else "MISS"
                target = f"{'>= ' + format(TRANSFORMER_PEAK_TARGET, '.0%'):>8s} {verdict}"
            print(f"{model_name:12s} {L:6d} {r['tokens_per_s']:10.0f} {r['step_s']:8.3f} {r['peak_mem_mb']:9.0f} "
                  f"{r['flops_per_s'] / 1e9:8.2f} {r['matmul_peak'] / 1e9:8.2f} {share:8.1%} {target}", flush=True)


if __name__ == "__main__":
    main()
