"""Small Gaussian helpers of the run-time model, and the emission mixture every factor shares.

A Mixture's components are stacked on the first axis and cycle through the emitter's three parts
(normal, long stall, short stall); ``EMITTER_PARTS`` and ``SHORT`` name that layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

LOG_2PI = math.log(2 * math.pi)
EMITTER_PARTS, SHORT = 3, 2  # the emitter's parts (normal, long stall, short stall), the last's index


def exponential(shape, generator=None) -> torch.Tensor:
    """Draws of Exp(1)."""
    return torch.empty(shape).exponential_(generator=generator)


def stack(a: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A (K,) vector shaped (K, 1, ..., 1) to broadcast against ``like`` along a new first axis."""
    return a.reshape(len(a), *([1] * like.dim()))


def gaussian_cross_entropy(mu, var, prior_mu, prior_var_extra, q):
    """E_q[log N(z; prior_mu, q)] where z ~ N(mu, var) and prior_mu carries extra variance
    prior_var_extra from z_{t-1} (= (A Sigma_{t-1} A^T)_ii), summed over the last axis."""
    return -0.5 * (LOG_2PI + q.log() + ((mu - prior_mu) ** 2 + var + prior_var_extra) / q).sum(-1)


def gaussian_entropy(var):
    return 0.5 * (LOG_2PI + 1 + var.log()).sum(-1)


def log_phi(z: torch.Tensor) -> torch.Tensor:
    """log of the standard normal density."""
    return -0.5 * (LOG_2PI + z**2)


ASYMPTOTIC_BELOW = -10.0  # log_ndtr's switch from erfc to Phi's asymptotic series


def log_ndtr(z: torch.Tensor) -> torch.Tensor:
    """log Phi(z), the standard normal's log CDF, to float32's precision and with finite
    gradients everywhere: log(erfc(-z / sqrt 2) / 2) above z = -10 (erfc keeps its relative
    precision down to z = -11), and below it the asymptotic series
    log Phi(z) = log phi(z) - log(-z) + log(1 - 1/z^2 + 3/z^4 - 15/z^6 + ...), whose next term is
    below 1e-6 there. torch.special.log_ndtr computes the same through erfcx, whose CPU kernel
    costs far more than erfc's, on each of the filter's n x 18 components. Each branch sees
    its argument clamped into its own range, so the one ``where`` discards has no inf to
    back-propagate."""
    low = z.clamp_max(ASYMPTOTIC_BELOW)
    w = low.square().reciprocal()
    series = (w * (w * (3 - 15 * w) - 1)).log1p() - (-low).log() + log_phi(low)
    # clamped a unit lower, so that its gradient still passes at the switch itself
    high = z.clamp_min(ASYMPTOTIC_BELOW - 1)
    upper = torch.special.erfc(high * -math.sqrt(0.5)).log() - math.log(2)
    return torch.where(z < ASYMPTOTIC_BELOW, series, upper)


def above(z: torch.Tensor, log_phi_z: torch.Tensor):
    """log P(Z > z) and the standardised moments of Z | Z > z, Z ~ N(0, 1): mean h(z) (the
    inverse Mills ratio phi / (1 - Phi)) and variance 1 + z h - h^2. ``log_phi_z``: log_phi(z)."""
    log_tail = log_ndtr(-z)
    h = torch.exp(log_phi_z - log_tail)
    return log_tail, h, (1 + z * h - h**2).clamp(0, 1)


@dataclass
class Mixture:
    """A per-worker mixture of K components in emission space, stacked on the first axis, that
    cycle through the emitter's parts (normal, long stall, short stall): v ~ sum_k w_k p_k,
    p_k = N(mean_k, var_k) for the first two and N(mean_k, var_k) + Exp(rate) (an exponentially
    modified Gaussian) for a short stall. var_k = u_var_k + the emitter's variance, u_var_k the
    prior variance of u in that component. w_k is each worker's marginal weight; ``log_p_c`` is
    the node-level prior of the episode C that the weights of ``filtering.predictive_mixture``
    include (per worker), for the node's joint likelihood."""

    mean: torch.Tensor  # (K, ..., n)
    var: torch.Tensor  # (K, ..., n)
    log_w: torch.Tensor  # (K, ..., n) or broadcastable to it
    u_var: torch.Tensor  # (K, ..., n)  prior variance of u in component k
    u_mean: torch.Tensor  # (..., n)  prior mean of u (the same in every component)
    rate: torch.Tensor  # ()  lambda, the rate of a short stall's exponential length
    log_p_c: torch.Tensor | None = None  # (2, ..., K) log P(C = 0, 1) per node

    def sample(self, generator=None) -> torch.Tensor:
        """One draw of v per entry (component by inverse CDF of the weights, then its Gaussian,
        plus an exponential length for a short stall): all components drawn as written, the
        reference the fast joint draws (``sampling.next_step``) are tested against."""
        cdf = self.log_w.exp().cumsum(0)
        pick = (torch.rand(self.mean.shape[1:], generator=generator) > cdf[:-1]).sum(0)
        mean = torch.gather(self.mean, 0, pick[None]).squeeze(0)
        sd = torch.gather(self.var, 0, pick[None]).squeeze(0).sqrt()
        short = (pick % EMITTER_PARTS == SHORT) * exponential(mean.shape, generator) / self.rate
        return mean + sd * torch.randn(mean.shape, generator=generator) + short
