"""result.json's provenance names the attention kernel a run used and whether fp32 matmuls ran in TF32."""

from pathlib import Path

import pytest
import torch

from sptune import config, files, registry
from sptune.build import build_task_model
from sptune.models import transformer
from sptune.run import provenance, runs, train
from test_transformer import fake_flash_attn

CPU = torch.device("cpu")


def model_of(*overrides):
    cfg = config.load(None, ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16",
                             "model.d_state=8", *overrides])
    task = registry.get_task(cfg.task.name)
    return build_task_model(runs.resolve(cfg, task, "scratch").model, task)


@pytest.mark.parametrize("overrides, precision, kernel", [
    ([], "fp32", "sdpa flash"),  # torch's fused CPU flash kernel
    ([], "bf16", "sdpa flash"),
    (["model.attention=block", "model.block_size=64", "model.causal=true"], "fp32", "sdpa flash"),  # with a mask
    (["model.dropout=0.1"], "fp32", "sdpa math (training), sdpa flash (evaluation)"),  # CPU flash: no dropout
])
def test_the_attention_kernel_is_torchs_own_choice_on_the_cpu(overrides, precision, kernel):
    assert provenance.attention(model_of(*overrides), CPU, precision) == kernel


def test_an_ssm_model_has_no_attention_kernel():
    assert provenance.attention(model_of("model.name=s4"), CPU, "fp32") is None


def test_flash_attn_is_named_where_it_runs(monkeypatch):
    monkeypatch.setattr(transformer, "flash_attn_func", fake_flash_attn([]))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # not Hopper, which prefers cuDNN's kernel
    layer = transformer.SelfAttention(16, 2)
    assert layer.attention_kernel(torch.device("cuda"), torch.bfloat16, training=True) == "flash-attn"
    assert layer.attention_kernel(CPU, torch.bfloat16, training=True) == "sdpa flash"  # flash-attn needs CUDA


def test_a_run_records_its_attention_kernel_and_fp32_matmuls(tmp_path):
    cfg = config.load(None, ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16",
                             "optim.batch_size=8", "optim.max_steps=2", "optim.eval_every=2",
                             "task.max_val_examples=16", "task.max_test_examples=16", "run.progress=false",
                             "run.device=cpu", f"run.out_dir={tmp_path}"])
    result = train.scratch(cfg)
    where = files.read_json(Path(result["run_dir"]) / "result.json")["provenance"]
    assert where["attention"] == "sdpa flash" and where["fp32_matmul"] == "ieee"
