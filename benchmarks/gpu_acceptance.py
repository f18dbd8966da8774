"""A GPU node, proven in one command: every figure sptune's GPU path is held to, printed beside its target.

    python benchmarks/gpu_acceptance.py             # one H100 or H200, about 8 minutes
    python benchmarks/gpu_acceptance.py --quick     # any machine, seconds: each check at toy scale
    python benchmarks/gpu_acceptance.py --only resume plan    # some of the checks

The checks, each a line `check  figure  target  verdict`:
    resume       a run interrupted at an evaluation and resumed, against an uninterrupted one: the gap between
                 their numbers vs the floor, the gap between two uninterrupted runs (tests/reproducibility.py):
                 at most 4x the floor on a GPU, none on a CPU
    tests        pytest on the test files of the GPU path, in a subprocess: 0 failed (needs pytest and Ray)
    transformer  the trainer's bf16 step of a Transformer (d_model 512, 6 layers, as configs/listops_transformer.yaml)
                 at L 1K / 2K / 4K, eager and compiled, in FLOP/s (sptune.flops) as a share of a bf16 matmul peak
                 measured in this process: >= 50% at L 2K (the better of the two)
    s4           S4 (DPLR) and S4D layer time / the S4 repository's S4Block's on this GPU (H 256, N 64, batch 16,
                 bidirectional, forward + backward; benchmarks/ssm_kernels.py) at L 1K / 4K / 16K: <= 0.6; needs a
                 state-spaces/s4 checkout (--reference-repo or $S4_REFERENCE_REPO)
    plan         `sptune plan`'s device-seconds for one trial on this node (sptune.experiment.budget) / the trial's measured
                 train + eval seconds: 0.67-1.5
    packing      16 trials on one GPU, each process capped as --trials-per-gpu 16 caps it
                 (sptune.trials.resources): slot utilisation (the trials' train + eval seconds / 16 slots x
                 wall, from the moment every slot's process is up, as Ray's reused actors are) >= 85%, no
                 out-of-memory; and the CUDA context a process holds, measured, within the one the cap counts.
                 The slots are plain processes: Ray's own scheduling is benchmarks/experiment_utilization.py's.
The GPU-only targets (transformer, s4, packing) are not judged on a CPU, and no speed target is judged with
--quick (toy sizes); both print their figures. Ends with `acceptance: P passed, F failed`; exit 1 if F > 0.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]  # as a script from anywhere

from reproducibility import FLOOR_MULTIPLE, gap  # noqa: E402

from sptune import config, plugins  # noqa: E402
from sptune.experiment import budget  # noqa: E402
from sptune.run import runs, train  # noqa: E402
from sptune.tasks.base import Task  # noqa: E402

TEST_FILES = ["test_train.py", "test_train_device.py", "test_reproducibility.py", "test_packing.py",
              "test_failures.py", "test_backend_probe.py", "test_plan.py", "test_ssm_kernels.py",
              "test_transformer.py", "test_s4_dlr.py", "test_flops.py", "test_run_dirs.py"]
TRANSFORMER = ["model.name=transformer", "model.d_model=512", "model.n_layers=6", "model.n_heads=8", "model.d_ff=1024",
               "model.pos_encoding=sinusoidal", "run.precision=bf16"]
TRANSFORMER_TARGET = 0.50  # share of the bf16 matmul peak at L 2K
S4_TARGET = 0.60  # time ratio to S4Block
PLAN_RANGE = (0.67, 1.5)
PACKING_TARGET = 0.85
WALL_TARGET_S = 480.0


@dataclass(frozen=True)
class Scale:
    """Sizes of every check: a GPU's, or toy sizes (--quick)."""

    quick: bool
    resume: list[str]  # overrides of the resumed runs
    tests: list[str]  # pytest's arguments
    tests_timeout_s: float
    lengths: dict[int, int]  # the Transformer's L -> batch
    transformer: list[str]
    peak_n: int  # the matmul peak's square size
    seconds: float  # of each timing
    s4_lengths: list[int]
    plan: list[str]
    slots: int
    slot_trials: int
    packed: list[str]


