"""Ray Tune's W&B callback with a logging actor that lets W&B write its run before Ray kills the actor.

Ray's WandbLoggerCallback runs one actor per trial and kills it (`ray.kill`) as soon as the actor's loop
returns from `wandb.finish()`, and Ray kills a dead worker's child processes. But `finish()` only sends
W&B's service process (wandb-core, a child of the actor) a message to close the run; the service writes
the run file's records when it closes the run. Killed before that, the file keeps its 7-byte header and
nothing else. This happens under load, e.g. in a CI run with two test workers on 2 cores (the offline run of
tests/test_study_output.py::test_wandb_offline_runs had no config and no history; its debug-internal.log
ends before "stream: finishing up"). `wandb.teardown()` waits until the service has closed its runs and
exited, as W&B's own atexit hook does in a process that is not killed.

Imported only for `--logger wandb` (sptune.trackers.loggers): importing it imports wandb.
"""

from __future__ import annotations

from ray.air.integrations.wandb import WandbLoggerCallback, _WandbLoggingActor


class FlushingWandbLoggingActor(_WandbLoggingActor):
    def run(self):
        super().run()  # logs each result, then wandb.finish()
        self._wandb.teardown()  # returns once the service has written the run and exited


class WandbCallback(WandbLoggerCallback):
    _logger_actor_cls = FlushingWandbLoggingActor
