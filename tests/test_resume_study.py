"""`sptune resume` after the study driver dies for real: SIGKILL (nothing saved on the way out) and
Ctrl-C (SIGINT), while the pretraining and scratch stages run concurrently (one trial each: 2 CPUs).
A study runs in a subprocess until a trial has finished and a pretraining and a scratch trial have
checkpoints; the driver is stopped, and the resumed study must keep the finished trials as they were,
continue the others from their latest checkpoints, and end with a complete results table.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml
from ray_fixtures import sptune_env

from sptune import files
from sptune.config import STAGES
from sptune.experiment.engine import session
from sptune.records import results
from sptune.search import journal

pytestmark = pytest.mark.slow

CONFIG = {
    "task": {"name": "listops-mini", "max_val_examples": 32},
    "model": {"name": "transformer", "d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 16},
    "optim": {"batch_size": 8, "max_steps": 8, "eval_every": 4, "warmup_steps": 0},
    # Pretraining and scratch are long enough to be caught mid-way, both at once.
    "stages": {"pretrain": {"optim": {"max_steps": 300, "eval_every": 10}},
               "scratch": {"optim": {"max_steps": 300, "eval_every": 10}}},
}
SPACE = {  # one trial at a time per stage: the two stages share the 2 CPUs, one trial each
    "task": "listops-mini", "model": "transformer", "num_samples": 2, "max_concurrent": 1,
    "extend_grids": False,  # the declared grids: the checks count trials (grids that extend: test_bracketing)
    "stages": {"pretrain": {"params": {"optim.lr": [1e-3], "optim.batch_size": [8, 16]}},
               "finetune": {"params": {"optim.lr": [1e-3, 5e-4], "optim.batch_size": [8]}},
               "scratch": {"params": {"optim.lr": [1e-3, 5e-4], "optim.batch_size": [8]}}},
}


def sptune(*args, **kwargs):
    return subprocess.Popen([sys.executable, "-m", "sptune.cli", *map(str, args)], env=sptune_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            **kwargs)


def stage_runs(study_dir, stage):
    stage_dir = study_dir / stage
    return sorted(p for p in stage_dir.iterdir() if (p / "trial.json").is_file()) if stage_dir.is_dir() else []


def midway(study_dir, stage):
    """Trials of the stage with a checkpoint past step 20 but no result yet."""
    return [r for r in stage_runs(study_dir, stage) if not (r / "result.json").is_file()
            and (r / "progress.json").is_file() and files.read_json(r / "progress.json")["step"] >= 20]


def wait_for_midway(study_dir, proc, timeout=300):
    """Until a trial has finished, and a pretraining and a scratch trial have checkpoints but no result."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        finished = [r for stage in ("pretrain", "scratch") for r in stage_runs(study_dir, stage)
                    if (r / "result.json").is_file()]
        pretraining, scratch = midway(study_dir, "pretrain"), midway(study_dir, "scratch")
        if finished and pretraining and scratch:
            return finished[0], [pretraining[0], scratch[0]]
        time.sleep(0.2)
    raise AssertionError("the study never reached a finished trial beside two checkpointed-but-unfinished "
                         "ones (pretraining and scratch)")


def continued_as(run, trial_id):
    """A trial's run directory after a resume: the same, or renamed under the id Tune gave its point
    again when its last snapshot missed the trial (trial.json keeps the earlier ids)."""
    records = {r: files.read_json(r / "trial.json") for r in stage_runs(run.parent.parent, run.parent.name)}
    matches = [r for r, rec in records.items() if trial_id in [rec["trial_id"], *rec.get("previous_trial_ids", [])]]
    assert len(matches) == 1, (run, matches)
    return matches[0]


