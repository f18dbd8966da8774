"""DLR layer: diagonal linear RNN (Gupta et al. 2022b; paper §3.3, Eq. 3) in the same block as S4.

    x_n = Lambda x_n-1 + 1 u_n,   y_n = Re(W x_n)   =>   K_l = Re(sum_n W_n Lambda_n^l)   (ssm.dlr_kernel)

No continuous-time system and no discretization: Lambda is learned directly in log space,
log Lambda = -log_lambda_re_sqrt^2 + i log_lambda_im (the ag1988/dlr parameterization), so |Lambda| <= 1
for any parameter value and the kernel is bounded by sum_n |W_n|, also under random init.
As in the official code, Lambda (N,) is shared by all H channels while W (c, H, N) is per channel; a
bidirectional layer has two W copies (c = 2) over the same Lambda.

Block: y = K * u + D u -> GELU -> dropout -> Linear(H, 2H) -> GLU, the S4Layer block. The official layer
(ag1988/dlr src/models/sequence/ss/standalone/dss.py, DSS.output_linear) is Linear(H, H) followed by
`postact`, None by default, but every DLR config of the paper's own runs sets `postact: glu`
(IdoAmos/not-from-scratch configs/experiment/lra/dlr-lra-*.yaml), which makes it Linear(H, 2H) -> GLU:
the block the paper's Table 7 numbers come from.

Optimizer settings as the official layer registers them (DLRKernel.register): Lambda and W at their own lr
(configs/model/layer/dlr.yaml: lr.Lambda = lr.W = 1e-4) and without weight decay (wd: 0 for W, 0.0 for Lambda).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from sptune.errors import UserError

from . import ssm
from .s4 import RANDOM_INIT_STD, SSMConvBlock, tag_ssm_param

class DLRLayer(SSMConvBlock):
    """Diagonal linear RNN layer. d_state N complex modes (1024 by default, as the official DLR layer).

    init="structured" (ag1988/dlr Lambda_init="omega"): log Lambda_n = -dt_n/2 + 2 pi i n / N with
    dt_n log-uniform in [dt_min, dt_max] (official defaults 1e-4, 1e-1), i.e. Lambda_n spread over the N-th
    roots of unity just inside the unit circle; W ~ N(0, 1/N^2) per real and imaginary part (W_scale = 1/N).
    init="random": log_lambda_re_sqrt, log_lambda_im, W and D ~ N(0, 0.1^2) (Appendix C.1.3).
    ssm_lr: the lr of Lambda and W (official 1e-4); None = the optimizer's lr. Both never get weight decay.
    """

    def __init__(self, d_model: int, d_state: int = 1024, bidirectional: bool = True, init: str = "structured",
                 dt_min: float = 1e-4, dt_max: float = 1e-1, ssm_lr: float | None = 1e-4, dropout: float = 0.0):
        super().__init__(d_model, bidirectional, dropout)
        if init not in ("structured", "random"):
            raise UserError(f"unknown init {init!r}; expected 'structured' or 'random'")
        N = d_state
        dt = ssm.log_uniform((N,), dt_min, dt_max)  # (N,)
        self.log_lambda_re_sqrt = nn.Parameter(torch.sqrt(dt / 2).float())  # (N,) Re log Lambda = -dt/2
        self.log_lambda_im = nn.Parameter(2 * math.pi * torch.arange(N, dtype=torch.float) / N)  # (N,)
        self.W = nn.Parameter(torch.randn(self.channels, d_model, N, 2) / N)  # (c, H, N, 2) complex as pairs

        if init == "random":
            with torch.no_grad():
                for p in (self.log_lambda_re_sqrt, self.log_lambda_im, self.W, self.D):
                    p.normal_(0.0, RANDOM_INIT_STD)
        for p in (self.log_lambda_re_sqrt, self.log_lambda_im, self.W):
            tag_ssm_param(p, ssm_lr)

    def ssm_params(self):
        """log Lambda (N,) complex, W (c, H, N) complex."""
        log_lambda = -self.log_lambda_re_sqrt ** 2 + 1j * self.log_lambda_im
        return log_lambda, torch.view_as_complex(self.W)

    def kernel(self, L: int):
        """(channels, H, L) convolution kernel."""
        log_lambda, W = self.ssm_params()
        return ssm.dlr_kernel(log_lambda, W, L)

    def kernel_flops(self, L: int) -> float:
        return ssm.dlr_kernel_flops(self.channels, self.d_model, self.log_lambda_im.shape[0], L)

    def _scan(self, u, channel: int):
        """Causal output of kernel channel `channel` by the recurrence x_t = Lambda x_{t-1} + u_t (Eq. 3)."""
        log_lambda, W = self.ssm_params()
        lam, w = torch.exp(log_lambda), W[channel]  # (N,), (H, N)
        x = torch.zeros(u.size(0), u.size(1), lam.size(0), dtype=lam.dtype, device=u.device)  # (B, H, N)
        ys = []
        for t in range(u.size(-1)):
            x = lam * x + u[:, :, t, None]  # (B, H, N)
            ys.append(torch.einsum("hn,bhn->bh", w, x).real)  # (B, H)
        return torch.stack(ys, dim=-1)  # (B, H, L)
