"""Kernel functions of sptune.models.ssm against the s4 reference tensors and the naive definitions."""

import logging
import math

import pytest
import torch
from conftest import rel_err

from sptune.errors import UserError
from sptune.models import ssm, ssm_minimal

TOL = 1e-4  # max |k_ours - k| / max |k| for float32 (reference README)



def reference_params(sd):
    """s4 v4 state dict -> dt (H,), A, P, B (H, N), C (c, H, N) in the s4 conventions (reference README)."""
    dt = torch.exp(sd["kernel.inv_dt"][:, 0])
    A = -torch.exp(sd["kernel.A_real"]) - 1j * sd["kernel.A_imag"]
    P = torch.view_as_complex(sd["kernel.P"])[0] if "kernel.P" in sd else None
    return dt, A, P, torch.view_as_complex(sd["kernel.B"])[0], torch.view_as_complex(sd["kernel.C"])


def random_system(H=3, N=6, channels=2, seed=0):
    """Random stable continuous system in float64: dt (H,), A, P, B (H, N), C (c, H, N)."""
    g = torch.Generator().manual_seed(seed)
    cplx = lambda *s: torch.randn(*s, dtype=torch.complex128, generator=g)
    dt = torch.exp(torch.empty(H, dtype=torch.float64).uniform_(math.log(1e-2), math.log(0.5), generator=g))
    A = -torch.rand(H, N, dtype=torch.float64, generator=g) - 0.1 + 1j * 5 * torch.randn(H, N, generator=g)
    return dt, A, cplx(H, N), cplx(H, N), cplx(channels, H, N)


# --- 1. the s4 reference -----------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["diag_diag-lin", "diag_diag-inv", "diag_legs", "diag_bidir"])
def test_diag_kernel_matches_s4_reference(reference, case):
    dt, A, _, B, C = reference_params(reference[case]["state_dict"])
    k = reference[case]["k"]  # (c, H, L)
    assert rel_err(ssm.diag_kernel(dt, A, B, C, k.size(-1), disc="zoh"), k) < TOL


def test_dplr_kernel_matches_s4_reference(reference):
    sd, k = reference["dplr_legs"]["state_dict"], reference["dplr_legs"]["k"]
    dt, A, P, B, C_tilde = reference_params(sd)
    L = k.size(-1)
    assert int(sd["kernel.l_kernel"]) == L
    # s4 stores C~ = C (I - dA^L); Alg. 1 on it directly
    assert rel_err(ssm.dplr_kernel_from_ctilde(dt, A, P, B, C_tilde, L, backend="torch"), k) < TOL
    # recover the true C = C~ (I - dA^L)^{-1} in float64, then the full kernel (which recomputes C~)
    c64 = lambda t: t.to(torch.complex128)
    dA, _ = ssm.bilinear(dt.double(), ssm.dplr_state_matrix(c64(A), c64(P)), ssm.conj_pairs(c64(B)))
    M = torch.eye(dA.size(-1), dtype=dA.dtype) - torch.linalg.matrix_power(dA, L)  # (H, 2N, 2N)
    C = torch.linalg.solve(M.mT, ssm.conj_pairs(c64(C_tilde)).unsqueeze(-1)).squeeze(-1)  # (c, H, 2N)
    N = A.size(-1)
    assert torch.allclose(C[..., N:], C[..., :N].conj(), atol=1e-10)  # still conjugate pairs
    k_ours = ssm.dplr_kernel(dt, A, P, B, C[..., :N].to(torch.complex64), L, backend="torch")
    assert rel_err(k_ours, k) < TOL


# --- 2. fast kernels vs the naive definitions (float64) -----------------------------------------------------

@pytest.mark.parametrize("disc", ["zoh", "bilinear"])
def test_diag_kernel_matches_naive_powers(disc):
    dt, A, _, B, C = random_system()
    k = ssm.diag_kernel(dt, A, B, C, 50, disc=disc)
    assert k.shape == (2, 3, 50)
    assert rel_err(k, ssm_minimal.diag_kernel(dt, A, B, C, 50, disc=disc)) < 1e-10


