"""Multi-seed comparison: `compare --seeds`, `study --seeds` (one study per seed + paired summary), report."""

import json
import subprocess
import sys

import pytest
from ray_fixtures import CONFIG, TINY, ray_instance, sptune_env  # noqa: F401 (fixture)

from sptune import files
from sptune.cli.main import main
from sptune.experiment.engine import driver, session
from sptune.records import seeds, studies
from sptune.report import writer
from test_tune import write_space

CLI_TINY = [*TINY, "run.progress=false"]


def test_compare_seeds_prints_each_seed_and_the_paired_interval(tmp_path, capsys):
    out_dir = tmp_path / "runs"
    assert main(["compare", str(CONFIG), "--seeds", "0", "1", *CLI_TINY, f"run.out_dir={out_dir}"]) == 0
    out = capsys.readouterr().out
    assert "--- seed 0" in out and "--- seed 1" in out
    assert "SPT vs scratch over 2 seed(s)" in out and "mean paired gain (SPT - scratch)" in out
    assert "95% CI" in out and "[Student-t, 1 dof]" in out and "best@/budget" in out
    for seed in (0, 1):  # default run names carry the seed: nothing is shared or resumed across seeds
        (run,) = out_dir.glob(f"finetune-listops-mini-transformer-s{seed}*")
        assert json.loads((run / "result.json").read_text())["status"] == "completed"


@pytest.mark.parametrize("extra, words", [
    (["--seeds", "1", "1"], "distinct seeds"),
    (["--seeds", "0", "1", "run.seed=3"], "not a run.seed= override"),
])
def test_seeds_user_errors(extra, words, tmp_path, capsys):
    for command in ("compare", "study"):
        args = [command, str(CONFIG), *extra] + (["--dir", str(tmp_path / "s")] if command == "study" else [])
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("sptune: error: ") and words in err


def test_multi_seed_study_one_study_per_seed_then_report(tmp_path, ray_instance, capsys):
    parent = tmp_path / "seeds"
    seeds.create(str(CONFIG), list(TINY), parent, [0, 1], str(write_space(tmp_path)), studies.Options())
    driver.run_seeds(parent, verbose=0)
    out = writer.write(parent)  # what `sptune study --seeds` prints and writes after its run
    for seed in (0, 1):
        state = json.loads((parent / f"seed-{seed}" / "study.json").read_text())
        assert state["stage_status"] == {"pretrain": "done", "finetune": "done", "scratch": "done"}
        assert state["stages"]["scratch"]["run"]["seed"] == seed == state["stages"]["finetune"]["run"]["seed"]
    summary = json.loads((parent / files.SEEDS_SUMMARY).read_text())
    assert [p["seed"] for p in summary["pairs"]] == [0, 1] and summary["paired_gain"]["n"] == 2
    gains = [p["spt_test"] - p["scratch_test"] for p in summary["pairs"]]
    assert summary["paired_gain"]["mean"] == pytest.approx(sum(gains) / 2)
    assert "mean paired gain (SPT - scratch)" in out.text and summary["wall_seconds"] > 0
    for pair in summary["pairs"]:  # convergence columns from each selected run's result.json
        for arm in ("spt", "scratch"):
            assert 0 < pair[f"{arm}_best_step"] <= pair[f"{arm}_steps"] and pair[f"{arm}_train_loss"] > 0
    assert "best@/budget" in out.text and f"/{summary['pairs'][0]['scratch_steps']}" in out.text
    assert (parent / files.SEEDS_PLOT).read_bytes()[:4] == b"\x89PNG"

    # `sptune report` and `sptune results` rebuild the same summary from the run directories.
    (parent / files.SEEDS_PLOT).unlink()
    assert main(["report", str(parent), "--plot", str(tmp_path / "docs" / "seeds.png")]) == 0
    assert (parent / files.SEEDS_PLOT).is_file() and "mean paired gain" in capsys.readouterr().out
    assert (tmp_path / "docs" / "seeds.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["results", str(parent)]) == 0 and "seed" in capsys.readouterr().out
    # A second study in the same directory is refused; resuming it is the way on.
    assert main(["study", str(CONFIG), "--seeds", "0", "1", "--dir", str(parent)]) == 2
    assert "sptune resume" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_study_seeds_smoke(tmp_path):
    parent = tmp_path / "seeds"
    try:
        proc = subprocess.run([sys.executable, "-m", "sptune.cli", "study", str(CONFIG), "--smoke",
                               "--seeds", "0", "1", "--dir", str(parent)], capture_output=True, text=True,
                              env=sptune_env(), timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        # The seeds are cells of one Tune run (no seed after seed): each seed's study is complete.
        assert "mean paired gain (SPT - scratch)" in proc.stdout
        assert all((parent / f"seed-{seed}" / "results.csv").is_file() for seed in (0, 1))
        assert f"log: {parent / 'study.log'}" in proc.stdout and (parent / "study.log").is_file()
        assert (parent / "seeds.png").is_file() and (parent / "seed-1" / "results.csv").is_file()
    finally:
        session.stop_processes(session.leftover_processes(parent))
