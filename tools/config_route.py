"""The route a study's config travels, counted by a profiler: every call into sptune's code whose arguments carry
the config, and every return that hands it back, from `sptune study configs/shapes_tiny_transformer.yaml
--smoke` to one pretraining trial's training loop (docs/architecture.md, "The config's route").

    python tools/config_route.py            # the two parts' files in order, stays and returns

Carriers: the config file's path, the study's `Config` or a config dict of its task (a TrialSpec's base,
study.json's stages; not the one-field configs a grid value is checked with), a `StudyState`, `TrialSpec`, `Trial`,
`Cell`, `Stage`, `Experiment`, and containers holding them (one level).
Every call counts, not the first of each function. A *stay* is each time the config moves into a file other
than the one it was in; a *return* is a stay in a file it was in before. The driver's part runs the command
line in this process through Tune's loop (the engine's searcher proposing the first trial) up to that trial's
start (Tune's `on_trial_start` hook, as its actor starts); the trial's part runs the worker's entry point
(`entry.run_trial`, Tune's context faked, as a worker calls it with the specs the driver made) up to the
training loop (`train.train_loop`).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = str(ROOT / "sptune")
CONFIG = "configs/shapes_tiny_transformer.yaml"
TASK = "shapes-tiny"  # not the default task: the one-field configs a grid value is checked with are not it


class Reached(Exception):
    """The route's end: raised where the part stops."""


def reached(*args: Any, **kwargs: Any) -> None:
    """Stands in for the function a part ends at: the profile stops here, so the calls that unwind back out
    (a context manager's exit, a `finally`) are not counted as the route."""
    sys.setprofile(None)
    raise Reached


def carrier_types() -> tuple[type, ...]:
    from sptune.config import Config
    from sptune.experiment.engine.domain import Cell, Experiment, Stage
    from sptune.records.study_state import StudyState
    from sptune.trials.trainable import Trial, TrialSpec

    return Config, StudyState, TrialSpec, Trial, Cell, Stage, Experiment


def carries(value: Any, types: tuple[type, ...], depth: int = 1) -> bool:
    if isinstance(value, types[0]):  # sptune's Config
        return getattr(getattr(value, "task", None), "name", None) == TASK  # (one being copied has none yet)
    if isinstance(value, types) or (isinstance(value, (str, Path)) and str(value).endswith(CONFIG)):
        return True
    if isinstance(value, dict):
        if {"task", "model", "optim"} <= set(value):
            return isinstance(value["task"], dict) and value["task"].get("name") == TASK
        return depth > 0 and any(carries(v, types, depth - 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return depth > 0 and any(carries(v, types, depth - 1) for v in value)
    return False


def traced(fn: Any) -> list[str]:
    """The files of sptune the config moves through while `fn()` runs, in order (repeats in a row merged)."""
    types = carrier_types()
    route: list[str] = []

    def enter(path: str) -> None:
        if path.startswith(PACKAGE) and (not route or route[-1] != path):
            route.append(path)

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            if any(carries(value, types) for value in list(frame.f_locals.values())):
                enter(frame.f_code.co_filename)
        elif event == "return" and frame.f_back is not None and carries(arg, types):
            enter(frame.f_back.f_code.co_filename)

    sys.setprofile(profile)
    try:
        fn()
    except Reached:
        return [str(Path(path).relative_to(PACKAGE).with_suffix("")) for path in route]
    finally:
        sys.setprofile(None)
    raise SystemExit("the part ended before its end was reached: the route was not measured")


def driver_part(study_dir: Path) -> list[str]:
    from ray.tune import Callback

    from sptune.cli.main import main

    Callback.on_trial_start = reached  # the first callback that keeps Tune's own hook ends the part
    return traced(lambda: main(["study", str(ROOT / CONFIG), "--smoke", "--dir", str(study_dir), "--quiet"]))


def trial_part(study_dir: Path) -> list[str]:
    from ray import tune as ray_tune

    from sptune.experiment.engine import domain
    from sptune.run import train
    from sptune.trials import entry
    from sptune.trials.trainable import LINEAGE_KEY

    experiment = domain.open_experiment(study_dir, {study_dir.name: study_dir}, {}, {})
    specs = experiment.specs
    config = {"optim.lr": 1e-3, "optim.batch_size": 32,
              LINEAGE_KEY: {"study_dir": str(study_dir), "stage": "pretrain", "cell": study_dir.name}}
    ray_tune.get_context = lambda: SimpleNamespace(get_trial_id=lambda: "t0")

    train.train_loop = reached
    return traced(lambda: entry.run_trial(config, specs))


def counted(route: list[str]) -> tuple[list[str], int, int]:
    seen: set[str] = set()
    marked = []
    for name in route:
        marked.append(f"{name} r" if name in seen else name)
        seen.add(name)
    return marked, len(route), sum(name.endswith(" r") for name in marked)


def main() -> None:
    import ray

    with tempfile.TemporaryDirectory() as tmp:
        study_dir = Path(tmp) / "study"
        parts = {"driver": driver_part(study_dir)}
        ray.shutdown()
        parts["trial"] = trial_part(study_dir)
    totals = [0, 0]
    for name, route in parts.items():
        marked, stays, returns = counted(route)
        totals = [totals[0] + stays, totals[1] + returns]
        print(f"{name}: {stays} stays, {returns} returns: {', '.join(marked)}")
    print(f"both: {totals[0]} stays, {totals[1]} returns")


if __name__ == "__main__":
    main()
