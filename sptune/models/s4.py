"""S4 / S4D layer: an SSM convolution per channel followed by a GLU feature mix (paper §3.3, Eq. 1-2).

Block (as the state-spaces/s4 S4Block with FFTConv):
    u (B, L, H) -> y = K * u + D u -> GELU -> dropout -> Linear(H, 2H) -> GLU -> (B, L, H)

Parameterization (as state-spaces/s4, so the s4 reference checkpoints map one to one):
    dt = exp(log_dt)                       (H,)     log-uniform in [dt_min, dt_max] at init
    A  = -exp(A_real) - i A_imag           (H, N/2) Re(A) < 0 for every value of A_real
    B, P, C complex, stored as (re, im) pairs in a trailing axis of size 2
    DPLR: C holds C~ = C_true (I - dA^l_kernel), as s4 trains it, once l_kernel > 0 (see S4Layer.kernel)
Because Re(A) = -exp(.) < 0 and p p^H is positive semi-definite, A - p p^H has a negative definite
Hermitian part, so both the ZOH and the bilinear discretizations are stable (|eigenvalues| < 1) for any
parameter values, including the random init of Appendix C.1.3.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F

from sptune.errors import UserError

from . import ssm

S4_MODES = ("dplr", "diag-lin", "diag-inv", "diag-legs")
RANDOM_INIT_STD = 0.1  # Appendix C.1.3: "random normal values and standard deviation 0.1"


def tag_ssm_param(param: nn.Parameter, ssm_lr: float | None) -> None:
    """Mark an SSM parameter for the optimizer (s4 convention): own lr and no weight decay."""
    param._optim = {"weight_decay": 0.0} if ssm_lr is None else {"lr": ssm_lr, "weight_decay": 0.0}


def without_autocast(device: torch.device):
    """Autocast switched off on `device` if it is on there (meta tensors, as in sptune.flops, have none)."""
    if device.type in ("cpu", "cuda") and torch.is_autocast_enabled(device.type):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()


class SSMConvBlock(nn.Module):
    """What S4Layer and DLRLayer share: the D skip, the output mix, and conv vs recurrent evaluation.

    Subclasses define `kernel(L) -> (channels, H, L)`, `kernel_flops(L)` (its forward FLOPs, for
    sptune.flops) and `_scan(u, channel) -> (B, H, L)`, the causal SSM
    output of one kernel channel computed by the explicit recurrence.
    """

    def __init__(self, d_model: int, bidirectional: bool, dropout: float):
        super().__init__()
        self.d_model = d_model
        self.bidirectional = bidirectional
        self.channels = 2 if bidirectional else 1
        self.D = nn.Parameter(torch.randn(d_model))  # skip connection, y = K * u + D u
        self.activation = nn.GELU()
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.output_linear = nn.Linear(d_model, 2 * d_model)

    def _output(self, y):
        """(B, H, L) SSM output -> (B, L, H) block output."""
        y = self.dropout(self.activation(y.transpose(-1, -2)))  # (B, L, H)
        return F.glu(self.output_linear(y), dim=-1)  # (B, L, 2H) -> (B, L, H)

    def forward(self, x):
        """x (B, L, H) -> (B, L, H), the SSM applied as a global convolution."""
        u = x.transpose(-1, -2)  # (B, H, L)
        # The kernel in the parameters' precision even under bf16 autocast: its real matmuls would otherwise
        # run in bf16, and powers dA^l up to l = L need more than bf16's 8 bits.
        with without_autocast(u.device):
            k = self.kernel(u.size(-1))  # (c, H, L)
        return self._output(ssm.fft_conv(u, k, self.D))  # (B, H, L) -> (B, L, H)

    def step_forward(self, x):
        """Same output as forward, computed by running the recurrence step by step (for tests).

        The reverse direction of a bidirectional layer is the causal recurrence on the flipped input,
        shifted by one step so that k1[j] multiplies u[t + 1 + j] as in ssm.fft_conv.
        """
        u = x.transpose(-1, -2)  # (B, H, L)
        y = self._scan(u, 0)  # (B, H, L)
        if self.bidirectional:
            y_rev = self._scan(u.flip(-1), 1)  # (B, H, L): y_rev[i] = sum_j k1[j] u[L-1-i+j]
            y = y + F.pad(y_rev[..., :-1], (1, 0)).flip(-1)  # (B, H, L): sum_j k1[j] u[t+1+j]
        return self._output(y + self.D[:, None] * u)


class S4Layer(SSMConvBlock):
    """S4 (mode="dplr": HiPPO-LegS in NPLR form, bilinear, Eq. 2) or S4D (mode="diag-*": diagonal, ZOH).

    d_state is the full state size N; the parameters hold N/2 conjugate pairs.
    init="structured" uses the HiPPO / S4D inits; init="random" redraws every kernel parameter (log_dt,
    A_real, A_imag, B, P, C) and D from N(0, 0.1^2) (Appendix C.1.3). Under the exp parameterizations that
    gives dt = exp(N(0, .01)) ~ 1 and Re(A) = -exp(N(0, .01)) ~ -1: a stable, fast-decaying kernel.
    """

    def __init__(self, d_model: int, d_state: int = 64, mode: str = "dplr",
                 bidirectional: bool = True, init: str = "structured",
                 dt_min: float = 1e-3, dt_max: float = 1e-1, ssm_lr: float | None = 1e-3,
                 dropout: float = 0.0, backend: str = "auto"):
        super().__init__(d_model, bidirectional, dropout)
        if mode not in S4_MODES:
            raise UserError(f"unknown S4 mode {mode!r}; choose one of {', '.join(S4_MODES)}")
        if init not in ("structured", "random"):
            raise UserError(f"unknown init {init!r}; expected 'structured' or 'random'")
        if d_state % 2:
            raise UserError(f"d_state must be even (conjugate pairs), got {d_state}")
        self.mode, self.backend = mode, ssm.resolve_backend(backend)  # validated at build time
        H, N2 = d_model, d_state // 2

        if mode == "dplr":
            A, P, B, _ = ssm.nplr_legs(d_state)  # (N/2,) each
        else:
            A, B = ssm.diag_init(mode, d_state)
        log_dt = torch.log(ssm.log_uniform((H,), dt_min, dt_max))  # (H,)
        C = torch.randn(self.channels, H, N2, dtype=torch.cfloat)  # (c, H, N/2), as s4

        self.log_dt = nn.Parameter(log_dt.float())
        self.A_real = nn.Parameter(torch.log(-A.real).float().expand(H, N2).clone())  # (H, N/2)
        self.A_imag = nn.Parameter((-A.imag).float().expand(H, N2).clone())  # (H, N/2)
        self.B = nn.Parameter(torch.view_as_real(B.to(torch.cfloat)).expand(H, N2, 2).clone())  # (H, N/2, 2)
        ssm_params = [self.log_dt, self.A_real, self.A_imag, self.B]
        if mode == "dplr":
            self.P = nn.Parameter(torch.view_as_real(P.to(torch.cfloat)).expand(H, N2, 2).clone())  # (H, N/2, 2)
            ssm_params.append(self.P)
            # The length C~ is defined at; 0 = C is still the true C (s4's l_kernel, saved with the weights).
            # kernel_length mirrors it as a Python int, so a forward reads it without a host-device sync. A DPLR
            # checkpoint from before l_kernel (its C the true C) is refused by strict loading, not misread.
            self.register_buffer("l_kernel", torch.zeros((), dtype=torch.long))
            self.kernel_length = 0
            self.register_load_state_dict_post_hook(_mirror_kernel_length)
        self.C = nn.Parameter(torch.view_as_real(C))  # (c, H, N/2, 2)

        if init == "random":
            with torch.no_grad():
                for p in ssm_params + [self.C, self.D]:
                    p.normal_(0.0, RANDOM_INIT_STD)
        for p in ssm_params:
            tag_ssm_param(p, ssm_lr)

    def ssm_params(self):
        """Continuous-time parameters: dt (H,), A (H, N/2), P (H, N/2) or None, B (H, N/2), C (c, H, N/2).
        DPLR: C is C~ at kernel_length once that is set (> 0), the true C before."""
        dt = torch.exp(self.log_dt)
        A = -torch.exp(self.A_real) - 1j * self.A_imag
        P = torch.view_as_complex(self.P) if self.mode == "dplr" else None
        return dt, A, P, torch.view_as_complex(self.B), torch.view_as_complex(self.C)

    def backend_used(self, cuda: bool, dtype: torch.dtype) -> str | None:
        """'cauchy keops' or 'cauchy torch' for DPLR (sptune.run.provenance); the diagonal modes choose nothing."""
        return f"cauchy {self.backend}" if self.mode == "dplr" else None

    def kernel(self, L: int):
        """(channels, H, L) convolution kernel.

        DPLR trains C~ = C (I - dA^l) directly (state-spaces/s4): the first call converts the initial C to C~ at
        its L, once; from then on every call is S4 Alg. 1 on C~, with no dense matrix, solve or matrix power
        (a length above kernel_length doubles C~ on the fly without storing it: kernel analyses, not training).
        """
        if self.mode == "dplr" and self.kernel_length == 0:
            self.set_kernel_length(L)
        dt, A, P, B, C = self.ssm_params()
        if self.mode == "dplr":
            return ssm.dplr_kernel_trained(dt, A, P, B, C, self.kernel_length, L, self.backend)
        return ssm.diag_kernel(dt, A, B, C, L, disc="zoh")

    @torch.compiler.disable  # once per layer, eagerly: compiled forwards then hold only the Alg. 1 path
    @torch.no_grad()
    def set_kernel_length(self, L: int) -> None:
        """Replace the true C by C~ = C (I - dA^L) (s4's _setup_C): the kernel is the same function of the
        parameters, now reached without dA^L. In place, so an optimizer built before keeps the parameter."""
        dt, A, P, _, C = self.ssm_params()
        self.C.copy_(torch.view_as_real(ssm.ctilde_from_c(dt, A, P, C, L)))
        self.l_kernel.fill_(L)
        self.kernel_length = L

    def kernel_flops(self, L: int) -> float:
        H, N = self.A_real.shape  # N/2 stored pairs
        if self.mode == "dplr":
            return ssm.dplr_kernel_flops(self.channels, H, N, L)
        return ssm.diag_kernel_flops(self.channels, H, N, L)

    def _scan(self, u, channel: int):
        """Causal SSM output of kernel channel `channel` by the recurrence x_t = dA x_{t-1} + dB u_t."""
        dt, A, P, B, C = self.ssm_params()
        if self.mode == "dplr":
            # dense conjugate-completed state of size 2N (bilinear, Eq. 2.2-2.3): y_t = Re(c . x_t), c the true C
            dA, dB = ssm.bilinear(dt, ssm.dplr_state_matrix(A, P), ssm.conj_pairs(B))  # (H, 2N, 2N), (H, 2N)
            if self.kernel_length > 0:
                C = ssm.c_from_ctilde(dt, A, P, C, self.kernel_length)  # (c, H, N/2)
            c = ssm.conj_pairs(C[channel])  # (H, 2N)
        else:
            # one member per pair; its conjugate adds the conjugate output, so y_t = Re(2c . x_t)
            dA, dB = ssm.discretize_diag(dt, A, B, "zoh")  # (H, N/2)
            dA, c = torch.diag_embed(dA), 2 * C[channel]  # (H, N/2, N/2), (H, N/2)
        x = torch.zeros(u.size(0), *dB.shape, dtype=dB.dtype, device=u.device)  # (B, H, n)
        ys = []
        for t in range(u.size(-1)):
            x = torch.einsum("hmn,bhn->bhm", dA, x) + dB * u[:, :, t, None]  # (B, H, n)
            ys.append(torch.einsum("hn,bhn->bh", c, x).real)  # (B, H)
        return torch.stack(ys, dim=-1)  # (B, H, L)

    @classmethod
    def from_reference_state_dict(cls, state_dict, mode: str | None = None, **kwargs) -> "S4Layer":
        """Build an S4Layer from a state-spaces/s4 (v4, standalone s4.py) FFTConv / S4Block state dict.

        Accepts the kernel-level keys (`D`, `kernel.*`) or the block-level ones (`layer.D`,
        `layer.kernel.*`, `output_linear.0.*`). Mapping (s4 -> here):
            kernel.inv_dt (H, 1)          -> log_dt (H,)       (s4 dt_transform='exp': dt = exp(inv_dt))
            kernel.A_real, kernel.A_imag  -> A_real, A_imag    (same -exp(.) - i(.) convention)
            kernel.B, kernel.P (1, H, N/2, 2) -> B, P (H, N/2, 2)
            kernel.C (c, H, N/2, 2)       -> C                 (DPLR: C~ = C (I - dA^l_kernel), as here)
            kernel.l_kernel ()            -> l_kernel          (DPLR: the length C~ is defined at; 0 = true C)
            D (1, H)                      -> D (H,)
            output_linear.0.{weight,bias} -> output_linear.{weight,bias}
        mode defaults to "dplr" when P is present, else "diag-lin" (any diagonal mode: the init is
        overwritten). Keys absent from the reference (e.g. the output linear) keep their fresh init.
        """
        prefix = "layer." if "layer.D" in state_dict else ""
        sd = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
        C = torch.view_as_complex(sd["kernel.C"].contiguous())  # (c, H, N/2)
        channels, H, N2 = C.shape
        if mode is None:
            mode = "dplr" if "kernel.P" in sd else "diag-lin"
        layer = cls(H, 2 * N2, mode=mode, bidirectional=channels == 2, **kwargs)

        new = {
            "log_dt": sd["kernel.inv_dt"][:, 0],
            "A_real": sd["kernel.A_real"],
            "A_imag": sd["kernel.A_imag"],
            "B": sd["kernel.B"][0],
            "D": sd["D"][0],
        }
        if mode == "dplr":
            new["P"] = sd["kernel.P"][0]
            new["l_kernel"] = sd["kernel.l_kernel"].reshape(()).long()
        new["C"] = torch.view_as_real(C.to(torch.cfloat))
        for name in ("weight", "bias"):
            if f"output_linear.0.{name}" in state_dict:
                new[f"output_linear.{name}"] = state_dict[f"output_linear.0.{name}"]
        layer.load_state_dict(new, strict=False)
        return layer


def _mirror_kernel_length(layer: S4Layer, incompatible_keys) -> None:
    """After load_state_dict: kernel_length follows the loaded l_kernel (read once here, not per forward)."""
    layer.kernel_length = int(layer.l_kernel)
