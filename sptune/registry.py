"""One flat table from names to code: task names -> Task, model names -> sequence-layer builders.

A model name picks the sequence-mixing layer of every residual block (sptune/models/backbone.py);
everything around it (encoder, norms, feed-forward, heads) is shared, so the comparison between
architectures is the paper's: same backbone, different sequence layer (§3.2, §3.3).
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from sptune.config import Config, ModelConfig
from sptune.errors import UserError
from sptune.tasks import bidmc, hub_tasks, listops, lra, pathfinder, pathfinder_release, shapes, ucr
from sptune.tasks.base import Task

TASKS: dict[str, Task] = {
    t.name: t
    for t in [listops.LISTOPS, listops.LISTOPS_MINI, *lra.TASKS, *hub_tasks.TASKS, *bidmc.TASKS, *pathfinder.TASKS,
              *pathfinder_release.TASKS, *shapes.TASKS, *ucr.TASKS]
}


def _transformer(cfg: ModelConfig, causal: bool) -> nn.Module:
    from sptune.models.transformer import SelfAttention

    return SelfAttention(cfg.d_model, cfg.n_heads, causal=causal, rotary=cfg.pos_encoding == "rotary",
                         attention=cfg.attention, block_size=cfg.block_size, dropout=cfg.dropout)


def _s4(mode: str) -> Callable[[ModelConfig, bool], nn.Module]:
    def build(cfg: ModelConfig, causal: bool) -> nn.Module:
        from sptune.models.s4 import S4Layer

        return S4Layer(cfg.d_model, d_state=cfg.d_state, mode=mode, bidirectional=not causal, init=cfg.ssm_init,
                       dt_min=cfg.dt_min, dt_max=cfg.dt_max, ssm_lr=cfg.ssm_lr, dropout=cfg.dropout,
                       backend=cfg.kernel_backend)

    return build


def _dlr(cfg: ModelConfig, causal: bool) -> nn.Module:
    from sptune.models.dlr import DLRLayer

    return DLRLayer(cfg.d_model, d_state=cfg.d_state, bidirectional=not causal, init=cfg.ssm_init,
                    dt_min=cfg.dt_min, dt_max=cfg.dt_max, ssm_lr=cfg.ssm_lr, dropout=cfg.dropout)


# name -> build(model_config, causal) -> nn.Module mapping (B, L, D) -> (B, L, D)
MODELS: dict[str, Callable[[ModelConfig, bool], nn.Module]] = {
    "transformer": _transformer,
    "s4": _s4("dplr"),  # S4 (NPLR / DPLR, HiPPO-LegS), paper Eq. 2
    "s4d-legs": _s4("diag-legs"),
    "s4d-lin": _s4("diag-lin"),
    "s4d-inv": _s4("diag-inv"),
    "dlr": _dlr,  # diagonal linear RNN, paper Eq. 3
}


def _check_name(kind: str, name: str, table: dict[str, object], field: str | None = None) -> None:
    if name not in table:
        where = f" ({field})" if field else ""
        raise UserError(f"unknown {kind} '{name}'{where}; choose one of: {', '.join(sorted(table))}")


def get_task(name: str) -> Task:
    _check_name("task", name, TASKS)
    return TASKS[name]


def get_model(name: str) -> Callable[[ModelConfig, bool], nn.Module]:
    """The sequence layer's constructor of model `name` (model.name)."""
    _check_name("model", name, MODELS, "model.name")
    return MODELS[name]


def check_names(cfg: Config) -> Config:
    """The config's task and model name each a registered one, or a one-line UserError naming the field
    and the choices. Every entry point that runs a config calls this right after loading it."""
    _check_name("task", cfg.task.name, TASKS, "task.name")
    _check_name("model", cfg.model.name, MODELS, "model.name")
    return cfg
