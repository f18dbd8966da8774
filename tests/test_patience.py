"""optim.patience: a run stops once validation has not improved for that many steps, stays stopped on resume,
and the setting is fingerprinted only when on; the main job's budgets as the configs and the studies set them."""

import pytest

from sptune import config
from sptune.errors import UserError
from sptune.experiment import settings
from sptune.report import pairs
from sptune.run import fingerprint, train

TINY = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "model.d_ff=16", "optim.batch_size=8",
        "optim.max_steps=40", "optim.eval_every=4", "task.max_val_examples=16", "task.max_test_examples=16",
        "run.progress=false"]


@pytest.fixture
def plateau_after_step_8(monkeypatch):
    """Validation improves at evals 1-2 (steps 4, 8), then stays flat: metric and loss equal."""
    real, calls = train.evaluate, []

    def evaluate(model, cfg, task, stage, split, device, limit, **options):
        out = real(model, cfg, task, stage, split, device, limit, **options)
        calls.append(1)
        level = min(len(calls), 2)
        return dict(out, metric=0.5 + 0.1 * level, loss=1.0 / level)

    monkeypatch.setattr(train, "evaluate", evaluate)


def test_patience_stops_at_the_plateau_and_a_resume_stays_stopped(tmp_path, plateau_after_step_8):
    cfg = config.load(None, TINY + [f"run.out_dir={tmp_path}", "optim.patience=8"])
    result = train.scratch(cfg)
    # Best at step 8; steps 12 and 16 gain nothing; 16 - 8 = patience: stop there, not at max_steps 40.
    assert (result["best_step"], result["steps"], result["max_steps"]) == (8, 16, 40)
    assert [h["step"] for h in result["history"]] == [4, 8, 12, 16]
    again = train.scratch(cfg)  # resumes last.pt (step 16): already plateaued, trains nothing more
    assert (again["steps"], len(again["history"])) == (16, 4)


def test_without_patience_the_run_uses_its_budget(tmp_path, plateau_after_step_8):
    result = train.scratch(config.load(None, TINY + [f"run.out_dir={tmp_path}"]))
    assert (result["best_step"], result["steps"]) == (8, 40)


def test_patience_must_be_a_multiple_of_eval_every():
    with pytest.raises(UserError, match="optim.patience=10 is not a multiple of optim.eval_every=4"):
        config.validate(config.load(None, TINY + ["optim.patience=10"]))


def test_patience_is_fingerprinted_only_when_on():
    def digest(*overrides):
        return fingerprint.of(config.load(None, list(overrides)), "scratch").digest

    assert digest("optim.patience=0") == digest()  # run directories from before the setting stay valid
    assert digest("optim.patience=100") != digest()


def test_convergence_check_measures_the_best_step_against_the_budget():
    stopped = {"best_step": 150, "steps": 250, "max_steps": 400, "history": [{"train_loss": 0.1}]}
    assert pairs.convergence("scratch", stopped)["scratch_steps"] == 400
    assert pairs.convergence("scratch", {"best_step": 150, "steps": 200})["scratch_steps"] == 200  # older result


@pytest.mark.parametrize("model", sorted(settings.CPU_MODELS))
def test_main_job_budget_and_the_first_budget_the_scaling_studies_ran(model):
    def budget(overrides, stage):
        optim = config.load(None, overrides, stage=stage).optim
        return optim.max_steps, optim.patience

    current, first = settings.cpu_overrides(model), settings.first_budget_overrides(model)
    assert budget(current, "pretrain") == (200, 100)
    assert budget(current, "finetune") == budget(current, "scratch") == (400, 100)  # the same for both arms
    assert all(budget(first, stage) == (settings.FIRST_BUDGET_STEPS, 0) for stage in config.STAGES)
    assert fingerprint.of(config.load(None, first, stage="scratch"), "scratch").fields["optim.max_steps"] == 200
    first_space, current_space = settings.first_budget_space(model), settings.cpu_space(model)
    assert first_space["scratch"]["params"]["optim.lr"] == settings.FIRST_LR_GRID[model]
    assert first_space["finetune"]["params"]["optim.lr"] == first_space["scratch"]["params"]["optim.lr"]
    assert current_space["finetune"]["params"]["optim.lr"] == current_space["scratch"]["params"]["optim.lr"]
