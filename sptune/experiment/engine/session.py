"""The one way sptune starts, joins and cleans up Ray: `sptune study`, the paper experiments and the
benchmarks all enter Ray through `ray_session`.

    with ray_session(run_dir, address):   # a study directory or an experiment directory
        ...                               # Tune / Train work

A Ray session already initialized (a test, a notebook, an experiment running its cells' studies) is
reused as it is. Otherwise the session joins `address` (or $RAY_ADDRESS, set inside `ray job submit`
jobs), or starts a local Ray instance whose processes carry the directory's tag in their environment,
so that a later run can find and stop what a killed driver left behind (and only that: other Ray
instances on the machine are untouched). Linux /proc; elsewhere no leftover is found.

driver.json records the driver's pid and command line: a second driver on the same directory is refused
while the first one runs (two drivers would write the same trials).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

from sptune import atomic, files
from sptune.errors import UserError
from sptune.experiment.engine import interrupts

log = logging.getLogger("sptune.engine")

TAG_ENV = "SPTUNE_RAY_TAG"  # marks every process of a directory's local Ray instance (for cleanup)


@contextmanager
def joined_cluster(address: str) -> Iterator[None]:
    """A running Ray cluster, joined for work that has no run directory (`sptune doctor --address`) and
    left on exit; a Ray session already initialized is used as it is and left running."""
    import ray

    if ray.is_initialized():
        yield
        return
    try:
        from sptune import plugins

        ray.init(address=address, logging_level="WARNING", log_to_driver=False, runtime_env=plugins.runtime_env())
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UserError(f"cannot reach a Ray cluster at {address} ({str(exc).strip().splitlines()[0]}); start one "
                        f"(`ray start --head`) or run without --address to check this machine") from None
    try:
        yield
    finally:
        ray.shutdown()


@contextmanager
def ray_session(run_dir: str | Path, address: str | None = None) -> Iterator[None]:
    """Ray for the work of `run_dir`: the instance already initialized, else `address`, else a tagged local one."""
    import ray

    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    # Ray Train's checkpoints (the train path) force an experiment snapshot each (num_to_keep=1): wanted.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    # One signal handler, sptune.experiment.engine.interrupts: Tune's own would end its loop "normally".
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    if ray.is_initialized():
        yield
        return
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    address = address or os.environ.get("RAY_ADDRESS")
    check_driver(run_dir)
    stop_processes(leftover_processes(run_dir))  # a killed driver's Ray instance, if it left anything
    tag = ray_tag(run_dir)
    driver = {"pid": os.getpid(), "cmdline": _cmdline(os.getpid()), "tag": tag, "address": address,
              "started": time.time(), "raylet_pids": []}
    atomic.write_json(run_dir / files.DRIVER, driver)
    os.environ[TAG_ENV] = tag
    try:
        # The dashboard stays on: Ray Train's PlacementGroupCleaner asks its state API whether a
        # trial's controller is gone; without it stopped trials leak placement groups (ray#54305).
        # Trials print one line per eval; Ray's INFO lines (a checkpoint saved, ...) would double them.
        from sptune import plugins

        # A researcher's layer or task imported from outside an installed package reaches every worker with
        # the job (runtime_env py_modules): a cluster node need not hold a copy.
        ray.init(address=address or "local", logging_level=logging.WARNING,
                 logging_config=ray.LoggingConfig(log_level="WARNING"), runtime_env=plugins.runtime_env())
        # Recorded for a later cleanup: if this driver is killed, the raylet's agents outlive it.
        driver["raylet_pids"] = [pid for pid in ray_processes(tag) if _cmdline(pid).split(" ")[0].endswith("/raylet")]
        atomic.write_json(run_dir / files.DRIVER, driver)
        interrupts.install()  # ray.init set its own SIGTERM handler (sys.exit): the driver keeps one path
        interrupts.raise_if_received()  # a signal that came while Ray started
        yield
    finally:
        ray.shutdown()
        os.environ.pop(TAG_ENV, None)


def check_driver(run_dir: str | Path) -> None:
    """Refuse a second driver while the one recorded in driver.json still runs."""
    path = Path(run_dir) / files.DRIVER
    if not path.is_file():
        return
    driver = files.read_json(path)
    pid, running = driver["pid"], _cmdline(driver["pid"])
    # The recorded command line tells a live driver from an unrelated process that reuses its pid.
    if pid != os.getpid() and running and running == driver["cmdline"]:
        raise UserError(f"{run_dir} is still in use by a running driver (pid {pid}); stop it first "
                        f"(Ctrl-C or kill {pid}), then rerun or resume")


def ray_tag(run_dir: str | Path) -> str:
    return "sptune-" + hashlib.sha1(str(Path(run_dir).resolve()).encode()).hexdigest()[:12]


def ray_processes(tag: str, raylet_pids: Iterable[int] = ()) -> list[int]:
    """PIDs of one Ray instance: the processes whose environment carries `SPTUNE_RAY_TAG=<tag>`, and
    the agents of its raylets, which start with an environment of their own naming their raylet in
    RAY_RAYLET_PID (`raylet_pids`: raylets recorded earlier, now dead, whose agents may be left)."""
    needle = f"\0{TAG_ENV}={tag}\0".encode()
    tagged, raylet_of = [], {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            env = b"\0" + (proc / "environ").read_bytes()
        except OSError:
            continue  # exited meanwhile, or not ours to read
        pid = int(proc.name)
        if pid == os.getpid():
            continue
        if needle in env:
            tagged.append(pid)
        match = re.search(rb"\0RAY_RAYLET_PID=(\d+)\0", env)
        if match:
            raylet_of[pid] = int(match.group(1))
    raylets = set(tagged) | {pid for pid in raylet_pids if not _alive(pid)}  # a live raylet must be tagged
    return tagged + [pid for pid, raylet in raylet_of.items() if raylet in raylets and pid not in tagged]


def leftover_processes(run_dir: str | Path) -> list[int]:
    """What the local Ray instance of the directory's last driver left running (none if it joined a cluster)."""
    path = Path(run_dir) / files.DRIVER
    if not path.is_file():
        return []
    driver = files.read_json(path)
    return ray_processes(driver["tag"], driver.get("raylet_pids", []))


def stop_processes(pids: list[int], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL what is still alive after `timeout` seconds."""
    if not pids:
        return
    log.warning("stopping %d leftover Ray process(es) of this directory: %s", len(pids), pids)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
            time.sleep(0.2)
        pids = [pid for pid in pids if _alive(pid)]
        if not pids:
            return


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"  # a zombie is dead, only not yet reaped by its parent
    except (OSError, IndexError):
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
