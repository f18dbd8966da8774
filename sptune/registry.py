"""Names to code: task names -> Task, model names -> sequence-layer builders.

A model name picks the sequence-mixing layer of every residual block (sptune/models/backbone.py);
everything around it (encoder, norms, feed-forward, heads) is shared, so the comparison between
architectures is the paper's: same backbone, different sequence layer (§3.2, §3.3).

The built-in tables come first; any other name is a researcher's (sptune.plugins: registered, an entry
point, or an import path "package.module:factory"), and `task.name=files task.path=DIR` reads a task from
files (sptune.tasks.files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from torch import nn

from sptune import plugins
from sptune.config import Config, ModelConfig, TaskConfig
from sptune.errors import UserError
from sptune.tasks import bidmc, hub_tasks, listops, lra, pathfinder, pathfinder_release, shapes, ucr
from sptune.tasks.base import Task, check_resample

TASKS: dict[str, Task] = {
    t.name: t
    for t in [listops.LISTOPS, listops.LISTOPS_MINI, *lra.TASKS, *hub_tasks.TASKS, *bidmc.TASKS, *pathfinder.TASKS,
              *pathfinder_release.TASKS, *shapes.TASKS, *ucr.TASKS]
}
FILES_TASK = "files"  # task.name=files task.path=DIR: the researcher's own data (sptune.tasks.files)


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


Builder = Callable[[ModelConfig, bool], nn.Module]


def external(factory: Callable[..., nn.Module]) -> Builder:
    """A plug-in factory as a builder: factory(d_model=..., causal=..., **model.options)."""
    def build(cfg: ModelConfig, causal: bool) -> nn.Module:
        return factory(d_model=cfg.d_model, causal=causal, **cfg.options)

    build.factory = factory  # type: ignore[attr-defined]  # its origin (plugins.origin) names the layer's code
    return build


def is_builtin_model(name: str) -> bool:
    return name in MODELS


def get_task(name: str, path: str = "") -> Task:
    """The task `name`: built-in, registered or an entry point; `files` reads the directory `path`."""
    if name == FILES_TASK:
        if not path:
            raise UserError("task.name=files needs task.path=DIR, the directory holding train / val / test "
                            "(.npz, Parquet or a Hugging Face save_to_disk directory)")
        from sptune.tasks.files import load_files_task

        return load_files_task(path)
    if name in TASKS:
        return TASKS[name]
    found = plugins.find(plugins.TASK_GROUP, name)
    if found is None:
        choices = sorted({*TASKS, FILES_TASK, *plugins.names(plugins.TASK_GROUP)})
        raise UserError(f"unknown task '{name}' (task.name); choose one of: {', '.join(choices)}")
    task = found if isinstance(found, Task) else found()
    if not isinstance(task, Task):
        raise UserError(f"task '{name}' gave a {type(task).__name__}, not a sptune.tasks.base.Task; return one")
    return task


def task_of(task: TaskConfig) -> Task:
    """The task a config's task section names."""
    return get_task(task.name, task.path)


def get_model(name: str) -> Builder:
    """The sequence layer's constructor of model `name` (model.name): built-in, registered, an entry point of
    group sptune.models, or an import path package.module:factory."""
    if name in MODELS:
        return MODELS[name]
    found = plugins.find(plugins.MODEL_GROUP, name)
    if found is None:
        choices = sorted({*MODELS, *plugins.names(plugins.MODEL_GROUP)})
        raise UserError(f"unknown model '{name}' (model.name); choose one of: {', '.join(choices)}, or give an "
                        f"import path package.module:factory")
    if not callable(found):
        raise UserError(f"model.name={name} is a {type(found).__name__}, not a callable; name a factory "
                        f"factory(d_model, causal, **options) -> nn.Module")
    return external(found)


def check_names(*cfgs: Config) -> None:
    """Each config's task and model exist (and the task can redraw its splits if task.resample_splits asks
    it to), or a one-line UserError naming the field and the choices.
    A layer from outside sptune is also held to its contract (sptune.layer_contract: a tiny forward). A
    files task's path becomes absolute (trials run in other directories). Every entry point that runs a
    config calls this right after loading it."""
    for cfg in cfgs:
        if cfg.task.path:
            cfg.task.path = str(Path(cfg.task.path).expanduser().resolve())
        task = task_of(cfg.task)
        if cfg.task.resample_splits:
            check_resample(task)
        builder = get_model(cfg.model.name)
        if is_builtin_model(cfg.model.name):
            if cfg.model.options:
                raise UserError(f"model.options ({', '.join(sorted(cfg.model.options))}) is for layers from "
                                f"outside sptune; built-in model '{cfg.model.name}' takes model.<field> settings")
        else:
            from sptune.layer_contract import check

            check(cfg.model.name, builder, cfg.model, causal=cfg.model.causal or cfg.objective.kind == "causal")


def slug(name: str) -> str:
    """A model name fit for a directory name: an import path keeps its last part (pkg.mod:make_lru -> make_lru)."""
    return name.rsplit(":", 1)[-1].rsplit(".", 1)[-1] if plugins.is_import_path(name) else name
