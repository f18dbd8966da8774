"""The suite's guard against a test starting its own Ray (conftest.one_ray_per_session) can fail."""

from pathlib import Path

pytest_plugins = ["pytester"]

INNER = '''
import pytest
import ray

ray.init = lambda *args, **kwargs: None  # the guard wraps this stand-in: no Ray starts in this check


def test_starts_its_own():
    ray.init(address="local", num_cpus=1)


@pytest.mark.own_ray
def test_says_it_starts_its_own():
    ray.init(address="local", num_cpus=1)


def test_starts_none():
    pass
'''


def test_a_test_that_starts_its_own_ray_fails_unless_marked(pytester):
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers = own_ray: a Ray of its own\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_starts_its_own*",
                                 "*started a Ray instance of its own (ray.init, address='local')*"])
