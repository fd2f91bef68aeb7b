"""p(x_t | z_t): each worker's run-time given the latent state, in emission space v.

    v_{t,w} | z_t ~ (1 - B_{t,w}) [(1 - pi) N(m_{t,w}, s^2)
                                   + pi N(m_{t,w} + delta, s^2 + s_st^2)]   (long stall)
                    + B_{t,w} [N(m_{t,w} + delta_s, s^2) + Exp(lambda)],     (short stall)
    m_{t,w} = f(g_t, e_w) + u_{t,w} + C_{t,k(w)} (delta_c + eps_{t,k(w)}),  s = s(g_t, e_w)

independently over w given z_t. v = log x~ (``lognormal``, the default: positive, heavy right
tail) or v = x~ (``gaussian``, the paper's; draws below zero are clamped to a tiny positive).

The two stall parts are transient slowdowns: a heavy right tail that a single Gaussian could only
fake by widening everyone's spread. A long stall is a wide Gaussian shifted by delta > 0, which
reaches the rare 30x stalls. A short stall is delta_s longer plus an exponential length (a Pareto
tail in x~): most of its mass sits just above delta_s, where the common 1.2-1.7x stalls are, which
the long stall gives so little density that it would leave much of the posterior on a lasting
change of the worker. A short stall goes on into the next iteration with probability kappa
(learnt: a simulated stall never does, an Alibaba trace holds each sampled value for two
iterations), so that a spike seen twice is still a stall and not an episode.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from bdsgd.config import EMISSIONS
from bdsgd.runtime_model.gaussian import Mixture, stack

MIN_X = 1e-4  # smallest normalised run-time a gaussian draw is clamped to


class StallParameters(NamedTuple):
    """The emitter's parts (normal, long stall, short stall) and B's chain: ``shift``
    (0, delta, delta_s), added variances ``var`` (0, s_st^2, 0), the short stall's ``rate``
    lambda and ``probs`` (pi, pi_s, kappa) (``Emitter.stall_probs``)."""

    shift: torch.Tensor
    var: torch.Tensor
    rate: torch.Tensor
    probs: torch.Tensor


class Emitter(nn.Module):
    """p(v_{t,w} | z_t), the stall parts' parameters included (B's chain among them).

    h = tanh(W_1 g + c_1);  f(g, e) = (W_f [h, g] + c_f)^T [e, 1];
    s(g, e) = softplus((W_s h + c_s)^T [e, 1]); pi, pi_s, kappa = sigmoid(.),
    delta, delta_s = softplus(.), s_st and lambda are learnt. e_w is worker w's identity
    embedding; f and s are bilinear in an MLP of g and e_w, so one emitter serves any n and a pass
    over S draws x n workers is two matrix products.
    """

    def __init__(self, latent_dim: int, worker_dim: int, hidden_dim: int, emission: str):
        super().__init__()
        if emission not in EMISSIONS:
            raise ValueError(f"unknown emission {emission!r}")
        self.emission = emission
        self.hidden = nn.Sequential(nn.Linear(latent_dim, hidden_dim), nn.Tanh())
        self.to_loc = nn.Linear(hidden_dim + latent_dim, worker_dim + 1)
        self.to_scale = nn.Linear(hidden_dim, worker_dim + 1)
        self.stall_logit = nn.Parameter(torch.tensor(-6.0))  # pi ~ 0.25 %
        self.stall_shift = nn.Parameter(torch.tensor(0.5))  # delta = softplus(.) ~ 0.97
        self.stall_log_scale = nn.Parameter(torch.tensor(math.log(0.5)))
        self.short_logit = nn.Parameter(torch.tensor(-6.0))  # pi_s ~ 0.25 %
        self.short_shift = nn.Parameter(torch.tensor(-2.0))  # delta_s = softplus(.) ~ 0.13
        self.short_log_rate = nn.Parameter(torch.tensor(math.log(2.0)))  # mean length 1 / 2
        self.short_stay_logit = nn.Parameter(torch.tensor(-1.0))  # kappa ~ 0.27
        with torch.no_grad():  # start near x~ = 1 with a 10 % spread
            self.to_loc.bias[-1] = 0.0 if emission == "lognormal" else 1.0
            self.to_scale.bias[-1] = -2.2

    def project(self, embedding: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The output layers times [e_w, 1], (W_f^T [e, 1]^T, c_f^T [e, 1]^T, and the same for
        s): per-worker weights (., n), so that ``forward`` is one matrix product per output."""
        e = F.pad(embedding, (0, 1), value=1.0).T  # (worker_dim + 1, n)
        return (self.to_loc.weight.T @ e, self.to_loc.bias @ e, self.to_scale.weight.T @ e,
                self.to_scale.bias @ e)

    def forward(self, g: torch.Tensor, projected: tuple[torch.Tensor, ...]):
        """(f, s), each (..., n), at cluster state g (..., d): the emitter without u.
        ``projected``: ``project(embedding)``."""
        loc_w, loc_b, scale_w, scale_b = projected
        h = self.hidden(g)
        # g also enters linearly, so a load the training trace never had is still expressible
        loc = F.linear(torch.cat([h, g], -1), loc_w.T, loc_b)  # the bias added in the product
        return loc, F.softplus(F.linear(h, scale_w.T, scale_b)) + 1e-3

    def stall_probs(self):
        """(pi, pi_s, kappa): a long stall; a short one starts, goes on."""
        return torch.sigmoid(torch.stack([self.stall_logit, self.short_logit, self.short_stay_logit]))

    def stall_parameters(self) -> StallParameters:
        """Per part (normal, long stall, short stall): shifts (0, delta, delta_s), added
        variances (0, s_st^2, 0); the short stall's rate lambda; ``stall_probs``."""
        zero = torch.zeros(())
        shift = torch.stack([zero, F.softplus(self.stall_shift), F.softplus(self.short_shift)])
        var = torch.stack([zero, (2 * self.stall_log_scale).exp(), zero])
        return StallParameters(shift, var, self.short_log_rate.exp(), self.stall_probs())

    def mixture(self, g: torch.Tensor, u: torch.Tensor, p_short: torch.Tensor,
                projected: tuple[torch.Tensor, ...], stall: StallParameters) -> Mixture:
        """p(v_t | g_t, u_t): the three parts at level f(g, e_w) + u (..., n), with each worker's
        P(B_t = 1) = ``p_short`` (..., n). ``projected``: ``project(embedding)``; ``stall``:
        ``stall_parameters()``."""
        loc, scale = self(g, projected)
        shift, stall_var = stack(stall.shift, loc), stack(stall.var, loc)
        return Mixture(loc + u + shift, scale**2 + stall_var,
                       self.part_log_w(p_short, stall.probs), torch.zeros_like(shift), u,
                       stall.rate)

    @staticmethod
    def part_log_w(p_short, probs):
        """Log weights (3, ..., n) of the parts (normal, long stall, short stall) at
        P(B_t = 1) = p_short: a long stall with probability pi when not in a short one."""
        rest = (-p_short).log1p()
        pi = probs[0]
        return torch.stack([rest + (-pi).log1p(), rest + pi.log(), p_short.log()])

    def space(self, x: torch.Tensor) -> torch.Tensor:
        """The space the family is Gaussian in: log x~ (lognormal) or x~ (gaussian)."""
        return x.log() if self.emission == "lognormal" else x

    def unspace(self, v: torch.Tensor) -> torch.Tensor:
        return v.exp() if self.emission == "lognormal" else v.clamp_min(MIN_X)
