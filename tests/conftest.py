"""Test settings shared by every test: offline hub, a private cache, the --slow switch, and one Ray per session."""

import os
from pathlib import Path

import pytest
import torch

# No test may touch the network: the hub libraries fail in < 1 s instead of retrying.
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the slow end-to-end tests (CI does)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow"):
        return
    skip = pytest.mark.skip(reason="slow end-to-end test: run with --slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def one_ray_per_session(request, monkeypatch):
    """Fails a test that starts a Ray instance in the test process: tests share the session's one
    (ray_fixtures.ray_instance, started before this fixture since it is session-scoped), because each start
    costs seconds of the CI budget and a second instance would be joined, unseen, by later tests. A test
    whose subject is another cluster (a fake autoscaling one, an address to join) says so with
    @pytest.mark.own_ray. Ray started in a subprocess (a killed study's driver) is not this guard's."""
    if request.node.get_closest_marker("own_ray"):
        yield
        return
    import ray

    started = []
    real_init = ray.init

    def init(*args, **kwargs):
        started.append(kwargs.get("address", args[0] if args else None))
        return real_init(*args, **kwargs)

    monkeypatch.setattr(ray, "init", init)
    yield
    if started:
        pytest.fail(f"the test started a Ray instance of its own (ray.init, address={started[0]!r}): request "
                    f"ray_fixtures.ray_instance, or mark it own_ray if another cluster is its subject", pytrace=False)


# Generated data (ListOps, Pathfinder) is cached once per pytest session, outside the user's cache.
if "SPTUNE_CACHE" not in os.environ:
    import tempfile

    os.environ["SPTUNE_CACHE"] = tempfile.mkdtemp(prefix="sptune-test-cache-")


# Tensors from the public S4 implementation (../shared/reference beside the checkout, as in CI).
REFERENCE = Path(os.environ.get(
    "SPTUNE_REFERENCE", Path(__file__).resolve().parents[1].parent / "shared" / "reference" / "s4_v4_reference.pt"))


@pytest.fixture(scope="session")
def reference():
    if not REFERENCE.exists():
        pytest.skip(f"s4 reference tensors not found at {REFERENCE} (set SPTUNE_REFERENCE to their path)")
    return torch.load(REFERENCE, weights_only=True)  # plain tensors in dicts: no pickled code needed


def rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.fixture
def offline_roots(tmp_path, monkeypatch):
    """Fresh data and cache roots, and a `datasets` that is offline with an empty cache."""
    import datasets

    monkeypatch.setenv("SPTUNE_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("SPTUNE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    datasets.disable_progress_bars()
    return tmp_path
