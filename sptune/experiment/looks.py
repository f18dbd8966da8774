"""The sequential looks of an architecture experiment with a declared design (sptune.report.sequential): what the
pooled report prints at the current look, continue or stop.

    find_design(experiment_dirs, explicit)   the design to apply: `explicit` (`sptune report --design FILE`), else
                                             the design.json of the pooled directories or records (one design:
                                             batches that declare different ones are refused); None without one
    lines(arm_rows, layout, found)           the section: the design, a table of each look reached (seeds, mean,
                                             paired t, the z bound and the critical t, the repeated confidence
                                             interval, the conditional power where a futility rule is declared,
                                             the verdict) and the decision at the current look

Look k uses the first n_k seeds in seed order (batches run in seed order) of the confirmation seeds where the
experiment has them (selection seeds chose settings: they are no part of a confirmatory test), else of every seed.
Looks happen at the declared seed counts only: seeds past the last look reached wait for the next one, and the
looks before the current one are evaluated too, since the design's bounds assume each was taken.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sptune.errors import UserError
from sptune.experiment import endpoints
from sptune.report import sequential

VERDICT_TEXT = {"continue": "continue", "efficacy": "stop for efficacy", "futility": "stop for futility (non-binding)",
                "final: no efficacy": "final look: no efficacy", "no test": "no test (zero variance)"}


def find_design(experiment_dirs: list[str | Path], explicit: str | Path | None = None
                ) -> tuple[sequential.Design, str] | None:
    if explicit is not None:
        return sequential.read_design(explicit), str(explicit)
    found = [(sequential.read_design(d), str(Path(d) / sequential.DESIGN_FILE)) for d in experiment_dirs
             if (Path(d) / sequential.DESIGN_FILE).is_file()]
    if len({json.dumps(design.declared(), sort_keys=True) for design, _ in found}) > 1:
        other = next(source for design, source in found if design.declared() != found[0][0].declared())
        raise UserError(f"{found[0][1]} and {other} declare different designs; a design is declared once: pass the "
                        "declared one with --design FILE")
    return found[0] if found else None


def lines(arm_rows: list[dict[str, Any]], layout: dict[str, Any],
          found: tuple[sequential.Design, str] | None) -> list[str]:
    """The section's lines (markdown); none without a design."""
    if found is None:
        return []
    design, source = found
    out = ["## Sequential looks (declared design)", ""]
    if not layout.get("architectures"):
        return out + [f"{source} declares a design; sequential looks cover architecture experiments only.", ""]
    role = "confirmation" if any(a.get("role") == "confirmation" for a in arm_rows) else None
    endpoint = endpoints.find(endpoints.endpoints(arm_rows, layout, role), design.endpoint)
    taken = sequential.run_looks(design, endpoint.values)
    seeds = f"{len(endpoint.values)} {role + ' ' if role else ''}seeds so far ({_seeds(endpoint.seeds)})"
    out += [design_text(design, source), "",
            f"Endpoint: {endpoint.name} (points), {seeds}; look k reads the first n_k of them.", ""]
    if taken:
        out += table(design, taken) + [""]
    return out + [decision(design, taken, len(endpoint.values), endpoint.name), ""]


def design_text(design: sequential.Design, source: str) -> str:
    futility = ("none" if design.futility is None else
                f"stop when the conditional power under the current trend is below {design.futility:.0%} "
                "(non-binding: the efficacy bounds ignore it)")
    return (f"Design ({source}): {design.looks} looks at {', '.join(map(str, design.look_sizes()))} of "
            f"{design.seeds} planned seeds; two-sided alpha {design.alpha:g} spent by the {design.spending}-type "
            f"function (Lan & DeMets); critical t calibrated to the alpha spent at each look "
            f"(sptune.report.sequential); "
            f"futility: {futility}.")


def table(design: sequential.Design, taken: list[sequential.Look]) -> list[str]:
    """One row per look reached; the conditional power column only with a futility rule."""
    futility = design.futility is not None
    header = ["look", "seeds", "mean", "paired t", "z bound", "critical t", f"repeated {1 - design.alpha:.0%} CI",
              *(["conditional power"] if futility else []), "verdict"]
    rows = []
    for k in taken:
        cells = [str(k.index), str(k.seeds), f"{k.mean:+.2f}", "—" if k.t is None else f"{k.t:+.2f}",
                 f"{k.z_bound:.2f}", f"{k.t_bound:.2f}", f"[{k.low:+.2f}, {k.high:+.2f}]"]
        cells += ["—" if k.conditional_power is None else f"{k.conditional_power:.0%}"] if futility else []
        rows.append("| " + " | ".join(cells + [VERDICT_TEXT[k.verdict]]) + " |")
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *rows]


def decision(design: sequential.Design, taken: list[sequential.Look], seeds: int, name: str) -> str:
    """The line that says what to do now, after the looks `taken`."""
    sizes = design.look_sizes()
    if not taken:
        return (f"**Decision: continue.** {seeds} seeds so far; the first look is at {sizes[0]} of the "
                f"{design.seeds} planned seeds.")
    last = taken[-1]
    where = f"look {last.index} of {design.looks} ({last.seeds} of {design.seeds} planned seeds)"
    interval = f"{name} {last.mean:+.2f}, repeated {1 - design.alpha:.0%} CI [{last.low:+.2f}, {last.high:+.2f}]"
    extra = seeds - last.seeds
    if last.verdict == "efficacy":
        after = f" The {extra} seeds after it were not needed for the decision." if extra else ""
        return f"**Decision: stop for efficacy** at {where}: {interval}.{after}"
    if last.verdict == "no test" and last.index == design.looks:
        return f"**Decision: none**: {where} has zero variance, no test."
    if last.verdict in ("continue", "no test"):
        waiting = f" ({extra} seeds past it wait for that look)" if extra else ""
        return (f"**Decision: continue** to look {last.index + 1} at {sizes[last.index]} seeds{waiting}: {where}, "
                f"{interval}.")
    if last.verdict == "futility":
        return (f"**Decision: stop for futility** at {where}: conditional power {last.conditional_power:.0%} below "
                f"{design.futility:.0%}; {interval}. Non-binding: continuing keeps the type I error at most "
                f"{design.alpha:g}.")
    return f"**Decision: stop, final look without efficacy**: {where}, {interval} includes 0."


def _seeds(seeds: tuple[Any, ...]) -> str:
    if not seeds:
        return "none"
    if seeds and all(isinstance(s, int) for s in seeds) and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]}–{seeds[-1]}" if len(seeds) > 1 else f"seed {seeds[0]}"
    return "seeds " + ", ".join(map(str, seeds))
