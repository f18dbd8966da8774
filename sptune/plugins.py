"""Code from outside sptune: a researcher's sequence layer or task, named without editing sptune.

Three ways to name one, looked up in this order after the built-ins (sptune.registry):

    sptune.register_model("lru", make_lru)        # Python code that runs before the study: this process only
    [project.entry-points."sptune.models"]         # an installed package: every process that has it
    lru = "my_layers.lru:make_lru"
    model.name=my_layers.lru:make_lru              # an import path: any name with a ":"

Tasks the same way (`register_task`, the group "sptune.tasks"); a task entry is a Task or a function
returning one. A layer factory is called as `factory(d_model=..., causal=..., **model.options)` and returns an
nn.Module mapping (B, L, D) -> (B, L, D) (sptune.layer_contract checks it before any work starts).

A Ray worker imports the layer by the same name, so its code must reach every node: an installed package
(the cluster's image), or Ray's runtime_env `py_modules`, which sptune fills itself with every plug-in module
imported from outside an installed package (a directory on PYTHONPATH) and with each `--ship DIR`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
import site
import sys
import sysconfig
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

from sptune.errors import UserError

MODEL_GROUP = "sptune.models"
TASK_GROUP = "sptune.tasks"
REGISTERED_ENV = "SPTUNE_REGISTERED"  # {group: {name: import path}}: registered names, seen by Ray workers

_registered: dict[str, dict[str, Any]] = {MODEL_GROUP: {}, TASK_GROUP: {}}
_shipped: dict[str, None] = {}  # paths for runtime_env py_modules, in the order they were met


def register_model(name: str, factory: Callable[..., Any]) -> None:
    """Name a layer factory `factory(d_model, causal, **options) -> nn.Module` for model.name=<name>."""
    _register(MODEL_GROUP, name, factory)


def register_task(name: str, task: Any) -> None:
    """Name a task (a sptune.tasks.base.Task, or a function returning one) for task.name=<name>."""
    _register(TASK_GROUP, name, task)


def _register(group: str, name: str, value: Any) -> None:
    if not name or ":" in name or not callable(value) and group == MODEL_GROUP:
        raise UserError(f"register '{name}': a name without ':' and a callable factory are needed")
    _registered[group][name] = value
    module = getattr(value, "__module__", None) or type(value).__module__
    if module != "__main__":  # Ray workers import it by its path (runtime_env below); __main__ stays local
        load_import_path(f"{module}:{getattr(value, '__qualname__', name)}")  # ships its code if not installed


def is_import_path(name: str) -> bool:
    return ":" in name


def find(group: str, name: str) -> Any | None:
    """The object `name` stands for in `group`: registered, an entry point, or an import path; None if
    nothing by that name exists (an import path that fails to import is a UserError naming why)."""
    if name in _registered[group]:
        return _registered[group][name]
    inherited = json.loads(os.environ.get(REGISTERED_ENV, "{}")).get(group, {})
    if name in inherited:  # registered in the driver: a Ray worker imports it by its path
        return load_import_path(inherited[name])
    if is_import_path(name):
        return load_import_path(name)
    point = entry_points(group).get(name)
    if point is None:
        return None
    try:
        return point.load()
    except Exception as exc:  # noqa: BLE001 - any import failure of the user's package is reported, not raised
        raise UserError(f"entry point '{name}' ({point.value}) of group {group} failed to load "
                        f"({type(exc).__name__}: {exc}); fix or reinstall the package that declares it") from None


def names(group: str) -> list[str]:
    """Every name `group` knows besides import paths: registered ones and installed entry points."""
    return sorted(set(_registered[group]) | set(entry_points(group)))


def entry_points(group: str) -> dict[str, metadata.EntryPoint]:
    return {point.name: point for point in metadata.entry_points(group=group)}


def load_import_path(spec: str) -> Any:
    """`package.module:attribute` (the attribute may be dotted) -> the object, or a one-line UserError."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UserError(f"'{spec}' is not an import path; write package.module:factory")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"cannot import module '{module_name}' of '{spec}' ({exc}); install its package, put its "
                        f"directory on PYTHONPATH, or pass --ship DIR") from None
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise UserError(f"module '{module_name}' has no attribute '{attribute}' (from '{spec}'); name a "
                            f"factory it defines: {module_name}:<name>")
        target = getattr(target, part)
    code = top_level_path(module_name.split(".")[0])
    if code is not None and not installed(code):
        ship(code)
    return target


def ship(path: str | Path) -> None:
    """Send a package directory (or a module file) to every Ray worker with the study (runtime_env py_modules)."""
    path = Path(path).expanduser().resolve()
    if not path.exists():
        raise UserError(f"--ship {path}: no such directory; name a Python package directory or module file")
    _shipped[str(path)] = None


def runtime_env() -> dict[str, Any] | None:
    """Ray's runtime_env for the plug-ins of this process: the code imported from outside an installed package
    (py_modules), and the names given by register_model / register_task (an environment variable the workers'
    lookups read)."""
    env: dict[str, Any] = {"py_modules": list(_shipped)} if _shipped else {}
    paths = {group: {name: f"{v.__module__}:{v.__qualname__}" for name, v in table.items()
                     if getattr(v, "__module__", "__main__") != "__main__" and hasattr(v, "__qualname__")}
             for group, table in _registered.items()}
    if any(paths.values()):
        env["env_vars"] = {REGISTERED_ENV: json.dumps(paths)}
    return env or None


def top_level_path(top_module: str) -> Path | None:
    """The directory of an imported top-level package, or the file of a top-level module."""
    module = sys.modules.get(top_module) or importlib.import_module(top_module)
    file = getattr(module, "__file__", None)
    if not file:
        return None
    return Path(file).parent if Path(file).name == "__init__.py" else Path(file)


def installed(path: Path) -> bool:
    """Whether `path` lies in an installed site (site-packages of this interpreter or the user's)."""
    roots = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages(),
             site.getusersitepackages()}
    return any(path.resolve().is_relative_to(Path(root).resolve()) for root in roots if root)


@functools.lru_cache(maxsize=1)
def distributions() -> dict[str, list[str]]:
    """Top-level module -> the installed distributions that ship it: a scan of every installed package's
    metadata, done once per process (every run's fingerprint and provenance ask it)."""
    return metadata.packages_distributions()


def origin(obj: Any) -> dict[str, Any]:
    """Where a plug-in's code comes from: its import path, the distribution that ships it and its version,
    and a hash of its source (every .py file of its top-level package), so a changed layer is a new run."""
    module_name = getattr(obj, "__module__", None) or type(obj).__module__
    top = module_name.split(".")[0]
    qualname = getattr(obj, "__qualname__", None) or type(obj).__qualname__
    distribution = distributions().get(top, [None])[0]
    return {"import_path": f"{module_name}:{qualname}", "package": distribution,
            "version": _version(distribution), "source_sha": source_hash(top)}


def _version(distribution: str | None) -> str | None:
    try:
        return metadata.version(distribution) if distribution else None
    except metadata.PackageNotFoundError:
        return None


def source_hash(top_module: str) -> str | None:
    """sha256 (16 hex digits) over the .py files of an imported top-level module or package, in path order;
    None when it has no source on disk (a module built into Python or compiled only)."""
    root = top_level_path(top_module)
    if root is None:
        return None
    sources = sorted(root.rglob("*.py")) if root.is_dir() else [root]
    digest = hashlib.sha256()
    for path in sources:
        digest.update(str(path.relative_to(root.parent)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
