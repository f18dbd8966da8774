"""Choose width / depth (and state size for SSMs) so a task model lands within 10% of a parameter budget.

Appendix E (Table 9) compares models of 100K, 300K, 1M, 3M and 10M parameters. The count is the one the
trainer reports: `count_parameters(build_task_model(cfg.model, task))`, the finetuning / scratch model.

For a fixed depth and state size the count is a quadratic in the width H (attention and the S4 output
mix are H x H, feed-forward H x r*H, embeddings and heads linear in H), so three small builds give the
curve, the budget gives H, and two real builds at the neighbouring allowed widths pick the closer one.
Depths are tried in the caller's order of preference; the first depth with a fit inside the tolerance wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sptune.build import build_task_model, count_parameters
from sptune.config import Config, load
from sptune.errors import UserError
from sptune.registry import task_of

SSM_MODELS = ("s4", "s4d-legs", "s4d-lin", "s4d-inv", "dlr")


@dataclass(frozen=True)
class Fit:
    budget: int
    n_params: int
    d_model: int
    n_layers: int
    d_ff: int
    d_state: int
    ssm: bool

    @property
    def rel_error(self) -> float:
        return self.n_params / self.budget - 1.0

    def overrides(self) -> list[str]:
        values = [f"model.d_model={self.d_model}", f"model.n_layers={self.n_layers}", f"model.d_ff={self.d_ff}"]
        return values + ([f"model.d_state={self.d_state}"] if self.ssm else [])


def width_quantum(cfg: Config) -> int:
    """Allowed widths are multiples of this: Transformer heads of even size (rotary pairs), else 4."""
    return 2 * cfg.model.n_heads if cfg.model.name == "transformer" else 4


def count(base: list[str], width: int, depth: int, d_state: int, ff_ratio: float) -> tuple[int, int]:
    """(parameters, d_ff) of the task model at this shape."""
    d_ff = int(round(ff_ratio * width))
    cfg = load(None, base + [f"model.d_model={width}", f"model.n_layers={depth}", f"model.d_ff={d_ff}",
                             f"model.d_state={d_state}"])
    return count_parameters(build_task_model(cfg.model, task_of(cfg.task))), d_ff


def fit_depth(base: list[str], budget: int, depth: int, d_state: int, ff_ratio: float, quantum: int,
              ssm: bool) -> Fit:
    """The width (a multiple of `quantum`) whose count is closest to `budget` at this depth and state size."""
    xs = [quantum, 2 * quantum, 3 * quantum]
    ys = [count(base, x, depth, d_state, ff_ratio)[0] for x in xs]
    # Exact quadratic through three points (second differences), solved for the budget.
    a = (ys[2] - 2 * ys[1] + ys[0]) / (2 * quantum ** 2)
    b = (ys[1] - ys[0]) / quantum - a * (xs[0] + xs[1])
    c = ys[0] - a * xs[0] ** 2 - b * xs[0]
    if a > 0:
        h = (-b + math.sqrt(max(b * b - 4 * a * (c - budget), 0.0))) / (2 * a)
    else:
        h = (budget - c) / max(b, 1e-9)
    best: Fit | None = None
    for width in {max(quantum, math.floor(h / quantum) * quantum), max(quantum, math.ceil(h / quantum) * quantum)}:
        n, d_ff = count(base, width, depth, d_state, ff_ratio)
        candidate = Fit(budget, n, width, depth, d_ff, d_state, ssm)
        if best is None or abs(candidate.rel_error) < abs(best.rel_error):
            best = candidate
    assert best is not None
    return best


def fit(base: list[str], budget: int, depths: tuple[int, ...], d_states: tuple[int, ...] | None = None,
        tolerance: float = 0.10) -> Fit:
    """Shape of the model `base` (config overrides, task included) with budget * (1 +- tolerance) parameters.

    The feed-forward width keeps the base config's d_ff / d_model ratio (0 stays 0, S4 style). For SSMs,
    state sizes in `d_states` are tried at each depth (default: the base config's d_state only).
    """
    cfg = load(None, base)
    ff_ratio = cfg.model.d_ff / cfg.model.d_model
    ssm = cfg.model.name in SSM_MODELS
    states = d_states if (d_states and ssm) else (cfg.model.d_state,)
    quantum = width_quantum(cfg)
    tried = []
    for depth in depths:
        fits = [fit_depth(base, budget, depth, s, ff_ratio, quantum, ssm) for s in states]
        best = min(fits, key=lambda f: abs(f.rel_error))
        if abs(best.rel_error) <= tolerance:
            return best
        tried.append(f"depth {depth}: {best.n_params:,} ({best.rel_error:+.0%})")
    raise UserError(f"no {cfg.model.name} shape within {tolerance:.0%} of {budget:,} parameters "
                    f"({'; '.join(tried)}); allow other depths")
