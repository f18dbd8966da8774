"""Minimal reference SSM kernels: the definitions, computed naively in O(N^2 L) or O(N L).

Written to be read next to ssm.py and used as its test oracle (like state-spaces/s4's minimal S4D file):
every kernel is K_l = C A_d^l B_d (paper §3.3, Eq. 1 unrolled) with the powers A_d^l built one
multiplication at a time, and every matrix written out densely. Nothing here is fast; use ssm.py.
"""

from __future__ import annotations

import torch


def krylov(L: int, dA, dB, c):
    """K[..., l] = c . dA^l . dB by explicit powers. dA (H, M, M), dB (H, M), c (..., H, M) -> (..., H, L)."""
    x, out = dB, []
    for _ in range(L):
        out.append(torch.einsum("...hm,hm->...h", c, x))
        x = torch.einsum("hmn,hn->hm", dA, x)  # dA^{l+1} dB
    return torch.stack(out, dim=-1)


def diag_kernel(dt, A, B, C, L: int, disc: str = "zoh"):
    """Diagonal SSM kernel from its dense real-system definition.

    The conjugate-completed state [x, conj x] (size 2N) has A_full = diag(A, conj A), b = [B, conj B],
    c = [C, conj C]; K = c A_d^l b_d is then real. dt (H,), A, B (H, N), C (c, H, N) -> (c, H, L).
    """
    A_full = torch.diag_embed(torch.cat([A, A.conj()], -1))  # (H, 2N, 2N)
    b = torch.cat([B, B.conj()], -1)  # (H, 2N)
    c = torch.cat([C, C.conj()], -1)  # (c, H, 2N)
    I = torch.eye(A_full.size(-1), dtype=A.dtype)
    dtA = dt[:, None, None] * A_full
    if disc == "zoh":  # dA = e^{dt A}, dB = A^{-1} (e^{dt A} - I) B
        dA = torch.linalg.matrix_exp(dtA)
        dB = torch.linalg.solve(A_full, ((dA - I) @ b.unsqueeze(-1))).squeeze(-1)
    else:  # bilinear: (I - dt/2 A)^{-1} (I + dt/2 A), (I - dt/2 A)^{-1} dt B
        inv = torch.linalg.inv(I - dtA / 2)
        dA = inv @ (I + dtA / 2)
        dB = (inv @ (dt[:, None] * b).unsqueeze(-1)).squeeze(-1)
    return krylov(L, dA, dB, c).real


def dplr_discretized(dt, A, P, B):
    """The dense bilinear S4 system: A_full = diag(A, conj A) - p p^H, p = [P, conj P], with explicit inverses.

    dt (H,), A, P, B (H, N) -> dA (H, 2N, 2N), dB (H, 2N).
    """
    p = torch.cat([P, P.conj()], -1)  # (H, 2N)
    A_full = torch.diag_embed(torch.cat([A, A.conj()], -1)) - p[:, :, None] * p.conj()[:, None, :]
    b = torch.cat([B, B.conj()], -1)  # (H, 2N)
    I = torch.eye(A_full.size(-1), dtype=A.dtype)
    inv = torch.linalg.inv(I - dt[:, None, None] / 2 * A_full)
    dA = inv @ (I + dt[:, None, None] / 2 * A_full)  # (H, 2N, 2N)
    dB = (inv @ (dt[:, None] * b).unsqueeze(-1)).squeeze(-1)  # (H, 2N)
    return dA, dB


def dplr_kernel(dt, A, P, B, C, L: int):
    """S4 kernel from the dense definition, discretized bilinearly (dplr_discretized), powered one step at a time.

    dt (H,), A, P, B (H, N), C (c, H, N) (true C, not C~) -> (c, H, L).
    """
    dA, dB = dplr_discretized(dt, A, P, B)
    c = torch.cat([C, C.conj()], -1)  # (c, H, 2N)
    return krylov(L, dA, dB, c).real


def dplr_kernel_from_ctilde(dt, A, P, B, C_tilde, l_kernel: int, L: int):
    """S4 kernel from C~ = C (I - dA^l_kernel), what an S4 layer trains (as state-spaces/s4 does): the true C
    recovered as C~ (I - dA^l_kernel)^{-1} with an explicit inverse, then the definition above, for any L.

    dt (H,), A, P, B (H, N), C_tilde (c, H, N) -> (c, H, L).
    """
    dA, dB = dplr_discretized(dt, A, P, B)
    I = torch.eye(dA.size(-1), dtype=dA.dtype)
    power = I
    for _ in range(l_kernel):
        power = power @ dA  # dA^l_kernel, one multiplication at a time
    c_tilde = torch.cat([C_tilde, C_tilde.conj()], -1)  # (c, H, 2N)
    c = torch.einsum("chm,hmn->chn", c_tilde, torch.linalg.inv(I - power))  # (c, H, 2N) true C
    return krylov(L, dA, dB, c).real


def dlr_kernel(log_lambda, W, L: int):
    """DLR kernel K_l = Re(sum_n W_n Lambda_n^l) with Lambda^l by repeated multiplication.

    log_lambda (N,), W (c, H, N) -> (c, H, L).
    """
    lam, power, out = torch.exp(log_lambda), torch.ones_like(log_lambda), []
    for _ in range(L):
        out.append((W * power).sum(-1).real)
        power = power * lam
    return torch.stack(out, dim=-1)
