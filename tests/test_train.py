"""The trainer: loss regression, exact resume, finetune from the pretrained backbone, failures."""

import math
from pathlib import Path

import pytest
import torch
from reproducibility import assert_reproduces

from sptune import config, files, registry
from sptune.errors import UserError
from sptune.run import checkpoints, train, train_setup
from sptune.trials import trainable

TINY = ["model.d_model=32", "model.n_layers=1", "model.n_heads=2", "model.d_ff=32", "optim.batch_size=8",
        "optim.max_steps=12", "optim.eval_every=4", "optim.warmup_steps=2", "task.max_val_examples=32",
        "run.progress=false"]


def tiny(tmp_path, *extra):
    return config.load(None, TINY + [f"run.out_dir={tmp_path}", *extra])


def test_pretraining_loss_decreases_and_result_is_complete(tmp_path):
    result = train.pretrain(tiny(tmp_path, "optim.max_steps=40", "optim.eval_every=20", "optim.lr=3e-3"))
    assert result["status"] == "completed"
    first, last = result["history"][0]["train_loss"], result["history"][-1]["train_loss"]
    # Untrained logits over 18 tokens start near ln(18); 40 steps learn at least the token statistics.
    assert last < first and first < math.log(18) + 0.5
    assert result["history"][-1]["val_loss"] < math.log(18) - 0.15
    assert 0.0 <= result["test_metric"] <= 1.0 and result["best_step"] in (20, 40)
    run_dir = Path(result["run_dir"])
    assert run_dir.parent == tmp_path and run_dir.name.startswith("pretrain-listops-mini-transformer-s0-")
    assert (run_dir / "config.yaml").is_file() and (run_dir / "fingerprint.json").is_file()
    assert files.read_json(run_dir / "result.json")["steps"] == 40
    assert "test_hits" not in result  # a masked-token accuracy has no per-example outcomes


def test_a_run_keeps_each_test_examples_outcome_in_the_splits_order(tmp_path):
    """result.json's test_hits: one '0'/'1' per test example (the whole split), whose mean is test_metric;
    not in what Ray Tune is told of a trial."""
    cfg = tiny(tmp_path, "optim.max_steps=4")
    result = train.scratch(cfg)
    hits = files.read_json(Path(result["run_dir"]) / "result.json")["test_hits"]
    test_split = registry.get_task(cfg.task.name).load(seed=cfg.run.seed)["test"]
    assert len(hits) == len(test_split) and set(hits) == {"0", "1"}
    assert hits.count("1") / len(hits) == result["test_metric"]
    assert "test_hits" not in trainable.final_metrics(result)


def test_same_seed_same_numbers_on_cpu(tmp_path):
    a = train.pretrain(tiny(tmp_path / "a", "run.device=cpu"))
    b = train.pretrain(tiny(tmp_path / "b", "run.device=cpu"))
    assert [h["train_loss"] for h in a["history"]] == [h["train_loss"] for h in b["history"]]
    c = train.pretrain(tiny(tmp_path / "c", "run.device=cpu", "run.seed=1"))
    assert [h["train_loss"] for h in a["history"]] != [h["train_loss"] for h in c["history"]]


@pytest.mark.parametrize("model, precision, kernels", [
    ("transformer", "fp32", ["attention sdpa"]), ("transformer", "bf16", ["attention sdpa"]),
    ("s4", "fp32", ["cauchy torch"]), ("s4d-lin", "fp32", [])])
def test_a_run_says_where_it_trained(tmp_path, model, precision, kernels):
    """result.json's provenance: device with its name, precision, the kernels the layers used, versions. The
    run trains where run.device=auto puts it: the CPU's kernels are named exactly; a GPU picks its own (flash
    attention, pykeops), so there each layer kind is named, whatever kernel it chose."""
    import ray

    result = train.scratch(tiny(tmp_path, f"model.name={model}", f"run.precision={precision}", "optim.max_steps=4"))
    where = files.read_json(Path(result["run_dir"]) / "result.json")["provenance"]
    device = train_setup.pick_device("auto", 0)
    assert where["device"] == device.type and where["precision"] == precision
    if device.type == "cpu":
        assert where["device_name"].startswith("cpu (") and "threads" in where["device_name"]
        assert where["kernels"] == kernels
    else:
        assert where["device_name"].startswith(f"cuda:{device.index} {torch.cuda.get_device_name(device)} (")
        assert [k.split()[0] for k in where["kernels"]] == [k.split()[0] for k in kernels]
    assert where["torch"] == torch.__version__ and where["cuda"] == torch.version.cuda
    assert where["ray"] == ray.__version__ and where["python"].count(".") == 2


