"""Stopping the engine's Tune run: its loop ends at a step boundary (a callback), never inside a write."""

import logging
import signal

import pytest
import ray.cloudpickle as cloudpickle

from sptune.experiment.engine import stopping


@pytest.fixture
def no_sigusr1_handler():
    """SIGUSR1 at its default, as before any tune.run (each tune.run installs its handler and leaves it)."""
    previous = signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGUSR1, previous)


def test_the_stop_callback_raises_once_its_run_is_stopping_where_tune_catches_no_sigusr1(tmp_path, no_sigusr1_handler):
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
        callback.on_step_begin(iteration=3, trials=[])  # told once
        # Tune pickles its callbacks with the Tuner; the restored one finds the live stop by its key.
        restored = cloudpickle.loads(cloudpickle.dumps(callback))
        stopping.register(key).event.set()
        with pytest.raises(stopping.StageInterrupted):
            restored.on_step_begin(iteration=4, trials=[])
        assert not stop.budget_reached
    finally:
        stopping.unregister(key)


def test_a_time_budget_stops_the_run_at_the_first_step_past_its_deadline(tmp_path, no_sigusr1_handler):
    key = stopping.key(tmp_path, "experiment")
    callback = stopping.StopAtStepBoundary(key)
    stop = stopping.register(key, time_budget_s=1e-9)
    try:
        with pytest.raises(stopping.StageInterrupted):
            callback.on_step_begin(iteration=0, trials=[])
        assert stop.budget_reached and stopping.is_stopping(key)
    finally:
        stopping.unregister(key)


def test_where_tune_catches_sigusr1_the_loop_ends_through_its_handler_once(tmp_path):
    """tune.run's SIGUSR1 handler ends its loop after the step and writes Tune's final snapshot."""
    key = stopping.key(tmp_path, "experiment")
    callback = stopping.StopAtStepBoundary(key)
    caught = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: caught.append(signum))
    stopping.register(key).event.set()
    try:
        callback.on_step_begin(iteration=0, trials=[])  # no raise: the handler ends the loop
        callback.on_step_begin(iteration=1, trials=[])
        assert caught == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)
        stopping.unregister(key)


def test_tunes_own_notes_on_a_stop_are_dropped_only_while_its_run_is_stopping(tmp_path, caplog):
    key = stopping.key(tmp_path, "experiment")
    logger = logging.getLogger("ray.tune.tune")
    stop = stopping.register(key)
    try:
        with stopping.quiet_tune_stop_notes(key):
            logger.warning("Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run.")
            stop.event.set()
            logger.warning("Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run.")
            logger.warning("Experiment has been interrupted, but the most recent state was saved.")
            logger.warning("Wrote the latest version of all result files")
        logger.warning("Trials did not complete: []")
    finally:
        stopping.unregister(key)
    assert [r.getMessage()[:20] for r in caplog.records] == [
        "Stop signal received", "Wrote the latest ver", "Trials did not compl"]
