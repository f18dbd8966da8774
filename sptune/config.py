"""Typed run configuration: five dataclasses, read from YAML, validated at load, dumped resolved.

    Config(task, model, objective, optim, run)

Every field has a default; a YAML file and `key=value` overrides (dotted: `optim.lr=5e-4`) set the
rest. Validation names the field and the allowed values, so a bad value is a one-line error.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from sptune import atomic
from sptune.errors import UserError


@dataclass
class TaskConfig:
    name: str = "listops-mini"
    data_dir: str = ""  # root of the real datasets; "" = $SPTUNE_DATA or ~/sptune_data
    train_fraction: float = 1.0  # nested subsets: prefixes of one fixed permutation (Appendix C.1.4)
    max_val_examples: int = 0  # 0 = the whole validation split (cap it for quick runs)
    max_test_examples: int = 0  # 0 = the whole test split
    # Cross-validated selection (sptune.folds): k >= 2 pools train and val into k stratified
    # folds; fold `val_fold` validates and the rest trains. 0: the task's own validation split.
    val_folds: int = 0
    val_fold: int = 0
    path: str = ""  # task.name=files: the directory holding train / val / test (sptune.tasks.files)
    resample_splits: bool = False  # each run draws train / val from run.seed (test fixed); ucr-* and files tasks


@dataclass
class ModelConfig:
    # A built-in layer (sptune.registry.MODELS), a registered or entry-point name, or an import path
    # "package.module:factory" (sptune.plugins): any sequence layer inside the same backbone.
    name: str = "transformer"
    d_model: int = 64
    n_layers: int = 2
    d_ff: int = 128  # feed-forward width of each block; 0 = no feed-forward sub-layer (S4 style)
    dropout: float = 0.0
    norm: str = "layer"  # "layer" | "batch"
    prenorm: bool = True  # the paper always uses pre-LayerNorm for Transformers (Appendix C.1)
    pooling: str = "mean"  # "mean" | "max" | "last" (Appendix C.1.1)
    causal: bool = False  # unidirectional model: required by causal SPT (§2)
    # Transformer
    n_heads: int = 4
    pos_encoding: str = "sinusoidal"  # "learned" | "sinusoidal" | "rotary" | "none"
    attention: str = "full"  # "full" | "block" (block-local, §2: blocks of 4096 for L >= 16K)
    block_size: int = 4096
    # SSMs (S4 / S4D / DLR)
    d_state: int = 64  # full state size N (S4 stores N/2 conjugate pairs); DLR default 1024
    ssm_init: str = "structured"  # "structured" | "random" (normal, std 0.1: Appendix C.1.3)
    ssm_lr: float = 1e-3  # SSM parameters get their own lr and no weight decay (Gu et al. 2022a); DLR 1e-4
    # Timescale range of the SSM init, dt log-uniform in [dt_min, dt_max]: state-spaces/s4 default; PathX uses
    # dt_min 1e-4 (s4-lra-pathx.yaml), DLR 1e-4 (ag1988/dlr configs/model/layer/dlr.yaml).
    dt_min: float = 1e-3
    dt_max: float = 1e-1
    kernel_backend: str = "auto"  # "auto" | "keops" | "torch"
    # A layer from outside sptune: its own keyword arguments, factory(d_model=..., causal=..., **options).
    # Searched and overridden like any field: model.options.d_state=64, `model.options.d_state: [32, 64]`.
    options: dict = field(default_factory=dict)


@dataclass
class ObjectiveConfig:
    kind: str = "masked"  # "masked" | "causal": the denoising objective of pretraining (§2)
    mask_ratio: float = -1.0  # -1 = the task's default (50% visual, 15% text, 10% ListOps, 25% SC/BIDMC)
    loss: str = "auto"  # "auto" = the task's ("ce" tokens, "l1" pixels/signals) | "ce" | "l1"


@dataclass
class OptimConfig:
    lr: float = 1e-3
    batch_size: int = 32
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    schedule: str = "cosine"  # "cosine" (linear warmup then cosine) | "constant" (after warmup)
    warmup_steps: int = 0
    max_steps: int = 1000  # total optimizer steps; set epochs > 0 to train by epochs instead
    epochs: int = 0
    grad_clip: float = 1.0  # 0 = off
    eval_every: int = 100  # steps between validation passes (and checkpoints)
    # Early stopping: end the run once validation has not improved for this many steps (0 = off; a multiple of
    # eval_every). The best checkpoint is kept either way; it only saves the steps after a plateau, so that a
    # longer budget (the convergence check's remedy) costs what the run needs, the same rule for every arm.
    patience: int = 0
    # Micro-batches per optimizer step (gradient accumulation): batch_size stays the effective batch, each
    # forward/backward sees batch_size / accumulate examples, so long inputs (PathX, L=16K) fit one device.
    accumulate: int = 1


@dataclass
class RunConfig:
    seed: int = 0
    out_dir: str = "runs"  # run directories are created below this
    name: str = ""  # run directory name; "" = <stage>-<task>-<model>-s<seed>
    device: str = "auto"  # "auto" | "cpu" | "cuda"
    precision: str = "fp32"  # "fp32" | "bf16" (autocast; flash-attn runs only in half precision)
    num_threads: int = 0  # torch intra-op threads; 0 = torch's default
    progress: bool = True  # progress bar on the training loop
    resume: bool = True  # continue from <run dir>/last.pt when it exists
    # torch.compile the model (falls back to eager, with a warning, when it cannot). None = auto, resolved when the
    # run starts (compile_default) and dumped resolved: on for a Transformer without dropout on CUDA, else off.
    compile: bool | None = None


@dataclass
class Config:
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Allowed values of the string fields: a value outside these is a user error naming the field.
CHOICES: dict[str, tuple[str, ...]] = {
    "model.norm": ("layer", "batch"),
    "model.pooling": ("mean", "max", "last"),
    "model.pos_encoding": ("learned", "sinusoidal", "rotary", "none"),
    "model.attention": ("full", "block"),
    "model.ssm_init": ("structured", "random"),
    "model.kernel_backend": ("auto", "keops", "torch"),
    "objective.kind": ("masked", "causal"),
    "objective.loss": ("auto", "ce", "l1"),
    "optim.schedule": ("cosine", "constant"),
    "run.device": ("auto", "cpu", "cuda"),
    "run.precision": ("fp32", "bf16"),
}
POSITIVE = ("model.d_model", "model.n_layers", "model.n_heads", "model.block_size", "model.d_state",
            "model.dt_min", "model.dt_max",
            "optim.lr", "optim.batch_size", "optim.max_steps", "optim.eval_every", "optim.accumulate")
NON_NEGATIVE = ("model.d_ff", "model.dropout", "optim.weight_decay", "optim.warmup_steps", "optim.epochs",
                "optim.patience", "optim.grad_clip", "task.max_val_examples", "task.max_test_examples", "model.ssm_lr")


AUTO = ("auto", "null", "none", "")  # how a YAML / CLI value asks an optional (`bool | None`) field for its default


def _coerce(path: str, value: Any, kind: Any) -> Any:
    """Turn a YAML/CLI value into the field's declared type, or raise a UserError naming the field."""
    if kind == (bool | None):
        if value is None or (isinstance(value, str) and value.lower() in AUTO):
            return None
        try:
            return _coerce(path, value, bool)
        except UserError:
            raise UserError(f"config field {path}={value!r} is not a valid bool; give true, false or auto") from None
    try:
        if kind is bool:
            if isinstance(value, str):
                if value.lower() in ("true", "1", "yes"):
                    return True
                if value.lower() in ("false", "0", "no"):
                    return False
                raise ValueError
            return bool(value)
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind is float:
            return float(value)
        if kind is str:
            return str(value)
        if kind is dict:
            if not isinstance(value, dict):
                raise ValueError
            return dict(value)
        if kind == tuple[float, float]:
            items = yaml.safe_load(value) if isinstance(value, str) else value
            a, b = (float(v) for v in items)
            return (a, b)
    except (TypeError, ValueError):
        pass
    name = getattr(kind, "__name__", str(kind))
    raise UserError(f"config field {path}={value!r} is not a valid {name}; give a {name} value")


