"""Configs: every shipped config loads; bad values are one-line errors naming the field."""

from pathlib import Path

import pytest
import yaml

from sptune import config, registry
from sptune.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_config_loads_for_every_stage(path):
    assert "sptune " in path.read_text().splitlines()[1] or "sptune " in path.read_text()[:400], \
        "a config's header must give its launch command"
    for stage in config.STAGES:
        cfg = config.load(path, stage=stage)
        assert cfg.task.name and cfg.model.name


def test_overrides_and_stage_sections(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"optim": {"lr": 1e-3}, "stages": {"finetune": {"optim": {"lr": 5e-4}}}}))
    assert config.load(p, stage="pretrain").optim.lr == 1e-3
    assert config.load(p, stage="finetune").optim.lr == 5e-4
    cfg = config.load(p, ["optim.batch_size=8", "finetune.optim.lr=1e-4", "model.causal=true"], stage="finetune")
    assert (cfg.optim.batch_size, cfg.optim.lr, cfg.model.causal) == (8, 1e-4, True)
    assert config.load(p, ["finetune.optim.lr=1e-4"], stage="pretrain").optim.lr == 1e-3


@pytest.mark.parametrize("override, words", [
    (["model.pooling=cls"], ["model.pooling", "mean"]),
    (["optim.lr=-1"], ["optim.lr", "> 0"]),
    (["optim.batch_size=abc"], ["optim.batch_size", "int"]),
    (["optim.bogus=1"], ["optim.bogus", "allowed"]),
    (["objective.mask_ratio=1.5"], ["objective.mask_ratio"]),
    (["model.dt_min=0"], ["model.dt_min", "> 0"]),
    (["model.dt_min=0.2"], ["model.dt_min=0.2", "below model.dt_max=0.1"]),
    (["lr=1"], ["section.field=value"]),
    (["optim.accumulate=0"], ["optim.accumulate", "> 0"]),
    (["optim.batch_size=10", "optim.accumulate=4"], ["optim.batch_size=10", "not divisible by optim.accumulate=4"]),
    (["run.compile=maybe"], ["run.compile", "bool"]),
])
def test_bad_values_name_the_field(override, words):
    with pytest.raises(UserError) as err:
        config.load(None, override)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


@pytest.mark.parametrize("override, words", [
    (["model.name=lstm"], ["model.name", "transformer"]),
    (["task.name=nope"], ["task.name", "listops-mini"]),
])
def test_unknown_names_fail_the_registry_check(override, words):
    cfg = config.load(None, override)  # config is pure data: names are the registry's to check
    with pytest.raises(UserError) as err:
        registry.check_names(cfg)
    message = str(err.value)
    assert "\n" not in message
    for word in words:
        assert word in message


def test_dump_round_trip(tmp_path):
    cfg = config.load(None, ["model.name=s4", "optim.lr=3e-4", "optim.betas=[0.9, 0.98]"])
    config.dump(cfg, tmp_path / "config.yaml")
    again = config.load(tmp_path / "config.yaml")
    assert again == cfg


@pytest.mark.parametrize("override, words", [
    ("model.name=lstm", ["unknown model 'lstm' (model.name)", "transformer"]),
    ("task.name=nope", ["unknown task 'nope' (task.name)", "listops-mini"]),
])
def test_a_study_checks_names_before_any_work(override, words, tmp_path, capsys):
    from sptune.cli.main import main

    config_path = ROOT / "configs" / "listops_mini_transformer.yaml"
    assert main(["study", str(config_path), override, "--dir", str(tmp_path / "study")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    for word in words:
        assert word in err
    assert not (tmp_path / "study").exists()


def test_a_searched_name_must_be_registered():
    from sptune.search.spaces import check_value

    with pytest.raises(UserError, match="unknown model 'lstm'"):
        check_value("search space", "model.name", "lstm")
    check_value("search space", "model.name", "s4")  # a registered one passes
