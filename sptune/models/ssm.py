"""State space convolution kernels and their initializations (pure functions, no module state).

A linear SSM (paper §3.3, Eq. 1) x_n = A x_{n-1} + B u_n, y_n = C x_n is a convolution y = K * u with
K_l = C A^l B. This file computes K for the three parameterizations compared in §3.3:

- diag_kernel: diagonal A (S4D), discretized by ZOH or bilinear (Eq. 2.2-2.3 with P = 0).
- dplr_kernel: diagonal plus low rank A - P P^* (S4, Eq. 2.1-2.4), via the Cauchy kernel + Woodbury
  identity evaluated on the roots of unity (Gu et al. 2022, "Efficiently modeling long sequences with
  structured state spaces", Alg. 1). Alg. 1 needs C~ = C (I - dA^L), not C: an S4 layer trains C~ itself
  (dplr_kernel_trained, as state-spaces/s4 does), so its forward forms no dense matrix, solves nothing and
  takes no matrix power; dplr_kernel from the true C is the definition, for tests and conversions.
- dlr_kernel: the diagonal linear RNN of Gupta et al. 2022b (Eq. 3), x_n = Lambda x_{n-1} + 1 u_n.

Conventions (those of state-spaces/s4): complex parameters of S4/S4D hold one member of each conjugate
pair, so (H, N) complex tensors describe a real system with state size 2N. Shapes use
c = output channels (2 for bidirectional), H = model width, N = state size (pairs), L = length.
"""

from __future__ import annotations

import logging
import math

import torch

from sptune.errors import UserError
from sptune.models import backend_probe
from sptune.models.cauchy import CAUCHY, HAS_KEOPS, conj_pairs

log = logging.getLogger(__name__)

_logged_backends: set[str] = set()  # the backend choices already logged: one line each per process





# ----------------------------------------------------------------------------------------------------
# Initializations (S4: Gu et al. 2022a; S4D: Gu et al. 2022b "On the parameterization and initialization
# of diagonal state space models"). All return one member of each conjugate pair, with Im(A) <= 0.


def hippo_legs(N: int):
    """Dense HiPPO-LegS matrices (float64): A (N, N), B (N,).

    A_nk = -sqrt(2n+1) sqrt(2k+1) if n > k, -(n+1) if n = k, 0 if n < k;  B_n = sqrt(2n+1).
    """
    q = torch.arange(N, dtype=torch.float64)
    r = torch.sqrt(2 * q + 1)
    A = -torch.tril(r[:, None] * r[None, :], diagonal=-1) - torch.diag(q + 1)  # (N, N)
    return A, r.clone()