TINY = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=32", "optim.batch_size=8",
        "task.max_val_examples=32", "task.max_test_examples=32", "optim.warmup_steps=2"]
QUICK = Scale(quick=True, resume=[*TINY, "optim.max_steps=12", "optim.eval_every=4"],
              tests=["tests/test_reproducibility.py"], tests_timeout_s=120, lengths={64: 2},
              transformer=["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=32",
                           "run.precision=bf16"], peak_n=256, seconds=0.1, s4_lengths=[64],
              plan=[*TINY, "optim.max_steps=8", "optim.eval_every=4"], slots=2, slot_trials=1,
              packed=[*TINY, "optim.max_steps=4", "optim.eval_every=4"])
GPU = Scale(quick=False, resume=["model.d_model=128", "model.n_layers=2", "model.n_heads=4", "model.d_ff=256",
                                 "optim.batch_size=32", "optim.max_steps=60", "optim.eval_every=20",
                                 "task.max_val_examples=256", "run.precision=bf16"],
            tests=[f"tests/{name}" for name in TEST_FILES], tests_timeout_s=240,
            lengths={1024: 16, 2048: 64, 4096: 16}, transformer=TRANSFORMER, peak_n=8192, seconds=2.0,
            s4_lengths=[1024, 4096, 16384],
            plan=["model.d_model=256", "model.n_layers=4", "model.n_heads=4", "model.d_ff=512", "optim.batch_size=32",
                  "optim.max_steps=400", "optim.eval_every=100", "task.max_val_examples=512",
                  "task.max_test_examples=512", "run.precision=bf16"],
            slots=16, slot_trials=3,
            # Eager: the check is of packing, and 16 processes compiling at once would measure the compiler.
            packed=["optim.batch_size=32", "optim.max_steps=300", "optim.eval_every=100", "task.max_val_examples=256",
                    "task.max_test_examples=256", "run.compile=false"])


@dataclass(frozen=True)
class Row:
    check: str
    figure: str
    target: str
    verdict: str  # "PASS" | "FAIL" | "SKIP: why" (not judged) | "-" (a figure without a target)


def judged(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def on_gpu() -> bool:
    return torch.cuda.is_available()


def speed_verdict(scale: Scale, ok: bool, gpu_only: bool = True) -> str:
    """A speed target is judged at a GPU's sizes only, and a GPU-only one on a GPU only."""
    if scale.quick:
        return "SKIP: toy sizes (--quick)"
    if gpu_only and not on_gpu():
        return "SKIP: no GPU"
    return judged(ok)


def run_config(overrides: list[str], out_dir: Path, *extra: str) -> config.Config:
    return config.load(None, ["task.name=listops-mini", "run.progress=false", *overrides, *extra,
                              f"run.out_dir={out_dir}"], stage="scratch")


# ----------------------------------------------------------------------------- resume
class Interrupt(Exception):
    pass


def check_resume(scale: Scale, tmp: Path) -> list[Row]:
    """Two uninterrupted runs (their gap: the floor) and one interrupted at its middle evaluation, resumed."""
    def cfg(name: str) -> config.Config:
        return run_config([*scale.resume, "model.dropout=0.1"], tmp / name)

    full, again = train.run_stage(cfg("full"), "scratch"), train.run_stage(cfg("again"), "scratch")
    middle = full["history"][len(full["history"]) // 2 - 1]["step"]

    def interrupt(record: dict[str, Any], run_dir: Path) -> None:
        if record["step"] == middle:
            raise Interrupt

    try:
        train.run_stage(cfg("resumed"), "scratch", on_eval=interrupt)
    except Interrupt:
        pass
    resumed = train.run_stage(cfg("resumed"), "scratch")
    floor, resume_gap = gap(full, again), gap(resumed, full)
    where = full["provenance"]["device"]
    ok = resume_gap == 0 if where == "cpu" else resume_gap <= FLOOR_MULTIPLE * floor
    target = "0 (a CPU is exact)" if where == "cpu" else f"<= {FLOOR_MULTIPLE} x floor = {FLOOR_MULTIPLE * floor:.3g}"
    return [Row("resume", f"gap {resume_gap:.3g} (floor {floor:.3g}, {where}, {full['provenance']['precision']})",
                target, judged(ok))]


# ----------------------------------------------------------------------------- tests
def check_tests(scale: Scale, tmp: Path) -> list[Row]:
    """The test files' counts from pytest's summary line."""
    missing = [name for name in ("pytest", "ray") if not importable(name)]
    if missing:
        return [Row("tests", "-", "0 failed", f"SKIP: {' and '.join(missing)} not importable")]
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "RAY_ADDRESS": ""}
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *scale.tests],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=scale.tests_timeout_s)
    except subprocess.TimeoutExpired:
        return [Row("tests", f"timed out after {scale.tests_timeout_s:g} s", "0 failed", "FAIL")]
    counts = pytest_counts(proc.stdout)
    figure = ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "no summary line"
    failed = counts.get("failed", 0) + counts.get("error", 0) + counts.get("errors", 0)
    return [Row("tests", f"{figure} ({len(scale.tests)} files)", "0 failed",
                judged(proc.returncode == 0 and failed == 0 and counts.get("passed", 0) > 0))]


