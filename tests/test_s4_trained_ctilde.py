"""S4Layer (DPLR) trains C~ = C (I - dA^L) as state-spaces/s4 does: converted once, then no dense work per call."""

import pytest
import torch
from conftest import rel_err

from sptune.models import ssm
from sptune.models.s4 import S4Layer


def fresh_layer(seed=0, bidirectional=True):
    torch.manual_seed(seed)
    return S4Layer(4, d_state=16, mode="dplr", bidirectional=bidirectional, backend="torch").double()


def forbid_dense_work(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("dense work in a forward")

    for name in ("solve", "matrix_power", "inv"):
        monkeypatch.setattr(torch.linalg, name, forbidden)
    monkeypatch.setattr(ssm, "dplr_bilinear_dA", forbidden)


def test_the_first_kernel_converts_c_to_ctilde_once_and_keeps_the_function():
    layer = fresh_layer()
    dt, A, P, B, C = (t.detach().clone() for t in layer.ssm_params())  # C: a view of the parameter, copied
    before = ssm.dplr_kernel(dt, A, P, B, C, 48, backend="torch").detach()  # the true C's kernel
    param = layer.C
    assert layer.kernel_length == 0
    after = layer.kernel(48).detach()
    assert layer.kernel_length == 48 and int(layer.l_kernel) == 48 and layer.C is param  # in place
    assert rel_err(after, before) < 1e-10
    assert rel_err(layer.kernel(20), before[..., :20]) < 1e-10  # shorter: truncated
    assert rel_err(layer.kernel(100), ssm.dplr_kernel(dt, A, P, B, C, 100, backend="torch")) < 1e-9  # longer
    assert layer.kernel_length == 48  # other lengths convert nothing


def test_after_the_first_call_a_step_runs_no_solve_and_no_matrix_power(monkeypatch):
    layer = fresh_layer()
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-3)  # built before the conversion, as in a run
    x = torch.randn(2, 32, 4, dtype=torch.float64)
    layer(x).sum().backward()  # converts
    optimizer.step()
    forbid_dense_work(monkeypatch)
    optimizer.zero_grad()
    C_before = layer.C.detach().clone()
    layer(x).sum().backward()
    optimizer.step()
    assert layer.C.grad is not None and not torch.equal(layer.C.detach(), C_before)


def test_the_state_dict_carries_the_kernel_length(monkeypatch):
    layer = fresh_layer()
    x = torch.randn(2, 32, 4, dtype=torch.float64)
    y = layer(x).detach()
    state = layer.state_dict()
    assert int(state["l_kernel"]) == 32
    other = fresh_layer(seed=1)
    other.load_state_dict(state)
    assert other.kernel_length == 32
    monkeypatch.setattr(S4Layer, "set_kernel_length", lambda self, L: pytest.fail("converted C~ again"))
    torch.testing.assert_close(other(x), y)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_recurrence_uses_the_true_c_behind_ctilde(bidirectional):
    layer = fresh_layer(bidirectional=bidirectional)
    x = torch.randn(2, 24, 4, dtype=torch.float64)
    y = layer(x)  # converts at 24
    assert rel_err(y, layer.step_forward(x)) < 1e-10


def test_reference_state_dict_loads_ctilde_as_is(reference):
    layer = S4Layer.from_reference_state_dict(reference["dplr_legs"]["state_dict"], backend="torch")
    assert layer.kernel_length == 64
    torch.testing.assert_close(layer.C.detach(), reference["dplr_legs"]["state_dict"]["kernel.C"])


def test_the_layer_traces_as_one_graph_once_converted():
    torch.manual_seed(0)
    layer = S4Layer(8, d_state=16, mode="dplr", backend="torch")
    x = torch.randn(2, 32, 8)
    eager = layer(x)  # the one-time conversion runs eagerly (torch.compiler.disable)
    explained = torch._dynamo.explain(layer)(x)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained.break_reasons
    torch.testing.assert_close(layer(x), eager)


def test_kernel_flops_price_the_cauchy_sums_only():
    """Per call: the Cauchy sums at L//2 + 1 nodes, linear in L (no dense (2N, 2N) work any more)."""
    layer = S4Layer(16, d_state=8, bidirectional=True)
    H, N, c = 16, 4, 2
    for L in (256, 1024):
        assert layer.kernel_flops(L) == H * 2 * N * (L // 2 + 1) * (2 * ssm.COMPLEX_MUL + 2 * (c + 1) * ssm.COMPLEX_MAC)
