"""Stopping the engine's Tune run: its loop ends at a step boundary (a callback), never inside a write."""

import pytest
import ray.cloudpickle as cloudpickle

from sptune.tune.engine import stopping


def test_the_stop_callback_raises_only_once_its_run_is_stopping(tmp_path):
    key = stopping.key(tmp_path, "experiment")
    callback = stopping.StopAtStepBoundary(key)
    callback.on_step_begin(iteration=0, trials=[])  # nothing registered: runs on
    stop = stopping.register(key)
    try:
        callback.on_step_begin(iteration=1, trials=[])
        assert not stopping.is_stopping(key)
        stop.event.set()
        with pytest.raises(stopping.StageInterrupted):
            callback.on_step_begin(iteration=2, trials=[])
        # Tune pickles its callbacks with the Tuner; the restored one finds the live stop by its key.
        restored = cloudpickle.loads(cloudpickle.dumps(callback))
        with pytest.raises(stopping.StageInterrupted):
            restored.on_step_begin(iteration=3, trials=[])
        assert not stop.budget_reached
    finally:
        stopping.unregister(key)


def test_a_time_budget_stops_the_run_at_the_first_step_past_its_deadline(tmp_path):
    key = stopping.key(tmp_path, "experiment")
    callback = stopping.StopAtStepBoundary(key)
    stop = stopping.register(key, time_budget_s=1e-9)
    try:
        with pytest.raises(stopping.StageInterrupted):
            callback.on_step_begin(iteration=0, trials=[])
        assert stop.budget_reached and stopping.is_stopping(key)
    finally:
        stopping.unregister(key)
