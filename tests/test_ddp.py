"""run_stage under torch.distributed (what Ray Train's multi-worker path runs): 2 gloo ranks on CPU."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sptune import config, files
from sptune.run import train

TINY = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16", "optim.batch_size=8",
        "optim.max_steps=6", "optim.eval_every=3", "task.max_val_examples=16", "run.progress=false",
        "run.num_threads=1"]


def _worker(rank: int, world: int, out_dir: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        result = train.scratch(config.load(None, TINY + [f"run.out_dir={out_dir}"]))
        assert result["status"] == "completed"
        # Every rank trained on its half of each batch and reports the same number of steps.
        steps = torch.tensor([result["steps"]])
        gathered = [torch.zeros_like(steps) for _ in range(world)]
        dist.all_gather(gathered, steps)
        assert [g.item() for g in gathered] == [6] * world
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # Skip interpreter teardown: gloo's background threads can still be joining then, and about one
    # run in three aborted with "terminate called without an active exception" after all the work
    # above had passed. Failures never reach this line: they raise, and mp.spawn reports them.
    os._exit(0)


def test_two_ranks_train_and_only_rank0_writes(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(2, str(tmp_path), port), nprocs=2, join=True)
    (run_dir,) = tmp_path.glob("scratch-listops-mini-transformer-s0-*")
    assert files.read_json(run_dir / "result.json")["steps"] == 6
    assert sorted(p.name for p in run_dir.iterdir() if p.suffix == ".pt") == ["best.pt", "last.pt"]


pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed not built")
