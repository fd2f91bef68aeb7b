"""The generative next step, written once: the bdsgd policy's predictive draws
(``RuntimeModel.draws``) and ancestral sampling of a synthetic trace (``sample_trace``).

Given q(z_t) (a filter's posterior, or a point mass at a sampled z_t), one step draws
g_{t+1} ~ N(A mu^g_t + b, diag(A Sigma^g_t A^T) + q_g), u's step variance (J per node, R per
worker), C_{t+1,k} from its chain at P(C_t = 1), the emitter's part from B's chain at
P(B_t = 1), and v_{t+1} as one Gaussian of u_{t+1} and the emitter's noise plus a stall's extra
and the node's episode level.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from bdsgd.runtime_model.filtering import FilterState
from bdsgd.runtime_model.gaussian import SHORT
from bdsgd.runtime_model.transition import RESET_PROB, Nodes
from bdsgd.traces.schema import Trace, from_arrays

if TYPE_CHECKING:
    from bdsgd.runtime_model.model import Parts, RuntimeModel


def step_variances(nodes: Nodes, parts: Parts, samples: int, generator=None,
                   resets: bool = True) -> torch.Tensor:
    """Draws (S, n) of u's step variance: J per node, then R per worker (if ``resets``)."""
    q_u, q_j, q_r = parts.step
    jump = torch.rand((samples, nodes.count), generator=generator) < parts.log_w_j[1].exp()
    step = nodes.spread(jump * (q_j - q_u) + q_u)
    if not resets:
        return step
    reset = torch.rand(step.shape, generator=generator) < RESET_PROB
    return step + reset * (q_r - step)


def episode_levels(nodes: Nodes, parts: Parts, samples: int, generator=None) -> torch.Tensor:
    """Draws (S, n) of a node's episode shift delta_c + eps_k, eps_k ~ N(0, s_c^2), one per
    node and spread to its workers: an episode slows a node's workers together."""
    shift, extra = parts.episode
    eps = torch.randn((samples, nodes.count), generator=generator)
    return nodes.spread(shift + extra.sqrt() * eps)


def next_step(model: RuntimeModel, s: FilterState, samples: int, generator, parts: Parts,
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
    tr, nodes = model.transition, model.nodes
    mu_u, var_u = tr.carry_u(s.mu_u, s.var_u, parts.rho)
    mu_g, var_g = tr.predict_g(s)
    g = mu_g + var_g.sqrt() * torch.randn((samples, mu_g.shape[-1]), generator=generator)
    loc, scale = model.emitter(g, parts.emitter_e)
    step = step_variances(nodes, parts, samples, generator, resets=ancestral)
    if ancestral:
        mu_u = mu_u + (var_u + step).sqrt() * torch.randn(step.shape, generator=generator)
        var = scale.square_()
    else:
        var = scale.square_().add_(var_u).add_(step)
    p_c = tr.episode_chain(parts.switch).predict(s.p_c)
    c = (torch.rand((samples, nodes.count), generator=generator) < p_c).float()
    on = nodes.spread(c)
    # A stall: short with P(B_{t+1} = 1), else long with probability pi. Stalls are rare,
    # so they are indexed rather than masked over all S x n draws: one uniform picks the
    # part, and for a short stall u = which / P(B = 1) is a fresh uniform on [0, 1), whose
    # -log(1 - u) is its Exp(1) length (not -log u: torch.rand returns exactly 0 once in
    # 2^24, about once in 2,000 decisions at n = 16, and a clamped -log 0 made a stall of
    # 10^2-10^4 x that forecast a cut for nothing); a long stall's extra spread is its own
    # normal draw.
    which = torch.rand(loc.shape, generator=generator)
    p_short = tr.stall_chain(parts.stall_probs).predict(s.p_b).expand_as(which)
    i, w = (which < p_short + (1 - p_short) * parts.stall_probs[0]).nonzero(as_tuple=True)
    u = which[i, w] / p_short[i, w]
    long_stall = parts.shift[1] + parts.stall_var[1].sqrt() * torch.randn(
        u.shape, generator=generator)
    short_stall = parts.shift[SHORT] - (-u).log1p() / parts.stall_rate
    v = var.sqrt_().mul_(torch.randn(loc.shape, generator=generator)).add_(loc).add_(mu_u)
    v.index_put_((i, w), torch.where(u < 1, short_stall, long_stall), accumulate=True)
    v = v.add_(on * episode_levels(nodes, parts, samples, generator))
    if not ancestral:
        return v, None
    b = torch.zeros_like(v).index_put_((i, w), (u < 1).float())
    return v, FilterState(s.h, g, torch.zeros_like(g), mu_u, torch.zeros_like(mu_u), c, b)


@torch.no_grad()
def sample_trace(model: RuntimeModel, iterations: int, seed: int) -> Trace:
    """Ancestral sampling from the generative model: a synthetic trace of ``iterations``, each
    iteration ``next_step`` from the last one's z; g_0 and u_0 drawn from their priors, C_0 and
    B_0 from their chains' stationary laws."""
    gen = torch.Generator().manual_seed(seed)
    parts, prior = model.parts(), model.initial_state(1)
    s = dataclasses.replace(
        prior, mu_g=torch.randn(prior.mu_g.shape, generator=gen), var_g=torch.zeros_like(prior.var_g),
        mu_u=prior.var_u.sqrt() * torch.randn(prior.mu_u.shape, generator=gen),
        var_u=torch.zeros_like(prior.var_u))
    rows = []
    for _ in range(iterations):
        v, s = next_step(model, s, 1, gen, parts, ancestral=True)
        rows.append(model.emitter.unspace(v))
    runtimes = torch.cat(rows).double().numpy() * model.scale_s
    return from_arrays(runtimes, meta={"source": "model-sample", "time_unit": model.time_unit,
                                       "seed": seed}, node=model.node)