def pytest_counts(out: str) -> dict[str, int]:
    """{'passed': 120, 'skipped': 3, ...} from pytest's last summary line ('120 passed, 3 skipped in 9.1s')."""
    lines = [line for line in out.splitlines() if " in " in line and any(w in line for w in ("passed", "failed",
                                                                                              "error"))]
    if not lines:
        return {}
    words = lines[-1].strip("= ").split(" in ")[0].split(", ")
    return {kind: int(n) for n, kind in (w.split()[:2] for w in words if w.split()[0].isdigit())}


def importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# ----------------------------------------------------------------------------- transformer
def check_transformer(scale: Scale, tmp: Path) -> list[Row]:
    """The share at each length, eager and compiled; the better of the two judged at L 2K."""
    device = torch.device("cuda" if on_gpu() else "cpu")
    peak = matmul_peak(device, scale.peak_n)
    rows, best = [], {}
    for L, batch in scale.lengths.items():
        shares = {}
        for compiled in (False, True):
            cfg = run_config([*scale.transformer, f"task.name={length_task(L)}", f"optim.batch_size={batch}",
                              f"run.compile={str(compiled).lower()}"], tmp)
            flops_per_s, compile_s = trainer_step(cfg, scale.seconds)
            shares[compiled] = flops_per_s / peak
            mode = f"compiled ({compile_s:.0f} s to compile)" if compiled else "eager"
            rows.append(Row(f"transformer L {L}", f"{shares[compiled]:.1%} of {peak / 1e12:.3g} TFLOP/s, {mode}",
                            f">= {TRANSFORMER_TARGET:.0%} at L 2048", "-"))
        best[L] = max(shares.values())
    if 2048 in best:
        rows.append(Row("transformer L 2048", f"{best[2048]:.1%} (the better of eager and compiled)",
                        f">= {TRANSFORMER_TARGET:.0%}", speed_verdict(scale, best[2048] >= TRANSFORMER_TARGET)))
    else:
        rows.append(Row("transformer", f"{max(best.values()):.1%} at L {max(best, key=best.get)}",
                        f">= {TRANSFORMER_TARGET:.0%} at L 2048", speed_verdict(scale, False)))
    return rows


def length_task(L: int) -> str:
    """A token task of length L for the timing (random examples of its shapes: no data is read)."""
    name = f"acceptance-tokens-{L}"
    task = Task(name=name, seq_len=L, input_kind="tokens", num_classes=10, metric="accuracy", mask_ratio=0.15,
                pretrain_loss="ce", loader=lambda *args: {}, vocab_size=20)
    plugins.register_task(name, lambda: task)
    return name