@pytest.mark.parametrize("L", [1, 2, 17, 64, 300])  # T = ceil(sqrt(L)) need not divide L
def test_power_chunks_cover_every_power(L):
    log_x = torch.tensor([-0.01 + 2.5j, -0.3 - 0.7j], dtype=torch.complex128)  # (2,)
    coarse, fine = ssm.power_chunks(log_x, L)  # (2, J), (2, T)
    J, T = coarse.size(-1), fine.size(-1)
    assert J * T >= L and (J - 1) * T < L  # no whole chunk past the end
    powers = (coarse.unsqueeze(-1) * fine.unsqueeze(-2)).reshape(2, -1)[:, :L]  # (2, L)
    expected = torch.exp(log_x.unsqueeze(-1) * torch.arange(L, dtype=torch.float64))  # (2, L)
    assert torch.allclose(powers, expected, rtol=1e-12, atol=0)


@pytest.mark.parametrize("L", [1, 2, 17, 300])
def test_diag_kernel_any_length_matches_naive_powers(L):
    dt, A, _, B, C = random_system(seed=L)
    k = ssm.diag_kernel(dt, A, B, C, L)
    assert k.shape == (2, 3, L)
    assert rel_err(k, ssm_minimal.diag_kernel(dt, A, B, C, L)) < 1e-10


def test_diag_kernel_gradients_match_naive_powers():
    dt, A, _, B, C = random_system()
    params = [t.clone().requires_grad_() for t in (dt, A, B, C)]
    weights = torch.randn(2, 3, 45, dtype=torch.float64)  # a generic linear functional of K
    (ssm.diag_kernel(*params, 45) * weights).sum().backward()
    fast = [p.grad for p in params]
    for p in params:
        p.grad = None
    (ssm_minimal.diag_kernel(*params, 45) * weights).sum().backward()
    for got, want in zip(fast, [p.grad for p in params]):
        assert rel_err(got, want) < 1e-10


@pytest.mark.parametrize("L", [1, 37, 64])  # odd L has no Nyquist bin, even L does
def test_dplr_kernel_matches_dense_definition(L):
    dt, A, P, B, C = random_system(seed=L)
    k = ssm.dplr_kernel(dt, A, P, B, C, L, backend="torch")
    assert k.shape == (2, 3, L)
    assert rel_err(k, ssm_minimal.dplr_kernel(dt, A, P, B, C, L)) < 1e-9


def test_dplr_kernel_hippo_legs_matches_dense_definition():
    A, P, B, _ = ssm.nplr_legs(16)  # (8,) each
    H = 4
    dt = torch.logspace(-3, -1, H, dtype=torch.float64)
    A, P, B = (t.expand(H, -1) for t in (A, P, B))
    C = torch.randn(1, H, 8, dtype=torch.complex128)
    k = ssm.dplr_kernel(dt, A, P, B, C, 128, backend="torch")
    assert rel_err(k, ssm_minimal.dplr_kernel(dt, A, P, B, C, 128)) < 1e-9


def test_dplr_closed_form_dA_is_the_bilinear_discretization():
    dt, A, P, B, _ = random_system()
    dA, _ = ssm.bilinear(dt, ssm.dplr_state_matrix(A, P), ssm.conj_pairs(B))  # two LU solves
    assert rel_err(ssm.dplr_bilinear_dA(dt, A, P), dA) < 1e-12


@pytest.mark.parametrize("L", [1, 17, 40, 64, 100, 170])  # below, at and above the trained length (40)
def test_dplr_kernel_from_trained_ctilde_matches_dense_definition(L):
    """What an S4 layer computes from its parameter C~ (at length 40): the kernel of the true C, any length."""
    dt, A, P, B, C = random_system(seed=3)
    C_tilde = ssm.ctilde_from_c(dt, A, P, C, 40)
    k = ssm.dplr_kernel_trained(dt, A, P, B, C_tilde, 40, L, "torch")
    assert k.shape == (2, 3, L)
    assert rel_err(k, ssm_minimal.dplr_kernel(dt, A, P, B, C, L)) < 1e-9
    assert rel_err(k, ssm_minimal.dplr_kernel_from_ctilde(dt, A, P, B, C_tilde, 40, L)) < 1e-9


def test_c_from_ctilde_inverts_ctilde_from_c():
    dt, A, P, _, C = random_system(seed=4)
    C_tilde = ssm.ctilde_from_c(dt, A, P, C, 37)
    assert rel_err(ssm.c_from_ctilde(dt, A, P, C_tilde, 37), C) < 1e-10
    doubled, length = ssm.double_ctilde(dt, A, P, C_tilde, 37, 100)  # 37 -> 74 -> 148
    assert length == 148 and rel_err(doubled, ssm.ctilde_from_c(dt, A, P, C, 148)) < 1e-10


