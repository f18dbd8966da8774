"""The import graph of sptune: imports point down the layers only, function-level imports included, and
form no circle (docs/architecture.md). Read from the source with `ast`, so a lazy import counts too."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "sptune"

# Bottom to top. A module belongs to the first entry that is its name or a package above it.
LAYERS = [
    ["sptune.errors", "sptune.files", "sptune.atomic", "sptune.config", "sptune.selection", "sptune.output",
     "sptune.flops", "sptune.utilization", "sptune.folds", "sptune.cpu_kernels", "sptune.run.checkpoints",
     "sptune.run.rng_state", "sptune.report.stats", "sptune.report.multiplier", "sptune.report.pairs",
     "sptune.report.power", "sptune.report.sequential"],  # pure helpers: no task, model, training, Ray
    ["sptune.protocol"],  # the SPT protocol's order and selection rule (plain runs and the engine ask it)
    ["sptune.tasks", "sptune.models", "sptune.run.objectives"],
    ["sptune.plugins"],  # names -> a researcher's code: import paths, entry points, register_* (no sptune code)
    # names -> code (built-ins first), a layer's contract, a run's identity (its layer's source included)
    ["sptune.registry", "sptune.layer_contract", "sptune.run.fingerprint", "sptune.build", "sptune.run.data",
     "sptune.baselines", "sptune.run.runs"],
    ["sptune.run"],  # one stage trained once: the stage functions, no Ray
    ["sptune.trials"],  # one trial on a worker: entry point, trainable, retries, resources, failures
    ["sptune.search.spaces", "sptune.search.options", "sptune.trackers"],  # what a search is asked for
    # the folders a run leaves (study state, trial rows, results, storage) and the searches over them: files and
    # Optuna, no Tune loop
    ["sptune.records", "sptune.search", "sptune.report.curves", "sptune.report.search_plots"],
    ["sptune.experiment.engine"],  # the one Ray driver: cells, searcher and scheduler routing, signals
    ["sptune.experiment", "sptune.report", "sptune.doctor"],  # experiments of cells; their tables and figures
    ["sptune.api"],
    ["sptune.cli", "sptune"],  # command lines
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer_of(module: str) -> int:
    for index, names in enumerate(LAYERS):
        if any(module == n or (module.startswith(n + ".") and n != "sptune") for n in names):
            return index
    raise AssertionError(f"{module} is in no layer of tests/test_layers.py: add it")


def imports_of(module: str) -> set[str]:
    """The sptune modules `module` imports anywhere in its file (top level or inside functions)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names}
    return {m for m in found if m in MODULES and m != module}


GRAPH = {module: imports_of(module) for module in MODULES}


def upward(graph: dict[str, set[str]]) -> list[str]:
    return [f"{a} -> {b}" for a, targets in sorted(graph.items()) for b in sorted(targets) if layer_of(b) > layer_of(a)]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle, one path each (depth-first search over the graph)."""
    found, state = [], {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                found.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_every_module_has_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_import_points_up_a_layer():
    assert upward(GRAPH) == []


def test_no_import_circle():
    assert circles(GRAPH) == []


@pytest.mark.parametrize("low, high", [("sptune.records.results", "sptune.api"), ("sptune.run.train", "sptune.trials.trainable")])
def test_the_check_sees_a_function_level_import_that_points_up(low, high):
    """The checks catch what they are for: an upward import added inside a function, and the circle it makes."""
    graph = {module: set(targets) for module, targets in GRAPH.items()}
    graph[low].add(high)
    assert upward(graph) == [f"{low} -> {high}"]
    assert circles(graph)  # the module above imports it back, directly or through others


def test_imports_inside_functions_are_read():
    assert "sptune.records.studies" in imports_of("sptune.cli.study")  # imported only inside cmd_plan and others


def test_reading_a_search_space_imports_neither_ray_nor_optuna():
    """The search-space format (sptune.search.spaces) is separate from Tune's searcher (sptune.search.searcher)."""
    import subprocess
    import sys

    code = ("import sys; from sptune.search import spaces; spaces.load(spaces.default_path('shapes-tiny', 'transformer')); "
            "print(sorted(m for m in ('ray', 'optuna') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]


def calls_in(module: str) -> set[str]:
    """Dotted names called anywhere in a module (`ray_tune.Tuner.restore`, `threading.Thread`)."""
    def dotted(node: ast.AST) -> str:
        if isinstance(node, ast.Attribute):
            return f"{dotted(node.value)}.{node.attr}"
        return node.id if isinstance(node, ast.Name) else ""
    tree = ast.parse(MODULES[module].read_text())
    return {dotted(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}


def test_one_file_constructs_or_restores_a_tuner():
    """One Ray driver: the engine's driver is the only place a Tune run is made or restored."""
    makers = {m for m in MODULES if any(c.split(".")[-1] == "Tuner" or c.endswith("Tuner.restore")
                                        for c in calls_in(m))}
    assert makers == {"sptune.experiment.engine.driver"}


RAY_LAYER = ("sptune.trials", "sptune.search", "sptune.records", "sptune.experiment.engine")


def test_the_ray_layer_starts_no_threads_but_the_storage_uploads():
    """Tune runs in the main thread of the driver (signals reach one handler there): no stage threads. The one
    exception is durable storage, whose pushes must never block or raise into Tune's loop: its uploader thread
    and the uploads it overlaps touch files and the storage only."""
    assert {m for m in MODULES if m.startswith(RAY_LAYER) and
            any(c.split(".")[-1] in ("Thread", "ThreadPoolExecutor") for c in calls_in(m))} == {
        "sptune.experiment.engine.mirroring", "sptune.records.storage"}
