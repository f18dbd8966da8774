"""What a paper experiment runs: its cells and how to tabulate them (plan.json), and the cells' search spaces.

A cell is one point of the experiment's grid (task, model, axis value, seed). It runs the stages it
names: ("pretrain", "finetune", "scratch") gives the SPT arm and its scratch baseline, ("pretrain",
"finetune") an SPT arm alone (e.g. causal SPT next to a masked cell that holds the shared baseline),
("scratch",) and ("pretrain",) one stage. With the tune backend a cell is one study (sptune.records.studies).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sptune import atomic, files
from sptune.config import STAGES, load as load_config
from sptune.errors import UserError

BACKENDS = ("tune", "plain")


@dataclass(frozen=True)
class Cell:
    key: str  # directory name under cells/
    labels: dict[str, Any]  # table coordinates (task, model, seed, axis values, display column ...)
    overrides: tuple[str, ...]  # config overrides; `pretrain.optim.max_steps=...` targets one stage
    stages: tuple[str, ...] = STAGES
    # Nuisance search space {stage: {"params": {key: [values]}, "points": [{key: value}]}, and optionally
    # "limits": {key: [low, high]}}; None = the project's search_spaces/<task>/<model>.yaml (tune) / the config's
    # own values (plain).
    space: dict[str, Any] | None = None
    paper: dict[str, dict[str, Any]] = field(default_factory=dict)  # arm -> {"value", "source"}


@dataclass
class Plan:
    experiment: str
    title: str
    axis: str  # the scientific variable(s)
    nuisance: str  # searched (tune backend) hyper-parameters
    fixed: str  # held fixed
    layout: dict[str, Any]  # how sptune.report.tables tabulates and plots the cells
    cells: list[Cell]
    smoke: bool = False
    backend: str = "tune"
    notes: list[str] = field(default_factory=list)
    commands: dict[str, str] = field(default_factory=dict)
    preamble: list[str] = field(default_factory=list)  # printed as the experiment starts (each model's grid)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cell_from_dict(data: dict[str, Any]) -> Cell:
    return Cell(key=data["key"], labels=data["labels"], overrides=tuple(data["overrides"]),
                stages=tuple(data["stages"]), space=data.get("space"), paper=data.get("paper") or {})


def load_plan(experiment_dir: str | Path) -> Plan:
    path = Path(experiment_dir) / files.PLAN
    if not path.is_file():
        raise UserError(f"{experiment_dir} is not an experiment directory (no {files.PLAN}); "
                        f"run a script in experiments/ first")
    data = files.read_json(path)
    data["cells"] = [cell_from_dict(c) for c in data["cells"]]
    return Plan(**data)


def save_plan(experiment_dir: Path, plan: Plan) -> None:
    """Write plan.json. A rerun into the same directory must ask for every cell it holds, unchanged: the same
    cells resume it; more cells (e.g. more --seeds) extend it, and the report then covers them all."""
    path = experiment_dir / files.PLAN
    if path.is_file():
        new = {c.key: (c.overrides, c.stages) for c in plan.cells}
        changed = [c.key for c in load_plan(experiment_dir).cells if new.get(c.key) != (c.overrides, c.stages)]
        if changed:
            raise UserError(f"{experiment_dir} holds cells this command would drop or change ({changed[0]}"
                            f"{' and more' if len(changed) > 1 else ''}; flags changed?); rerun with the original "
                            f"flags (more seeds may be added), or pass another --dir")
    atomic.write_json(path, plan.to_dict())


# ----------------------------------------------------------------------------- search spaces
def fixed_space(values: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A space with one point per stage: the experiment fixes these values (e.g. Appendix C.1.4)."""
    return {stage: {"params": {k: [v] for k, v in point.items()}, "points": [point]}
            for stage, point in values.items()}


def repo_space(cell: Cell) -> dict[str, Any] | None:
    """The project's search_spaces/<task>/<model>.yaml as a cell space, for cells that declare none."""
    from sptune.search import spaces

    cfg = load_config(None, list(cell.overrides))
    try:
        loaded = spaces.load(spaces.default_path(cfg.task.name, cfg.model.name))
    except UserError:
        return None
    return {s: {"params": sp.params, "points": sp.points} for s, sp in loaded.stages.items()}


def plain_point(space: dict[str, Any] | None, stage: str) -> list[str]:
    """The plain backend's values for a stage: the first point, else the first value of each grid."""
    if not space or stage not in space:
        return []
    spec = space[stage]
    point = spec["points"][0] if spec.get("points") else {
        key: values[0] if isinstance(values, list) else next(iter(values.values()))[0]
        for key, values in spec["params"].items()}
    return [f"{key}={value}" for key, value in point.items()]


def study_space(cell: Cell, cell_dir: Path):
    """The cell's search space as the SearchSpace of its study (every stage present, as a study requires;
    a stage the cell skips is never searched). None: the project's file for the cell's task and model."""
    from sptune.search import spaces

    if cell.space is None:
        return None
    cfg = load_config(None, list(cell.overrides))
    filler = next(v for k, v in cell.space.items() if k in STAGES)
    data = {"task": cfg.task.name, "model": cfg.model.name, "num_samples": 1000, "max_concurrent": 2,
            "resources": {"workers": 1, "cpus_per_worker": 1, "gpus_per_worker": 0},
            "stages": {s: cell.space.get(s, filler) for s in STAGES},
            **({"limits": cell.space["limits"]} if "limits" in cell.space else {})}  # how far grids may extend
    return spaces.parse(data, f"{cell_dir} (the space of cell {cell.key})")