def test_trained_dplr_kernel_runs_no_solve_and_no_matrix_power(monkeypatch):
    """At or below its trained length, the kernel is Alg. 1 on C~: no dense dA, no LU, no dA^L."""
    dt, A, P, B, C = random_system(seed=5)
    C_tilde = ssm.ctilde_from_c(dt, A, P, C, 64)

    def forbidden(*args, **kwargs):
        raise AssertionError("dense work in the per-call kernel")

    for name in ("solve", "matrix_power", "inv", "lu_factor"):
        monkeypatch.setattr(torch.linalg, name, forbidden)
    monkeypatch.setattr(ssm, "dplr_bilinear_dA", forbidden)
    for L in (64, 50):
        assert ssm.dplr_kernel_trained(dt, A, P, B, C_tilde, 64, L, "torch").shape == (2, 3, L)


def test_dplr_trained_on_s4_reference_ctilde_at_other_lengths(reference):
    """The reference's C~ (at l_kernel = 64) truncated to 32 and doubled to 128, against the true C's kernel."""
    sd, k = reference["dplr_legs"]["state_dict"], reference["dplr_legs"]["k"]
    dt, A, P, B, C_tilde = reference_params(sd)
    assert rel_err(ssm.dplr_kernel_trained(dt, A, P, B, C_tilde, 64, 32, "torch"), k[..., :32]) < TOL
    c64 = lambda t: t.to(torch.complex128)
    C = ssm.c_from_ctilde(dt.double(), c64(A), c64(P), c64(C_tilde), 64)  # the true C, in float64
    k128 = ssm_minimal.dplr_kernel(dt.double(), c64(A), c64(P), c64(B), C, 128)
    assert rel_err(ssm.dplr_kernel_trained(dt, A, P, B, C_tilde, 64, 128, "torch"), k128) < TOL


def test_dplr_kernel_with_zero_P_is_bilinear_diag_kernel():
    dt, A, _, B, C = random_system()
    k = ssm.dplr_kernel(dt, A, torch.zeros_like(A), B, C, 40, backend="torch")
    assert rel_err(k, ssm.diag_kernel(dt, A, B, C, 40, disc="bilinear")) < 1e-10


def test_dlr_kernel_matches_naive_loop():
    g = torch.Generator().manual_seed(0)
    re = -0.1 * torch.rand(20, dtype=torch.float64, generator=g)
    log_lambda = re + 2j * math.pi * torch.rand(20, dtype=torch.float64, generator=g)  # (N,)
    W = torch.randn(2, 3, 20, dtype=torch.complex128, generator=g)
    k = ssm.dlr_kernel(log_lambda, W, 70)
    assert k.shape == (2, 3, 70)
    assert rel_err(k, ssm_minimal.dlr_kernel(log_lambda, W, 70)) < 1e-10


def test_dlr_kernel_gradients_match_naive_loop():
    """_DLRKernel's closed-form backward equals autograd through the definition (Lambda^l by products)."""
    g = torch.Generator().manual_seed(1)
    re = (-0.1 * torch.rand(12, dtype=torch.float64, generator=g)).requires_grad_()
    im = (2 * math.pi * torch.rand(12, dtype=torch.float64, generator=g)).requires_grad_()
    W = torch.randn(2, 3, 12, dtype=torch.complex128, generator=g).requires_grad_()
    weights = torch.randn(2, 3, 41, dtype=torch.float64, generator=g)  # a generic linear functional of K
    (ssm.dlr_kernel(torch.complex(re, im), W, 41) * weights).sum().backward()
    fast = [p.grad for p in (re, im, W)]
    for p in (re, im, W):
        p.grad = None
    (ssm_minimal.dlr_kernel(torch.complex(re, im), W, 41) * weights).sum().backward()
    for got, want in zip(fast, [p.grad for p in (re, im, W)]):
        assert rel_err(got, want) < 1e-10