class Interrupt(Exception):
    pass


@pytest.mark.parametrize("stage", ["pretrain", "scratch"])
def test_resume_from_last_reproduces_uninterrupted_run(tmp_path, stage):
    """Exactly on a CPU; on a GPU within a small multiple of two uninterrupted runs' gap (tests/reproducibility)."""
    full = train.run_stage(tiny(tmp_path / "full", "model.dropout=0.1"), stage)

    def crash_at_8(record, run_dir):
        if record["step"] == 8:
            raise Interrupt

    cfg = tiny(tmp_path / "resumed", "model.dropout=0.1")
    with pytest.raises(Interrupt):
        train.run_stage(cfg, stage, on_eval=crash_at_8)
    resumed = train.run_stage(cfg, stage)
    assert [h["step"] for h in resumed["history"]] == [4, 8, 12]
    assert_reproduces(resumed, full, lambda: train.run_stage(tiny(tmp_path / "again", "model.dropout=0.1"), stage))


def test_a_checkpoint_written_on_a_gpu_resumes_on_the_cpu_as_if_uninterrupted(tmp_path, caplog):
    """A GPU run's last.pt carries the CUDA generator's state beside the CPU one; resumed on the CPU (a
    trial retried on another node), the CPU state is restored exactly and the GPU's is named as not applying.
    Both runs train on the CPU, on a GPU node too: the checkpoint is made a GPU's by adding a CUDA state."""
    full = train.run_stage(tiny(tmp_path / "full", "model.dropout=0.1", "run.device=cpu"), "scratch")

    def crash_at_8(record, run_dir):
        if record["step"] == 8:
            raise Interrupt

    cfg = tiny(tmp_path / "resumed", "model.dropout=0.1", "run.device=cpu")
    with pytest.raises(Interrupt):
        train.run_stage(cfg, "scratch", on_eval=crash_at_8)
    (last,) = (tmp_path / "resumed").glob("scratch-*/last.pt")
    ckpt = torch.load(last, weights_only=True)
    assert ckpt["rng"]["cpu"].dtype == torch.uint8 and ckpt["rng"]["cpu"].device.type == "cpu"
    ckpt["rng"]["cuda"] = torch.zeros(16, dtype=torch.uint8)  # what rng_state.capture adds on a GPU
    torch.save(ckpt, last)
    with caplog.at_level("INFO", logger="sptune.run.rng_state"):
        resumed = train.run_stage(cfg, "scratch")
    assert "written on a GPU, resumed on the CPU" in caplog.text
    assert [h["train_loss"] for h in resumed["history"]] == [h["train_loss"] for h in full["history"]]
    assert resumed["test_metric"] == full["test_metric"]


def test_the_cuda_state_is_captured_and_restored_as_a_cpu_byte_tensor(monkeypatch):
    from sptune.run import rng_state

    calls = {}
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: torch.arange(8, dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: calls.update(state=state, device=device))
    gpu = torch.device("cuda", 0)
    state = rng_state.capture(gpu)
    assert state["cuda"].dtype == torch.uint8 and state["cuda"].device.type == "cpu"
    rng_state.restore(state, gpu)
    assert calls["device"] == gpu and calls["state"].device.type == "cpu"
    assert torch.equal(calls["state"], torch.arange(8, dtype=torch.uint8))
    rng_state.restore(torch.get_rng_state(), torch.device("cpu"))  # a checkpoint from before the CUDA state


def test_finetune_starts_from_pretrained_backbone(tmp_path, monkeypatch):
    pre = train.pretrain(tiny(tmp_path))
    best = checkpoints.load(Path(pre["run_dir"]) / "best.pt")["model"]
    loaded = {}
    original = train.load_pretrained_backbone

    def spy(model, pre_dir):
        original(model, pre_dir)
        loaded.update({k: v.clone() for k, v in model.state_dict().items()})

    monkeypatch.setattr(train, "load_pretrained_backbone", spy)
    result = train.finetune(tiny(tmp_path), pre["run_dir"])
    assert result["status"] == "completed" and result["init_from"] == pre["run_dir"]
    backbone = [k for k in best if k.startswith("backbone.")]
    assert backbone and all(torch.equal(loaded[k], best[k]) for k in backbone)
    assert not any(k.startswith("head.") and k in loaded and loaded[k].shape == best[k].shape
                   and torch.equal(loaded[k], best[k]) for k in best)