def _apply(section: Any, section_name: str, values: dict[str, Any]) -> None:
    if not isinstance(values, dict):
        raise UserError(f"config section '{section_name}' must be a mapping of field: value")
    hints = get_type_hints(type(section))
    known = {f.name for f in fields(section)}
    for key, value in values.items():
        field_name, dot, option = key.partition(".")
        if dot and field_name in known and hints[field_name] is dict and option:  # model.options.d_state=64
            getattr(section, field_name)[option] = value
            continue
        if key not in known:
            raise UserError(f"unknown config field {section_name}.{key}; allowed: {', '.join(sorted(known))}")
        setattr(section, key, _coerce(f"{section_name}.{key}", value, hints[key]))


def from_dict(data: dict[str, Any] | None) -> Config:
    cfg = Config()
    sections = {f.name for f in fields(cfg)}
    for name, values in (data or {}).items():
        if name not in sections:
            raise UserError(f"unknown config section '{name}'; allowed: {', '.join(sorted(sections))}")
        _apply(getattr(cfg, name), name, values or {})
    validate(cfg)
    return cfg


STAGES = ("pretrain", "finetune", "scratch")  # the one list of stages, in the order a study runs them
MAPPING_FIELDS = ("options",)  # fields holding a mapping, set key by key (model.options.<key>)


