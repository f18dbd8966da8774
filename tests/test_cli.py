"""The `sptune` command: one-line errors with exit code 2, and the stage commands end to end."""

import subprocess
import sys

import pytest

from sptune.cli.main import main

TINY = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16", "optim.batch_size=8",
        "optim.max_steps=4", "optim.eval_every=2", "task.max_val_examples=16", "run.progress=false"]


@pytest.mark.parametrize("args, words", [
    (["scratch", "CONFIG", "model.name=lstm"], ["unknown model 'lstm'", "transformer"]),
    (["scratch", "CONFIG", "task.name=imagenet"], ["unknown task 'imagenet'", "listops-mini"]),
    (["pretrain", "CONFIG", "optim.lr=0"], ["optim.lr", "> 0"]),
    (["pretrain", "CONFIG", "objective.kind=span"], ["objective.kind", "masked, causal"]),
    (["scratch", "missing.yaml"], ["missing.yaml does not exist"]),
    (["finetune", "CONFIG", "--from", "no/such/run"], ["not a finished pretraining run"]),
])
def test_user_errors_are_one_line_with_exit_code_2(args, words, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text("task: {name: listops-mini}\n")
    args = [str(config) if a == "CONFIG" else a for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("sptune: error: ") and err.count("\n") == 1 and "Traceback" not in err
    for word in words:
        assert word in err


def test_missing_real_data_is_a_clear_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPTUNE_DATA", str(tmp_path / "empty"))
    assert main(["scratch", str(_config(tmp_path)), "task.name=listops-lra"]) == 2
    err = capsys.readouterr().err
    assert "listops-lra" in err or "lra_release" in err
    assert err.count("\n") == 1


def _config(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(f"run: {{out_dir: {tmp_path / 'runs'}}}\n")
    return p


def test_console_script_exit_code_on_bad_override(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sptune.cli", "scratch", str(_config(tmp_path)), "lr=1"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "section.field=value" in proc.stderr and "Traceback" not in proc.stderr


def test_compare_prints_scratch_and_spt_side_by_side(tmp_path, capsys):
    assert main(["compare", str(_config(tmp_path)), *TINY]) == 0
    out = capsys.readouterr().out
    assert "scratch" in out and "SPT (pretrain -> finetune)" in out and "SPT - scratch" in out
    (finetune_dir,) = (tmp_path / "runs").glob("finetune-listops-mini-transformer-s0-*")
    assert (finetune_dir / "result.json").is_file()


def test_overrides_after_options_are_accepted(tmp_path):

    assert main(["pretrain", str(_config(tmp_path)), *TINY]) == 0
    (run,) = (tmp_path / "runs").glob("pretrain-listops-mini-transformer-s0-*")
    assert main(["finetune", str(_config(tmp_path)), "--from", str(run), *TINY, "optim.lr=2e-4"]) == 0
    from sptune import config

    (finetune_dir,) = (tmp_path / "runs").glob("finetune-listops-mini-transformer-s0-*")
    assert config.load(finetune_dir / "config.yaml").optim.lr == 2e-4
    with pytest.raises(SystemExit) as exit_info:
        main(["finetune", str(_config(tmp_path)), "--from", str(run), "--bogus"])
    assert exit_info.value.code == 2
