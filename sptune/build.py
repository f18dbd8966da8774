"""Build a model for a task from the config: the one place that joins tasks and models."""

from __future__ import annotations

from torch import nn

from sptune.config import Config
from sptune.models.backbone import Backbone, Encoder, PooledHead, PretrainHead, RetrievalHead, SequenceModel
from sptune.registry import MODELS, check_names
from sptune.tasks.base import Task


def build_backbone(cfg: Config, task: Task, mask_channel: bool) -> Backbone:
    m = check_names(cfg).model
    encoder = Encoder(m.d_model, vocab_size=task.vocab_size if task.input_kind == "tokens" else 0,
                      channels=task.channels, mask_channel=mask_channel)
    positions = None
    if m.name == "transformer" and m.pos_encoding in ("learned", "sinusoidal"):
        from sptune.models.transformer import PositionalEncoding

        positions = PositionalEncoding(m.pos_encoding, task.seq_len, m.d_model)
    make_mixer = lambda: MODELS[m.name](m, m.causal)  # noqa: E731 - one fresh layer per block
    return Backbone(encoder, make_mixer, m.n_layers, m.d_model, m.d_ff, m.dropout, m.norm, m.prenorm, positions)


def build_pretrain_model(cfg: Config, task: Task, mask_channel: bool) -> SequenceModel:
    out_dim = task.vocab_size if cfg.objective.loss == "ce" else task.channels  # resolved by runs.resolve
    return SequenceModel(build_backbone(cfg, task, mask_channel), PretrainHead(cfg.model.d_model, out_dim))


def build_task_model(cfg: Config, task: Task) -> SequenceModel:
    outputs = task.num_classes if task.num_classes > 0 else 1
    head: nn.Module
    if task.paired:
        head = RetrievalHead(cfg.model.d_model, outputs, cfg.model.pooling)
    else:
        head = PooledHead(cfg.model.d_model, outputs, cfg.model.pooling)
    return SequenceModel(build_backbone(cfg, task, mask_channel=False), head)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
