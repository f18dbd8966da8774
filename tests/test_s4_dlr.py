"""S4Layer and DLRLayer: s4 reference block, conv vs recurrence, causality, random init, optimizer tags."""


import pytest
import torch
from conftest import rel_err

from sptune.errors import UserError
from sptune.models.dlr import DLRLayer
from sptune.models.s4 import S4Layer

TOL = 1e-4
S4_MODES = ["dplr", "diag-lin", "diag-inv", "diag-legs"]



def make_layer(kind, bidirectional, init="structured", mode="dplr"):
    torch.manual_seed(0)
    if kind == "dlr":
        return DLRLayer(4, d_state=32, bidirectional=bidirectional, init=init).double()
    return S4Layer(4, d_state=16, mode=mode, bidirectional=bidirectional, init=init).double()


LAYERS = [("s4", m) for m in S4_MODES] + [("dlr", None)]


# --- s4 reference --------------------------------------------------------------------------------------------

def test_s4block_matches_reference(reference):
    case = reference["s4block_dplr_bidir"]
    assert set(case["state_dict"]) == {
        "layer.D", "layer.kernel.inv_dt", "layer.kernel.C", "layer.kernel.B", "layer.kernel.A_real",
        "layer.kernel.A_imag", "layer.kernel.P", "layer.kernel.l_kernel", "output_linear.0.weight",
        "output_linear.0.bias"}
    layer = S4Layer.from_reference_state_dict(case["state_dict"], backend="torch").eval()
    assert layer.mode == "dplr" and layer.bidirectional
    with torch.no_grad():
        y = layer(case["x"].transpose(1, 2)).transpose(1, 2)  # reference x, y are (B, H, L)
    assert rel_err(y, case["y"]) < TOL


@pytest.mark.parametrize("case", ["dplr_legs", "diag_diag-lin", "diag_diag-inv", "diag_legs", "diag_bidir"])
def test_converted_layer_kernel_matches_reference(reference, case):
    layer = S4Layer.from_reference_state_dict(reference[case]["state_dict"], backend="torch")
    k = reference[case]["k"]
    with torch.no_grad():
        assert rel_err(layer.kernel(k.size(-1)), k) < TOL


# --- convolution == recurrence -------------------------------------------------------------------------------

@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("kind,mode", LAYERS)
def test_conv_matches_recurrence(kind, mode, bidirectional):
    layer = make_layer(kind, bidirectional, mode=mode)
    x = torch.randn(2, 24, 4, dtype=torch.float64)
    y = layer(x)
    assert y.shape == x.shape
    assert rel_err(y, layer.step_forward(x)) < 1e-10


# --- causality -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,mode", LAYERS)
def test_unidirectional_is_causal(kind, mode):
    """d y_t / d x_s = 0 for s > t. The FFT convolution leaves float64 round-off (~1e-17) there, so "zero"
    is checked relative to the past gradient; a real leak would be O(1)."""
    layer = make_layer(kind, bidirectional=False, mode=mode)
    x = torch.randn(1, 32, 4, dtype=torch.float64, requires_grad=True)
    y = layer(x)
    for t in (0, 13, 30):
        (g,) = torch.autograd.grad(y[0, t].sum(), x, retain_graph=True)
        assert g[0, t + 1:].abs().max() <= 1e-12 * g[0, : t + 1].abs().max()
    # and the bidirectional layer really does look ahead
    layer = make_layer(kind, bidirectional=True, mode=mode)
    (g,) = torch.autograd.grad(layer(x)[0, 13].sum(), x)
    assert g[0, 14:].abs().max() > 1e-3 * g[0, :14].abs().max()


# --- random init and optimizer tags --------------------------------------------------------------------------

@pytest.mark.parametrize("kind,mode", LAYERS)
def test_random_init_kernel_is_finite_and_bounded(kind, mode):
    torch.manual_seed(0)
    layer = (DLRLayer(8, d_state=64, init="random") if kind == "dlr"
             else S4Layer(8, d_state=16, mode=mode, init="random"))
    with torch.no_grad():
        k = layer.kernel(2048)
        y = layer(torch.randn(2, 256, 8))
    assert k.shape == (2, 8, 2048)
    assert torch.isfinite(k).all() and torch.isfinite(y).all()
    assert k.abs().max() < 100  # no growth: |k_l| stays bounded
    assert k[..., -256:].abs().max() <= k.abs().max()


def test_random_init_draws_ssm_params_from_small_normal():
    torch.manual_seed(0)
    layer = S4Layer(64, d_state=64, mode="dplr", init="random")
    for name in ("log_dt", "A_real", "A_imag", "B", "P", "C", "D"):
        p = getattr(layer, name)
        assert 0.07 < p.std().item() < 0.13 and abs(p.mean().item()) < 0.03, name
    torch.manual_seed(0)
    layer = DLRLayer(64, d_state=256, init="random")
    for name in ("log_lambda_re_sqrt", "log_lambda_im", "W", "D"):
        assert 0.07 < getattr(layer, name).std().item() < 0.13, name