def ray_left_behind(run_dir, timeout=30):
    """The directory's Ray processes still running `timeout` s after its driver ended ({pid: command line}).
    Ray's agents exit by themselves once their raylet is gone, which they notice by polling: wait for that."""
    deadline = time.monotonic() + timeout
    while (left := session.leftover_processes(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return {pid: Path(f"/proc/{pid}/cmdline").read_bytes()[:200] for pid in left if Path(f"/proc/{pid}").exists()}


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_resume_after_the_driver_dies(tmp_path, sig):
    config, space, study_dir = tmp_path / "config.yaml", tmp_path / "space.yaml", tmp_path / "study"
    config.write_text(yaml.safe_dump(CONFIG))
    space.write_text(yaml.safe_dump(SPACE))
    tag = session.ray_tag(study_dir)
    driver = sptune("study", config, "--search-space", space, "--dir", study_dir, "--quiet")
    procs = [driver]
    try:
        finished, unfinished = wait_for_midway(study_dir, driver)
        os.kill(driver.pid, sig)
        output = driver.communicate(timeout=60)[0]
        if sig == signal.SIGINT:
            assert driver.returncode == 130 and f"sptune resume {study_dir}" in output, output[-4000:]
        # A killed driver's trial processes run on until Ray notices; `sptune resume` stops them first
        # (session.stop_processes). Stopping them here fixes what is on disk before it is read: a trial that
        # was near its end can finish in that gap (one CI run saw it, at step ~260 of 300). Such a trial is
        # finished, and the resume must keep it as it is; the others must continue, and one at least does.
        session.stop_processes(session.leftover_processes(study_dir))
        finished_in_gap = [run for run in unfinished if (run / "result.json").is_file()]
        unfinished = [run for run in unfinished if run not in finished_in_gap]
        assert unfinished, "both trials finished after the driver died: nothing was left to continue"
        kept = {run: {name: (run / name).read_bytes() for name in ("result.json", "trial.json", "best.pt")}
                for run in [finished, *finished_in_gap]}
        seen_steps = [files.read_json(run / "progress.json")["step"] for run in unfinished]
        trial_ids = [files.read_json(run / "trial.json")["trial_id"] for run in unfinished]

        resumed = sptune("resume", study_dir, "--quiet")
        procs.append(resumed)
        output = resumed.communicate(timeout=420)[0]
        assert resumed.returncode == 0, output[-3000:]
        assert results.RULE in output

        # The finished trials were not run again: their files are byte for byte what they were.
        for run, files_before in kept.items():
            assert {name: (run / name).read_bytes() for name in files_before} == files_before, run
        # The unfinished ones (pretraining, scratch or both) continued from their latest checkpoints, not from step 0,
        # in their own directories (renamed when Tune's last snapshot missed their trial: adopt_orphan).
        for run, seen_step, trial_id in zip(unfinished, seen_steps, trial_ids):
            run = continued_as(run, trial_id)
            trial = files.read_json(run / "trial.json")
            starts = [a["start_step"] for a in trial["attempts"]]
            assert len(starts) == 2 and starts[0] == 0 and starts[1] >= seen_step > 0, run
            history = files.read_json(run / "result.json")["history"]
            assert [h["step"] for h in history] == list(range(10, 301, 10))  # every eval exactly once

        # The table is complete: 2 trials per stage, all completed, finetuning from the best pretraining.
        rows = results.collect(study_dir)
        assert [r["stage"] for r in rows].count("pretrain") == 2 and len(rows) == 6
        assert all(r["status"] == "completed" for r in rows)
        best, _ = results.best_row(rows, "pretrain")
        assert all(r["init_trial"] == best["trial_id"] for r in rows if r["stage"] == "finetune")
        assert len((study_dir / "results.csv").read_text().splitlines()) == 7
        for stage in ("finetune", "scratch"):  # the searcher did not hand out a point twice
            assert len({r["optim.lr"] for r in rows if r["stage"] == stage}) == 2

        # Each stage's Optuna study in the journal went on across the resume: exactly one COMPLETE trial
        # per finished Tune trial, with its params, and nothing left running.
        storage = journal.journal_storage(study_dir / files.OPTUNA_JOURNAL)
        for stage in STAGES:
            trials = optuna.load_study(study_name=journal.optuna_study_name(study_dir, stage), storage=storage).trials
            complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
            mine = [r for r in rows if r["stage"] == stage]
            assert sorted((t.params["optim.lr"], t.params["optim.batch_size"]) for t in complete) == \
                sorted((r["optim.lr"], r["optim.batch_size"]) for r in mine)
            assert sorted(t.value for t in complete) == pytest.approx(sorted(r["best_val"] for r in mine))
            assert not [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]

        assert ray_left_behind(study_dir) == {}  # the resumed driver stopped its own Ray instance on the way out
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        session.stop_processes(session.leftover_processes(study_dir) + session.ray_processes(tag))
