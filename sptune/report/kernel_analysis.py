"""K_max(l): how strongly an SSM layer ties positions l apart (paper §3.6, Eq. 4, Figure 4).

    K_max(l) = max over channels c (and, bidirectional, both directions) of |K_{c,l}|

which bounds |dy_{c,k} / dx_{c,k-l}| for every position k and channel c. We compute it per layer for a
pretrained model ("generate kernels for the pretrained S4 models ... before finetuning") and for the
same model at its initialization (HiPPO for structured S4: the "Baseline" of Figure 4).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from sptune import files
from sptune.build import build_backbone
from sptune.config import Config
from sptune.config import load as load_config
from sptune.models.s4 import SSMConvBlock
from sptune.registry import task_of
from sptune.run import checkpoints


@torch.no_grad()
def layer_kmax(layer: SSMConvBlock, length: int) -> torch.Tensor:
    """(L,) K_max of one SSM layer: the kernel is (directions, H, L); max |.| over the first two axes."""
    return layer.kernel(length).abs().amax(dim=(0, 1)).float()


def ssm_layers(model: nn.Module) -> list[SSMConvBlock]:
    """The SSM layers of a model in block order (S4, S4D and DLR layers)."""
    return [m for m in model.modules() if isinstance(m, SSMConvBlock)]


def model_kmax(model: nn.Module, length: int) -> list[torch.Tensor]:
    return [layer_kmax(layer, length) for layer in ssm_layers(model)]


def mass_radius(kmax: torch.Tensor, share: float = 0.9) -> int:
    """The smallest lag r with sum_{l<=r} K_max(l) >= share * sum_l K_max(l): how local the kernel is."""
    cumulative = torch.cumsum(kmax.double(), 0)
    return int(torch.searchsorted(cumulative, share * cumulative[-1]).item())


def _backbone(cfg: Config) -> nn.Module:
    task = task_of(cfg.task)
    # A masked-SPT model of continuous inputs has one extra input column, the mask indicator (run/train.py).
    mask_channel = cfg.objective.kind == "masked" and task.input_kind == "continuous"
    return build_backbone(cfg.model, task, mask_channel)


def pretrained_vs_init(run_dir: str | Path) -> dict[str, Any]:
    """K_max per layer of a pretraining run's best checkpoint and of the same model at initialization.

    The initial model is rebuilt from the run's resolved config under the run's seed, as run_stage does.
    Returns {"task", "model", "ssm_init", "seq_len", "resolution", "layers": [{"layer", "pretrained", "init"}]}.
    """
    run_dir = Path(run_dir)
    cfg = load_config(run_dir / files.CONFIG)
    task = task_of(cfg.task)
    torch.manual_seed(cfg.run.seed)
    initial = _backbone(cfg)
    trained = _backbone(cfg)
    state = checkpoints.load(run_dir / files.BEST)["model"]
    trained.load_state_dict({k[len("backbone."):]: v for k, v in state.items() if k.startswith("backbone.")})
    length = task.seq_len
    before, after = model_kmax(initial, length), model_kmax(trained, length)
    return {"task": task.name, "model": cfg.model.name, "ssm_init": cfg.model.ssm_init, "seq_len": length,
            "resolution": task.extras.get("resolution"), "run_dir": str(run_dir),
            "layers": [{"layer": i, "pretrained": a.tolist(), "init": b.tolist()}
                       for i, (a, b) in enumerate(zip(after, before))]}
