"""Many trials per GPU (--trials-per-gpu N): each trial's share, its CPUs sized to the node, its memory
capped to its share less its CUDA context, its peak counted from its own start, and an out-of-memory a
neighbour caused retried rather than failed. No GPU here: torch's memory calls are faked, and the scheduling
runs on Ray's fake GPU resources (a GPU count Ray hands out without hardware behind it)."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from ray_fixtures import CONFIG, TINY, sptune_env

from sptune import config
from sptune.errors import UserError
from sptune.records import studies
from sptune.search import spaces
from sptune.search.options import Options
from sptune.trials import resources, trainable

GIB = 2**30


def resolve(**values):
    return studies.resolve_options(Options(**values), spaces.SearchSpace(path="", stages={},
                                                                         resources={"cpus_per_worker": 4}))


def test_trials_per_gpu_gives_each_trial_its_share():
    options = resolve(trials_per_gpu=4)
    assert options.gpus_per_worker == 0.25 and options.trials_per_gpu == 4 and options.path == "direct"
    assert options.cpus_per_worker == 4  # what the space asks; the driver fits it to the GPU nodes
    assert resolve().trials_per_gpu == 0


@pytest.mark.parametrize("values", [{"trials_per_gpu": 0}, {"trials_per_gpu": 2, "gpus_per_worker": 1},
                                    {"trials_per_gpu": 2, "workers": 2}])
def test_trials_per_gpu_contradicted_is_a_one_line_error(values):
    with pytest.raises(UserError, match="--trials-per-gpu N packs N one-worker trials"):
        resolve(**values)


@pytest.mark.parametrize("asked, n, nodes, cpus", [
    (4, 16, [{"CPU": 16, "GPU": 1}], 1),  # the paper spaces' 4 CPUs would run 4 of the 16 at once
    (4, 4, [{"CPU": 16, "GPU": 1}], 4),  # enough: never more than asked
    (4, 4, [{"CPU": 8, "GPU": 1}, {"CPU": 48, "GPU": 4}], 2),  # the tightest GPU node decides
    (4, 4, [{"CPU": 2}, {"CPU": 64, "GPU": 2}], 4),  # CPU-only nodes (the head) do not count
    (1, 8, [{"CPU": 4, "GPU": 1}], 1),  # at least one CPU
])
def test_cpus_per_packed_trial_fit_the_gpu_nodes(asked, n, nodes, cpus):
    assert resources.fit_cpus(asked, n, nodes) == cpus


@pytest.fixture
def shared_gpu(monkeypatch):
    """A 16 GiB GPU this process sees, torch's memory calls recorded or faked; `peak` is its reserved peak
    (an earlier trial's until the statistics are reset), `resets` how often they were."""
    state = {"peak": 0, "cap": None, "resets": 0}
    monkeypatch.setattr(resources, "trial_device", lambda requested: ("cuda", None))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "fake GPU")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: type("P", (), {"total_memory": 16 * GIB}))
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: state["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda *a: state.update(peak=0, resets=state["resets"] + 1))
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction",
                        lambda fraction, device: state.update(cap=(fraction, device)))
    return state


def oom(monkeypatch, gpu, request="1.00 GiB", peak=0):
    """run_stage reserves `peak` bytes of the `shared_gpu` (this trial's own peak), then fails to allocate `request`."""
    def run_stage(*args, **kwargs):
        gpu["peak"] = max(gpu["peak"], peak)
        raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {request}. GPU 0 has a total "
                                     f"capacity of 16.00 GiB of which 20.00 MiB is free.")

    monkeypatch.setattr(trainable, "run_stage", run_stage)


def guarded(tmp_path, share):
    cfg = config.load(str(CONFIG), TINY, stage="scratch")
    return trainable.run_guarded(cfg, "scratch", None, None, tmp_path / "run", gpu_share=share)


def test_a_neighbours_out_of_memory_is_retried(tmp_path, monkeypatch, shared_gpu):
    """1 GiB reserved + its context + 1 GiB asked is within a quarter of 16 GiB: the GPU was full of other
    trials' memory, so the error reaches Tune, which retries the trial from its checkpoint."""
    oom(monkeypatch, shared_gpu, peak=1 * GIB)
    with pytest.raises(torch.OutOfMemoryError):
        guarded(tmp_path, 0.25)
    # The trial's allocator was capped to its share less its CUDA context.
    assert shared_gpu["cap"] == (0.25 - resources.CONTEXT_BYTES / (16 * GIB), 0)


def test_a_trial_outgrowing_its_share_fails_at_once(tmp_path, monkeypatch, shared_gpu):
    oom(monkeypatch, shared_gpu, peak=int(3 * GIB))  # + its context + 1 GiB > 4 GiB: its own
    result = guarded(tmp_path, 0.25)
    assert result["status"] == "failed" and "fewer --trials-per-gpu" in result["reason"]
    assert json.loads((tmp_path / "run" / "result.json").read_text())["reason"] == result["reason"]