def test_finetune_from_a_non_run_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="not a finished pretraining run"):
        train.finetune(tiny(tmp_path), tmp_path / "nothing")


def test_non_finite_loss_fails_cleanly(tmp_path):
    result = train.scratch(tiny(tmp_path, "optim.lr=1e30", "optim.warmup_steps=0", "optim.grad_clip=0"))
    assert result["status"] == "failed" and "non-finite loss" in result["reason"]
    # Noted on the device, acted on at the first eval boundary (no host sync per step): the reason names
    # the step that diverged and the step it was caught at.
    assert "at step 1 (checked at step 4)" in result["reason"] and "\n" not in result["reason"]
    saved = files.read_json(Path(result["run_dir"]) / "result.json")
    assert saved["status"] == "failed"


def test_causal_objective_makes_the_model_causal(tmp_path):
    result = train.pretrain(tiny(tmp_path, "objective.kind=causal"))
    assert result["metric"] == "next_accuracy" and result["status"] == "completed"
    saved = config.load(Path(result["run_dir"]) / "config.yaml")
    assert saved.model.causal and saved.objective.mask_ratio == 0.1 and saved.objective.loss == "ce"


def test_train_fraction_subsets_are_nested():
    from sptune.run.data import train_fraction
    from sptune.tasks.base import Split

    split = Split(torch.arange(1000)[:, None], torch.arange(1000), torch.ones(1000, dtype=torch.long))
    sets = [set(train_fraction(split, f).targets.tolist()) for f in (0.005, 0.01, 0.05, 0.1, 0.5, 1.0)]
    assert [len(s) for s in sets] == [5, 10, 50, 100, 500, 1000]
    assert all(a <= b for a, b in zip(sets, sets[1:]))


def test_ssm_parameters_get_their_own_optimizer_group():
    from sptune.build import build_task_model
    from sptune.registry import get_task

    cfg = config.load(None, ["model.name=s4", "model.d_model=8", "model.d_state=8", "model.ssm_lr=2e-4",
                             "optim.weight_decay=0.1"])
    opt = train_setup.make_optimizer(build_task_model(cfg.model, get_task("listops-mini")), cfg.optim)
    ssm_groups = [g for g in opt.param_groups if g["lr"] == 2e-4]
    assert ssm_groups and all(g["weight_decay"] == 0.0 for g in ssm_groups)
    assert any(g["weight_decay"] == 0.1 for g in opt.param_groups)


@pytest.mark.parametrize("model", sorted(registry.MODELS))
def test_bf16_autocast_trains(tmp_path, model):
    result = train.pretrain(tiny(tmp_path, f"model.name={model}", "model.d_state=8", "run.precision=bf16",
                                 "optim.max_steps=4", "optim.eval_every=2"))
    assert result["status"] == "completed" and math.isfinite(result["history"][-1]["train_loss"])


@pytest.fixture
def float64():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def params_after(tmp_path, stage, *extra):
    """The model's parameters after one optimizer step (last.pt of a 1-step run)."""
    result = train.run_stage(tiny(tmp_path, "optim.max_steps=1", "optim.eval_every=1", "optim.warmup_steps=0",
                                  "optim.batch_size=16", *extra), stage)
    assert result["status"] == "completed"
    return result, checkpoints.load(Path(result["run_dir"]) / files.LAST)["model"]


@pytest.mark.parametrize("stage", ["scratch", "pretrain"])
def test_accumulated_micro_batches_step_like_the_big_batch(tmp_path, stage, float64):
    # float64: some gradients are zero in exact arithmetic (a key bias cannot change a softmax over keys);
    # in float32 they are rounding noise of 1e-9 that AdamW's first step, g / (|g| + eps), turns into
    # lr-sized moves of either sign. In float64 the noise is far below eps, so what is compared is the
    # accumulation, not the rounding.
    big_result, big = params_after(tmp_path / "big", stage)
    micro_result, micro = params_after(tmp_path / "micro", stage, "optim.accumulate=4")
    assert big.keys() == micro.keys() and big["backbone.encoder.embed.weight"].dtype == torch.float64
    moved = 0
    for name in big:
        assert torch.allclose(micro[name], big[name], rtol=0, atol=1e-6), name
        moved += 1
    assert moved and big_result["history"][0]["train_loss"] == pytest.approx(micro_result["history"][0]["train_loss"],
                                                                          rel=1e-6)
    # Same numbers -> same fingerprint: accumulation is how a step runs, not what it computes.
    assert big_result["run_dir"].split("-")[-1] == micro_result["run_dir"].split("-")[-1]


