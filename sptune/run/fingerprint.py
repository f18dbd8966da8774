"""A run directory belongs to one config: its fingerprint, recorded before anything else is written.

    fingerprint.json   {"hash": 16 hex digits, "fields": {"stage": ..., "optim.lr": ..., "init.run_dir": ...}}

The fields are everything that changes a run's numbers: the stage, the resolved config minus
BOOKKEEPING, and for finetuning the pretraining run it starts from (its directory and its own
fingerprint). The hash is the sha256 of their canonical JSON; its first digits name default run
directories, so two configs never share one by accident. Resuming a directory is allowed only
when the fingerprints agree; otherwise the error names the differing fields and the ways out.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sptune import atomic, files
from sptune.config import Config, resolve_compile
from sptune.config import load as load_config
from sptune.errors import UserError

# Config fields that cannot make a run another experiment: where the run lives (out_dir, name), what
# it shows (progress) and whether an existing run is continued (resume, itself guarded by this
# fingerprint). num_threads only reorders float reductions (last-bit differences); a Ray trial sets
# it from its CPU reservation. run.device and run.precision are NOT here: they change the numbers.
BOOKKEEPING = ("run.out_dir", "run.name", "run.progress", "run.resume", "run.num_threads")
# How a step is executed, not what it computes: accumulating micro-batch gradients weighted by their share
# of the batch's loss terms gives the big batch's gradient, and a compiled model the eager one's outputs, up
# to float reassociation (last bits, like num_threads). Each is fingerprinted only when set away from its
# default where it does change the numbers: with dropout (micro-batches and compiled kernels draw other
# dropout masks) and, for accumulation, BatchNorm (statistics per micro-batch). Left out otherwise, so run
# dirs and their names from before these settings existed stay valid. run.compile=auto (None) is fingerprinted
# as what it resolves to (config.compile_default): never on with dropout, so never a fingerprinted value and a
# run's identity is the same whether its config says auto, or false, or (without dropout) true.
EXECUTION_DEFAULTS = {"optim.accumulate": 1, "run.compile": False}
# Fields added after run directories existed, each at the default that reproduces those runs: fingerprinted
# only when set, so the older directories (and their names) stay valid. optim.patience (early stopping) off;
# task.val_folds 0 (the task's own validation split); task.resample_splits off (the task's fixed train / val split).
ADDED_DEFAULTS = {"optim.patience": 0, "task.val_folds": 0, "task.val_fold": 0, "task.path": "",
                  "task.resample_splits": False}
# A layer from outside sptune is also fingerprinted by its code (sptune.plugins.source_hash): the same name
# with edited source is another experiment, never a silent resume of the old one.
LAYER_SOURCE = "model.source"
# Shown in a mismatch message; the rest are counted.
MAX_LISTED = 6


@dataclass(frozen=True)
class Fingerprint:
    fields: dict[str, Any]

    @property
    def digest(self) -> str:
        canonical = json.dumps(self.fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def short(self) -> str:
        """Six hex digits: the suffix of default run-directory names."""
        return self.digest[:6]


def of(cfg: Config, stage: str, init_dir: Path | None = None) -> Fingerprint:
    """The fingerprint of a config resolved as runs.resolve resolves it (run.compile decided) run as `stage`
    (from the pretraining run `init_dir`)."""
    fields: dict[str, Any] = {"stage": stage, **config_fields(cfg)}
    if init_dir is not None:
        fields["init.run_dir"] = str(Path(init_dir).resolve())
        fields["init.fingerprint"] = recorded(init_dir).digest
    return Fingerprint(fields)


def config_fields(cfg: Config) -> dict[str, Any]:
    flat = {f"{section}.{name}": value for section, values in cfg.to_dict().items()
            for name, value in values.items()}
    changes_numbers = {"optim.accumulate": cfg.model.dropout > 0 or cfg.model.norm == "batch",
                       "run.compile": cfg.model.dropout > 0}
    flat = {k: v for k, v in flat.items()
            if k not in EXECUTION_DEFAULTS or (v != EXECUTION_DEFAULTS[k] and changes_numbers[k])}
    flat = {k: v for k, v in flat.items() if k not in ADDED_DEFAULTS or v != ADDED_DEFAULTS[k]}
    if not layer_source(cfg.model.name):  # a built-in layer takes no options: its directories predate them
        flat.pop("model.options", None)
    flat.update(layer_source(cfg.model.name))
    # Through JSON, so a fresh fingerprint compares equal to one read back from fingerprint.json (tuples).
    return json.loads(json.dumps({k: v for k, v in flat.items() if k not in BOOKKEEPING}))


def layer_source(model_name: str) -> dict[str, str]:
    """{model.source: hash of the layer's code} for a layer from outside sptune; {} for a built-in one, whose
    code is sptune's own (versioned with it)."""
    from sptune import plugins, registry

    if registry.is_builtin_model(model_name):
        return {}
    origin = plugins.origin(registry.get_model(model_name).factory)
    return {LAYER_SOURCE: origin["source_sha"]} if origin["source_sha"] else {}


def recorded(run_dir: Path) -> Fingerprint | None:
    """The fingerprint a run directory holds. A directory from before fingerprints has only its
    config.yaml: its config fields are the fingerprint (stage and init unknown). None if neither."""
    run_dir = Path(run_dir)
    if (run_dir / files.FINGERPRINT).is_file():
        return Fingerprint(files.read_json(run_dir / files.FINGERPRINT)["fields"])
    if (run_dir / files.CONFIG).is_file():
        return Fingerprint(config_fields(resolve_compile(load_config(run_dir / files.CONFIG))))
    return None


def differences(old: Fingerprint, new: Fingerprint) -> list[str]:
    """`optim.lr: 0.001 -> 0.0005` for each field both know and disagree on. A field only one side
    has was added or removed by a code change, not by the user's config, so it is not compared."""
    return [f"{key}: {json.dumps(old.fields[key])} -> {json.dumps(new.fields[key])}"
            for key in sorted(old.fields.keys() & new.fields.keys()) if old.fields[key] != new.fields[key]]


def check(run_dir: Path, new: Fingerprint) -> None:
    """Raise a one-line UserError when `run_dir` already belongs to another config."""
    old = recorded(run_dir)
    if old is None:
        return
    changed = differences(old, new)
    if not changed:
        return
    listed = "; ".join(changed[:MAX_LISTED]) + (f"; and {len(changed) - MAX_LISTED} more"
                                               if len(changed) > MAX_LISTED else "")
    raise UserError(f"run directory {run_dir} holds a run of another config ({listed}); pick a new "
                    f"run.name=... for this config, or pass --restart to start that run over (deletes its "
                    f"checkpoints, result and tb/)")


def write(run_dir: Path, fp: Fingerprint) -> None:
    atomic.write_json(Path(run_dir) / files.FINGERPRINT, {"hash": fp.digest, "fields": fp.fields})
