"""q(z_t | x_{1:t}): online filtering, one pass over the workers per iteration, no optimisation.

The cluster part g is the inference network's (``inference``). The worker part is exact given g:
u_{t,w} is conditionally a mixture of 2 x 3 x 3 components (episode x regime x the emitter's
part; a short stall's is an exponentially modified Gaussian, whose posterior of u is still closed
form, ``observe_components``) whose posterior after an observed v, or after the censored fact
v > log tau~, is moment-matched back to one Gaussian (assumed-density filtering,
``worker_update``). The node-shared C and J are weighed on all of a node's observations at once
(``node_posterior``), and P(C_{t,k} = 1 | x_{1:t}) and P(B_{t,w} = 1 | x_{1:t}) are carried
exactly (two-state forward filters, per node and per worker). This part has no learnt
parameters, so it behaves the same in states that training never visited.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bdsgd.runtime_model.emitter import Emitter
from bdsgd.runtime_model.gaussian import EMITTER_PARTS, SHORT, Mixture, above, log_ndtr, log_phi, stack
from bdsgd.runtime_model.inference import InferenceNetwork
from bdsgd.runtime_model.parameters import StepParameters
from bdsgd.runtime_model.transition import Nodes, Transition


@dataclass
class FilterState:
    """q(z_t | x_{1:t}) and the recurrent summary h_t, for a batch of B sequences."""

    h: torch.Tensor  # (B, H)
    mu_g: torch.Tensor  # (B, d)
    var_g: torch.Tensor  # (B, d)
    mu_u: torch.Tensor  # (B, n)
    var_u: torch.Tensor  # (B, n)
    p_c: torch.Tensor  # (B, K) P(C_{t,k} = 1 | x_{1:t}): node k is in an episode
    p_b: torch.Tensor  # (B, n) P(B_{t,w} = 1 | x_{1:t}): worker w is in a short stall


def filter_step(inference: InferenceNetwork, transition: Transition, emitter: Emitter,
                nodes: Nodes, params: StepParameters, s: FilterState, x: torch.Tensor,
                censored: torch.Tensor) -> FilterState:
    """q(z_t | x_{1:t}) from q(z_{t-1} | x_{1:t-1}) ``s`` and x_t (B, n), normalised; where
    ``censored``, x holds the cutoff time tau~ instead. g's part is the inference network's at
    the transition's prior mean, u's, C's and B's ``worker_update`` through
    ``predictive_mixture`` at g = mu^g_t."""
    h = inference.summarise(s.h, x.log(), censored, params.phi_e)
    mu_g, var_g = inference.combine_g(transition.predict_g(s.mu_g, s.var_g)[0], h)
    mix = predictive_mixture(emitter, nodes, params, s, mu_g)
    mu_u, var_u, _, p_c, p_b = worker_update(mix, emitter.space(x), censored, nodes,
                                             params.log_w_j)
    return FilterState(h, mu_g, var_g, mu_u, var_u, p_c, p_b)


def predictive_mixture(emitter: Emitter, nodes: Nodes, params: StepParameters, s: FilterState,
                       g: torch.Tensor) -> Mixture:
    """p(v_t | g_t, x_{1:t-1}): the node's episode C_t (off, on) x u_t's three regimes x the
    emitter's three parts, given q(z_{t-1}) ``s`` and the cluster state g (..., d).

    u_t's prior is the transition's step (``Transition.carry_u`` plus the regime's variance) of
    q(u_{t-1}), C_t's and B_t's the chains' one step from P(C_{t-1} = 1) and P(B_{t-1} = 1);
    the emitter's mixture (``Emitter.mixture``) sits at u_t's prior mean, and the variance of
    u_t is added to each component's.
    """
    mu_u, var_u = Transition.carry_u(s.mu_u, s.var_u, params.rho)
    p_short = Transition.stall_chain(params.stall.probs).predict(s.p_b).clamp(1e-7, 1 - 1e-7)
    emitted = emitter.mixture(g, mu_u, p_short, params.emitter_e, params.stall)
    step = stack(params.step, emitted.mean[0])
    log_w_u = stack(params.log_w_u, emitted.mean[0])
    k, parts = len(params.step), len(params.stall.shift)
    # regime-major, part-minor; broadcast views, not repeat's copies (it costs the most here)
    u_var = (var_u + step)[:, None].expand(-1, parts, *([-1] * var_u.dim()))
    mean = emitted.mean.expand(k, *emitted.mean.shape).flatten(0, 1)
    var = (u_var + emitted.var).flatten(0, 1)
    u_var = u_var.flatten(0, 1)
    log_w = (log_w_u[:, None] + emitted.log_w[None]).flatten(0, 1)
    p_c = Transition.episode_chain(params.switch).predict(s.p_c).clamp(1e-7, 1 - 1e-7)
    log_p_c = torch.stack([(-p_c).log1p(), p_c.log()])  # (2, ..., K)
    shift, extra = params.episode
    return Mixture(torch.cat([mean, mean + shift]), torch.cat([var, var + extra]),
                   torch.cat([log_w + nodes.spread(c) for c in log_p_c]),
                   torch.cat([u_var, u_var]), emitted.u_mean, emitted.rate, log_p_c)


def node_posterior(log_joint: torch.Tensor, nodes: Nodes, log_w_j: torch.Tensor,
                   log_p_c: torch.Tensor):
    """P(component | every observation of the worker's node) per worker, the log marginal
    likelihood of the observations, summed over nodes, and P(C = 1 | the node's observations).

    log_joint (18, ..., n) is log P(component) + log p(v_w | component), components
    episode-major (C = 0, 1), then regime (stay, jump, reset), then the emitter's part (normal,
    long stall, short stall); P(component) holds the worker's share of the node's P(C)
    (``log_p_c`` (2, ..., K)) and P(J). C and J are shared by the node: with
    L_{w,C,J} = log [(1 - p_r) p(v_w | C, J) + p_r p(v_w | C, reset)],
    P(C, J | node) ~ P(C) P(J) prod_{w in node} exp L_{w,C,J}, and a worker's component
    posterior is P(C, J | node) P(component, v_w | C, J) / exp L_{w,C,J}, summed over the J a
    component allows (a reset allows both). A node of one worker gives the plain per-worker
    mixture posterior.
    """
    per_regime = log_joint.unflatten(0, (2, 3, -1)).logsumexp(2)  # log P(C, k) p(v | C, k)
    log_c = nodes.spread(log_p_c)[:, None]  # (2, 1, ..., n)
    prior = log_c + stack(log_w_j, per_regime[0, 0])  # log P(C) P(J), (2, 2, ..., n)
    given = torch.logaddexp(per_regime[:, :2] - prior, per_regime[:, 2:] - log_c)  # L_{w,C,J}
    joint = log_p_c[:, None] + stack(log_w_j, log_p_c[0]) + nodes.total(given)  # (2, 2, ..., K)
    log_norm = joint.flatten(0, 1).logsumexp(0)
    post = joint - log_norm  # log P(C, J | node)
    weight = nodes.spread(post) - given  # log P(C, J | node) / p(v_w | C, J), per worker
    by_c = log_joint.unflatten(0, (2, 3, -1))
    moves = (weight - prior)[:, :, None] + by_c[:, :2]  # stay (J = 0) and jump (J = 1)
    resets = (weight.logsumexp(1) - log_c[:, 0])[:, None] + by_c[:, 2]
    log_r = torch.cat([moves, resets[:, None]], 1).flatten(0, 2)
    return log_r.exp(), log_norm.sum(-1), post[1].logsumexp(0).exp()


def observe_components(mix: Mixture, v: torch.Tensor, censored: torch.Tensor):
    """Per component of ``mix``: log p_k(v) (log P_k(V > v) where censored), and the posterior
    of its Gaussian part G (all of V but a short stall's exponential length E) given that,
    standardised: (E[G | .] - mean_k) / sd_k and Var[G | .] / var_k. Three (K, ..., n) tensors.

    With alpha = (v - mean_k) / sd_k, a Gaussian component (V = G) gives the Gaussian density and
    G = v, or, censored, G truncated below at v (``above``). A short stall, V = G + E,
    E ~ Exp(lambda), with b = lambda sd_k and beta = alpha - b: observed, p(v) = lambda
    exp(-b alpha + b^2 / 2) Phi(beta), and G | v is N(mean_k + lambda var_k, var_k) truncated
    above at v (mean b - h', variance 1 - beta h' - h'^2, h' = phi(beta) / Phi(beta)); censored,
    P(V > v) = P(G > v) + P(G <= v, E > v - G) = (1 - Phi(alpha)) + exp(-b alpha + b^2 / 2)
    Phi(beta), and G is the mixture of the two truncated normals with these two weights.
    """
    sd = mix.var.sqrt()
    alpha = (v - mix.mean) / sd
    lp = log_phi(alpha)
    tail, h, var_tail = above(alpha, lp)  # every component's Gaussian part, censored at v

    def short(t):  # the short stalls' entries of a (K, ..., n) tensor
        return t.unflatten(0, (-1, EMITTER_PARTS))[:, SHORT]

    a_s, lp_s, tail_s, h_s, var_tail_s = (short(t) for t in (alpha, lp, tail, h, var_tail))
    b = mix.rate * short(sd)
    beta = a_s - b
    log_e = b * (0.5 * b - a_s) + log_ndtr(beta)  # log P(G <= v, E > v - G)
    h_below = torch.exp(lp_s - log_e)  # phi(beta) / Phi(beta)
    mean_below = b - h_below
    var_below = (1 - beta * h_below - h_below**2).clamp(0, 1)
    log_surv = torch.logaddexp(tail_s, log_e)
    p_g = torch.exp(tail_s - log_surv)  # P(G > v | V > v)
    mean_cens = p_g * h_s + (1 - p_g) * mean_below
    var_cens = (p_g * (var_tail_s + h_s**2) + (1 - p_g) * (var_below + mean_below**2)
                - mean_cens**2).clamp(0, 1)
    gaussian = (torch.where(censored, tail, lp - sd.log()), torch.where(censored, h, alpha),
                torch.where(censored, var_tail, 0.0))
    stall = (torch.where(censored, log_surv, mix.rate.log() + log_e),
             torch.where(censored, mean_cens, mean_below),
             torch.where(censored, var_cens, var_below))
    return tuple(torch.cat([g.unflatten(0, (-1, EMITTER_PARTS))[:, :SHORT], s[:, None]], 1)
                 .flatten(0, 1) for g, s in zip(gaussian, stall, strict=True))


def worker_update(mix: Mixture, v: torch.Tensor, censored: torch.Tensor, nodes: Nodes,
                  log_w_j: torch.Tensor):
    """Posterior of u_{t,w} after v_{t,w} (or after v > v where censored), moment-matched to one
    Gaussian, log p(v) (or log P(V > v)) of all workers, each node's P(C = 1) and each worker's
    P(B = 1) (the short stall's components' posterior): assumed-density filtering through
    ``mix`` (18 components, see ``node_posterior``).

    In component k the Gaussian part is G = u + (the emitter's noise), of mean m_k and variance
    V_k, u's prior variance is P_k, and u | G is exact: mean mu + K_k (G - m_k), variance
    P_k (1 - K_k), K_k = P_k / V_k. So with G's posterior (``observe_components``: G = v for a
    Gaussian component; a truncated normal, or two, where censored or a short stall), u's is mean
    mu + K_k (E[G] - m_k), variance P_k (1 - K_k) + K_k^2 Var[G]. The components are weighted by
    their posterior probabilities r_k and collapsed: mean sum r_k mu_k, variance
    sum r_k (P_k + mu_k^2) - mean^2.
    """
    log_lik, g_mean, g_var = observe_components(mix, v, censored)
    gain = mix.u_var / mix.var
    mu = mix.u_mean + gain * mix.var.sqrt() * g_mean
    var = mix.u_var * (1 - gain * (1 - g_var)).clamp_min(1e-6)
    r, log_norm, p_c = node_posterior(mix.log_w + log_lik, nodes, log_w_j, mix.log_p_c)
    mean = (r * mu).sum(0)
    p_b = r.unflatten(0, (-1, EMITTER_PARTS))[:, SHORT].sum(0)
    return mean, (r * (var + (mu - mean) ** 2)).sum(0).clamp_min(1e-8), log_norm, p_c, p_b


def impute(x: torch.Tensor, censored: torch.Tensor, generator=None) -> torch.Tensor:
    """``censoring: impute``, the paper's treatment: every censored run-time becomes an
    uncensored run-time of the same iteration drawn uniformly at random (needs at least one
    uncensored worker per iteration), so the filter and the likelihood see no censoring."""
    ranked = torch.where(censored, torch.inf, x).sort(dim=-1).values  # uncensored first
    k = (~censored).sum(-1, keepdim=True)
    pick = (torch.rand(x.shape, generator=generator) * k).long()
    return torch.where(censored, torch.gather(ranked, -1, pick), x)
