"""What a push to durable storage costs as a study grows: a synthetic study tree on a local S3 server.

    python benchmarks/storage_scale.py                      # 1,000 / 3,000 / 10,000 finished trials
    python benchmarks/storage_scale.py --trials 200 1000    # smaller (minutes, not tens of minutes)
    python benchmarks/storage_scale.py --quick              # 20 / 60 trials: checks it runs (seconds)

The tree has, per finished trial, the files a trial of `sptune study` leaves (sizes of a small model's:
trial.json, result.json, progress.json, a 64 KB checkpoint, TensorBoard events, a log, and Tune's
params/result/progress files), Tune's experiment state at 17.8 KB a trial, and the study's files that grow in place
with it (study.log and the Optuna journal, GROWING bytes a trial, appended to at each report). A whole push uploads it all
(not timed) and the driver's periodic pushes run, CHANGING trials reporting (their progress, checkpoint,
events and log rewritten) before each, until every other folder is quiet (storage.QUIET_ROUNDS, not timed);
then, at each size, the trials report once more and one periodic push is timed, with the S3 requests it made counted at the server, then the same change and a
whole push (the driver's last; it takes Tune's snapshot too). The last line reads
`push at N trials: S s, R requests` (the periodic push). The server is moto's, in this process, on 127.0.0.1
(tests/s3_server.py), so its request handling shares this process's CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from s3_server import S3Server  # noqa: E402

from sptune.records import storage  # noqa: E402

TRIAL_FILES = {"trial.json": 1_500, "result.json": 900, "progress.json": 200, "last.pt": 64_000,
               "events.out.tfevents": 12_000, "stdout.log": 4_000}
TUNE_TRIAL_FILES = {"params.json": 300, "result.json": 2_000, "progress.csv": 3_000}
TUNE_STATE_PER_TRIAL = 17_800
GROWING = {"study.log": (5_000, 500), "optuna.journal": (2_000, 300)}  # bytes a finished trial, a report
CHANGING = 100


def write_trial(root: Path, index: int, salt: bytes = b"") -> None:
    trial = root / "pretrain" / f"trial-{index:05d}"
    trial.mkdir(parents=True, exist_ok=True)
    for name, size in TRIAL_FILES.items():
        (trial / name).write_bytes((salt + os.urandom(16)).ljust(size, b"x"))
    tune_trial = root / "tune" / "experiment" / f"trial-{index:05d}"
    tune_trial.mkdir(parents=True, exist_ok=True)
    for name, size in TUNE_TRIAL_FILES.items():
        (tune_trial / name).write_bytes((salt + os.urandom(16)).ljust(size, b"x"))


def grow(root: Path, trials: int = 0, reports: int = 0) -> None:
    """Append what `trials` finished trials and `reports` reports add to the study's growing files."""
    for name, (per_trial, per_report) in GROWING.items():
        with open(root / name, "ab") as appended:
            appended.write(os.urandom(16).ljust(trials * per_trial + reports * per_report, b"y"))


def write_tune_state(root: Path, trials: int) -> None:
    state = root / "tune" / "experiment"
    state.mkdir(parents=True, exist_ok=True)
    (state / "experiment_state.json").write_text('{"trials": "' + "x" * (TUNE_STATE_PER_TRIAL * trials) + '"}')


def timed_push(mirror: storage.Mirror, server: S3Server, whole: bool) -> tuple[float, int, int]:
    before, start = server.requests, time.perf_counter()
    uploaded = mirror.push(whole)
    return time.perf_counter() - start, server.requests - before, uploaded


def report(root: Path, size: int, changing: int, salt: bytes) -> None:
    for index in range(size - changing, size):  # trials still reporting
        write_trial(root, index, salt=salt)
    grow(root, reports=changing)
    write_tune_state(root, size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, nargs="+", default=[1_000, 3_000, 10_000])
    parser.add_argument("--quick", action="store_true", help="20 and 60 trials, 10 changing: checks it runs")
    args = parser.parse_args()
    changing = 10 if args.quick else CHANGING
    if args.quick:
        args.trials = [20, 60]
    server = S3Server().start()
    server.reset()
    os.environ.update(server.env)
    with tempfile.TemporaryDirectory() as tmp:
        root, made = Path(tmp) / "study", 0
        root.mkdir()
        uri = storage.attach(root, "s3://studies/bench")
        mirror = storage.mirror_of(root)
        print(f"{'trials':>7} {'files':>8} {'push s':>7} {'requests':>9} {'uploaded':>9} {'whole s':>8} {'uploaded':>9}")
        for size in sorted(args.trials):
            for index in range(made, size):
                write_trial(root, index)
            grow(root, trials=size - made)
            made = size
            write_tune_state(root, size)
            mirror.push()  # everything so far reaches the storage (untimed)
            for round_ in range(storage.QUIET_ROUNDS + 1):
                report(root, size, changing, b"%d" % round_)
                mirror.push(whole=False)
            report(root, size, changing, b"again")
            seconds, requests, uploaded = timed_push(mirror, server, whole=False)
            report(root, size, changing, b"once more")
            whole_seconds, _, whole_uploaded = timed_push(mirror, server, whole=True)
            files = sum(1 for path in root.rglob("*") if path.is_file())
            print(f"{size:>7} {files:>8} {seconds:>7.2f} {requests:>9} {uploaded:>9} {whole_seconds:>8.2f} "
                  f"{whole_uploaded:>9}", flush=True)
        print(f"(storage {uri}, {changing} trials changing a push)")
        print(f"push at {size} trials: {seconds:.2f} s, {requests} requests")
    server.stop()


if __name__ == "__main__":
    main()
