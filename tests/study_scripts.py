"""experiments/<name>.py loaded as a module in tests (the scripts are not a package)."""

import importlib.util
from pathlib import Path

STUDIES = Path(__file__).resolve().parents[1] / "experiments"


def load_study(name: str):
    spec = importlib.util.spec_from_file_location(f"study_{name}", STUDIES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
