"""Config overrides of the studies: the paper's per-task models (sptune.studies.paper) and the smoke scale.

A study script picks (task, model variant, arm) and gets here: the architecture overrides, the
nuisance search space (the Appendix C.1 grid with the paper's reported best first) and the training
budget. Smoke runs replace all of it with one tiny, fast setting on the embedded tasks.
"""

from __future__ import annotations

from typing import Any

from sptune.registry import get_task
from sptune.studies import paper
from sptune.studies.runner import search_space

# ----------------------------------------------------------------------------- smoke scale
# d_model 16, one layer, 15 steps per stage, 32 validation examples: every study in minutes on 2 CPU cores.
SMOKE_STEPS = 15
SMOKE_COMMON = ["model.d_model=16", "model.n_layers=1", f"optim.max_steps={SMOKE_STEPS}", "optim.eval_every=5",
                "optim.warmup_steps=0", "task.max_val_examples=32", "optim.weight_decay=0.0",
                # one torch thread: tiny models on a shared 2-core machine run 2-4x faster than with two
                "run.num_threads=1"]
SMOKE_MODEL = {"transformer": ["model.n_heads=2", "model.d_ff=32"],
               "s4": ["model.d_ff=0", "model.d_state=16"],
               "dlr": ["model.d_ff=0", "model.d_state=32"]}
SMOKE_POINT = {"optim.lr": 1e-3, "optim.batch_size": 16}  # every stage, no search

# Embedded tasks standing in for the paper's in smoke tests: tokens for text-like, pixels for image-like.
STAND_IN = {"listops": "listops-mini", "text": "listops-mini", "retrieval": "listops-mini",
            "speech-commands": "listops-mini", "image": "pathfinder-mini", "pathfinder": "pathfinder-mini",
            "pathx": "pathfinder-mini", "scifar": "pathfinder-mini"}

# Training budget of the real grids: the epochs of the S4 configs for every stage (the paper caps each
# stage at 200 epochs or 24 h, Appendix C.1). Evaluation / warmup cadence is ours.
REAL_COMMON = ["optim.eval_every=1000", "optim.warmup_steps=1000"]


def as_overrides(values: dict[str, Any]) -> list[str]:
    return [f"{key}={value}" for key, value in values.items()]


def smoke_model(model_overrides: dict[str, Any], layers: int = 1) -> list[str]:
    """The tiny version of a model: keeps its kind (name, positions, init, pooling, causality)."""
    kept = {k: v for k, v in model_overrides.items()
            if k in ("model.name", "model.pos_encoding", "model.ssm_init", "model.pooling", "model.causal")}
    name = kept.get("model.name", "transformer")
    return as_overrides(kept) + SMOKE_COMMON + SMOKE_MODEL["dlr" if name == "dlr" else
                                                           "transformer" if name == "transformer" else "s4"] + \
        [f"model.n_layers={layers}"]


def smoke_space(stages: tuple[str, ...] = ("pretrain", "finetune", "scratch")) -> dict[str, Any]:
    return {s: {"params": {k: [v] for k, v in SMOKE_POINT.items()}, "points": [dict(SMOKE_POINT)]} for s in stages}


def column(task: str, paper_task: str, smoke: bool, suffix: str = "") -> str:
    """Table column of a task: the paper's column name, or "<embedded task> (for <paper column>)"."""
    name = paper.TASK_COLUMN.get(paper_task, paper_task) + suffix
    return f"{task} (for {name})" if smoke else name


# ----------------------------------------------------------------------------- the paper's models
def long_sequence(task: str) -> dict[str, Any]:
    """§2: for L >= 16K the attention is split into blocks of 4096 attending to themselves and neighbours."""
    return {"model.attention": "block", "model.block_size": 4096} if get_task(task).seq_len >= 16384 else {}


def transformer(task: str, variant: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(overrides, search space) of a Table 4 Transformer; variant "masked" / "causal" (†) or "rotary"."""
    setting = paper.TABLE_4[(task, variant)]
    model = dict(setting.model) | long_sequence(task) | {"optim.weight_decay": setting.weight_decay}
    return model, search_space(setting.best, paper.APPENDIX_C1_GRID)


def ssm(task: str, model: str, init: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(overrides, search space) of S4 or DLR (Appendix C.1.2-C.1.3), init "structured" or "random"."""
    arch, scratch_best, _, weight_decay = paper.S4_ARCH[task]
    values = dict(arch) | {"model.ssm_init": init, "optim.weight_decay": weight_decay}
    if model == "dlr":
        values |= paper.DLR_CHANGES
    rand = "-random" if init == "random" else ""
    best = dict(paper.TABLE_5.get((task, f"{model}{rand}-spt"), {}))
    best |= paper.TABLE_5.get((task, f"{model}{rand}"), {})
    if model == "s4" and init == "structured":
        best.setdefault("scratch", scratch_best)  # Gu et al.'s own training of S4 from scratch
    return values, search_space(best, paper.APPENDIX_C1_GRID)


def epochs(task: str) -> list[str]:
    return REAL_COMMON + [f"optim.epochs={paper.S4_ARCH[task][2]}"]