def test_accumulation_weights_micro_batches_by_their_masked_terms():
    """L1 masked denoising with uneven masks per micro-batch: the gradient is the big batch's, where a
    micro-batch's mean over few masked tokens counts less than one over many (not a plain mean of means)."""
    torch.manual_seed(0)
    cfg = config.load(None, ["objective.loss=l1", "optim.batch_size=6"])
    net = torch.nn.Linear(4, 3)

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, inputs, lengths):
            return self.net(inputs)  # (B, L, C)

    mask = torch.zeros(6, 5, dtype=torch.bool)
    mask[0, :4] = mask[1, 0] = mask[4, 1:] = True  # 4, 1, 0, 0, 4, 0 masked tokens per row
    problem = train.Problem(torch.randn(6, 5, 4), torch.full((6,), 5), torch.randn(6, 5, 3), mask, 1)
    grads = {}
    for accumulate in (1, 3):
        cfg.optim.accumulate = accumulate
        net.zero_grad()
        loss = train.accumulate_gradients(Model(), None, cfg, None, "pretrain", problem, torch.device("cpu"))
        grads[accumulate] = (loss, net.weight.grad.clone(), net.bias.grad.clone())
    expected = (net(problem.inputs)[mask] - problem.targets[mask]).abs().mean()
    assert grads[1][0] == pytest.approx(expected.item(), rel=1e-6)
    assert grads[3][0] == pytest.approx(expected.item(), rel=1e-6)
    for a, b in zip(grads[1][1:], grads[3][1:]):
        assert torch.allclose(a, b, rtol=0, atol=1e-6)


def test_accumulate_and_compile_are_fingerprinted_only_where_they_change_the_numbers():
    from sptune.run import fingerprint

    def digest(*overrides):
        return fingerprint.of(config.load(None, list(overrides)), "scratch").digest

    plain = digest()
    assert digest("optim.accumulate=4") == digest("run.compile=true") == plain
    # Dropout: micro-batches and compiled kernels draw other masks. BatchNorm: statistics per micro-batch.
    dropout = digest("model.dropout=0.1")
    assert len({dropout, digest("model.dropout=0.1", "optim.accumulate=4"),
                digest("model.dropout=0.1", "run.compile=true")}) == 3
    batch_norm = digest("model.norm=batch")
    assert digest("model.norm=batch", "run.compile=true") == batch_norm != digest("model.norm=batch",
                                                                                 "optim.accumulate=2")


def test_prefetcher_builds_each_step_once_ahead_of_use():
    from sptune.run.data import Prefetcher

    class Item:
        def __init__(self, step):
            self.step, self.pinned = step, False

        def pin_memory(self):
            self.pinned = True
            return self

    built = []

    def make(step):
        built.append(step)
        return Item(step)

    with Prefetcher(make, start=3, stop=7, pin=True, depth=2) as batches:
        first = batches.get(3)
        assert (first.step, first.pinned) == (3, True)
        for future in list(batches._pending.values()):
            future.result()
        assert sorted(built) == [3, 4, 5]  # steps 4 and 5 were built while step 3 was in use
        assert [batches.get(s).step for s in (4, 5, 6)] == [4, 5, 6]
    assert sorted(built) == [3, 4, 5, 6]  # each once, nothing past stop


def losses(result):
    return [h[key] for h in result["history"] for key in ("train_loss", "val_loss")] + [result["test_loss"]]


@pytest.mark.slow  # compiling forward, backward and eval graphs on CPU: ~30 s cold
def test_compiled_model_trains_like_eager(tmp_path, monkeypatch):
    compiled_models = []
    original = train_setup.compile_model
    monkeypatch.setattr(train_setup, "compile_model",
                        lambda *a: compiled_models.append(original(*a)) or compiled_models[-1])
    quick = ["optim.max_steps=4", "optim.eval_every=2", "task.max_val_examples=16"]
    eager = train.pretrain(tiny(tmp_path / "eager", *quick))
    compiled = train.pretrain(tiny(tmp_path / "compiled", *quick, "run.compile=true"))
    assert len(compiled_models) == 1 and isinstance(compiled_models[0], torch._dynamo.eval_frame.OptimizedModule)
    # Fused kernels reorder float operations: equal up to rounding, not bit for bit.
    assert losses(compiled) == pytest.approx(losses(eager), rel=1e-4)
    assert compiled["run_dir"].split("-")[-1] == eager["run_dir"].split("-")[-1]  # dropout 0: same numbers


