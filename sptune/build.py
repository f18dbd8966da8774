"""Build a model for a task from the config: the one place that joins tasks and models."""

from __future__ import annotations

from torch import nn

from sptune.config import ModelConfig, ObjectiveConfig
from sptune.models.backbone import Backbone, Encoder, PooledHead, PretrainHead, RetrievalHead, SequenceModel
from sptune.registry import get_model
from sptune.tasks.base import Task


def build_backbone(m: ModelConfig, task: Task, mask_channel: bool) -> Backbone:
    mixer = get_model(m.name)
    encoder = Encoder(m.d_model, vocab_size=task.vocab_size if task.input_kind == "tokens" else 0,
                      channels=task.channels, mask_channel=mask_channel)
    positions = None
    if m.name == "transformer" and m.pos_encoding in ("learned", "sinusoidal"):
        from sptune.models.transformer import PositionalEncoding

        positions = PositionalEncoding(m.pos_encoding, task.seq_len, m.d_model)
    make_mixer = lambda: mixer(m, m.causal)  # noqa: E731 - one fresh layer per block
    return Backbone(encoder, make_mixer, m.n_layers, m.d_model, m.d_ff, m.dropout, m.norm, m.prenorm, positions)


def build_pretrain_model(m: ModelConfig, objective: ObjectiveConfig, task: Task, mask_channel: bool) -> SequenceModel:
    out_dim = task.vocab_size if objective.loss == "ce" else task.channels  # resolved by runs.resolve
    return SequenceModel(build_backbone(m, task, mask_channel), PretrainHead(m.d_model, out_dim))


def build_task_model(m: ModelConfig, task: Task) -> SequenceModel:
    outputs = task.num_classes if task.num_classes > 0 else 1
    head: nn.Module
    if task.paired:
        head = RetrievalHead(m.d_model, outputs, m.pooling)
    else:
        head = PooledHead(m.d_model, outputs, m.pooling)
    return SequenceModel(build_backbone(m, task, mask_channel=False), head)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
