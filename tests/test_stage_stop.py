"""Stopping a concurrent stage: its Tune loop ends at a step boundary (a callback), never inside a write."""

import threading

import pytest
import ray.cloudpickle as cloudpickle

from sptune.tune import pipeline, stopping_stages


def test_the_stop_callback_raises_only_once_its_study_is_stopping(tmp_path):
    key = stopping_stages.key(tmp_path, "scratch")
    callback = stopping_stages.StopAtStepBoundary(key)
    callback.on_step_begin(iteration=0, trials=[])  # no event registered: runs on
    stopping = threading.Event()
    stopping_stages.register(key, stopping)
    try:
        callback.on_step_begin(iteration=1, trials=[])
        stopping.set()
        with pytest.raises(stopping_stages.StageInterrupted):
            callback.on_step_begin(iteration=2, trials=[])
        # Tune pickles its callbacks with the Tuner; the restored one finds the live event by its key.
        restored = cloudpickle.loads(cloudpickle.dumps(callback))
        with pytest.raises(stopping_stages.StageInterrupted):
            restored.on_step_begin(iteration=3, trials=[])
    finally:
        stopping_stages._events.pop(key, None)


def test_run_concurrently_stops_the_other_chain_cooperatively_when_the_main_chain_fails():
    seen = []

    def chain(stages, stopping):
        if stages == ("main",):
            raise RuntimeError("the chain failed")
        while not stopping.wait(0.05):  # stands in for a Tune loop whose next step checks the event
            pass
        seen.append("stopped")

    with pytest.raises(RuntimeError, match="the chain failed"):
        pipeline.run_concurrently(chain, [("main",), ("scratch",)])
    assert seen == ["stopped"]
