"""Node losses retried without limit, other crashes --max-failures times (sptune.experiment.engine.preemption).

The classification and Tune's count, without Ray; then a study on Ray's fake multi-node provider under autoscaler
v2 (`ray up`'s default, test_autoscaling.fake_cluster) with --max-failures 1 and durable storage (an S3 server on
127.0.0.1): a pretraining trial whose node is lost twice, unannounced and then after Ray's notice of preemption,
completes, resumed from its checkpoint each time, with the numbers of an uninterrupted run, and the storage holds
the study as it ended. A crash with its node alive still counts against --max-failures: the classification test
here, and on Ray's single-node path
test_failures.test_oom_is_final_and_a_crash_is_failed_then_retried_from_its_checkpoint (its trial is spent)."""

import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray
from ray import cloudpickle
from ray.exceptions import RayActorError
from ray.tune.experiment import Trial
from ray.tune.trainable.metadata import _TrainingRunMetadata
from ray_fixtures import CONFIG
from reproducibility import assert_pretraining_uninterrupted
from s3_server import S3Server, mirrored_files
from test_autoscaling import fake_cluster, kill_node, worker_raylets

from sptune import atomic, files
from sptune.experiment.engine import preemption
from sptune.records import results, storage, studies
from sptune.trials import entry, retries
from sptune.trials.trainable import LINEAGE_KEY, TrialSpec, trial_run_dir


# ----------------------------------------------------------------------------- without Ray
@pytest.fixture
def raylets(monkeypatch):
    """Nodes as ray.nodes() lists them, {node id: (alive in the GCS, raylet port)}: a port of a listening
    socket answers, a port nothing listens on refuses."""
    listening = socket.create_server(("127.0.0.1", 0))
    free = socket.create_server(("127.0.0.1", 0))
    closed_port = free.getsockname()[1]
    free.close()
    nodes = {"live": (True, listening.getsockname()[1]), "dead": (False, closed_port),
             "silent": (True, closed_port)}  # alive for the GCS (its health checks lag), raylet gone
    monkeypatch.setattr(ray, "nodes", lambda: [{"NodeID": node, "Alive": alive, "NodeManagerAddress": "127.0.0.1",
                                                "NodeManagerPort": port} for node, (alive, port) in nodes.items()])
    yield nodes
    listening.close()


