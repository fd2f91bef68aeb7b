"""``RuntimeModel``: the factors composed into the model of the package docstring, its objective
(the ELBO) and its one-step predictive."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from bdsgd.config import ModelConfig
from bdsgd.runtime_model.emitter import Emitter
from bdsgd.runtime_model.filtering import FilterState, filter_step, node_posterior, observe_components
from bdsgd.runtime_model.gaussian import Mixture, gaussian_entropy, stack
from bdsgd.runtime_model.inference import InferenceNetwork
from bdsgd.runtime_model.sampling import next_step, sample_trace
from bdsgd.runtime_model.transition import Nodes, Transition
from bdsgd.traces.schema import Trace


@dataclass
class Parts:
    """Everything that does not depend on the data: the scalar parameters of u's regimes and the
    emitter's stall, and the workers' embeddings projected through the layers they enter.
    Computed once per training sequence batch or per predictor, not once per iteration."""

    step: torch.Tensor  # (q_u, q_j, q_r)
    log_w_u: torch.Tensor  # log P(regime): stay, jump, reset
    log_w_j: torch.Tensor  # log P(J): (log(1 - p_j), log p_j), the node's jump indicator
    rho: torch.Tensor  # () the pull of each worker's level towards the workers' mean
    switch: torch.Tensor  # (p_on, p_off) of a node's episode C
    episode: torch.Tensor  # (delta_c, s_c^2): an episode's shift of v and its added variance
    shift: torch.Tensor  # (0, delta, delta_s): each emitter part's shift of v
    stall_var: torch.Tensor  # (0, s_st^2, 0): its added variance
    stall_rate: torch.Tensor  # () lambda, the rate of a short stall's exponential length
    stall_probs: torch.Tensor  # (pi, pi_s, kappa): a long stall; a short one starts, goes on
    emitter_e: tuple[torch.Tensor, ...]  # ``Emitter.project``
    phi_e: torch.Tensor  # (n, H) ``InferenceNetwork.project``


class RuntimeModel(nn.Module):
    """Transition, emitter, inference network and the workers' identity embeddings.

    Run-times enter and leave in seconds (or the trace's unit) through the policy's predictor
    and ``sample_trace``; inside, everything is divided by ``scale_s`` (the training median).
    ``node`` (n,): the node of each worker (the training trace's), whose workers share J and C.
    """

    def __init__(self, config: ModelConfig, n_workers: int, scale_s: float = 1.0,
                 time_unit: str = "s", node: np.ndarray | None = None):
        super().__init__()
        self.config, self.n_workers = config, n_workers
        self.scale_s, self.time_unit = float(scale_s), time_unit
        self.node = None if node is None else np.asarray(node, dtype=np.int64)
        self.nodes = Nodes(self.node if config.node_jumps else None, n_workers)
        self.embedding = nn.Parameter(0.1 * torch.randn(n_workers, config.worker_dim))
        self.transition = Transition(config.latent_dim)
        self.emitter = Emitter(config.latent_dim, config.worker_dim, config.hidden_dim,
                               config.emission)
        self.inference = InferenceNetwork(config.latent_dim, config.worker_dim, config.hidden_dim)

    def initial_state(self, batch: int) -> FilterState:
        """z_0: g_0 ~ N(0, I), u_0 ~ N(0, p_0), C_0 and B_0 at their chains' stationary laws."""
        d, n, tr = self.config.latent_dim, self.n_workers, self.transition
        return FilterState(
            h=torch.zeros(batch, self.config.hidden_dim), mu_g=torch.zeros(batch, d),
            var_g=torch.ones(batch, d), mu_u=torch.zeros(batch, n),
            # full tensors, not expanded views: a compiled step then serves t = 0 too
            var_u=tr.p0_u * torch.ones(batch, n),
            p_c=tr.episode_chain(tr.switch()).stationary() * torch.ones(batch, self.nodes.count),
            p_b=tr.stall_chain(self.emitter.stall_probs()).stationary() * torch.ones(batch, n),
        )

    def parts(self) -> Parts:
        return Parts(*self.transition.u_regimes(), self.transition.rho,
                     *self.transition.episode_parts(),
                     *self.emitter.stall_parts(), self.emitter.project(self.embedding),
                     self.inference.project(self.embedding))

    def emission(self, g: torch.Tensor, u: torch.Tensor, p_short: torch.Tensor,
                 parts: Parts) -> Mixture:
        """p(v_t | g_t, u_t): the emitter's three parts at level f(g, e_w) + u, with each
        worker's P(B_t = 1) = ``p_short`` (..., n)."""
        loc, scale = self.emitter(g, parts.emitter_e)
        shift, stall_var = stack(parts.shift, loc), stack(parts.stall_var, loc)
        return Mixture(loc + u + shift, scale**2 + stall_var,
                       self.emitter.part_log_w(p_short, parts.stall_probs),
                       torch.zeros_like(shift), u, parts.stall_rate)

    def mixture(self, g: torch.Tensor, s: FilterState, parts: Parts | None = None) -> Mixture:
        """p(v_t | g_t, x_{1:t-1}): the node's episode C_t (off, on) x u_t's three regimes x the
        emitter's three parts, given q(z_{t-1}) ``s`` and the cluster state g (..., d)."""
        parts = parts or self.parts()
        tr = self.transition
        mu_u, var_u = tr.carry_u(s.mu_u, s.var_u, parts.rho)
        p_short = tr.stall_chain(parts.stall_probs).predict(s.p_b).clamp(1e-7, 1 - 1e-7)
        part = self.emission(g, mu_u, p_short, parts)
        step, log_w_u = stack(parts.step, part.mean[0]), stack(parts.log_w_u, part.mean[0])
        k = len(parts.step)
        u_var = (var_u + step).repeat_interleave(len(parts.shift), 0)
        mean = part.mean.repeat(k, *([1] * mu_u.dim()))
        var = u_var + part.var.repeat(k, *([1] * mu_u.dim()))
        log_w = (log_w_u[:, None] + part.log_w[None]).flatten(0, 1)
        p_c = tr.episode_chain(parts.switch).predict(s.p_c).clamp(1e-7, 1 - 1e-7)
        log_p_c = torch.stack([(-p_c).log1p(), p_c.log()])  # (2, ..., K)
        shift, extra = parts.episode
        return Mixture(torch.cat([mean, mean + shift]), torch.cat([var, var + extra]),
                       torch.cat([log_w + self.nodes.spread(c) for c in log_p_c]),
                       torch.cat([u_var, u_var]), part.u_mean, part.rate, log_p_c)

    def step(self, s: FilterState, x: torch.Tensor, censored: torch.Tensor,
             parts: Parts | None = None) -> FilterState:
        """One filtering step (``filtering.filter_step``). ``parts``: the model's scalar
        parameters, when the caller has them already (the policy's predictor)."""
        return filter_step(self, s, x, censored, parts or self.parts())

    def log_likelihood(self, mix: Mixture, x: torch.Tensor, censored: torch.Tensor,
                       parts: Parts) -> torch.Tensor:
        """log p(x) of all workers under ``mix`` (..., n) (log P(X > x) where censored), as a
        density over x~ (the lognormal's Jacobian included)."""
        v = self.emitter.space(x)
        log_joint = mix.log_w + observe_components(mix, v, censored)[0]
        log_norm = node_posterior(log_joint, self.nodes, parts.log_w_j, mix.log_p_c)[1]
        if self.emitter.emission == "lognormal":
            log_norm = log_norm - torch.where(censored, 0.0, v).sum(-1)
        return log_norm

    def elbo(self, x: torch.Tensor, censored: torch.Tensor, generator=None,
             seen: tuple[torch.Tensor, torch.Tensor] | None = None, term=None) -> torch.Tensor:
        """The objective per sequence of x (B, T, n), normalised (see the package docstring).

        ``seen`` = (x', censored') is what the filter runs on (default: x itself) while the
        likelihood scores x: a more censored view teaches the filter the observations it gets in
        deployment, and the score asks it to forecast the truth from them. ``term``: what
        computes ``elbo_term`` (its torch.compile'd version when training compiles it).
        """
        seen_x, seen_censored = seen if seen is not None else (x, censored)
        term = term or self.elbo_term
        s = self.initial_state(x.shape[0])
        total = torch.zeros(x.shape[0])
        parts = self.parts()
        for t in range(x.shape[1]):
            noise = torch.randn(s.mu_g.shape, generator=generator)
            s, value = term(s, seen_x[:, t], seen_censored[:, t], x[:, t], censored[:, t], noise,
                            parts)
            total = total + value
        return total

    def elbo_term(self, s: FilterState, seen_x, seen_censored, x, censored, noise,
                  parts: Parts) -> tuple[FilterState, torch.Tensor]:
        """One iteration of ``elbo``: the filtering step on what was seen, then the score of x_t
        at g_t = mu^g_t + sigma^g_t noise, a draw of q(g_t) (``noise`` (B, d) standard normal,
        drawn outside: a seeded generator would break a compiled graph)."""
        new = self.step(s, seen_x, seen_censored, parts)
        mix = self.mixture(new.mu_g + new.var_g.sqrt() * noise, s, parts)
        value = (self.log_likelihood(mix, x, censored, parts) + gaussian_entropy(new.var_g)
                 + self.transition.log_prior_g(s, new.mu_g, new.var_g))
        return new, value

    def predictive(self, s: FilterState, samples: int, generator=None,
                   parts: Parts | None = None) -> Mixture:
        """p(v_{t+1} | x_{1:t}) as S draws of g_{t+1}, each with every worker's exact mixture
        (u_{t+1} integrated out): a Mixture of shape (18, S, n)."""
        mu_g, var_g = self.transition.predict_g(s)
        g = mu_g + var_g.sqrt() * torch.randn((samples, mu_g.shape[-1]), generator=generator)
        return self.mixture(g, s, parts)

    def draws(self, s: FilterState, samples: int, generator=None,
              parts: Parts | None = None) -> torch.Tensor:
        """S joint draws (S, n) of v_{t+1} | x_{1:t} (``sampling.next_step``)."""
        return next_step(self, s, samples, generator, parts or self.parts())[0]

    def sample_trace(self, iterations: int, seed: int) -> Trace:
        """A synthetic trace of ``iterations`` drawn from the model (``sampling.sample_trace``)."""
        return sample_trace(self, iterations, seed)