def trainer_step(cfg: config.Config, seconds: float) -> tuple[float, float]:
    """(FLOP/s, the warm-up step's seconds) of the trainer's training step at the config's batch size
    (sptune.experiment.budget.time_steps: prefetched batches, autocast, AdamW), compiled as run.compile says."""
    from sptune.run.train_setup import pick_device, wrap_model

    cfg, fp = runs.identify(cfg, "scratch")
    device = pick_device(cfg.run.device, 0)
    at = partial(budget.run_at, cfg, fp, "scratch", device)
    run = at(cfg.optim.batch_size)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        model, cost = train.build_model(run, budget.random_split(run.task, 1), None)
        trained, _, _ = wrap_model(model.to(device), device, False, cfg.run.compile)
        torch.compiler.reset()  # compiled from scratch, as in a trial's fresh process
        steps = budget.time_steps(run, model, trained, seconds)
    return cost.train(cfg.optim.batch_size, cfg.optim.accumulate) * steps.steps / steps.seconds, steps.warmup


def matmul_peak(device: torch.device, n: int, tries: int = 3) -> float:
    """FLOP/s of a square bf16 matmul, the best of `tries` timings of 20."""
    a, b = (torch.randn(n, n, device=device, dtype=torch.bfloat16) for _ in range(2))
    a @ b
    best = 0.0
    for _ in range(tries):
        sync(device)
        start = time.perf_counter()
        for _ in range(20):
            a @ b
        sync(device)
        best = max(best, 2 * n**3 * 20 / (time.perf_counter() - start))
    return best


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ----------------------------------------------------------------------------- s4
def check_s4(scale: Scale, tmp: Path, reference_repo: str | None = None) -> list[Row]:
    """sptune's DPLR and S4D-Lin layers against S4Block with the same parameters, on this GPU."""
    if not on_gpu():
        return [Row("s4", "-", f"<= {S4_TARGET} x S4Block", "SKIP: no GPU")]
    module = s4_reference(reference_repo)
    if isinstance(module, str):
        return [Row("s4", "-", f"<= {S4_TARGET} x S4Block", f"SKIP: {module}")]
    import ssm_kernels

    H, N, batch, repeats = (8, 4, 1, 1) if scale.quick else (256, 64, 16, 20)
    rows = []
    for mode in ("dplr", "diag-lin"):
        for L in scale.s4_lengths:
            ours, reference = ssm_kernels.s4_pair(module, mode, H, N)
            ours_s, ref_s = ssm_kernels.compare(ours, reference, L, H, batch, repeats, torch.device("cuda"))
            ratio = ours_s / ref_s
            rows.append(Row(f"s4 {mode} L {L}", f"{ratio:.2f} ({ours_s * 1e3:.1f} / {ref_s * 1e3:.1f} ms)",
                            f"<= {S4_TARGET}", speed_verdict(scale, ratio <= S4_TARGET)))
    return rows


def s4_reference(repo: str | None) -> Any:
    """The S4 repository's s4.py as a module, or why it cannot be imported."""
    import ssm_kernels

    if not repo:
        return "S4Block not importable: pass --reference-repo or set $S4_REFERENCE_REPO to a state-spaces/s4 checkout"
    try:
        return ssm_kernels.import_s4_reference(Path(repo))
    except SystemExit as exc:  # ssm_kernels says what is missing and exits
        return f"S4Block not importable: {exc}"


# ----------------------------------------------------------------------------- plan
def check_plan(scale: Scale, tmp: Path) -> list[Row]:
    """One trial planned on this node (the plan's own timing), then run: device-seconds against device-seconds."""
    cfg = run_config(scale.plan, tmp / "plan")
    stage = budget.stage_budget(cfg.to_dict(), "scratch", 1, [{}])
    planned = budget.node_seconds([stage], scale.seconds)[0]
    result = train.run_stage(cfg, "scratch")
    measured = result["train_seconds"] + result["eval_seconds"]
    ratio = planned / measured
    return [Row("plan", f"{ratio:.2f} ({planned:.1f} s planned / {measured:.1f} s measured, "
                        f"{result['provenance']['device']})",
                f"{PLAN_RANGE[0]}-{PLAN_RANGE[1]}", speed_verdict(scale, PLAN_RANGE[0] <= ratio <= PLAN_RANGE[1],
                                                                  gpu_only=False))]


