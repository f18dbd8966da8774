"""One typed option set (sptune.search.options.Options) from the command line and the Python API alike."""

import argparse

import pytest

import sptune
from sptune.errors import UserError
from sptune.search import options


def test_api_fields_by_name_replace_the_given_options():
    base = options.Options(num_samples=4, logger="mlflow")
    assert options.with_values(base, {"num_samples": 2}) == options.Options(num_samples=2, logger="mlflow")
    assert options.with_values(None, {}) == options.Options()


@pytest.mark.parametrize("values, words", [({"num_sample": 2}, "unknown study option(s) num_sample"),
                                           ({"num_samples": 0}, "--num-samples must be >= 1"),
                                           ({"time_budget_s": -1.0}, "--time-budget must be > 0")])
def test_a_bad_option_is_a_user_error_before_anything_runs(tmp_path, values, words):
    with pytest.raises(UserError, match=words.replace("(", r"\(").replace(")", r"\)")):
        sptune.run_study("configs/shapes_tiny_transformer.yaml", dir=tmp_path / "s", **values)
    assert not (tmp_path / "s").exists()


def test_the_flags_make_the_same_options():
    parser = argparse.ArgumentParser()
    options.add_options(parser)
    args = parser.parse_args(["--num-samples", "3", "--sampler", "tpe", "--no-asha"])
    assert options.from_args(args) == options.Options(num_samples=3, sampler="tpe", asha=False)
