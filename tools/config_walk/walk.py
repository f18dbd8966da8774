"""The config walk: which files a study's config is handled in, from sptune.api.run_study.

    python tools/config_walk/walk.py                       # the smoke study of configs/listops_mini_transformer.yaml
    python tools/config_walk/walk.py --config configs/ucr_osuleaf_s4.yaml

It runs `sptune.run_study(config, smoke=True, num_samples=2)` with a call tracer (sitecustomize.py beside this file)
in the driver and in every Ray worker. A function counts, at its first call only (a loop over trials is walked
once, as a call graph would be), when one of its arguments carries the config: the config file's path, a
sptune Config, StudyState or TrialSpec, or a dict holding a resolved config. The counted functions, in call
order, with consecutive ones of the same file merged, are the walk: each element is a *stay* in a file (a
*room*); a stay in a file already left before is a *return*. Printed: the driver's walk, then the longest walk
of a trial process (a finetuning trial's: it also loads its pretraining checkpoint), then both added.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DRIVE = ("import sys, sptune; sptune.run_study(sys.argv[1], dir=sys.argv[2], smoke=True, output='quiet', "
         "num_samples=2)")


def walk(trace: Path) -> list[tuple[str, list[str]]]:
    stays: list[tuple[str, list[str]]] = []
    for line in trace.read_text().splitlines():
        room, function = line.split("\t")
        if stays and stays[-1][0] == room:
            stays[-1][1].append(function)
        else:
            stays.append((room, [function]))
    return stays


def returns(stays: list[tuple[str, list[str]]]) -> int:
    left: set[str] = set()
    count = 0
    for before, (room, _) in zip([None, *stays], stays):
        if before is not None:
            left.add(before[0])
        count += room in left
    return count


def show(title: str, stays: list[tuple[str, list[str]]]) -> None:
    print(f"{title}: {len(stays)} stays in {len({r for r, _ in stays})} rooms, {returns(stays)} returns")
    for room, functions in stays:
        print(f"  {room:34s} {', '.join(functions)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "configs" / "listops_mini_transformer.yaml"))
    args = parser.parse_args()
    import sptune
    from sptune import config as configs, registry

    config = str(Path(args.config).resolve())
    # The task's data is made (ListOps is generated) here, untraced, before the walk: traced, the generator
    # ran for minutes with no training step, and it does not touch the config.
    cfg = configs.load(config)
    registry.task_of(cfg.task).load(cfg.task.data_dir or None)
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "CONFIG_WALK_OUT": tmp, "CONFIG_WALK_ROOT": str(Path(sptune.__file__).parent),
               "CONFIG_WALK_CONFIG": config, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])}
        # Run from the temp folder: `python -c` puts the working directory first on sys.path, and a checkout
        # there would shadow the sptune this script walks.
        subprocess.run([sys.executable, "-c", DRIVE, config, str(Path(tmp) / "study")], env=env, check=True,
                       stdout=subprocess.DEVNULL, cwd=tmp)
        driver_trace = Path(tmp) / f"trace-{traced_driver(tmp)}.tsv"
        driver = walk(driver_trace)
        trials = [walk(t) for t in Path(tmp).glob("trace-*.tsv") if t != driver_trace]
    trial = max(trials, key=len, default=[])
    show("driver (sptune.api.run_study)", driver)
    show("a trial process (the longest)", trial)
    print(f"walk: {len(driver) + len(trial)} stays, {returns(driver) + returns(trial)} returns "
          f"(driver + trial, each counted on its own)")


def traced_driver(folder: str) -> str:
    """The driver's pid: the one trace that entered sptune/api.py."""
    for trace in Path(folder).glob("trace-*.tsv"):
        if trace.read_text().startswith("api.py\t"):
            return trace.stem.removeprefix("trace-")
    raise SystemExit("no trace entered sptune/api.py: is sptune importable from this Python?")


if __name__ == "__main__":
    main()