# ----------------------------------------------------------------------------- packing
def check_packing(scale: Scale, tmp: Path) -> list[Row]:
    """`slots` processes, each running `slot_trials` trials one after another (a reused trial process), all at once."""
    from sptune.registry import get_task

    get_task("listops-mini").load(None, seed=0)  # generated once here, not by every slot at once
    go = tmp / "go"
    command = [sys.executable, __file__, "--slot", str(tmp), "--slots", str(scale.slots),
               "--slot-trials", str(scale.slot_trials), *(["--quick"] if scale.quick else [])]
    with ExitStack() as stack:
        slots = [stack.enter_context(subprocess.Popen([*command, "--slot-index", str(i)], stdout=subprocess.PIPE,
                                                      stderr=subprocess.PIPE, text=True))
                 for i in range(scale.slots)]
        while len(list(tmp.glob("ready-*"))) < scale.slots and all(s.poll() is None for s in slots):
            time.sleep(0.05)
        start = time.perf_counter()
        go.touch()
        ends = [s.communicate(timeout=600) for s in slots]
        wall = time.perf_counter() - start
    broken = [err.strip().splitlines()[-1:] for s, (_, err) in zip(slots, ends) if s.returncode != 0]
    if broken:
        return [Row("packing", f"{len(broken)} slot(s) failed: {broken[0]}", "every slot runs", "FAIL")]
    trials = [json.loads(line) for out, _ in ends for line in out.splitlines() if line.startswith("{")]
    used = sum(t["seconds"] for t in trials) / (scale.slots * wall)
    ooms = sum(t["status"] == "out of memory" for t in trials)
    rows = [Row("packing", f"{used:.0%} slot utilisation ({len(trials)} trials on {scale.slots} slots, {wall:.0f} s)",
                f">= {PACKING_TARGET:.0%}", speed_verdict(scale, used >= PACKING_TARGET)),
            Row("packing", f"{ooms} out of memory", "0", judged(ooms == 0))]
    return rows + context_rows(tmp)


