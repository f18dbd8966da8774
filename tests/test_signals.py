"""One signal path (sptune.experiment.engine.interrupts): Ctrl-C (SIGINT) or SIGTERM at any moment of a study stops
it, saves what the resume needs, prints the resume command and exits 130 or 143; a second one exits at once.

The moments: before Ray starts, during selection (inside Tune's loop), while writing the report (after it),
each followed by `sptune resume` to the end; a signal during a trial is test_resume_study's SIGINT case.
The signal is sent by the study's own process to itself at that moment (a wrapped step), as a terminal's
Ctrl-C reaches the driver alone (Ray's workers block SIGINT)."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import yaml
from ray_fixtures import CONFIG, TINY, ray_instance  # noqa: F401 (fixture)

from sptune import files
from sptune.cli.main import main
from sptune.config import STAGES
from sptune.experiment.engine import interrupts
from sptune.records import results, studies


@pytest.fixture
def handlers():
    """The test process's own handlers back afterwards, and no signal remembered across tests."""
    saved = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    interrupts.reset()
    yield
    interrupts.reset()
    for signum, handler in saved.items():
        signal.signal(signum, handler)


# ----------------------------------------------------------------------------- the handler alone (fast)
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_outside_tunes_loop_a_signal_raises_with_its_exit_code(sig, code, handlers):
    interrupts.install("sptune resume X")
    with pytest.raises(interrupts.Interrupted) as raised:
        os.kill(os.getpid(), sig)
    assert raised.value.exit_code == code and interrupts.received() == sig


def test_inside_tunes_loop_a_signal_only_asks_the_loop_to_stop(handlers):
    import threading

    interrupts.install()
    stopping = threading.Event()
    with interrupts.deferred_to(stopping):
        os.kill(os.getpid(), signal.SIGINT)  # no exception here: Tune's state is never cut mid-write
        assert stopping.is_set()
    with pytest.raises(interrupts.Interrupted):
        interrupts.raise_if_received()  # the engine raises once the loop has ended


def test_a_second_signal_exits_at_once():
    code = textwrap.dedent("""
        import os, signal, threading, time
        from sptune.experiment.engine import interrupts
        interrupts.install("sptune resume X")
        with interrupts.deferred_to(threading.Event()):
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(60)  # a loop that never reaches its step boundary
        print("not reached")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50)
    assert proc.returncode == 130 and "not reached" not in proc.stdout
    assert "again: exiting at once" in proc.stderr and "sptune resume X" in proc.stderr


# ----------------------------------------------------------------------------- a study, at each moment (Ray)
ONE = {"params": {"optim.lr": [1.0e-3], "optim.batch_size": [8]}}


def signalling(monkeypatch, module, name, sig):
    """Wrap module.name so that the study's process sends itself `sig` when its first call returns."""
    real, sent = getattr(module, name), []

    def wrapped(*args, **kwargs):
        out = real(*args, **kwargs)
        if not sent:
            sent.append(sig)
            os.kill(os.getpid(), sig)
        return out
    monkeypatch.setattr(module, name, wrapped)


MOMENTS = {  # where the signal lands: (module, function the study calls at that moment)
    "before Ray starts": (studies, "create"),
    "during selection": (studies, "select_pretraining"),
    "while writing the report": (results, "summary"),
}


@pytest.mark.slow  # about 1 min: three interrupted studies and their resumes on the shared Ray
@pytest.mark.parametrize("moment, sig", [("before Ray starts", signal.SIGTERM), ("during selection", signal.SIGINT),
                                         ("while writing the report", signal.SIGINT)])
def test_a_signal_at_any_moment_stops_the_study_and_resume_finishes_it(moment, sig, tmp_path, ray_instance,
                                                                       monkeypatch, capsys, handlers):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"task": "listops-mini", "model": "transformer", "num_samples": 1,
                                     "max_concurrent": 1, "stages": {s: ONE for s in STAGES}}))
    study_dir = tmp_path / "study"
    with monkeypatch.context() as patch:
        signalling(patch, *MOMENTS[moment], sig)
        code = main(["study", str(CONFIG), *TINY, "--search-space", str(space), "--dir", str(study_dir), "--quiet"])
    err = capsys.readouterr().err
    assert code == 128 + sig, err[-2000:]
    assert f"sptune resume {study_dir.resolve()}" in err  # the command that continues it
    state = files.read_json(study_dir / files.STUDY)  # what the resume needs was written first
    if moment == "during selection":  # stopped inside the loop: finetuning never ran, nothing counted as done
        assert "finetune" not in state["stage_status"]
        assert not list((study_dir / "finetune").glob(f"*/{files.RESULT}"))

    interrupts.reset()
    assert main(["resume", str(study_dir), "--quiet"]) == 0
    rows = results.collect(study_dir)
    assert sorted(r["stage"] for r in rows) == sorted(STAGES)  # one trial each: none run twice, none lost
    assert all(r["status"] == "completed" for r in rows)
    assert results.RULE in capsys.readouterr().out  # the report, written this time
