"""The accelerator's denoising loss over all positions (no mask-dependent shapes) against the boolean-indexed
reference, and which of the two a device computes."""

import pytest
import torch
import torch.nn.functional as F

from sptune.run import objectives
from sptune.run.objectives import Denoising, denoising_loss, indexed_loss, sync_free_loss
from sptune.tasks.base import MASK_ID


def problem(kind: str, seed: int, ratio: float = 0.3):
    """pred (4, 20, V or C), a Denoising with a random mask: token ids, or fp32 values with 3 channels."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(4, 20, generator=g) < ratio  # (B, L)
    if kind == "ce":
        targets = torch.randint(3, 18, (4, 20), generator=g)  # (B, L)
        pred = torch.randn(4, 20, 18, generator=g)  # (B, L, V)
    else:
        targets = torch.randn(4, 20, 3, generator=g)  # (B, L, C)
        pred = torch.randn(4, 20, 3, generator=g)
    return pred.requires_grad_(), Denoising(targets, targets, mask)


def reference(pred, d, kind):
    """What the loss means: the mean over the selected positions only (boolean indexing), and its term count."""
    sel = d.loss_mask
    if kind == "ce":
        return F.cross_entropy(pred[sel], d.targets[sel]), int(sel.sum())
    return F.l1_loss(pred[sel].float(), d.targets[sel].float()), int(sel.sum()) * d.targets.shape[-1]


@pytest.mark.parametrize("kind", ["ce", "l1"])
@pytest.mark.parametrize("seed", range(4))
def test_masked_loss_equals_the_mean_over_selected_positions(kind, seed):
    pred, d = problem(kind, seed)
    loss, terms = sync_free_loss(pred, d, kind)
    want, want_terms = reference(pred, d, kind)
    assert int(terms) == want_terms > 0
    torch.testing.assert_close(loss, want, rtol=1e-6, atol=1e-7)
    (grad,) = torch.autograd.grad(loss, pred)
    (want_grad,) = torch.autograd.grad(want, pred)
    torch.testing.assert_close(grad, want_grad, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("kind", ["ce", "l1"])
def test_nothing_selected_gives_a_zero_loss_that_keeps_the_graph(kind):
    pred, d = problem(kind, 0)
    d = Denoising(d.inputs, d.targets, torch.zeros_like(d.loss_mask))
    loss, terms = sync_free_loss(pred, d, kind)
    assert loss.item() == 0.0 and int(terms) == 0 and loss.requires_grad
    loss.backward()
    assert torch.equal(pred.grad, torch.zeros_like(pred))


@pytest.mark.parametrize("kind", ["ce", "l1"])
def test_unselected_positions_cannot_reach_the_loss(kind):
    """Targets or predictions outside the mask (here NaN, or a CE target id no class has) change nothing."""
    pred, d = problem(kind, 1)
    loss, _ = sync_free_loss(pred, d, kind)
    wild_pred = pred.detach().masked_fill(~d.loss_mask[..., None], float("nan"))
    wild_targets = d.targets.masked_fill(~d.loss_mask if kind == "ce" else ~d.loss_mask[..., None],
                                         MASK_ID if kind == "ce" else float("nan"))
    wild, _ = sync_free_loss(wild_pred, Denoising(d.inputs, wild_targets, d.loss_mask), kind)
    torch.testing.assert_close(wild, loss.detach())


def test_l1_targets_keep_fp32_under_a_bf16_prediction():
    """A bf16 prediction equal to its targets rounded to bf16 still has the rounding error as its loss: the
    targets are not rounded to the prediction's precision first (which would report 0)."""
    targets = 1.0 + torch.arange(1, 61, dtype=torch.float32).reshape(1, 20, 3) * 1e-3  # not bf16 numbers
    mask = torch.ones(1, 20, dtype=torch.bool)
    pred = targets.to(torch.bfloat16)
    loss, _ = sync_free_loss(pred, Denoising(targets, targets, mask), "l1")
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, (pred.float() - targets).abs().mean())
    assert loss.item() > 1e-4


@pytest.mark.parametrize("kind", ["ce", "l1"])
def test_the_loss_traces_as_one_graph(kind):
    """No host sync: neither .any() nor boolean indexing (a data-dependent shape) is left for the compiler to
    break on."""
    pred, d = problem(kind, 2)
    torch._dynamo.reset()
    compiled = torch.compile(lambda p, t, m: sync_free_loss(p, Denoising(t, t, m), kind), fullgraph=True,
                             backend="eager")
    loss, terms = compiled(pred, d.targets, d.loss_mask)
    want, want_terms = reference(pred, d, kind)
    torch.testing.assert_close(loss, want, rtol=1e-6, atol=1e-7)
    assert int(terms) == want_terms


@pytest.mark.parametrize("kind", ["ce", "l1"])
def test_the_cpu_computes_the_indexed_loss_and_an_accelerator_the_sync_free_one(kind, monkeypatch):
    pred, d = problem(kind, 0)
    loss, terms = denoising_loss(pred, d, kind)  # the CPU: the kept records' arithmetic, bit for bit
    indexed, indexed_terms = indexed_loss(pred, d, kind)
    assert torch.equal(loss, indexed) and torch.equal(terms, indexed_terms)
    called = []
    monkeypatch.setattr(objectives, "sync_free_loss", lambda *args: called.append(args[0].device.type))
    denoising_loss(pred.detach().to("meta"), d, kind)
    assert called == ["meta"]