def context_rows(tmp: Path) -> list[Row]:
    """The CUDA context of a process that has trained a step, measured beside the one the cap counts."""
    from sptune.trials.resources import CONTEXT_BYTES

    counted = f"<= {CONTEXT_BYTES / 2**30:.2f} GiB (counted by the cap)"
    if not on_gpu():
        return [Row("cuda context", "-", counted, "SKIP: no GPU")]
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    proc = subprocess.run([sys.executable, __file__, "--context", str(tmp)], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        return [Row("cuda context", (proc.stderr.strip().splitlines() or ["no answer"])[-1], counted, "FAIL")]
    context = json.loads(proc.stdout.strip().splitlines()[-1])["used"] - (total - free)
    return [Row("cuda context", f"{context / 2**30:.2f} GiB", counted, judged(context <= CONTEXT_BYTES))]


def packed_config(tmp: Path, index: int, seed: int, quick: bool) -> config.Config:
    return run_config((QUICK if quick else GPU).packed, tmp / f"slot-{index}", f"run.seed={seed}")


def slot(tmp: Path, index: int, slots: int, trials: int, quick: bool) -> None:
    """One packed slot: up, then (on the go) its trials, each as a trial on 1/slots of the GPU starts
    (resources.start_gpu_trial) and classified as its out-of-memory would be; one JSON line per trial."""
    from sptune.trials import resources

    torch.set_num_threads(1)
    if on_gpu():
        torch.cuda.init()
    (tmp / f"ready-{index}").touch()
    while not (tmp / "go").exists():
        time.sleep(0.01)
    for trial in range(trials):
        cfg = packed_config(tmp, index, index * trials + trial, quick)
        if on_gpu():
            resources.start_gpu_trial(1 / slots)
        try:
            result = train.run_stage(cfg, "scratch")
            print(json.dumps({"seconds": result["train_seconds"] + result["eval_seconds"], "status": result["status"]}),
                  flush=True)
        except torch.OutOfMemoryError:
            print(json.dumps({"seconds": 0.0, "status": "out of memory"}), flush=True)


def context(tmp: Path) -> None:
    """A packed trial's first steps, then the GPU's used memory less this process's allocator: the other
    processes' use (the caller measured it) plus this one's context."""
    train.run_stage(packed_config(tmp / "context", 0, 0, quick=False), "scratch")
    free, total = torch.cuda.mem_get_info()
    print(json.dumps({"used": total - free - torch.cuda.memory_reserved()}))


# ----------------------------------------------------------------------------- the run
CHECKS: dict[str, Callable[..., list[Row]]] = {"resume": check_resume, "tests": check_tests,
                                               "transformer": check_transformer, "s4": check_s4, "plan": check_plan,
                                               "packing": check_packing}


def run_check(name: str, scale: Scale, tmp: Path, args: argparse.Namespace) -> list[Row]:
    """A check's rows; one that raises is a failed row naming the error, and the others still run."""
    extra = {"reference_repo": args.reference_repo} if name == "s4" else {}
    (tmp / name).mkdir()
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the trainer's per-evaluation lines
            return CHECKS[name](scale, tmp / name, **extra)
    except Exception as exc:  # noqa: BLE001 - reported as the check's failure
        text = str(exc).strip().splitlines()
        return [Row(name, f"error: {type(exc).__name__}: {text[0][:200] if text else ''}", "runs", "FAIL")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="toy sizes, seconds, any machine (the test suite runs it)")
    parser.add_argument("--only", nargs="+", choices=list(CHECKS), default=list(CHECKS), metavar="CHECK",
                        help=f"these checks only ({', '.join(CHECKS)})")
    parser.add_argument("--reference-repo", default=os.environ.get("S4_REFERENCE_REPO"),
                        help="root of a state-spaces/s4 checkout (default: $S4_REFERENCE_REPO)")
    parser.add_argument("--slot", type=Path, help=argparse.SUPPRESS)  # internal: one packed slot
    parser.add_argument("--slot-index", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--slots", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--slot-trials", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--context", type=Path, help=argparse.SUPPRESS)  # internal: measure a CUDA context
    args = parser.parse_args(argv)
    if args.slot:
        slot(args.slot, args.slot_index, args.slots, args.slot_trials, args.quick)
        return 0
    if args.context:
        context(args.context)
        return 0
    return acceptance(args)


def acceptance(args: argparse.Namespace) -> int:
    scale = QUICK if args.quick else GPU
    where = torch.cuda.get_device_name() if on_gpu() else "no GPU: the CPU"
    print(f"{where}; torch {torch.__version__}; {'toy sizes (--quick)' if scale.quick else 'full sizes'}", flush=True)
    print(f"{'check':22s} {'figure':64s} {'target':34s} verdict")
    start, rows = time.perf_counter(), []
    with tempfile.TemporaryDirectory(prefix="gpu-acceptance-") as tmp:
        os.environ.setdefault("SPTUNE_CACHE", str(Path(tmp) / "cache"))
        for name in args.only:
            began = time.perf_counter()
            for row in run_check(name, scale, Path(tmp), args):
                rows.append(row)
                print(f"{row.check:22s} {row.figure:64s} {row.target:34s} {row.verdict}", flush=True)
            print(f"{'':22s} ({name}: {time.perf_counter() - began:.0f} s)", flush=True)
    wall = time.perf_counter() - start
    if set(args.only) == set(CHECKS):
        rows.append(Row("wall", f"{wall:.0f} s", f"<= {WALL_TARGET_S:.0f} s",
                        speed_verdict(scale, wall <= WALL_TARGET_S)))
        print(f"{'wall':22s} {rows[-1].figure:64s} {rows[-1].target:34s} {rows[-1].verdict}")
    passed, failed = (sum(r.verdict == v for r in rows) for v in ("PASS", "FAIL"))
    print(f"not judged: {sum(r.verdict.startswith('SKIP') for r in rows)}")
    print(f"acceptance: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
