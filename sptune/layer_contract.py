"""The contract of a sequence layer from outside sptune, checked with a tiny forward before any work starts.

    factory(d_model=..., causal=..., **model.options) -> nn.Module,   (B, L, D) -> (B, L, D), finite

and, when a stage trains it causally (causal SPT, §2, or model.causal), the output at step t must not move
when inputs after t change: a layer that sees the future makes next-token prediction trivial and the
pretraining worthless, silently. Each breach is one UserError naming the contract and the fix.
"""

from __future__ import annotations

import json
from typing import Callable

import torch
from torch import nn

from sptune.config import ModelConfig
from sptune.errors import UserError

BATCH, LENGTH = 2, 12  # the probe: small enough to cost nothing, long enough to see a step's future
CAUSAL_TOLERANCE = 1e-5  # relative to the output's scale: float noise of an FFT convolution sits far below

_checked: set[str] = set()


def check(name: str, build: Callable[[ModelConfig, bool], nn.Module], model: ModelConfig, causal: bool) -> None:
    """Build the layer as a block of the backbone would and hold it to the contract (once per process for
    each name, width, options and causality)."""
    key = json.dumps([name, model.d_model, model.options, causal], sort_keys=True, default=str)
    if key in _checked:
        return
    with torch.random.fork_rng(devices=[]):  # the layer's init draws from the global generator: leave it as it was
        layer = construct(name, build, model, causal)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(BATCH, LENGTH, model.d_model, generator=generator)  # (B, L, D)
    y = forward(name, layer, x)
    if causal:
        check_causal(name, layer, x, y, generator)
    _checked.add(key)


def construct(name: str, build: Callable[[ModelConfig, bool], nn.Module], model: ModelConfig,
              causal: bool) -> nn.Module:
    options = ", ".join(f"{k}={v!r}" for k, v in sorted(model.options.items())) or "no options"
    try:
        layer = build(model, causal)
    except Exception as exc:  # noqa: BLE001 - the user's factory may raise anything; say what and where
        raise UserError(f"model.name={name}: factory(d_model={model.d_model}, causal={causal}, {options}) raised "
                        f"{type(exc).__name__}: {exc}; a layer factory takes d_model, causal and its own "
                        f"model.options.<key> settings") from None
    if not isinstance(layer, nn.Module):
        raise UserError(f"model.name={name}: the factory returned a {type(layer).__name__}, not a torch.nn.Module; "
                        f"return the layer module")
    return layer.eval()  # the probe compares two forwards: dropout off


def forward(name: str, layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    B, L, D = x.shape
    try:
        with torch.no_grad():
            y = layer(x)
    except Exception as exc:  # noqa: BLE001
        raise UserError(f"model.name={name}: forward of a (B, L, D) = ({B}, {L}, {D}) input raised "
                        f"{type(exc).__name__}: {exc}; a layer maps (batch, length, d_model) to the same shape, "
                        f"for any length") from None
    if not isinstance(y, torch.Tensor):
        raise UserError(f"model.name={name}: forward returned a {type(y).__name__}; return one tensor of the "
                        f"input's shape (B, L, D), not a tuple or a state")
    if tuple(y.shape) != (B, L, D):
        raise UserError(f"model.name={name}: forward of a (B, L, D) = ({B}, {L}, {D}) input returned shape "
                        f"{tuple(y.shape)}; a layer must return (B, L, D), the input's shape")
    if not torch.isfinite(y).all():
        raise UserError(f"model.name={name}: forward returned NaN or inf on a standard normal input of shape "
                        f"({B}, {L}, {D}); check the layer's initialisation and arithmetic")
    return y


def check_causal(name: str, layer: nn.Module, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator) -> None:
    """Change the inputs after step t; the outputs up to t must stay put, for every t."""
    scale = y.abs().max().clamp(min=1.0)
    for t in range(x.shape[1] - 1):
        moved = x.clone()
        moved[:, t + 1:] = torch.randn(moved[:, t + 1:].shape, generator=generator)  # (B, L - t - 1, D)
        with torch.no_grad():
            change = (layer(moved)[:, :t + 1] - y[:, :t + 1]).abs().max()
        if change > CAUSAL_TOLERANCE * scale:
            raise UserError(f"model.name={name}: built with causal=True, its output at step {t} moved by "
                            f"{change.item():.3g} when only inputs after step {t} changed; a causal layer "
                            f"(causal SPT, model.causal) must use past and present inputs only: honour the "
                            f"factory's causal argument")
