"""The Cauchy sum at the heart of S4's DPLR kernel (Gu et al. 2022, Alg. 1), through torch or pykeops.

    sum_n v_n / (a - b w_n) + conj(v_n) / (a - b conj(w_n))   v (..., H, N), a, b (L,), w (H, N) -> (..., H, L)

Its own file: the S4 kernel (sptune.models.ssm) calls it, and the pykeops probe (sptune.models.backend_probe)
runs it in a child process against the torch result before any run may use pykeops.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache

import torch

# pykeops evaluates the Cauchy sum without materializing the (H, 2N, L) matrix. Found here, imported only on
# first use (keops_cauchy_op) and only after its probe passed in a child process (backend_probe): on an H100
# node pykeops 2.3 segfaulted in its first kernel build, which took every S4 trial down with it.
HAS_KEOPS = importlib.util.find_spec("pykeops") is not None


def conj_pairs(x):
    """(..., N) -> (..., 2N): complete one member of each conjugate pair with its conjugate."""
    return torch.cat([x, x.conj()], dim=-1)


def cauchy_torch(v, a, b, w):
    """sum_n v_n / (a - b w_n) + conj(v_n) / (a - b conj(w_n)), materializing the (H, 2N, L) matrix.

    v (..., H, N), a, b (L,), w (H, N) -> (..., H, L).
    """
    r = 1 / (a - b * conj_pairs(w).unsqueeze(-1))  # (H, 2N, L)
    return torch.einsum("...hn,hnl->...hl", conj_pairs(v), r)


@lru_cache(maxsize=None)
def keops_cauchy_op():
    from pykeops.torch import Genred  # here, not at import: see HAS_KEOPS

    # complex numbers are (re, im) pairs; i indexes frequencies, j indexes the state
    formula = (
        "ComplexDivide(v, a - ComplexMult(b, w))"
        " + ComplexDivide(Conj(v), a - ComplexMult(b, Conj(w)))"
    )
    aliases = ["v = Vj(2)", "w = Vj(2)", "a = Vi(2)", "b = Vi(2)"]
    return Genred(formula, aliases, reduction_op="Sum", axis=1)


def cauchy_keops(v, a, b, w):
    """Same sum as cauchy_torch, reduced on the fly by pykeops (memory O(H L) instead of O(H N L))."""
    batch = v.shape[:-1]  # (..., H)
    v = torch.view_as_real(v.contiguous())  # (..., H, N, 2)
    w = torch.view_as_real(w.contiguous()).expand(*batch, -1, 2).contiguous()  # (..., H, N, 2)
    a = torch.view_as_real(a.contiguous()).expand(*batch, -1, 2).contiguous()  # (..., H, L, 2)
    b = torch.view_as_real(b.contiguous()).expand(*batch, -1, 2).contiguous()  # (..., H, L, 2)
    r = keops_cauchy_op()(v, w, a, b)  # (..., H, L, 2)
    return torch.view_as_complex(r.contiguous())  # (..., H, L)


CAUCHY = {"keops": cauchy_keops, "torch": cauchy_torch}  # backend -> Cauchy sum (v, a, b, w) -> (..., H, L)