def parse_overrides(overrides: list[str], stage: str | None = None) -> dict[str, dict[str, Any]]:
    """`optim.lr=5e-4 model.name=s4` -> {"optim": {"lr": 5e-4}, "model": {"name": "s4"}}.

    A stage prefix applies to that stage only: `pretrain.optim.lr=1e-3` (used by `sptune compare`). A mapping
    field takes its keys one at a time: `model.options.d_state=64` -> {"model": {"options.d_state": 64}}.
    """
    nested: dict[str, dict[str, Any]] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        parts = key.split(".")
        if parts[0] in STAGES and len(parts) >= 3:
            if parts[0] != stage:
                continue
            parts = parts[1:]
        if len(parts) == 3 and parts[1] in MAPPING_FIELDS:
            parts = [parts[0], f"{parts[1]}.{parts[2]}"]
        if not sep or len(parts) != 2 or not all(parts):
            raise UserError(f"override '{item}' is not of the form section.field=value (e.g. optim.lr=5e-4)")
        nested.setdefault(parts[0], {})[parts[1]] = yaml.safe_load(value) if value else ""
    return nested


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for section, values in extra.items():
        if isinstance(values, dict) and isinstance(out.get(section), dict):
            out[section].update(values)
        else:
            out[section] = values
    return out


def with_params(base: dict[str, Any], params: dict[str, Any]) -> Config:
    """The config dict `base` with a trial's flattened params applied: `optim.lr`, `model.options.d_state` (a
    search space's keys, section first), as parse_overrides nests them."""
    nested: dict[str, dict[str, Any]] = {}
    for key, value in params.items():
        section, _, name = key.partition(".")
        nested.setdefault(section, {})[name] = value
    return from_dict(merge(base, nested))


def load(path: str | os.PathLike | None = None, overrides: list[str] | None = None,
         stage: str | None = None) -> Config:
    """Read a YAML config (safe_load), apply the `stages.<stage>` section and overrides, validate.

    A config may hold per-stage settings (the paper uses different lr / batch size for pretraining
    and finetuning, Tables 4-6) under `stages: {pretrain: {optim: ...}, finetune: ..., scratch: ...}`.
    """
    return for_stage(*read_sections(path), overrides, stage)


class StageConfigs(dict[str, Config]):
    """A study's config: each of STAGES to its own Config, from one file (load_stages)."""

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Each stage's config as Config.to_dict gives it: what study.json stores."""
        return {stage: cfg.to_dict() for stage, cfg in self.items()}


def load_stages(path: str | os.PathLike | None, overrides: list[str]) -> StageConfigs:
    """Every stage's config (load's, for each of STAGES), the file read once."""
    data, stages = read_sections(path)
    return StageConfigs({stage: for_stage(data, stages, overrides, stage) for stage in STAGES})


