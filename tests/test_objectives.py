"""Masked and causal denoising: what is masked, what counts in the loss, and the metrics."""

import torch

from sptune.run.data import step_draw
from sptune.run.objectives import Metric, causal_denoising, denoising_loss, masked_denoising
from sptune.tasks.base import MASK_ID


def test_masked_tokens_use_mask_id_only_on_valid_positions():
    x = torch.randint(3, 18, (64, 100))
    lengths = torch.randint(10, 101, (64,))
    d = masked_denoising(x, lengths, 0.15, step_draw(0, 0))
    pad = torch.arange(100)[None] >= lengths[:, None]
    assert not d.loss_mask[pad].any()
    assert (d.inputs[d.loss_mask] == MASK_ID).all()
    assert torch.equal(d.inputs[~d.loss_mask], x[~d.loss_mask])
    ratio = d.loss_mask.sum() / (~pad).sum()
    assert abs(ratio.item() - 0.15) < 0.02


def test_masked_continuous_zeroes_values_and_adds_indicator():
    x = torch.randn(8, 50, 2)
    d = masked_denoising(x, torch.full((8,), 50), 0.5, step_draw(0, 0))
    assert d.inputs.shape == (8, 50, 3)
    assert torch.equal(d.inputs[..., 2].bool(), d.loss_mask)
    assert (d.inputs[..., :2][d.loss_mask] == 0).all()


def test_loss_counts_masked_positions_only():
    x = torch.randint(3, 18, (4, 20))
    d = masked_denoising(x, torch.full((4,), 20), 0.3, step_draw(1, 0))
    pred = torch.randn(4, 20, 18, requires_grad=True)
    loss, terms = denoising_loss(pred, d, "ce")
    loss.backward()
    assert terms == d.loss_mask.sum()
    touched = pred.grad.abs().sum(-1) > 0
    assert torch.equal(touched, d.loss_mask)


def test_causal_targets_are_next_inputs():
    x = torch.arange(10)[None].repeat(2, 1)
    d = causal_denoising(x, torch.tensor([10, 6]))
    assert torch.equal(d.targets[0, :9], x[0, 1:])
    assert d.loss_mask[0].sum() == 9 and d.loss_mask[1].sum() == 5


def test_metrics():
    acc = Metric("accuracy")
    acc.update(torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]), torch.tensor([0, 1, 1]))
    assert abs(acc.value() - 2 / 3) < 1e-9
    r2 = Metric("r2")
    y = torch.randn(1000)
    r2.update(y, y)
    assert abs(r2.value() - 1.0) < 1e-9
    r2 = Metric("r2")
    r2.update(torch.full((1000,), y.mean().item()), y)
    assert abs(r2.value()) < 1e-6


def test_an_accuracy_keeps_each_targets_outcome_in_the_order_seen():
    acc = Metric("accuracy", keep_hits=True)
    acc.update(torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4]]), torch.tensor([0, 1, 1]))
    acc.update(torch.tensor([[0.3, 0.7], [0.8, 0.2]]), torch.tensor([0, 0]))
    assert acc.hit_string() == "11001" and acc.value() == 3 / 5
    assert Metric("accuracy").hit_string() is None  # not kept unless asked: validation passes keep nothing
    r2 = Metric("r2", keep_hits=True)
    r2.update(torch.zeros(3), torch.ones(3))
    assert r2.hit_string() is None  # an R² has no per-example right or wrong