def test_an_earlier_trials_peak_in_a_reused_process_is_not_this_trials(tmp_path, monkeypatch, shared_gpu):
    """Ray reuses a trial's process for the next trial (reuse_actors): the peak statistics restart with each
    trial, so a small trial after a large one is not taken for one that outgrew its share."""
    shared_gpu["peak"] = int(3.9 * GIB)  # the previous trial's, in this process
    oom(monkeypatch, shared_gpu, peak=1 * GIB)
    with pytest.raises(torch.OutOfMemoryError):
        guarded(tmp_path, 0.25)
    assert shared_gpu["resets"] == 1


@pytest.mark.parametrize("share", [1.0, 0.0], ids=["whole GPU", "no GPU"])
def test_an_unshared_out_of_memory_fails_at_once_uncapped(tmp_path, monkeypatch, shared_gpu, share):
    oom(monkeypatch, shared_gpu)
    result = guarded(tmp_path, share)
    assert result["status"] == "failed" and "CUDA out of memory" in result["reason"]
    assert "--trials-per-gpu" not in result["reason"] and shared_gpu["cap"] is None
    assert shared_gpu["resets"] == 1  # its peak counts from its start too


@pytest.mark.parametrize("trials, total_gib", [(16, 80), (4, 24), (16, 24)])
def test_packed_trials_and_their_contexts_fit_the_gpu(trials, total_gib):
    total = total_gib * GIB
    fraction = resources.allocator_share(1 / trials, total)
    assert trials * (fraction * total + resources.CONTEXT_BYTES) == pytest.approx(total)


def test_a_share_smaller_than_a_context_leaves_the_allocator_nothing():
    assert resources.allocator_share(1 / 64, 16 * GIB) == 0.0


PACKED_STUDY = """
import json, sys, time
from pathlib import Path
import ray
from sptune.experiment.engine import driver
from sptune.records import studies
from sptune.search.options import Options
from sptune.trials import trainable

def all_four_at_once(trial):
    # A scratch trial trains only once all four have started: the study ends only if they run together.
    params, spec = trial.params, trial.spec
    if spec.stage == "scratch":
        (Path(spec.study_dir) / f"started-{params['optim.lr']}").touch()
    deadline = time.monotonic() + 120
    while spec.stage == "scratch" and len(list(Path(spec.study_dir).glob("started-*"))) < 4:
        if time.monotonic() > deadline:
            raise RuntimeError("the four scratch trials never ran at once")
        time.sleep(0.2)
    trainable.stage_trainable(trial)

# A fake 4-CPU, 1-GPU node: Ray hands out the GPU count; the trials train on CPU (run.device=cpu). "local":
# a new instance with these resources, never a cluster another test started with `ray start`.
ray.init(address="local", num_cpus=4, num_gpus=1, log_to_driver=False, logging_level="WARNING")
state = studies.create(sys.argv[2], json.loads(sys.argv[3]), Path(sys.argv[1]), sys.argv[4],
                       Options(trials_per_gpu=4, max_failures=0))
driver.run_study(state.dir, verbose=0, trainable=all_four_at_once)
print(json.dumps(json.loads((Path(state.dir) / "study.json").read_text())["options"]))
"""


@pytest.mark.slow  # ~40 s: its own Ray instance (fake resources), 4 tiny trials at once on 2 cores
def test_four_trials_share_a_fake_gpu_at_once(tmp_path):
    space = tmp_path / "space.yaml"
    grid = {"params": {"optim.lr": [1e-3, 2e-3, 3e-3, 4e-3]}}
    space.write_text(json.dumps({"task": "listops-mini", "model": "transformer", "num_samples": 4,
                                 "extend_grids": False,
                                 "max_concurrent": 4, "resources": {"cpus_per_worker": 4},
                                 "stages": {"pretrain": {"params": {"optim.lr": [1e-3]}}, "finetune":
                                            {"params": {"optim.lr": [1e-3]}}, "scratch": grid}}))
    overrides = [*TINY, "run.device=cpu"]
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(PACKED_STUDY), str(tmp_path / "study"), str(CONFIG),
                           json.dumps(overrides), str(space)], capture_output=True, text=True, timeout=600,
                          env=sptune_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    options = json.loads(proc.stdout.strip().splitlines()[-1])
    assert options["gpus_per_worker"] == 0.25 and options["cpus_per_worker"] == 1  # 4 CPUs / 4 slots
    results = [json.loads(p.read_text()) for p in (tmp_path / "study" / "scratch").glob("*/result.json")]
    assert len(results) == 4 and all(r["status"] == "completed" for r in results)  # they ran together