def read_sections(path: str | os.PathLike | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """A config file's sections and its `stages` section (each empty without a file)."""
    data: dict[str, Any] = {}
    if path:
        p = Path(path)
        data = read_yaml(p, "config file", "pass a path to a YAML config (see configs/)")
        if not isinstance(data, dict):
            raise UserError(f"config file {p} must hold a mapping of sections (task, model, objective, optim, run)")
    stages = data.pop("stages", None) or {}
    if not isinstance(stages, dict) or set(stages) - set(STAGES):
        raise UserError(f"config 'stages' must map some of {', '.join(STAGES)} to config sections")
    return data, stages


def for_stage(data: dict[str, Any], stages: dict[str, Any], overrides: list[str] | None,
              stage: str | None) -> Config:
    """The config of `stage` (None: no stage section) from a file's sections, with the overrides, validated."""
    data = copy.deepcopy(data)  # a stage's config shares no mapping with another's
    if stage is not None:
        data = merge(data, copy.deepcopy(stages.get(stage) or {}))
    cfg = from_dict(merge(data, parse_overrides(overrides or [], stage)))
    check_causal_norm(cfg, stage)  # causal SPT: the pretraining stage's model will be causal
    return cfg


def read_yaml(path: Path, what: str, fix: str) -> Any:
    """safe_load a YAML file; a missing file or bad syntax is a one-line UserError."""
    if not path.is_file():
        raise UserError(f"{what} {path} does not exist; {fix}")
    try:
        return yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UserError(f"{what} {path} is not valid YAML ({str(exc).splitlines()[0]}); fix its syntax") from None


def validate(cfg: Config) -> None:
    """Check the fields' allowed values, ranges and combinations. Task and model names are the
    registry's to check (sptune.registry.check_names): config is pure data and imports no task or model code."""
    for path, allowed in CHOICES.items():
        section, name = path.split(".")
        value = getattr(getattr(cfg, section), name)
        if value not in allowed:
            raise UserError(f"{path}={value!r} is not allowed; choose one of: {', '.join(allowed)}")
    for path in POSITIVE + NON_NEGATIVE:
        section, name = path.split(".")
        value = getattr(getattr(cfg, section), name)
        if (path in POSITIVE and value <= 0) or value < 0:
            bound = "> 0" if path in POSITIVE else ">= 0"
            raise UserError(f"{path}={value} is out of range; it must be {bound}")
    if cfg.optim.batch_size % cfg.optim.accumulate:
        raise UserError(f"optim.batch_size={cfg.optim.batch_size} is not divisible by optim.accumulate="
                        f"{cfg.optim.accumulate}; pick a batch size that is a multiple of the micro-batch count")
    if cfg.optim.patience % cfg.optim.eval_every:
        raise UserError(f"optim.patience={cfg.optim.patience} is not a multiple of optim.eval_every="
                        f"{cfg.optim.eval_every}; patience counts steps between evaluations")
    folds, fold = cfg.task.val_folds, cfg.task.val_fold
    if folds == 1 or folds < 0 or not 0 <= fold < max(folds, 1):
        raise UserError(f"task.val_folds={folds}, task.val_fold={fold}: val_folds is 0 (the task's validation split) "
                        f"or k >= 2 folds, and val_fold one of 0..k-1")
    if cfg.task.resample_splits and folds:
        raise UserError(f"task.resample_splits=true with task.val_folds={folds}: the folds pool train and val, so a "
                        f"redrawn split changes nothing; use one of the two")
    if cfg.task.resample_splits and cfg.run.seed < 0:
        raise UserError(f"task.resample_splits=true draws the train / val split from run.seed, which must then be "
                        f">= 0, got {cfg.run.seed}")
    if not 0.0 < cfg.task.train_fraction <= 1.0:
        raise UserError(f"task.train_fraction={cfg.task.train_fraction} must be in (0, 1]")
    ratio = cfg.objective.mask_ratio
    if ratio != -1.0 and not 0.0 < ratio < 1.0:
        raise UserError(f"objective.mask_ratio={ratio} must be in (0, 1), or -1 for the task's default")
    if cfg.model.dt_min >= cfg.model.dt_max:
        raise UserError(f"model.dt_min={cfg.model.dt_min} must be below model.dt_max={cfg.model.dt_max}")
    if cfg.model.dropout >= 1.0:
        raise UserError(f"model.dropout={cfg.model.dropout} must be < 1")
    if cfg.model.d_model % cfg.model.n_heads and cfg.model.name == "transformer":
        raise UserError(f"model.d_model={cfg.model.d_model} must be divisible by model.n_heads={cfg.model.n_heads}")
    check_causal_norm(cfg)


def check_causal_norm(cfg: Config, stage: str | None = None) -> None:
    """A causal model (model.causal, or causal SPT, which makes the pretrained model causal, §2) must not
    use BatchNorm: in training mode its statistics over the whole sequence carry the future into every
    position. Checked at load (with the stage when known) and again when runs.resolve sets causality."""
    causal = cfg.model.causal or (stage == "pretrain" and cfg.objective.kind == "causal")
    if causal and cfg.model.norm == "batch":
        what = "model.causal=true" if cfg.model.causal else "objective.kind=causal pretraining"
        raise UserError(f"{what} with model.norm=batch: model.norm=batch mixes positions across the sequence, "
                        f"so a causal model would see the future; use model.norm=layer")


def compile_default(cfg: Config) -> bool:
    """What run.compile=auto (None) means for a config whose run.device is resolved: compile a Transformer on
    CUDA when the model has no dropout. There it pays: the step is launch- and elementwise-bound (fused norms,
    activations and residuals, one graph through the attention layer). Not on CPU (compiling costs tens of
    seconds a run, for little), not for the SSM layers (inductor does not generate code for their complex
    kernel arithmetic, which runs eagerly inside the graph) and not with dropout (compiled kernels draw other
    dropout masks: another run's numbers, which would also change the run's fingerprint)."""
    return cfg.run.device == "cuda" and cfg.model.name == "transformer" and cfg.model.dropout == 0


def resolve_compile(cfg: Config) -> Config:
    """cfg with run.compile resolved (compile_default when None), so the run directory's config says what ran."""
    if cfg.run.compile is not None:
        return cfg
    return dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, compile=compile_default(cfg)))


def dump(cfg: Config, path: str | os.PathLike) -> None:
    """Write the resolved config as YAML, atomically (a reader never sees half a file)."""
    data = cfg.to_dict()
    data["optim"]["betas"] = list(data["optim"]["betas"])
    atomic.write_text(path, yaml.safe_dump(data, sort_keys=False))
