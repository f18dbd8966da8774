"""Which checkpoint of a run, and which trial of a search, is the best: one rule for both.

The paper selects by the validation metric (accuracy / R², Appendix C.1). A metric can tie: masked-token
accuracy on ListOps is the frequency of `]` (0.148) for every pretraining trial, so all trials tie and
the first one would win by accident. The rule:

    1. the higher validation metric wins;
    2. two metrics tie when they differ by less than half the metric's resolution: an accuracy over N
       eval targets (masked tokens, or examples) moves in steps of 1/N, so a tie is the same number of
       correct targets (robust to float rounding of k / N); R² is continuous, so only equal values tie;
    3. a tie goes to the lower validation loss (the loss averaged over the same targets), and a tie in
       both to the earlier candidate (the earlier checkpoint, the first trial).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")

BY_METRIC = "val metric"
BY_LOSS = "val metric, tie broken by val loss"
BY_ORDER = "val metric and val loss tie, first candidate"


def tolerance(metric: str, n_targets: float | None) -> float:
    """Half the resolution of `metric` measured over `n_targets` targets (0 for a continuous metric)."""
    if metric.endswith("accuracy") and n_targets:
        return 0.5 / n_targets
    return 0.0


def select(candidates: Sequence[T], score: Callable[[T], tuple[float | None, float | None]],
           tol: float) -> tuple[T | None, str]:
    """The best candidate and how it won (BY_METRIC, BY_LOSS or BY_ORDER).

    score(candidate) -> (validation metric, validation loss); a missing or NaN metric never wins, a
    missing or NaN loss loses every tie-break.
    """
    scored = [(c, *score(c)) for c in candidates]
    scored = [(c, m, loss) for c, m, loss in scored if m is not None and not math.isnan(m) and m > -math.inf]
    if not scored:
        return None, BY_METRIC
    top = max(m for _, m, _ in scored)
    tied = [(c, _loss(loss)) for c, m, loss in scored if top - m <= tol]
    if len(tied) == 1:
        return tied[0][0], BY_METRIC
    winner, best_loss = min(tied, key=lambda t: t[1])  # min keeps the first of equal losses
    return winner, BY_ORDER if sum(loss == best_loss for _, loss in tied) > 1 else BY_LOSS


def _loss(value: float | None) -> float:
    return math.inf if value is None or math.isnan(value) else value
