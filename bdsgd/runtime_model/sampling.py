"""The generative next step, written once: the bdsgd policy's predictive draws
(``RuntimeModel.draws``) and ancestral sampling of a synthetic trace (``sample_runtimes``).

Given q(z_t) (a filter's posterior, or a point mass at a sampled z_t), one step draws
g_{t+1} ~ N(A mu^g_t + b, diag(A Sigma^g_t A^T) + q_g), u's step variance (J per node, R per
worker), C_{t+1,k} from its chain at P(C_t = 1), the emitter's part from B's chain at
P(B_t = 1), and v_{t+1} as one Gaussian of u_{t+1} and the emitter's noise plus a stall's extra
and the node's episode level.
"""

from __future__ import annotations

import dataclasses

import torch

from bdsgd.runtime_model.emitter import Emitter
from bdsgd.runtime_model.filtering import FilterState
from bdsgd.runtime_model.gaussian import SHORT
from bdsgd.runtime_model.parameters import StepParameters
from bdsgd.runtime_model.transition import RESET_PROB, Nodes, Transition


def step_variances(nodes: Nodes, params: StepParameters, samples: int, generator=None,
                   resets: bool = True) -> torch.Tensor:
    """Draws (S, n) of u's step variance: J per node, then R per worker (if ``resets``)."""
    q_u, q_j, q_r = params.step
    jump = torch.rand((samples, nodes.count), generator=generator) < params.log_w_j[1].exp()
    step = nodes.spread(jump * (q_j - q_u) + q_u)
    if not resets:
        return step
    reset = torch.rand(step.shape, generator=generator) < RESET_PROB
    return step + reset * (q_r - step)


def episode_levels(nodes: Nodes, params: StepParameters, samples: int,
                   generator=None) -> torch.Tensor:
    """Draws (S, K) of each node's episode shift delta_c + eps_k, eps_k ~ N(0, s_c^2): one per
    node, which ``Nodes.spread`` gives its workers, so that an episode slows them together."""
    shift, extra = params.episode
    eps = torch.randn((samples, nodes.count), generator=generator)
    return shift + extra.sqrt() * eps


def next_step(transition: Transition, emitter: Emitter, nodes: Nodes, params: StepParameters,
              s: FilterState, samples: int, generator,
              ancestral: bool = False) -> tuple[torch.Tensor, FilterState | None]:
    """S joint draws (S, n) of v_{t+1} given q(z_t) ``s``, and, if ``ancestral``, the z_{t+1}
    they were drawn at as a point mass (zero variances, indicators for P(C) and P(B)).

    A forecast (not ``ancestral``) leaves a fresh reset at t+1 out. It moves E[x_(c)] by about
    its probability, n p_r (0.2 % at n = 16), but drawn, it puts a 7x-50x outlier into some of
    the S draws: the estimate of E[x_(n)] then jumps by 5-100 % at random, and bdsgd cut a worker
    for nothing in 5 % of a calm cluster's iterations. The reset stays in the filter, whose
    posterior is what follows a change larger than training had, and in a sampled trace, which
    draws u_{t+1} apart from the emitter's noise to carry it on.
    """
    mu_u, var_u = transition.carry_u(s.mu_u, s.var_u, params.rho)
    mu_g, var_g = transition.predict_g(s.mu_g, s.var_g)
    g = mu_g + var_g.sqrt() * torch.randn((samples, mu_g.shape[-1]), generator=generator)
    loc, scale = emitter(g, params.emitter_e)
    step = step_variances(nodes, params, samples, generator, resets=ancestral)
    if ancestral:
        mu_u = mu_u + (var_u + step).sqrt() * torch.randn(step.shape, generator=generator)
        var = scale.square_()
    else:
        var = scale.square_().add_(var_u).add_(step)
    p_c = transition.episode_chain(params.switch).predict(s.p_c)
    c = (torch.rand((samples, nodes.count), generator=generator) < p_c).float()
    # A stall: short with P(B_{t+1} = 1), else long with probability pi. Stalls are rare,
    # so they are indexed rather than masked over all S x n draws: one uniform picks the
    # part, and for a short stall u = which / P(B = 1) is a fresh uniform on [0, 1), whose
    # -log(1 - u) is its Exp(1) length (not -log u: torch.rand returns exactly 0 once in
    # 2^24, about once in 2,000 decisions at n = 16, and a clamped -log 0 made a stall of
    # 10^2-10^4 x that forecast a cut for nothing); a long stall's extra spread is its own
    # normal draw.
    which = torch.rand(loc.shape, generator=generator)
    stall = params.stall
    p_short = transition.stall_chain(stall.probs).predict(s.p_b)  # per worker, not per draw
    i, w = (which < p_short + (1 - p_short) * stall.probs[0]).nonzero(as_tuple=True)
    u = which[i, w] / p_short.expand_as(which)[i, w]
    long_stall = stall.shift[1] + stall.var[1].sqrt() * torch.randn(u.shape, generator=generator)
    short_stall = stall.shift[SHORT] - (-u).log1p() / stall.rate
    v = var.sqrt_().mul_(torch.randn(loc.shape, generator=generator)).add_(loc).add_(mu_u)
    v.index_put_((i, w), torch.where(u < 1, short_stall, long_stall), accumulate=True)
    v = v.add_(nodes.spread(c * episode_levels(nodes, params, samples, generator)))
    if not ancestral:
        return v, None
    b = torch.zeros_like(v).index_put_((i, w), (u < 1).float())
    return v, FilterState(s.h, g, torch.zeros_like(g), mu_u, torch.zeros_like(mu_u), c, b)


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
    rows = []
    for _ in range(iterations):
        v, s = next_step(transition, emitter, nodes, params, s, 1, gen, ancestral=True)
        rows.append(emitter.unspace(v))
    return torch.cat(rows)