def nplr_legs(N: int, B_clip: float | None = 2.0):
    """Normal plus low-rank form of HiPPO-LegS (S4 §3.1): A_legs = V (Lambda - P P^*) V^*.

    A_legs + p p^T (p_n = sqrt(n + 1/2)) is -1/2 I plus a skew-symmetric matrix, so it is unitarily
    diagonalizable; like S4 we get the imaginary parts from `eigh` of the Hermitian matrix -i * skew and keep
    the half with negative imaginary part (the other half are their conjugates).
    B_clip clips Im(V^* B) to [-B_clip, B_clip] as S4 does ("can help with stability"); None keeps the exact
    unitary equivalence.

    Returns complex128: A (N/2,), P (N/2,), B (N/2,), V (N, N/2).
    """
    assert N % 2 == 0, "state size must be even (conjugate pairs)"
    A_legs, B_legs = hippo_legs(N)
    p = torch.sqrt(torch.arange(N, dtype=torch.float64) + 0.5)  # (N,)
    normal = A_legs + p[:, None] * p[None, :]  # (N, N) = -1/2 I + skew
    re = torch.diagonal(normal).mean()  # -1/2
    skew = normal - re * torch.eye(N, dtype=torch.float64)
    im, V = torch.linalg.eigh(-1j * skew.to(torch.complex128))  # skew V = i V diag(im); im ascending
    V = V[:, : N // 2]  # (N, N/2) eigenvectors with Im(lambda) < 0
    A = re + 1j * im[: N // 2]  # (N/2,)
    B = V.conj().T @ B_legs.to(V)  # (N/2,) V^* B
    P = V.conj().T @ p.to(V)  # (N/2,) V^* p
    if B_clip is not None:
        B = B.real + 1j * B.imag.clamp(-B_clip, B_clip)
    return A, P, B, V


def diag_init(kind: str, N: int):
    """Diagonal (A, B) inits of S4D, one member of each conjugate pair: A (N/2,), B (N/2,) complex128.

    diag-lin:  A_n = -1/2 - i pi n                       (S4D-Lin; conjugate of -1/2 + i pi n, same kernel)
    diag-inv:  A_n = -1/2 - i N/pi (N/(2n+1) - 1)        (S4D-Inv)
    diag-legs: diagonal part Lambda of the NPLR LegS form, B = V^* B_legs  (S4D-LegS)
    """
    n = torch.arange(N // 2, dtype=torch.float64)
    if kind == "diag-legs":
        A, _, B, _ = nplr_legs(N)
        return A, B
    if kind == "diag-lin":
        imag = math.pi * n
    elif kind == "diag-inv":
        imag = N / math.pi * (N / (2 * n + 1) - 1)
    else:
        raise UserError(f"unknown diagonal init {kind!r}; expected diag-lin, diag-inv or diag-legs")
    A = -0.5 - 1j * imag
    B = torch.ones(N // 2, dtype=torch.complex128)
    return A, B


def log_uniform(shape, lo: float, hi: float):
    """Samples exp(U[log lo, log hi]): the S4 / DLR timescale init (dt in [dt_min, dt_max])."""
    return torch.exp(torch.rand(shape, dtype=torch.float64) * (math.log(hi) - math.log(lo)) + math.log(lo))


# ----------------------------------------------------------------------------------------------------
# Discretization


def discretize_diag(dt, A, B, disc: str = "zoh"):
    """Discretize a diagonal continuous SSM with step dt: dt (H,), A (H, N), B (H, N) -> dA, dB (H, N).

    zoh:      dA = exp(dt A),                     dB = (exp(dt A) - 1) / A * B
    bilinear: dA = (1 + dt A/2) / (1 - dt A/2),   dB = dt B / (1 - dt A/2)     (Eq. 2.2-2.3)
    """
    dtA = dt[:, None] * A  # (H, N)
    if disc == "zoh":
        dA = torch.exp(dtA)
        return dA, (dA - 1) / A * B
    if disc == "bilinear":
        return (1 + dtA / 2) / (1 - dtA / 2), dt[:, None] * B / (1 - dtA / 2)
    raise UserError(f"unknown discretization {disc!r}; expected 'zoh' or 'bilinear'")


def dplr_state_matrix(A, P):
    """Dense conjugate-completed DPLR matrix diag(A, conj A) - p p^H with p = [P, conj P].

    A, P (H, N) -> (H, 2N, 2N). Eq. 2.1 with Q = P (S4's NPLR form of HiPPO).
    """
    p = conj_pairs(P)  # (H, 2N)
    return torch.diag_embed(conj_pairs(A)) - p[:, :, None] * p.conj()[:, None, :]


def bilinear(dt, A, B):
    """Bilinear (Tustin) discretization of dense systems (Eq. 2.2-2.3).

    dt (H,), A (H, M, M), B (H, M) -> dA = (I - dt/2 A)^{-1}(I + dt/2 A) (H, M, M), dB = (I - dt/2 A)^{-1} dt B (H, M).
    """
    I = torch.eye(A.size(-1), dtype=A.dtype, device=A.device)
    half = (dt / 2)[:, None, None] * A  # (H, M, M)
    dA = torch.linalg.solve(I - half, I + half)
    dB = torch.linalg.solve(I - half, (dt[:, None] * B).unsqueeze(-1)).squeeze(-1)
    return dA, dB


def dplr_bilinear_dA(dt, A, P):
    """The bilinear dA of the conjugate-completed DPLR matrix, in closed form (no LU, no solve).

    With Lambda = diag(A, conj A), p = [P, conj P] and d = 1 - dt/2 Lambda (diagonal), Sherman-Morrison gives
        (I - dt/2 (Lambda - p p^*))^{-1} = D^{-1} - s q r^T,  q = p / d,  r = conj(p) / d,
        s = (dt/2) / (1 + (dt/2) p^* D^{-1} p),
    and dA = that inverse times (I + dt/2 (Lambda - p p^*)). A dense (H, 2N, 2N) result: used where C~ is set
    up or extended (once per layer, not per forward) and by the recurrence that tests the convolution.

    dt (H,), A, P (H, N) -> dA (H, 2N, 2N).
    """
    lam, p = conj_pairs(A), conj_pairs(P)  # (H, 2N)
    half = (dt / 2)[:, None]  # (H, 1)
    d = 1 - half * lam  # (H, 2N) diagonal of D
    q, r = p / d, p.conj() / d  # (H, 2N)
    s = half / (1 + half * (p.conj() * q).sum(-1, keepdim=True))  # (H, 1)
    inv = torch.diag_embed(1 / d) - s[..., None] * q[:, :, None] * r[:, None, :]  # (H, 2N, 2N)
    plus = torch.diag_embed(1 + half * lam) - half[..., None] * p[:, :, None] * p.conj()[:, None, :]
    return inv @ plus  # (H, 2N, 2N)


# ----------------------------------------------------------------------------------------------------
# Kernels


def chunk_shape(L: int) -> tuple[int, int]:
    """(J, T) with l = j T + t for l < L: T = ceil(sqrt(L)) fine powers, J = ceil(L / T) coarse ones."""
    T = math.isqrt(L - 1) + 1 if L > 1 else 1
    return -(-L // T), T


def power_chunks(log_x, L: int):
    """x^l for l < L split as x^(jT + t) = x^(jT) x^t: coarse (..., J) and fine (..., T) powers, J T >= L.

    log_x (...) complex -> coarse (..., J), fine (..., T) with T = ceil(sqrt(L)), J = ceil(L / T).
    Every power is exp(l log x) of an exact multiple l (no error accumulates along l, unlike repeated
    multiplication), but only J + T ~ 2 sqrt(L) exponentials are taken per x instead of L: the (.., L) table
    is never exponentiated element by element.
    """
    J, T = chunk_shape(L)
    step = torch.arange(max(J, T), device=log_x.device, dtype=log_x.real.dtype)
    coarse = torch.exp(log_x.unsqueeze(-1) * (T * step[:J]))  # (..., J)
    fine = torch.exp(log_x.unsqueeze(-1) * step[:T])  # (..., T)
    return coarse, fine


def diag_kernel(dt, A, B, C, L: int, disc: str = "zoh"):
    """S4D kernel K[c, h, l] = 2 Re(sum_n C[c,h,n] dB[h,n] dA[h,n]^l)  (Eq. 2.4 with diagonal A).

    dt (H,) real, A, B (H, N) complex, C (c, H, N) complex -> K (c, H, L) real.
    The factor 2 Re accounts for the conjugate member of each pair. dA^l = exp(l log dA): for ZOH
    log dA = dt A exactly; for bilinear any branch of the log gives the same integer powers.

    With l = jT + t (power_chunks), K[c, h, jT + t] = 2 Re sum_n (v dA^(jT))[c,h,n,j] dA^t[h,n,t], v = C dB:
    per channel h one real matmul (c J, 2N) @ (2N, T) over [Re, -Im] and [Re; Im] (only the real part is
    needed, so half of a complex product), and no (H, N, L) tensor is ever formed.
    """
    dA, dB = discretize_diag(dt, A, B, disc)  # (H, N)
    log_dA = dt[:, None] * A if disc == "zoh" else torch.log(dA)
    coarse, fine = power_chunks(log_dA, L)  # (H, N, J), (H, N, T)
    left = (2 * C * dB).unsqueeze(-1) * coarse  # (c, H, N, J): 2 v dA^(jT)
    left = torch.cat([left.real, -left.imag], dim=-2)  # (c, H, 2N, J)
    right = torch.cat([fine.real, fine.imag], dim=-2)  # (H, 2N, T)
    k = torch.einsum("chnj,hnt->chjt", left, right)  # (c, H, J, T)
    return k.reshape(*k.shape[:2], -1)[..., :L]  # (c, H, L)


def dlr_power_table(log_lambda, L: int):
    """[Re Lambda^l; Im Lambda^l] (2N, L) real from log_lambda (N,) complex, by outer products of power_chunks.

    Lambda^(jT + t) = c_j f_t (complex product): Re = Re c Re f - Im c Im f, Im = Im c Re f + Re c Im f,
    written as one batched (J, 2) @ (2, T) product per row, so each table entry is written once and no
    exponential is taken per entry.
    """
    coarse, fine = power_chunks(log_lambda, L)  # (N, J), (N, T)
    rows = torch.cat([torch.stack([coarse.real, -coarse.imag], dim=-1),
                      torch.stack([coarse.imag, coarse.real], dim=-1)], dim=0)  # (2N, J, 2)
    cols = torch.stack([fine.real, fine.imag], dim=-2).repeat(2, 1, 1)  # (2N, 2, T)
    table = torch.bmm(rows, cols)  # (2N, J, T)
    return table.reshape(table.size(0), -1)[:, :L]  # (2N, L)


class _DLRKernel(torch.autograd.Function):
    """K = W_cat @ P with W_cat = [Re W, -Im W] (c, H, 2N) and P = [Re Lambda^l; Im Lambda^l] (2N, L).

    Autograd through the power table would keep and revisit every elementwise step of its construction;
    the gradient of log Lambda = alpha + i beta has a closed form that needs no pass over (2N, L) at all.
    d Lambda^l / d alpha = l Lambda^l and d Lambda^l / d beta = i l Lambda^l give, with G = dL/dK and
    M = (l G) @ P^T (c H, 2N) with halves M_re, M_im along its last axis (likewise w_re, w_im of W_cat):
        dL/d alpha_n = sum_ch (w_re M_re + w_im M_im)[ch, n]
        dL/d beta_n  = sum_ch (w_im M_re - w_re M_im)[ch, n]
    so the backward is one matmul [G; l G] @ P^T, the same flops as dL/dW plus dL/dP.
    """

    @staticmethod
    def forward(ctx, log_lambda_re, log_lambda_im, W_cat, L: int):
        table = dlr_power_table(torch.complex(log_lambda_re, log_lambda_im), L)  # (2N, L)
        ctx.save_for_backward(table, W_cat)
        return W_cat @ table  # (c, H, 2N) @ (2N, L) -> (c, H, L)

    @staticmethod
    def backward(ctx, grad_k):  # grad_k (c, H, L)
        table, W_cat = ctx.saved_tensors
        L = table.size(-1)
        l = torch.arange(L, device=table.device, dtype=table.dtype)
        grad_k = grad_k.reshape(-1, L).to(table.dtype)  # (c H, L)
        both = torch.cat([grad_k, grad_k * l], dim=0) @ table.T  # (2 c H, 2N): [G; l G] P^T
        grad_W, M = both.chunk(2, dim=0)  # (c H, 2N) each
        w_re, w_im = W_cat.reshape(-1, W_cat.size(-1)).chunk(2, dim=-1)  # (c H, N) each
        M_re, M_im = M.chunk(2, dim=-1)  # (c H, N) each
        grad_re = (w_re * M_re + w_im * M_im).sum(0)  # (N,)
        grad_im = (w_im * M_re - w_re * M_im).sum(0)  # (N,)
        return grad_re, grad_im, grad_W.reshape(W_cat.shape), None


def dlr_kernel(log_lambda, W, L: int):
    """DLR kernel (Eq. 3 unrolled): K[c, h, l] = Re(sum_n W[c,h,n] Lambda_n^l), Lambda_n = exp(log_lambda_n).

    log_lambda (N,) complex, W (c, H, N) complex -> K (c, H, L) real. Lambda is shared across H (as in
    ag1988/dlr), so the kernel is one matmul (c H, N) @ (N, L). Only its real part is needed: Re(W P) =
    [Re W, -Im W] @ [Re P; Im P], one real matmul with half the flops of the complex one.
    """
    W_cat = torch.cat([W.real, -W.imag], dim=-1)  # (c, H, 2N)
    return _DLRKernel.apply(log_lambda.real, log_lambda.imag, W_cat, L)  # (c, H, L)


# ----------------------------------------------------------------------------------------------------
# FLOPs of kernel generation (forward, real flops), priced here because they are complex arithmetic that
# torch's FlopCounterMode prices as real (matmuls) or not at all (elementwise ops, pykeops);
# sptune.flops adds them to the counted FLOPs (the real matmuls of the diagonal and DLR kernels are
# counted by the counter itself, forward and backward). A complex multiply is 4 real multiplies + 2 adds,
# a complex multiply-accumulate one more complex add; a complex exponential or reciprocal is priced as one
# complex multiply (what x^l = x^(l-1) x or conj(z) / |z|^2 cost). The kernels' FFTs are FFT ops: the counter
# counts those (sptune.flops). Terms of order H N (discretization) or c H L (Woodbury) are left out.
COMPLEX_MUL = 6
COMPLEX_MAC = 8


def diag_kernel_flops(channels: int, H: int, N: int, L: int) -> float:
    """diag_kernel (S4D), what the counter does not see: the J + T chunk powers exp(l dt A) per (h, n) and
    the products 2 C dB dA^(jT) for each channel. Its contraction is a real bmm, which the counter counts.
    N = stored conjugate pairs."""
    J, T = chunk_shape(L)
    return H * N * (J + T + channels * J) * COMPLEX_MUL


def dlr_kernel_flops(channels: int, H: int, N: int, L: int) -> float:
    """dlr_kernel, what the counter does not see: the J + T chunk powers of each Lambda_n. The power table
    (a bmm of the chunks) and the matmul [Re W, -Im W] @ [Re P; Im P] are real and counted."""
    J, T = chunk_shape(L)
    return COMPLEX_MUL * N * (J + T)


def dplr_kernel_flops(channels: int, H: int, N: int, L: int) -> float:
    """dplr_kernel_trained (what an S4 layer runs each forward, C~ trained at its kernel length L), per channel h
    with M = 2N poles (N stored pairs): the Cauchy sums of S4 Alg. 1 at the L//2 + 1 roots of unity, per
    (pole, node) the reciprocal 1 / (a - b w) (2 complex multiplies) and 2 (channels + 1) multiply-accumulates
    (the Woodbury terms' rows C~ and p^* against the columns B and p). No dense (2N, 2N) work: C~ is the
    parameter, so neither dA nor dA^L is formed (the one-time conversion C -> C~ at a layer's first forward is
    not a per-call cost). The inverse real FFT is counted by the counter."""
    M, F = 2 * N, L // 2 + 1
    return H * M * F * (2 * COMPLEX_MUL + 2 * (channels + 1) * COMPLEX_MAC)


def resolve_backend(backend: str) -> str:
    """'auto' | 'keops' | 'torch' -> the Cauchy backend used, logged once with the reason.

    keops needs pykeops installed and its probe passed (backend_probe: a child process, once per node and
    versions): auto falls back to torch otherwise, an explicit keops is a UserError.
    """
    if backend not in ("auto", "keops", "torch"):
        raise UserError(f"unknown Cauchy backend {backend!r}; expected 'auto', 'keops' or 'torch'")
    if backend == "torch":
        return _log_choice(logging.INFO, "torch", "requested")
    if not HAS_KEOPS:
        if backend == "keops":
            raise UserError("model.kernel_backend=keops but pykeops is not installed; "
                            "pip install 'sptune[keops]', or use model.kernel_backend=torch or auto")
        return _log_choice(logging.INFO, "torch", "pykeops not installed")
    verdict = backend_probe.probe("keops")
    if verdict.ok:
        return _log_choice(logging.INFO, "keops", "pykeops probe passed")
    if backend == "keops":
        raise UserError(f"model.kernel_backend=keops but the pykeops probe {verdict.detail}; "
                        "use model.kernel_backend=torch or auto")
    return _log_choice(logging.WARNING, "torch", f"pykeops probe {verdict.detail}; verdict cached in "
                                                 f"{backend_probe.cache_path()}, `sptune doctor` probes again")


def _log_choice(level: int, backend: str, why: str) -> str:
    message = f"S4 Cauchy kernel backend: {backend} ({why})"
    if message not in _logged_backends:
        _logged_backends.add(message)
        log.log(level, message)
    return backend


def dplr_kernel_from_ctilde(dt, A, P, B, C_tilde, L: int, backend: str = "auto"):
    """S4 Alg. 1: the DPLR kernel of length L from C~ = C (I - dA^L); `backend` is resolved (and logged) here.

    dt (H,), A, P, B (H, N), C_tilde (c, H, N) complex -> K (c, H, L) real.
    """
    return cauchy_kernel(dt, A, P, B, C_tilde, L, resolve_backend(backend))


def cauchy_kernel(dt, A, P, B, C_tilde, L: int, backend: str):
    """S4 Alg. 1 with an already resolved Cauchy backend: O(N L) Cauchy sums + one FFT, no dense matrices.

    The truncated generating function of K evaluated at the L-th roots of unity w_k = exp(-2 pi i k / L)
    is K^(w) = C~ (I - w dA)^{-1} dB (S4 Lemma C.2). With the bilinear dA, dB (Eq. 2.2-2.3):
        (I - w dA)^{-1} dB = M^{-1} dt B,  M = a I - b dt (Lambda - p p^*),  a = 1 - w,  b = (1 + w)/2.
    Woodbury with R = (a I - b dt Lambda)^{-1} (diagonal, so every term is a Cauchy sum):
        K^(w) = dt [k00 - b dt k01 k10 / (1 + b dt k11)],
        k00 = C~ R B,  k01 = C~ R p,  k10 = p^* R B,  k11 = p^* R p.
    S4 writes the same thing as 2/(1+w) times a Cauchy sum at z = 2(1-w)/(1+w); keeping (a, b) separate
    avoids the 0 * inf at the Nyquist node w = -1. K is the inverse real FFT of K^. No logging and no host
    sync: a layer's forward calls this (compiled as one graph).

    dt (H,), A, P, B (H, N), C_tilde (c, H, N) complex -> K (c, H, L) real.
    """
    k = torch.arange(L // 2 + 1, device=A.device, dtype=torch.float64)
    omega = torch.polar(torch.ones_like(k), -2 * math.pi * k / L).to(A.dtype)  # (L//2+1,) roots of unity
    a, b = 1 - omega, (1 + omega) / 2
    left = torch.cat([C_tilde, P.conj().unsqueeze(0)], dim=0)  # (c+1, H, N): rows C~ and p^*
    right = torch.stack([B, P], dim=0)  # (2, H, N): columns B and p
    v = left.unsqueeze(1) * right.unsqueeze(0)  # (c+1, 2, H, N)
    w = dt[:, None] * A  # (H, N)
    r = CAUCHY[backend](v, a, b, w)  # (c+1, 2, H, L//2+1)
    k00, k01 = r[:-1, 0], r[:-1, 1]  # (c, H, L//2+1)
    k10, k11 = r[-1, 0], r[-1, 1]  # (H, L//2+1)
    bdt = b * dt[:, None]  # (H, L//2+1)
    k_f = dt[:, None] * (k00 - bdt * k01 * k10 / (1 + bdt * k11))  # (c, H, L//2+1)
    return torch.fft.irfft(k_f, n=L)  # (c, H, L)


def ctilde_from_c(dt, A, P, C, L: int):
    """C~ = C (I - dA^L) from the true output vector C: one dense dA (closed form) and dA^L by repeated squaring
    (log2 L batched complex matmuls). What a layer does once, at its first forward; never per call.

    dt (H,), A, P (H, N), C (c, H, N) -> C~ (c, H, N), still one member of each conjugate pair.
    """
    N = A.size(-1)
    dA_L = torch.linalg.matrix_power(dplr_bilinear_dA(dt, A, P), L)  # (H, 2N, 2N)
    c = conj_pairs(C)  # (c, H, 2N)
    return (c - torch.einsum("chm,hmn->chn", c, dA_L))[..., :N]  # conjugate-symmetric: keep the first half


def double_ctilde(dt, A, P, C_tilde, l_kernel: int, L: int):
    """C~ at length l_kernel -> (C~ at l_kernel 2^m >= L, l_kernel 2^m), by C (I - dA^2l) = C (I - dA^l)(I + dA^l):
    no inverse of (I - dA^l) (ill-conditioned when dt l is small). For a kernel asked longer than the one
    trained (an analysis at another length); the training step never takes this path.

    dt (H,), A, P (H, N), C_tilde (c, H, N) -> ((c, H, N), int).
    """
    N = A.size(-1)
    power = torch.linalg.matrix_power(dplr_bilinear_dA(dt, A, P), l_kernel)  # (H, 2N, 2N) dA^l
    c = conj_pairs(C_tilde)  # (c, H, 2N)
    while l_kernel < L:
        c = c + torch.einsum("chm,hmn->chn", c, power)  # C~ (I + dA^l)
        power, l_kernel = power @ power, 2 * l_kernel
    return c[..., :N], l_kernel


def c_from_ctilde(dt, A, P, C_tilde, L: int):
    """The true C = C~ (I - dA^L)^{-1} (a dense solve): for the step-by-step recurrence, which needs C itself.

    dt (H,), A, P (H, N), C_tilde (c, H, N) -> C (c, H, N).
    """
    N = A.size(-1)
    dA = dplr_bilinear_dA(dt, A, P)  # (H, 2N, 2N)
    M = torch.eye(dA.size(-1), dtype=dA.dtype, device=dA.device) - torch.linalg.matrix_power(dA, L)
    c_tilde = conj_pairs(C_tilde)  # (c, H, 2N)
    C = torch.linalg.solve(M.mT, c_tilde.unsqueeze(-1)).squeeze(-1)  # c~ = c M  <=>  M^T c^T = c~^T
    return C[..., :N]


def dplr_kernel_trained(dt, A, P, B, C_tilde, l_kernel: int, L: int, backend: str):
    """An S4 layer's kernel (c, H, L) from its trained C~ = C (I - dA^l_kernel), backend already resolved.

    L <= l_kernel (the training step: L == l_kernel): Alg. 1 at l_kernel, truncated (K_l does not depend on the
    length it is computed for), so no solve and no matrix power. L > l_kernel: C~ doubled first (double_ctilde).
    """
    if L > l_kernel:
        C_tilde, l_kernel = double_ctilde(dt, A, P, C_tilde, l_kernel, L)
    k = cauchy_kernel(dt, A, P, B, C_tilde, l_kernel, backend)  # (c, H, l_kernel)
    return k if l_kernel == L else k[..., :L]


def dplr_kernel(dt, A, P, B, C, L: int, backend: str = "auto"):
    """S4 (NPLR / DPLR) kernel K[c, h, l] = c . dA^l . dB (Eq. 2.4) from the TRUE output vector C, dA, dB the
    bilinear discretization of A_full = diag(A, conj A) - p p^H, p = [P, conj P], b = [B, conj B],
    c = [C, conj C]: C~ = C (I - dA^L) (ctilde_from_c), then Alg. 1. The definition, for tests and conversions;
    an S4 layer trains C~ itself and calls dplr_kernel_trained, as state-spaces/s4 does.

    dt (H,) real, A, P, B (H, N) complex, C (c, H, N) complex -> K (c, H, L) real.
    """
    backend = resolve_backend(backend)
    return cauchy_kernel(dt, A, P, B, ctilde_from_c(dt, A, P, C, L), L, backend)


def fft_conv(u, k, D=None):
    """Convolve u (B, H, L) with kernel k (c, H, L): c = 1 causal, c = 2 bidirectional -> (B, H, L).
    D (H,), if given, adds the skip D u (Eq. 1's D term) as the kernel's tap 0: (K + D delta) * u = K * u + D u.

    Linear (not circular) convolution via FFT of length 2L. Bidirectional exactly as S4: the second
    kernel is flipped to the end of a length-2L circular kernel, pad(k0, (0, L)) + pad(flip(k1), (L, 0)),
    so k1[j] multiplies u[t + 1 + j] (S4's deliberate one-step offset in the reverse direction); that sum
    of two disjoint pads is the concatenation [k0, flip(k1)].
    """
    L = u.size(-1)
    k0 = k[0]  # (H, L)
    if D is not None:
        k0 = torch.cat([k0[:, :1] + D[:, None], k0[:, 1:]], dim=-1)  # (H, L)
    if k.size(0) == 2:
        k0 = torch.cat([k0, k[1].flip(-1)], dim=-1)  # (H, 2L)
    # FFTs have no half-precision CPU kernels: under bf16 autocast they run in fp32 (fp64 stays fp64).
    work = torch.promote_types(torch.promote_types(u.dtype, k0.dtype), torch.float32)
    k_f = torch.fft.rfft(k0.to(work), n=2 * L)  # (H, L+1)
    u_f = torch.fft.rfft(u.to(work), n=2 * L)  # (B, H, L+1)
    return torch.fft.irfft(u_f * k_f, n=2 * L)[..., :L].to(u.dtype)  # (B, H, L)
