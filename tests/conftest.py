"""Test settings shared by every test: offline hub, a private cache, and the --slow switch."""

import os

import pytest

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

# Generated data (ListOps, Pathfinder) is cached once per test session, outside the user's cache.
if "SPTUNE_CACHE" not in os.environ:
    import tempfile

    os.environ["SPTUNE_CACHE"] = tempfile.mkdtemp(prefix="sptune-test-cache-")
