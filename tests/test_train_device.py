"""Which device a trial trains on under Ray Train, and the order of DDP and torch.compile.

No GPU is needed: CUDA's answers are monkeypatched, and DDP runs as one gloo rank on CPU.
"""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from sptune import config
from sptune.run import train_setup
from sptune.trials import resources, trainable


@pytest.fixture
def four_gpus(monkeypatch):
    """torch reports 4 CUDA devices; set_device is recorded."""
    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    return current


def test_a_ray_train_worker_trains_on_the_gpu_ray_train_gives_it(four_gpus):
    # Rank 1 holding GPUs 2 and 3 (gpus_per_worker=2): Ray Train says cuda:2, rank % count says cuda:1.
    assert train_setup.pick_device("cuda", 1, torch.device("cuda", 2)) == torch.device("cuda", 2)
    assert four_gpus == [torch.device("cuda", 2)]  # made current, for NCCL and the fused optimizer
    # Outside Ray Train (a plain run, torch.distributed launched by hand): rank % device_count.
    assert train_setup.pick_device("cuda", 5) == torch.device("cuda", 1)
    assert train_setup.pick_device("cpu", 1, torch.device("cuda", 2)) == torch.device("cpu")
    assert four_gpus == [torch.device("cuda", 2)]


def test_the_train_worker_asks_ray_train_for_its_device(tmp_path, monkeypatch):
    import ray.train
    import ray.train.torch

    class Rank1:
        def get_world_rank(self):
            return 1

    seen = {}
    monkeypatch.setattr(ray.train, "get_context", Rank1)
    monkeypatch.setattr(ray.train.torch, "get_device", lambda: torch.device("cuda", 3))
    monkeypatch.setattr(resources, "trial_device", lambda requested: ("cuda", None))
    monkeypatch.setattr(resources, "start_gpu_trial", lambda share: None)  # no CUDA here to reset or cap
    monkeypatch.setattr(trainable, "run_stage", lambda *args, **kwargs: seen.update(kwargs) or {})
    cfg = config.load(None, [f"run.out_dir={tmp_path}"])
    trainable.train_worker({"cfg": cfg.to_dict(), "stage": "scratch", "run_dir": str(tmp_path / "run"),
                            "init_from": None})
    assert seen["train_device"] == torch.device("cuda", 3)
    # A function trial (no Ray Train) and a CPU trial keep sptune's own choice.
    trainable.run_guarded(cfg, "scratch", None, None, tmp_path / "run")
    assert seen["train_device"] is None
    monkeypatch.setattr(resources, "trial_device", lambda requested: ("cpu", None))
    trainable.run_guarded(cfg, "scratch", None, None, tmp_path / "run", train_device=trainable.ray_train_device)
    assert seen["train_device"] is None


@pytest.fixture
def one_rank():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_ddp_wraps_the_model_before_torch_compile(monkeypatch, one_rank):
    compiled = []
    monkeypatch.setattr(train_setup, "compile_model", lambda m, device: compiled.append(m) or ("compiled", m))
    model = nn.Linear(2, 2)
    trained, ddp, evaluated = train_setup.wrap_model(model, torch.device("cpu"), distributed=True, compile=True)
    assert isinstance(ddp, nn.parallel.DistributedDataParallel) and ddp.module is model
    assert trained == ("compiled", ddp)  # the loop backpropagates through compile(DDP(model))
    assert evaluated == ("compiled", model)  # evaluation never goes through DDP
    # One process: no DDP, one compiled model for training and evaluation.
    compiled.clear()
    trained, ddp, evaluated = train_setup.wrap_model(model, torch.device("cpu"), distributed=False, compile=True)
    assert ddp is None and trained is evaluated == ("compiled", model) and compiled == [model]
    assert train_setup.wrap_model(model, torch.device("cpu"), True, compile=False)[0].module is model
