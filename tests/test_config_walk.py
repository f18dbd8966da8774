"""tools/config_walk: the stays and returns it counts from a trace (the tracer itself runs a real study: the
figures in docs/architecture.md come from `python tools/config_walk/walk.py`)."""

import importlib.util
from pathlib import Path

WALK = Path(__file__).resolve().parents[1] / "tools" / "config_walk" / "walk.py"


def load_walk():
    spec = importlib.util.spec_from_file_location("config_walk", WALK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_consecutive_calls_in_a_file_are_one_stay_and_a_file_entered_again_is_a_return(tmp_path):
    walk = load_walk()
    trace = tmp_path / "trace-1.tsv"
    trace.write_text("api.py\trun_study\nconfig.py\tload\nconfig.py\tvalidate\nregistry.py\tcheck_names\n"
                     "config.py\tto_dict\napi.py\t_run\nregistry.py\tget_task\n")
    stays = walk.walk(trace)
    assert [room for room, _ in stays] == ["api.py", "config.py", "registry.py", "config.py", "api.py", "registry.py"]
    assert stays[1] == ("config.py", ["load", "validate"])
    assert walk.returns(stays) == 3  # config.py, api.py and registry.py were each left before
    assert walk.returns([("a.py", ["f"]), ("b.py", ["g"])]) == 0
