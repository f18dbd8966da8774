"""The attention layer compiles as one graph: no logging and no branch on tensor values in its forward."""

import logging

import pytest
import torch

from sptune import config, registry
from sptune.build import build_pretrain_model
from sptune.models import transformer
from sptune.models.transformer import SelfAttention
from sptune.run import runs
from test_transformer import fake_flash_attn


def one_graph(fn, *args):
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*args)
    assert explained.graph_break_count == 0, [r.reason for r in explained.break_reasons]
    assert explained.graph_count == 1


@pytest.mark.parametrize("attention", ["full", "block"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rotary", [False, True])
def test_attention_forward_is_one_graph(monkeypatch, attention, causal, rotary):
    monkeypatch.setattr(transformer, "_logged", set())  # nothing logged yet: forward must still log nothing
    layer = SelfAttention(16, 2, causal=causal, rotary=rotary, attention=attention, block_size=8)
    one_graph(layer, torch.randn(2, 20, 16))


def test_attention_with_dropout_in_training_is_one_graph(monkeypatch):
    monkeypatch.setattr(transformer, "_logged", set())
    layer = SelfAttention(16, 2, dropout=0.1).train()
    one_graph(layer, torch.randn(2, 20, 16))


@pytest.mark.parametrize("backend", ["auto", "flash"])
def test_attention_through_flash_attn_is_one_graph(monkeypatch, caplog, backend):
    """flash-attn installed (a stand-in on the CPU) and the input on CUDA: the backend is chosen without a log
    call in forward, which used to split the compiled graph; the choice is logged when the layer is built."""
    calls = []
    monkeypatch.setattr(transformer, "_logged", set())
    monkeypatch.setattr(transformer, "flash_attn_func", fake_flash_attn(calls))
    monkeypatch.setattr(transformer, "is_cuda", lambda t: True)
    with caplog.at_level(logging.INFO, logger="sptune.models.transformer"):
        layer = SelfAttention(16, 2, backend=backend)
    assert any("flash-attn" in r.getMessage() for r in caplog.records)
    x = torch.randn(2, 20, 16)
    if backend == "auto":  # auto takes flash-attn for half-precision inputs
        layer, x = layer.to(torch.bfloat16), x.to(torch.bfloat16)
    one_graph(layer, x)
    assert calls  # the stand-in was traced: flash-attn is what ran


def test_a_transformer_model_is_one_graph():
    cfg = config.load(None, ["model.d_model=16", "model.n_layers=2", "model.n_heads=2", "model.d_ff=16"])
    task = registry.get_task(cfg.task.name)
    cfg = runs.resolve(cfg, task, "pretrain")
    model = build_pretrain_model(cfg.model, cfg.objective, task, mask_channel=False)
    one_graph(model, torch.randint(3, 18, (2, task.seq_len)), torch.full((2,), task.seq_len))