def write_attempts(run_dir: Path, *nodes: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic.write_json(run_dir / files.TRIAL, {"attempts": [{"node_id": node, "start_step": 0} for node in nodes]})


def test_a_failure_is_a_node_loss_when_its_attempts_node_is_gone(tmp_path, raylets):
    empty = {"failures": []}
    for node, cause in [("dead", "node lost"), ("silent", "node lost"), ("forgotten", "node lost"), ("live", "crash")]:
        write_attempts(tmp_path, "live", node)
        assert preemption.classify(tmp_path, empty) == {"attempt": 2, "node_id": node, "cause": cause}
    # A retry that failed before it recorded its attempt (its start-up crashed, on whatever node): a crash,
    # though the attempt before it lost its node; so is a trial that never recorded one.
    write_attempts(tmp_path, "dead")
    assert preemption.classify(tmp_path, {"failures": [{"attempt": 1}]})["cause"] == "crash"
    assert preemption.classify(tmp_path / "none", empty) == {"attempt": 0, "node_id": None, "cause": "crash"}


def test_tune_retries_node_losses_without_limit_and_crashes_max_failures_times(tmp_path, raylets, monkeypatch):
    """Tune's own retry rule (Trial.should_recover) on the count the callback leaves, --max-failures 1."""
    config = {LINEAGE_KEY: {"study_dir": str(tmp_path), "stage": "pretrain"}, "optim.lr": 0.001}
    run_dir = trial_run_dir(config, "t1")
    error, pickled = tmp_path / "error.txt", tmp_path / "error.pkl"
    # The trial's storage copy of its errors lags (Tune syncs it later): the callback must not read it.
    trial = SimpleNamespace(trial_id="t1", config=config, run_metadata=_TrainingRunMetadata(),
                            max_failures=preemption.tune_limit(1), error_file=str(error),
                            pickled_error_file=str(pickled), get_pickled_error=lambda: None)
    callback = preemption.NodeLossRetries(max_failures=1)

    def fail(node: str, message: str, exception: Exception | None = None) -> bool:
        """A failure of the attempt on `node`, as TuneController._process_trial_failure handles it."""
        write_attempts(run_dir, *[f["node_id"] for f in files.read_json(run_dir / retries.RETRIES)["failures"]]
                       if (run_dir / retries.RETRIES).is_file() else [], node)
        error.write_text(f"Failure # n\n{message}\n")
        pickled.write_bytes(cloudpickle.dumps(exception or RuntimeError(message)))  # as Trial.handle_error
        trial.run_metadata.num_failures += 0 if exception and exception.preempted else 1  # Tune's own count
        if not Trial.should_recover(trial):
            return False
        callback.on_trial_recover(0, [], trial)
        return True

    for node in ["dead", "silent", "dead", "silent"]:  # more node losses than any limit
        assert fail(node, "ActorUnavailableError: Socket closed") and trial.run_metadata.num_failures == 0
    assert fail("live", "RuntimeError: first") and trial.run_metadata.num_failures == 1
    # Ray's own signal: drained for preemption, its raylet still answering. A node loss; Tune left it uncounted.
    assert fail("live", "ActorDiedError: preempted", RayActorError(preempted=True))
    assert trial.run_metadata.num_failures == 1
    assert "spent" not in files.read_json(run_dir / retries.RETRIES)
    assert fail("dead", "ActorUnavailableError: Socket closed")  # after the crash retries are spent, too
    assert fail("live", "RuntimeError: second")
    record = files.read_json(run_dir / retries.RETRIES)
    assert [f["cause"] for f in record["failures"]] == ["node lost"] * 4 + ["crash"] + ["node lost"] * 2 + ["crash"]
    assert [f.get("preempted", False) for f in record["failures"]] == [False] * 5 + [True] + [False] * 2
    assert record["spent"] == "crashed 2 times, more than --max-failures 1; the last: RuntimeError: second"

    # The spent trial's retry fails at once, so Tune ends it (its count passes Tune's limit); the mark is
    # consumed: a resume runs the trial again.
    monkeypatch.setattr(ray.tune, "get_context", lambda: SimpleNamespace(get_trial_id=lambda: "t1"))
    spec = TrialSpec(stage="pretrain", base={}, study_dir=str(tmp_path), path="direct")
    trained = []  # the run directories of the trials the entry point handed on
    with pytest.raises(retries.RetriesSpent, match="crashed 2 times"):
        entry.run_trial(config, {(str(tmp_path), "pretrain"): spec}, stage_fn=lambda t: trained.append(t.run_dir))
    trial.run_metadata.num_failures += 1
    assert not Trial.should_recover(trial) and trained == []
    entry.run_trial(config, {(str(tmp_path), "pretrain"): spec}, stage_fn=lambda t: trained.append(t.run_dir))
    assert trained == [run_dir]


# ----------------------------------------------------------------------------- on a fake multi-node cluster
@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with fake_cluster(tmp_path_factory.mktemp("cluster"), v2=True) as running:
        yield running


def study_losing_a_trials_node_twice(cluster, study_dir: Path, storage_env: dict[str, str]
                                    ) -> tuple[subprocess.CompletedProcess, list]:
    """A smoke study (pretraining 120 steps, an eval every 4) with --max-failures 1, GPU trials on the fake GPU
    workers, mirrored to the S3 server of `storage_env` (pushed every second). The first pretraining trial loses
    its node twice: unannounced at step >= 12 (sptune's fallback classifies that loss), then, once its retry has
    made two evals of its own, after Ray's notice of preemption (Ray marks that loss, Tune leaves it uncounted).
    Returns the finished study and [(run dir, node, step)] of the losses."""
    study = subprocess.Popen(
        [sys.executable, "-m", "sptune.cli", "study", str(CONFIG), "--smoke", "--quiet", "--dir", str(study_dir),
         "--address", cluster.address, "--cpus-per-worker", "1", "--gpus-per-worker", "1", "--max-failures", "1",
         "--storage", "s3://studies/nodes", "run.device=cpu", "pretrain.optim.max_steps=120"],
        env={**cluster.env, **storage_env, "SPTUNE_MIRROR_SECONDS": "1"}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    kills, notice, deadline = [], None, time.monotonic() + 300
    while study.poll() is None and time.monotonic() < deadline:
        run_dirs = sorted((study_dir / "pretrain").glob("pretrain-*"))
        run_dir = kills[0][0] if kills else next((d for d in run_dirs if (d / files.PROGRESS).is_file()), None)
        if run_dir is not None and len(kills) < 2 and (run_dir / files.PROGRESS).is_file():
            attempts = files.read_json(run_dir / files.TRIAL)["attempts"]
            step = files.read_json(run_dir / files.PROGRESS)["step"]
            if len(attempts) == 2 and notice is None:  # the retry started: the notice goes out at once
                notice = PreemptionNotice(cluster, attempts[-1]["node_id"])
            if len(attempts) == len(kills) + 1 and step >= max(12, attempts[-1]["start_step"] + 8) and \
                    (notice is None or notice.past_deadline()):
                raylet = worker_raylets(cluster.tag).get(attempts[-1]["node_id"])
                if raylet is not None:  # (a drained node may be gone already)
                    kill_node(raylet)
                kills.append((run_dir, attempts[-1]["node_id"], step))
        time.sleep(0.2)
    output = study.communicate(timeout=60)[0]
    assert len(kills) == 2, output[-4000:]
    return subprocess.CompletedProcess(study.args, study.returncode, output), kills


class PreemptionNotice:
    """Ray's notice of a spot reclaim, as autoscaler v2 relays a cloud's: the node drained with reason
    PREEMPTION and a deadline 1 s away (`ray drain-node`, started in the background). Ray marks the lost
    actors' errors preempted only for a node that dies past its deadline."""

    def __init__(self, cluster, node_id: str) -> None:
        self.drain = subprocess.Popen(
            [str(Path(sys.executable).parent / "ray"), "drain-node", "--address", cluster.address, "--node-id",
             node_id, "--reason", "DRAIN_NODE_REASON_PREEMPTION", "--reason-message", "spot instance reclaimed",
             "--deadline-remaining-seconds", "1"], env=cluster.env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True)
        self.drained_at: float | None = None

    def past_deadline(self) -> bool:
        if self.drained_at is None and self.drain.poll() is not None:
            assert self.drain.returncode == 0, self.drain.stdout.read()[-2000:]
            self.drained_at = time.monotonic()
        return self.drained_at is not None and time.monotonic() > self.drained_at + 1.5


@pytest.mark.slow
def test_a_trial_losing_its_node_twice_completes_as_if_uninterrupted(cluster, tmp_path, monkeypatch):
    server = S3Server().start()
    server.reset()
    try:
        proc, kills = study_losing_a_trials_node_twice(cluster, tmp_path / "study", server.env)
        assert proc.returncode == 0, proc.stdout[-4000:]
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        pulled = storage.pull("s3://studies/nodes/study", tmp_path / "pulled")
    finally:
        server.stop()
    rows = results.collect(tmp_path / "study")
    assert len(rows) == 3 * studies.SMOKE_SAMPLES and all(r["status"] == "completed" for r in rows), proc.stdout[-3000:]
    # The storage holds the study as it ended: every file of every trial, the twice-retried one's included.
    assert mirrored_files(pulled) == mirrored_files(tmp_path / "study")

    (run_dir, first_node, first_step), (_, second_node, second_step) = kills
    attempts = files.read_json(run_dir / files.TRIAL)["attempts"]
    assert [a["node_id"] for a in attempts[:2]] == [first_node, second_node]
    assert len(attempts) == 3 and attempts[2]["node_id"] not in (first_node, second_node)
    # Each retry continued from the last checkpoint of the attempt before, not from step 0.
    assert 0 < first_step <= attempts[1]["start_step"] < second_step <= attempts[2]["start_step"]
    assert [h["step"] for h in files.read_json(run_dir / files.RESULT)["history"]] == list(range(4, 121, 4))
    record = files.read_json(run_dir / retries.RETRIES)
    assert [(f["node_id"], f["cause"], f.get("preempted", False)) for f in record["failures"]] == \
        [(first_node, "node lost", False), (second_node, "node lost", True)]
    # The twice-retried trial's numbers are an uninterrupted run's.
    assert_pretraining_uninterrupted(tmp_path / "study", [r for r in rows if Path(r["run_dir"]).name == run_dir.name],
                                     tmp_path / "plain")