def test_compile_falls_back_to_eager_with_a_warning(tmp_path, monkeypatch, caplog):
    def no_compiler(*args, **kwargs):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found")

    monkeypatch.setattr(torch, "compile", no_compiler)
    quick = ["optim.max_steps=2", "optim.eval_every=2", "task.max_val_examples=16"]
    eager = train.scratch(tiny(tmp_path / "eager", *quick))
    with caplog.at_level("WARNING", logger="sptune.run.train"):
        fallback = train.scratch(tiny(tmp_path / "fallback", *quick, "run.compile=true"))
    assert "torch.compile does not work here (RuntimeError: InvalidCxxCompiler" in caplog.text
    assert fallback["status"] == "completed" and losses(fallback) == losses(eager)


def test_optimizer_is_foreach_on_cpu_and_keeps_the_ssm_groups():
    from sptune.build import build_task_model
    from sptune.registry import get_task

    cfg = config.load(None, ["model.name=s4", "model.d_model=8", "model.d_state=8", "model.ssm_lr=2e-4"])
    opt = train_setup.make_optimizer(build_task_model(cfg.model, get_task("listops-mini")), cfg.optim)
    assert all(g["foreach"] and not g["fused"] for g in opt.param_groups)
    assert any(g["lr"] == 2e-4 and g["weight_decay"] == 0.0 for g in opt.param_groups)


def _ddp_accumulate_worker(rank: int, world: int, out_dir: str, port: int) -> None:
    import contextlib
    import os

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_default_dtype(torch.float64)  # see test_accumulated_micro_batches_step_like_the_big_batch
    skipped_syncs = []
    original = torch.nn.parallel.DistributedDataParallel.no_sync

    @contextlib.contextmanager
    def counting_no_sync(self):
        skipped_syncs.append(1)
        with original(self):
            yield

    torch.nn.parallel.DistributedDataParallel.no_sync = counting_no_sync
    try:
        for accumulate in (1, 2):
            cfg = config.load(None, TINY + [f"run.out_dir={out_dir}/a{accumulate}", "optim.max_steps=2",
                                            "optim.eval_every=2", f"optim.accumulate={accumulate}",
                                            "run.num_threads=1"])
            assert train.scratch(cfg)["status"] == "completed"
        assert len(skipped_syncs) == 2  # accumulate=2: the first micro-batch of each of the 2 steps
        dist.barrier()
    finally:
        dist.destroy_process_group()
    os._exit(0)  # as in test_ddp.py: skip gloo's racy interpreter teardown


def test_accumulation_under_ddp_all_reduces_once_per_step(tmp_path):
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_ddp_accumulate_worker, args=(2, str(tmp_path), port), nprocs=2, join=True)
    (one,), (two,) = ((tmp_path / f"a{a}").glob(f"scratch-*/{files.LAST}") for a in (1, 2))
    one, two = checkpoints.load(one)["model"], checkpoints.load(two)["model"]
    assert one.keys() == two.keys()
    for name in one:
        assert torch.allclose(one[name], two[name], rtol=0, atol=1e-6), name


def test_training_steps_read_nothing_back_from_the_device(tmp_path, monkeypatch):
    """sptune's host reads (.item(), which wait for the device) happen per eval, not per step: 8 steps
    between two evals read back as many values as 4 steps do. (torch's own CPU AdamW reads its CPU step
    counters; on CUDA the fused AdamW keeps them on the device.)"""
    import sys

    reads = []
    original = torch.Tensor.item
    package = str(Path(train.__file__).parent)

    def item(self):
        if sys._getframe(1).f_code.co_filename.startswith(package):
            reads.append(1)
        return original(self)

    monkeypatch.setattr(torch.Tensor, "item", item)

    def count(steps):
        reads.clear()
        train.scratch(tiny(tmp_path / str(steps), f"optim.max_steps={steps}", f"optim.eval_every={steps}"))
        return len(reads)

    assert count(4) == count(8) > 0
