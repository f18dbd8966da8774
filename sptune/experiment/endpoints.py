"""The endpoints of an architecture experiment as per-seed values, and what a seed costs: what `sptune power`
plans from and what a group-sequential design looks at (sptune.report.power, sptune.report.sequential).

    endpoints(arm_rows, layout, role)   per model its SPT gain (and compute-tied SPT gain where that arm ran), per
                                  compared pair the gap under scratch and under SPT and the gap change: each a
                                  name and its per-seed paired values in points, in seed order, over the seeds
                                  where every arm it needs finished (sptune.report.architectures' terms)
    find(endpoints, name)         one of them by its name or the start of it ('gap change': the first)
    seed_seconds(arm_rows)        per seed, the device-seconds of every trial of its cells: the sum over its arms
                                  of summary.csv's search_device_seconds (selection included: a new seed runs
                                  the same search); None for a seed where an arm lacks it (records rebuilt from
                                  a printed report)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sptune.errors import UserError
from sptune.report.architectures import SCRATCH, SPT, TIED, arm_key, compared, per_seed

Terms = list[tuple[tuple[str, str], int]]


@dataclass(frozen=True)
class Endpoint:
    name: str
    seeds: tuple[Any, ...]
    values: tuple[float, ...]  # points (100 x accuracy), one per seed, in seed order


def definitions(layout: dict[str, Any], tied: set[str]) -> list[tuple[str, Terms]]:
    """(name, signed terms) of every endpoint; `tied`: the models whose compute-tied scratch arm ran."""
    models, gaps = compared(layout["architectures"])
    out: list[tuple[str, Terms]] = []
    for model in models:
        out.append((f"{model} SPT gain", [((model, SPT), 1), ((model, SCRATCH), -1)]))
        if model in tied:
            out.append((f"{model} compute-tied SPT gain", [((model, SPT), 1), ((model, TIED), -1)]))
    for model, base in gaps:
        for arm, init in ((SCRATCH, "scratch"), (SPT, "SPT")):
            out.append((f"gap ({model} - {base}) under {init}", [((model, arm), 1), ((base, arm), -1)]))
        out.append((f"gap change ({model} - {base})",
                    [((model, SPT), 1), ((base, SPT), -1), ((model, SCRATCH), -1), ((base, SCRATCH), 1)]))
    return out


def endpoints(arm_rows: list[dict[str, Any]], layout: dict[str, Any], role: str | None = None) -> list[Endpoint]:
    """Every endpoint over the seeds of `role` (None: every seed)."""
    if not layout.get("architectures"):
        raise UserError("power and sequential looks cover architecture experiments (experiments/architectures.py, "
                        "sptune evaluate): their gains, gaps and gap change are the endpoints")
    done = [a for a in arm_rows if a.get("test") is not None and (role is None or a.get("role") == role)]
    by_seed = per_seed(done)
    tied = {a["model"] for a in done if arm_key(a) == TIED}
    out = []
    for name, terms in definitions(layout, tied):
        seeds = [s for s in sorted(by_seed, key=_seed_order) if all(key in by_seed[s] for key, _ in terms)]
        values = [100.0 * sum(sign * by_seed[s][key]["test"] for key, sign in terms) for s in seeds]
        out.append(Endpoint(name, tuple(seeds), tuple(values)))
    return out


def _seed_order(seed: Any) -> tuple[int, Any]:
    return (0, seed) if isinstance(seed, int) else (1, str(seed))


def find(found: list[Endpoint], name: str) -> Endpoint:
    """The endpoint called `name`, or the first whose name starts with it."""
    match = next((e for e in found if e.name == name), None) or next((e for e in found if e.name.startswith(name)),
                                                                      None)
    if match is None:
        raise UserError(f"no endpoint {name!r}; this experiment's are: {', '.join(e.name for e in found)}")
    return match


def seed_seconds(arm_rows: list[dict[str, Any]]) -> dict[Any, float | None]:
    out: dict[Any, float | None] = {}
    for arm in arm_rows:
        seconds = arm.get("search_device_seconds")
        seed = arm.get("seed")
        out[seed] = None if seconds is None or (seed in out and out[seed] is None) else out.get(seed, 0.0) + seconds
    return out
