"""Installed sptune (a wheel, an editable install) finds its search spaces and configs without a checkout to
lean on."""

import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Where the demo task's default search space resolves, and where the installed package data is.
# The experiments read a config through the package (settings.cpu_overrides: the main job's cells).
PROBE = ("from sptune.experiment import settings; print(settings.cpu_overrides('transformer')[:1]); "
         "from sptune.search import spaces; print(spaces.default_path('listops-mini', 'transformer').resolve()); "
         "print(spaces.installed_search_spaces().resolve())")


def test_every_sptune_package_is_listed_for_the_wheel():
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    code = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "sptune").rglob("*.py")}
    assert set(setuptools["packages"]) == code | {"sptune.search_spaces", "sptune.configs"}
    assert setuptools["package-dir"] == {"sptune.search_spaces": "search_spaces", "sptune.configs": "configs"}
    for data in ("search_spaces", "configs"):  # regular packages: editable installs import them
        assert (REPO / data / "__init__.py").is_file()


def source_copy(tmp_path: Path) -> Path:
    """What a build needs, copied: building in the checkout would leave build/ and *.egg-info behind."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("sptune", "search_spaces", "configs"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    return src


def pip(*args: str, cwd: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def probe(python: str, cwd: Path, env_path: str | None) -> tuple[Path, Path]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    if env_path:
        env["PYTHONPATH"] = env_path
    proc = subprocess.run([python, "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    default, installed = proc.stdout.strip().splitlines()[-2:]
    return Path(default), Path(installed)


@pytest.mark.slow  # 15-25 s: two pip installs and a Ray import per probe
def test_search_spaces_are_package_data_of_a_wheel_and_an_editable_install(tmp_path):
    src, elsewhere = source_copy(tmp_path), tmp_path / "elsewhere"
    elsewhere.mkdir()

    # A wheel installed into a bare directory: the file comes from the installed package, not a checkout.
    pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "wheel"), str(src), cwd=tmp_path)
    wheel = next((tmp_path / "wheel").glob("sptune-*.whl"))
    pip("install", "--no-deps", "--target", str(tmp_path / "site"), str(wheel), cwd=tmp_path)
    shutil.rmtree(src / "search_spaces")  # nothing to fall back on
    shutil.rmtree(src / "configs")
    found, installed = probe(sys.executable, elsewhere, str(tmp_path / "site"))
    assert installed == tmp_path / "site" / "sptune" / "search_spaces"
    assert found == installed / "listops-mini" / "transformer.yaml" and found.is_file()

    # An editable install (README, CI) in a fresh environment that sees this one's dependencies only.
    for name in ("search_spaces", "configs"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    env = tmp_path / "venv"
    venv.create(env, with_pip=False)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(env), "platbase": str(env)}))
    (site / "dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip("install", "--no-deps", "--no-build-isolation", "--target", str(site), "-e", str(src), cwd=tmp_path)
    found, installed = probe(str(env / "bin" / "python"), elsewhere, None)
    assert installed == src / "search_spaces" and found == installed / "listops-mini" / "transformer.yaml"


@pytest.mark.slow  # ~60 s: two wheel builds and installs, a study script's plan, an evaluation at smoke size
def test_a_study_script_plans_and_a_layer_package_evaluates_from_installed_wheels(tmp_path):
    """A cluster image holds a `pip install .`, not a checkout: a study script copied out of the checkout
    plans its cells from the installed package alone (its configs, search spaces and tasks' embedded data), and
    `sptune evaluate` finds a layer package installed beside it by its entry point (examples/own-layer)."""
    src, elsewhere = source_copy(tmp_path), tmp_path / "elsewhere"
    elsewhere.mkdir()
    layer_src = shutil.copytree(REPO / "examples" / "own-layer", tmp_path / "own-layer")
    for package in (src, layer_src):
        pip("wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "wheel"), str(package), cwd=tmp_path)
    pip("install", "--no-deps", "--target", str(tmp_path / "site"), *map(str, (tmp_path / "wheel").glob("*.whl")),
        cwd=tmp_path)
    shutil.rmtree(src)  # nothing to fall back on
    script = shutil.copy(REPO / "experiments" / "architectures.py", elsewhere)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(elsewhere), "PYTHONPATH": str(tmp_path / "site"),
           "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, script, "--plan", "--dir", str(elsewhere / "study")], cwd=elsewhere,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "device-hours" in proc.stdout and "total" in proc.stdout
    assert not (elsewhere / "study").exists()  # a plan trains nothing and writes nothing

    data = elsewhere / "order"
    proc = subprocess.run([sys.executable, str(layer_src / "make_dataset.py"), str(data), "--length", "48",
                           "--train", "64", "--val", "16", "--test", "32"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    shutil.rmtree(layer_src)  # the layer comes from its installed wheel only
    probe_code = ("import sptune, longconv, sys; print(sptune.__file__, longconv.__file__); "
                  "sys.argv = ['sptune', 'evaluate', '--model', 'longconv', '--task', 'files', '--task-path', "
                  f"'{data}', '--baselines', 'transformer', '--smoke', '--dir', 'evaluated']; "
                  "from sptune.cli.main import main; sys.exit(main())")
    proc = subprocess.run([sys.executable, "-c", probe_code], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    imported = proc.stdout.splitlines()[0].split()
    assert all(Path(p).is_relative_to(tmp_path / "site") for p in imported), imported
    assert "- longconv: scratch" in proc.stdout and "architecture gap (longconv - Transformer)" in proc.stdout
