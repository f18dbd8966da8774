"""Shared Ray test fixtures: import them into a test module (`from ray_fixtures import ray_instance`).

One Ray instance serves the whole test session (starting Ray costs seconds): 2 CPUs like the CI
machine, the dashboard on (Ray Train's placement-group cleaner needs its state API, ray#54305),
trial output kept out of the test log.
"""

import logging
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "listops_mini_transformer.yaml"
# The tiny model of every Ray test (seconds per trial on one core).
TINY = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16", "optim.max_steps=8",
        "optim.eval_every=4", "optim.batch_size=8", "optim.warmup_steps=0", "task.max_val_examples=32"]



def bare_study(study_dir: Path, space: dict | None = None, stage_status: dict | None = None) -> None:
    """A study.json with default options and no stage configs, for results read from trials faked on disk."""
    from sptune.records import studies, study_state
    from sptune.search import spaces

    options = studies.resolve_options(studies.Options(), spaces.SearchSpace(path="", stages={}))
    Path(study_dir).mkdir(parents=True, exist_ok=True)
    study_state.save(study_dir, study_state.StudyState(stages={}, space=space or {}, options=options, config="None",
                                                       overrides=[], stage_status=stage_status or {}))


@pytest.fixture(scope="session")
def ray_instance():
    import ray

    if ray.is_initialized():
        # Each test module that imports this fixture holds its own copy of it: the first one started
        # Ray and shuts it down at the session's end.
        yield ray
        return
    # Ray's processes start from this environment: offline hub and the session's SPTUNE_CACHE.
    # num_gpus=0: the tests' cluster is the CI machine's, GPU-less, on a GPU node too.
    ray.init(address="local", num_cpus=2, num_gpus=0, log_to_driver=False, logging_level=logging.WARNING)
    yield ray
    ray.shutdown()


def sptune_env(**extra: str) -> dict[str, str]:
    """Environment for `sptune` subprocesses: the pytest session's offline settings and cache."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    env.pop("RAY_ADDRESS", None)  # a study subprocess starts or joins exactly the Ray the test chose
    return env