@pytest.mark.parametrize("kind,mode", LAYERS)
def test_ssm_params_carry_optim_tags(kind, mode):
    layer = make_layer(kind, bidirectional=True, mode=mode)
    # s4: dt, A, B (and P) at lr 1e-3 (state-spaces/s4 lr.{dt,A,B}); DLR: Lambda and W at lr 1e-4 (ag1988/dlr)
    ssm_names = ({"log_lambda_re_sqrt", "log_lambda_im", "W"} if kind == "dlr"
                 else {"log_dt", "A_real", "A_imag", "B"} | ({"P"} if mode == "dplr" else set()))
    for name, p in layer.named_parameters():
        if name in ssm_names:
            assert p._optim == {"lr": 1e-4 if kind == "dlr" else 1e-3, "weight_decay": 0.0}, name
        else:
            assert not hasattr(p, "_optim"), name
    assert {n for n, _ in layer.named_parameters()} >= ssm_names | {"D", "output_linear.weight"}


def test_ssm_lr_none_keeps_zero_weight_decay():
    layer = S4Layer(4, d_state=8, ssm_lr=None)
    assert layer.A_real._optim == {"weight_decay": 0.0}


def test_structured_inits_and_shapes():
    layer = S4Layer(6, d_state=16, mode="diag-lin", bidirectional=False)
    dt, A, P, B, C = layer.ssm_params()
    assert P is None and C.shape == (1, 6, 8) and layer.kernel(10).shape == (1, 6, 10)
    assert ((dt >= 1e-3 - 1e-9) & (dt <= 1e-1 + 1e-9)).all()
    assert torch.allclose(A.real, torch.full_like(A.real, -0.5))
    layer = DLRLayer(6, d_state=32)
    log_lambda, W = layer.ssm_params()
    assert W.shape == (2, 6, 32) and (log_lambda.real < 0).all() and (log_lambda.real > -0.051).all()
    # model.dt_min / dt_max reach both layers: log Re(Lambda) = -dt/2 (DLR), dt = exp(log_dt) (S4)
    log_lambda, _ = DLRLayer(6, d_state=32, dt_min=0.01, dt_max=0.02).ssm_params()
    assert ((log_lambda.real <= -0.005 + 1e-7) & (log_lambda.real >= -0.01 - 1e-7)).all()
    dt = S4Layer(6, d_state=16, dt_min=1e-4, dt_max=2e-4).ssm_params()[0]
    assert ((dt >= 1e-4 - 1e-9) & (dt <= 2e-4 + 1e-9)).all()
    with pytest.raises(UserError):
        S4Layer(4, mode="nplr")


@pytest.mark.parametrize("name", ["s4", "dlr"])
def test_config_dt_range_and_ssm_lr_reach_the_layers(name):
    from sptune import config
    from sptune.build import build_task_model
    from sptune.registry import get_task

    cfg = config.load(None, [f"model.name={name}", "model.d_model=4", "model.n_layers=1", "model.d_ff=0",
                             "model.d_state=8", "model.dt_min=0.01", "model.dt_max=0.02", "model.ssm_lr=3e-4"])
    layer = next(m for m in build_task_model(cfg.model, get_task(cfg.task.name)).modules()
                 if isinstance(m, (S4Layer, DLRLayer)))
    if name == "s4":
        dt, tagged = layer.ssm_params()[0], layer.log_dt
    else:
        dt, tagged = -2 * layer.ssm_params()[0].real, layer.W  # log Re(Lambda) = -dt / 2
    assert ((dt >= 0.01 - 1e-7) & (dt <= 0.02 + 1e-7)).all()
    assert tagged._optim == {"lr": 3e-4, "weight_decay": 0.0}


@pytest.mark.parametrize("kind,mode", LAYERS)
def test_kernel_is_fp32_under_bf16_autocast(kind, mode, monkeypatch):
    """The kernels' real matmuls would run in bf16 under autocast; forward computes them in fp32."""
    torch.manual_seed(0)
    layer = DLRLayer(4, d_state=32) if kind == "dlr" else S4Layer(4, d_state=16, mode=mode)
    dtypes, kernel = [], layer.kernel

    def recording_kernel(L):
        k = kernel(L)
        dtypes.append(k.dtype)
        return k

    monkeypatch.setattr(layer, "kernel", recording_kernel)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        layer(torch.randn(2, 24, 4)).float().sum().backward()  # backward through the kernel works too
    assert dtypes == [torch.float32]
