"""A run directory belongs to one config: fingerprints, --restart, finetune contradictions, damaged checkpoints."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from reproducibility import assert_reproduces

from sptune import config, files
from sptune.cli.main import main
from sptune.records import results
from sptune.run import fingerprint, train
from sptune.run.runs import identify, run_dir_of

REPO = Path(__file__).resolve().parents[1]
TINY = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16", "optim.batch_size=8",
        "optim.max_steps=4", "optim.eval_every=2", "task.max_val_examples=16", "task.max_test_examples=16",
        "run.progress=false"]
WIDER = ["model.d_model=8", "model.d_ff=8"]  # another model of the same kind: other parameter shapes


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("sptune: error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def file_bytes(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run directory with its bytes (tb/ included): to show that nothing changed."""
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Finished tiny runs shared by the tests that only read them (copy before changing one)."""
    out = tmp_path_factory.mktemp("runs")
    made = {"pretrain": train.pretrain(config.load(None, TINY + [f"run.out_dir={out}"], stage="pretrain")),
            "pretrain-other-model": train.pretrain(config.load(None, TINY + WIDER + [f"run.out_dir={out}"])),
            "scratch": train.scratch(config.load(None, TINY + [f"run.out_dir={out}"])),
            "scratch-other-model": train.scratch(config.load(None, TINY + WIDER + [f"run.out_dir={out}"]))}
    assert all(r["status"] == "completed" for r in made.values())
    return {name: Path(r["run_dir"]) for name, r in made.items()}


def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(f"run: {{out_dir: {tmp_path / 'runs'}}}\n")
    return path


# ----------------------------------------------------------------------------- fingerprint and names
def default_dir(overrides, stage="scratch"):
    cfg, fp = identify(config.load(None, TINY + overrides), stage)
    return run_dir_of(cfg, stage, fp)


def test_default_run_names_differ_for_configs_that_change_the_numbers():
    base = default_dir([])
    assert re.fullmatch(r"scratch-listops-mini-transformer-s0-[0-9a-f]{6}", base.name)
    assert default_dir([]) == base
    for change in (["optim.lr=5e-4"], ["run.precision=bf16"], ["model.dropout=0.1"], ["task.train_fraction=0.5"]):
        assert default_dir(change) != base, change
    # run.device=auto is recorded as the device that runs: the same run as naming that device.
    assert default_dir([f"run.device={'cuda' if torch.cuda.is_available() else 'cpu'}"]) == base
    assert default_dir([], stage="pretrain").name.startswith("pretrain-")
    # Bookkeeping fields name no other experiment: the same directory, so the run resumes.
    assert default_dir(["run.progress=true", "run.num_threads=1", "run.resume=false"]) == base
    assert default_dir(["run.out_dir=elsewhere"]).name == base.name
    assert default_dir(["run.name=mine"]).name == "mine"


def test_readme_example_names_the_directory_pretrain_makes():
    cfg, fp = identify(config.load(REPO / "configs" / "listops_mini_transformer.yaml", stage="pretrain"),
                             "pretrain")
    made = str(run_dir_of(cfg, "pretrain", fp))
    for path in ("docs/single-runs.md", "configs/listops_mini_transformer.yaml", "sptune/cli/main.py"):
        named = re.findall(r"--from (runs/\S+)", (REPO / path).read_text())
        assert named and all(name == made for name in named), (path, named, made)


def test_finetune_fingerprint_includes_the_pretraining_run(runs, tmp_path):
    copy = tmp_path / "pretrain-copy"
    shutil.copytree(runs["pretrain"], copy)
    cfg = config.load(None, TINY, stage="finetune")
    _, original = identify(cfg, "finetune", runs["pretrain"])
    _, other = identify(cfg, "finetune", copy)
    assert original.fields["init.fingerprint"] == fingerprint.recorded(runs["pretrain"]).digest
    assert fingerprint.differences(original, other) == [
        f"init.run_dir: {json.dumps(str(runs['pretrain'].resolve()))} -> {json.dumps(str(copy.resolve()))}"]
    assert original.short != other.short


# ----------------------------------------------------------------------------- resume only the same config
def test_changed_config_is_refused_and_the_directory_is_untouched(tmp_path, capsys):
    cfg = config_file(tmp_path)
    assert main(["scratch", str(cfg), *TINY, "run.name=mine"]) == 0
    run_dir = tmp_path / "runs" / "mine"
    before = file_bytes(run_dir)
    capsys.readouterr()
    assert main(["scratch", str(cfg), *TINY, "run.name=mine", "optim.lr=5e-4"]) == 2
    err = one_line_error(capsys)
    assert "optim.lr: 0.001 -> 0.0005" in err and "run.name=" in err and "--restart" in err
    assert "model.d_model" not in err  # only the fields that differ
    assert file_bytes(run_dir) == before


def test_restart_starts_the_run_over_with_the_new_config(tmp_path, capsys):
    cfg = config_file(tmp_path)
    assert main(["scratch", str(cfg), *TINY, "run.name=mine"]) == 0
    assert main(["scratch", str(cfg), *TINY, "run.name=mine", "optim.lr=5e-4", "--restart"]) == 0
    run_dir = tmp_path / "runs" / "mine"
    assert config.load(run_dir / "config.yaml").optim.lr == 5e-4
    assert fingerprint.recorded(run_dir).fields["optim.lr"] == 5e-4
    assert len(list((run_dir / "tb").iterdir())) == 1  # the old run's events were deleted
    # The numbers are those of a fresh run of the new config, not the old run resumed.
    def fresh_run(name):
        return train.scratch(config.load(None, TINY + ["optim.lr=5e-4", f"run.out_dir={tmp_path / name}"]))

    restarted = files.read_json(run_dir / "result.json")
    assert_reproduces(restarted, fresh_run("fresh"), lambda: fresh_run("again"))


def test_same_config_resumes(tmp_path, capsys):
    cfg = config_file(tmp_path)
    assert main(["scratch", str(cfg), *TINY, "optim.max_steps=2"]) == 0
    (run_dir,) = (tmp_path / "runs").glob("scratch-*")
    # Only bookkeeping changes, so the same directory; it continues the finished run, trains nothing.
    last = (run_dir / "last.pt").read_bytes()
    assert main(["scratch", str(cfg), *TINY, "optim.max_steps=2", "run.num_threads=1"]) == 0
    assert list((tmp_path / "runs").iterdir()) == [run_dir] and (run_dir / "last.pt").read_bytes() == last
    assert files.read_json(run_dir / "result.json")["steps"] == 2


def test_a_directory_from_before_fingerprints_is_checked_by_its_config(runs, tmp_path, capsys):
    legacy = tmp_path / "runs" / "old"
    shutil.copytree(runs["scratch"], legacy)
    (legacy / files.FINGERPRINT).unlink()
    assert main(["scratch", str(config_file(tmp_path)), *TINY, "run.name=old", "optim.lr=5e-4"]) == 2
    assert "optim.lr: 0.001 -> 0.0005" in one_line_error(capsys)
    assert main(["scratch", str(config_file(tmp_path)), *TINY, "run.name=old"]) == 0


# ----------------------------------------------------------------------------- finetune contradictions
def finetune_cli(tmp_path, pre_dir, *extra):
    return main(["finetune", str(config_file(tmp_path)), "--from", str(pre_dir), *TINY, *extra])


@pytest.mark.parametrize("override, words", [
    ("model.d_model=32", "model.d_model=32 contradicts the pretraining run (16)"),
    ("model.n_layers=2", "model.n_layers=2 contradicts the pretraining run (1)"),
    ("model.name=s4", "model.name=s4 contradicts the pretraining run (transformer)"),
    ("model.causal=true", "model.causal=True contradicts the pretraining run (False)"),
])
def test_contradicting_finetune_is_refused(runs, tmp_path, capsys, override, words):
    assert finetune_cli(tmp_path, runs["pretrain"], override) == 2
    err = one_line_error(capsys)
    assert words in err and str(runs["pretrain"]) in err and "pretrain again" in err
    assert not (tmp_path / "runs").exists()  # refused before any directory was made


def test_head_settings_apply_and_objective_comes_from_pretraining(runs, tmp_path):
    assert finetune_cli(tmp_path, runs["pretrain"], "model.pooling=max", "model.dropout=0.1", "model.ssm_lr=5e-4",
                        "objective.kind=causal", "objective.mask_ratio=0.3") == 0
    (run_dir,) = (tmp_path / "runs").glob("finetune-*")
    saved, pre = config.load(run_dir / "config.yaml"), config.load(runs["pretrain"] / "config.yaml")
    assert (saved.model.pooling, saved.model.dropout, saved.model.ssm_lr) == ("max", 0.1, 5e-4)
    assert saved.model.d_model == pre.model.d_model == 16
    assert saved.objective == pre.objective and saved.objective.kind == "masked"


def test_finetune_from_causal_pretraining_needs_no_causal_setting(tmp_path):
    pre = train.pretrain(config.load(None, TINY + ["objective.kind=causal", f"run.out_dir={tmp_path}"]))
    result = train.finetune(config.load(None, TINY + [f"run.out_dir={tmp_path}"]), pre["run_dir"])
    assert result["status"] == "completed"
    assert config.load(Path(result["run_dir"]) / "config.yaml").model.causal  # the pretraining run's architecture


# ----------------------------------------------------------------------------- damaged checkpoints
def damage(path: Path, kind: str, other_model: Path) -> None:
    good = path.read_bytes()
    if kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif kind == "random-bytes":
        path.write_bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0),
                                       dtype=torch.uint8).numpy().tobytes())
    elif kind == "json":
        path.write_text(json.dumps({"model": "not tensors"}))
    else:  # another model's checkpoint of the same kind (last.pt or best.pt)
        shutil.copyfile(other_model / path.name, path)


KINDS = ["empty", "truncated", "random-bytes", "json", "other-model"]


@pytest.mark.parametrize("kind", KINDS)
def test_damaged_best_checkpoint_of_from_is_one_line(runs, tmp_path, capsys, kind):
    pre_dir = tmp_path / "pre"
    shutil.copytree(runs["pretrain"], pre_dir)
    damage(pre_dir / "best.pt", kind, runs["pretrain-other-model"])
    assert finetune_cli(tmp_path, pre_dir) == 2
    err = one_line_error(capsys)
    assert str(pre_dir / "best.pt") in err and "--from" in err
    assert not (tmp_path / "runs").exists()  # no finetune directory claimed for a start that cannot happen


@pytest.mark.parametrize("kind", KINDS)
def test_damaged_last_checkpoint_on_resume_is_one_line(runs, tmp_path, capsys, kind):
    run_dir = tmp_path / "runs" / "mine"
    shutil.copytree(runs["scratch"], run_dir)
    damage(run_dir / "last.pt", kind, runs["scratch-other-model"])
    before = file_bytes(run_dir)
    assert main(["scratch", str(config_file(tmp_path)), *TINY, "run.name=mine"]) == 2
    err = one_line_error(capsys)
    assert str(run_dir / "last.pt") in err and "--restart" in err
    assert file_bytes(run_dir) == before  # the error loses nothing
    assert main(["scratch", str(config_file(tmp_path)), *TINY, "run.name=mine", "--restart"]) == 0


def test_study_trial_with_a_damaged_checkpoint_fails_with_the_reason(runs, tmp_path, monkeypatch):
    """stage_trainable as Tune calls it (Tune's context faked): the trial ends failed, the study would go on."""
    import ray
    from ray import tune as ray_tune

    from sptune.trials import trainable

    reports = []

    class Context:
        def get_trial_id(self):
            return "t0"

        def get_node_id(self):
            return "node"

    monkeypatch.setattr(ray_tune, "get_context", Context)
    monkeypatch.setattr(ray_tune, "report", lambda metrics: reports.append(metrics))
    monkeypatch.setattr(ray, "get_runtime_context", Context)
    # No GPU reserved. Ray's own get_gpu_ids would start a default Ray instance in this process, and the
    # later tests of this test process (a pytest-xdist worker) would run on it, not on ray_instance's.
    monkeypatch.setattr(ray, "get_gpu_ids", lambda: [])
    params = {"optim.lr": 1e-3}
    spec = trainable.TrialSpec(stage="scratch", base=config.load(None, TINY).to_dict(), study_dir=str(tmp_path),
                               path="direct")
    trial = trainable.Trial(spec, params, "t0")
    run_dir = trial.run_dir
    assert run_dir == tmp_path / "scratch" / trainable.run_name("scratch", "t0", params)
    shutil.copytree(runs["scratch"], run_dir)
    (run_dir / "result.json").unlink()  # interrupted before its end: the trial resumes from last.pt
    damage(run_dir / "last.pt", "truncated", runs["scratch-other-model"])

    threads = torch.get_num_threads()
    try:
        trainable.stage_trainable(trial)
    finally:
        torch.set_num_threads(threads)  # the trial sets one thread per reserved core; later tests keep theirs
    assert reports[-1]["status"] == "failed"
    (row,) = results.collect(tmp_path)
    assert row["status"] == "failed" and str(run_dir / "last.pt") in row["reason"] and "damaged" in row["reason"]
