"""The generative next step, written once: the bdsgd policy's predictive draws
(``RuntimeModel.draws`` and ``forecast``) and ancestral sampling of a synthetic trace (``sample_runtimes``).

Given q(z_t) (a filter's posterior, or a point mass at a sampled z_t), one step draws
g_{t+1} ~ N(A mu^g_t + b, diag(A Sigma^g_t A^T) + q_g), u's step variance (J per node, R per
worker), C_{t+1,k} from its chain at P(C_t = 1), the emitter's part from B's chain at
P(B_t = 1), and v_{t+1} as one Gaussian of u_{t+1}, the emitter's noise and a long stall's
spread, plus a short stall's length and the node's episode level.

The random numbers come first, in two blocks (``draw_noise``), and the step is a function of
them: so ``next_step`` has no generator inside and compiles to a few fused kernels
(``policies.compile``), and a seed fixes the draws however the step is run.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch

from bdsgd.runtime_model.emitter import Emitter
from bdsgd.runtime_model.filtering import FilterState
from bdsgd.runtime_model.gaussian import SHORT
from bdsgd.runtime_model.parameters import StepParameters
from bdsgd.runtime_model.transition import RESET_PROB, Nodes, Transition


class Noise(NamedTuple):
    """One step's random numbers for S draws of n workers on K nodes, g of dimension d.

    ``uniform`` (S, 2K + n [+ n]): J per node, C per node, the emitter's part per worker [and
    the reset R per worker, ancestral only]; ``normal`` (S, d + K + n [+ n]): g, the episode's
    size per node, v per worker [and u_{t+1} per worker, ancestral only]."""

    uniform: torch.Tensor
    normal: torch.Tensor


def draw_noise(samples: int, d: int, nodes: Nodes, n: int, generator=None,
               ancestral: bool = False) -> Noise:
    """``Noise`` for ``samples`` draws: two generator calls."""
    extra = n if ancestral else 0
    return Noise(torch.rand((samples, 2 * nodes.count + n + extra), generator=generator),
                 torch.randn((samples, d + nodes.count + n + extra), generator=generator))


def step_variances(nodes: Nodes, params: StepParameters, jump: torch.Tensor,
                   reset: torch.Tensor | None = None) -> torch.Tensor:
    """u's step variance (S, n) from uniforms: ``jump`` (S, K), J per node, then ``reset``
    (S, n), R per worker (None: no resets)."""
    q_u, q_j, q_r = params.step
    step = nodes.spread((jump < params.log_w_j[1].exp()) * (q_j - q_u) + q_u)
    if reset is None:
        return step
    return step + (reset < RESET_PROB) * (q_r - step)


def episode_levels(params: StepParameters, eps: torch.Tensor) -> torch.Tensor:
    """Each node's episode shift delta_c + s_c eps_k (S, K) from standard normals ``eps``: one
    per node, which ``Nodes.spread`` gives its workers, so that an episode slows them together."""
    shift, extra = params.episode
    return shift + extra.sqrt() * eps


def next_step(transition: Transition, emitter: Emitter, nodes: Nodes, params: StepParameters,
              s: FilterState, noise: Noise,
              ancestral: bool = False) -> tuple[torch.Tensor, FilterState | None]:
    """S joint draws (S, n) of v_{t+1} given q(z_t) ``s`` and ``noise`` (``draw_noise``'s, S
    rows), and, if ``ancestral``, the z_{t+1} they were drawn at as a point mass (zero
    variances, indicators for P(C) and P(B)).

    A forecast (not ``ancestral``) leaves a fresh reset at t+1 out. It moves E[x_(c)] by about
    its probability, n p_r, but drawn, it puts a rare outlier into a few of the S draws, and the
    estimate of E[x_(n)] then jumps at random: a worker cut for nothing (docs/decisions.md, "No
    fresh reset in the decision's draws"). The reset stays in the filter, whose posterior is what
    follows a change larger than training had, and in a sampled trace, which draws u_{t+1} apart
    from the emitter's noise to carry it on.
    """
    K, n = nodes.count, s.mu_u.shape[-1]
    jump, on, which, *reset = noise.uniform.split([K, K, n, n][:4 if ancestral else 3], -1)
    z_g, eps, z_v, *z_u = noise.normal.split([s.mu_g.shape[-1], K, n, n][:4 if ancestral else 3],
                                             -1)
    mu_u, var_u = transition.carry_u(s.mu_u, s.var_u, params.rho)
    mu_g, var_g = transition.predict_g(s.mu_g, s.var_g)
    g = mu_g + var_g.sqrt() * z_g
    loc, scale = emitter(g, params.emitter_e)
    step = step_variances(nodes, params, jump, reset[0] if ancestral else None)
    if ancestral:
        mu_u = mu_u + (var_u + step).sqrt() * z_u[0]
        var = scale.square()
    else:
        var = scale.square() + var_u + step
    c = (on < transition.episode_chain(params.switch).predict(s.p_c)).float()
    # The emitter's part from one uniform: a short stall with P(B_{t+1} = 1), else a long one
    # with probability pi. For a short stall which / P(B = 1) is a fresh uniform on [0, 1),
    # whose -log(1 - u) is its Exp(1) length (not -log u: torch.rand can return exactly 0, and
    # -log 0 is an endless stall that forecasts a cut for nothing). A long stall's shift is
    # Gaussian, so it joins v's Gaussian: one normal per draw serves both.
    stall = params.stall
    p_short = transition.stall_chain(stall.probs).predict(s.p_b)
    short = which < p_short
    long = ~short & (which < p_short + (1 - p_short) * stall.probs[0])
    u = torch.where(short, which / p_short, 0.0)  # 0 off a short stall: log1p stays finite
    length = stall.shift[SHORT] - (-u).log1p() / stall.rate
    v = ((var + long * stall.var[1]).sqrt() * z_v + loc + mu_u + long * stall.shift[1]
         + torch.where(short, length, 0.0) + nodes.spread(c * episode_levels(params, eps)))
    if not ancestral:
        return v, None
    return v, FilterState(s.h, g, torch.zeros_like(g), mu_u, torch.zeros_like(mu_u), c,
                          short.float())


@torch.no_grad()
def sample_runtimes(transition: Transition, emitter: Emitter, nodes: Nodes,
                    params: StepParameters, prior: FilterState, iterations: int,
                    seed: int) -> torch.Tensor:
    """Ancestral sampling from the generative model: normalised run-times x~ (iterations, n),
    each iteration ``next_step`` from the last one's z. ``prior``: z_0's law for one sequence
    (a filter's initial state): g_0 ~ N(0, I) and u_0 ~ N(0, p_0) are drawn from it, and C_0
    and B_0 enter the first step at its P(C_0 = 1) and P(B_0 = 1)."""
    gen = torch.Generator().manual_seed(seed)
    s = dataclasses.replace(
        prior, mu_g=torch.randn(prior.mu_g.shape, generator=gen), var_g=torch.zeros_like(prior.var_g),
        mu_u=prior.var_u.sqrt() * torch.randn(prior.mu_u.shape, generator=gen),
        var_u=torch.zeros_like(prior.var_u))
    d, n = prior.mu_g.shape[-1], prior.mu_u.shape[-1]
    rows = []
    for _ in range(iterations):
        noise = draw_noise(1, d, nodes, n, gen, ancestral=True)
        v, s = next_step(transition, emitter, nodes, params, s, noise, ancestral=True)
        rows.append(emitter.unspace(v))
    return torch.cat(rows)
