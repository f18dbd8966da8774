"""The random state a checkpoint carries, so a resumed run draws what the uninterrupted run would have drawn.

Two generators matter: the CPU one (model init, and dropout on the CPU) and, on a GPU, the device's own
(dropout on the GPU). Batches and masks draw from (seed, step) (sptune.run.data), not from either. Both states are
kept as CPU ByteTensors whatever device trained: `torch.set_rng_state` and `torch.cuda.set_rng_state` accept
nothing else, and a checkpoint loaded with map_location=<cuda> would otherwise turn them into CUDA tensors
(every resume on a GPU would crash on that). A checkpoint written on a GPU and resumed on the CPU (or the
other way round) restores the CPU state and says, in one logged line, that the device's state does not apply.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

log = logging.getLogger(__name__)


def capture(device: torch.device) -> dict[str, Any]:
    """The CPU generator's state, and the CUDA generator's of `device` when it is a GPU."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device).cpu()
    return state


def restore(state: dict[str, Any] | torch.Tensor, device: torch.device) -> None:
    """Set the generators from `capture`'s state (a bare tensor: a checkpoint from before the CUDA state)."""
    if isinstance(state, torch.Tensor):
        state = {"cpu": state}
    torch.set_rng_state(state["cpu"].cpu())
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), device)
    elif device.type == "cuda" or "cuda" in state:
        written, now = ("a GPU", "the CPU") if "cuda" in state else ("the CPU", "a GPU")
        log.info("checkpoint written on %s, resumed on %s: CPU random state restored, the GPU's starts from "
                 "the run's seed", written, now)