@pytest.mark.parametrize("channels", [1, 2])
def test_fft_conv_skip_is_kernel_tap_zero(channels):
    g = torch.Generator().manual_seed(0)
    u = torch.randn(2, 3, 16, dtype=torch.float64, generator=g)  # (B, H, L)
    k = torch.randn(channels, 3, 16, dtype=torch.float64, generator=g)  # (c, H, L)
    D = torch.randn(3, dtype=torch.float64, generator=g)  # (H,)
    assert torch.allclose(ssm.fft_conv(u, k, D), ssm.fft_conv(u, k) + D[:, None] * u, atol=1e-12)


def test_fft_conv_is_direct_convolution():
    g = torch.Generator().manual_seed(0)
    u = torch.randn(2, 3, 9, dtype=torch.float64, generator=g)  # (B, H, L)
    k = torch.randn(2, 3, 9, dtype=torch.float64, generator=g)  # (c, H, L)
    causal = torch.zeros_like(u)
    anti = torch.zeros_like(u)
    for t in range(9):
        for s in range(9):
            if s <= t:
                causal[..., t] += k[0, :, t - s] * u[..., s]
            else:  # s4 bidirectional convention: k1[j] multiplies u[t + 1 + j]
                anti[..., t] += k[1, :, s - t - 1] * u[..., s]
    assert torch.allclose(ssm.fft_conv(u, k[:1]), causal, atol=1e-12)
    assert torch.allclose(ssm.fft_conv(u, k), causal + anti, atol=1e-12)


# --- initializations -----------------------------------------------------------------------------------------

def test_nplr_legs_reconstructs_hippo_legs():
    N = 16
    A, P, B, V = ssm.nplr_legs(N, B_clip=None)  # no clipping: exact unitary equivalence
    A_legs, B_legs = ssm.hippo_legs(N)
    V_full = torch.cat([V, V.conj()], dim=-1)  # (N, N) unitary
    assert torch.allclose(V_full.conj().T @ V_full, torch.eye(N, dtype=V.dtype), atol=1e-10)
    A_full = ssm.dplr_state_matrix(A[None], P[None])[0]  # (N, N)
    assert torch.allclose(V_full @ A_full @ V_full.conj().T, A_legs.to(V.dtype), atol=1e-9)
    assert torch.allclose(V_full @ ssm.conj_pairs(B), B_legs.to(V.dtype), atol=1e-9)
    assert torch.allclose(A.real, torch.full_like(A.real, -0.5)) and (A.imag < 0).all()


def test_diag_inits():
    A, B = ssm.diag_init("diag-lin", 8)
    assert torch.allclose(A, -0.5 - 1j * math.pi * torch.arange(4, dtype=torch.float64))
    assert torch.allclose(B, torch.ones(4, dtype=B.dtype))
    A, _ = ssm.diag_init("diag-inv", 8)
    assert torch.allclose(A.imag, -8 / math.pi * (8 / (2 * torch.arange(4, dtype=torch.float64) + 1) - 1))
    A, B = ssm.diag_init("diag-legs", 8)
    A_nplr, _, B_nplr, _ = ssm.nplr_legs(8)
    assert torch.equal(A, A_nplr) and torch.equal(B, B_nplr)
    with pytest.raises(UserError):
        ssm.diag_init("diag-foo", 8)


# --- Cauchy backends -----------------------------------------------------------------------------------------

def test_backend_choice_is_logged_once(caplog):
    ssm._logged_backends.clear()
    dt, A, P, B, C = random_system()
    with caplog.at_level(logging.INFO, logger="sptune.models.ssm"):
        ssm.dplr_kernel(dt, A, P, B, C, 8, backend="torch")
        ssm.dplr_kernel(dt, A, P, B, C, 8, backend="torch")
    assert sum("Cauchy kernel backend" in r.getMessage() for r in caplog.records) == 1
    with pytest.raises(UserError):
        ssm.dplr_kernel(dt, A, P, B, C, 8, backend="cuda")


def test_keops_backend_matches_torch():
    if not ssm.HAS_KEOPS:
        with pytest.raises(UserError, match="pykeops"):
            ssm.dplr_kernel(*random_system(), 8, backend="keops")
        pytest.skip("pykeops not installed: the keops Cauchy path is not exercised")
    dt, A, P, B, C = random_system()
    k = ssm.dplr_kernel(dt, A, P, B, C, 32, backend="keops")
    assert rel_err(k, ssm.dplr_kernel(dt, A, P, B, C, 32, backend="torch")) < 1e-10
