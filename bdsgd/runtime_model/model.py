"""``RuntimeModel``: the factors composed into the model of the package docstring, its objective
(the ELBO) and its one-step predictive.

The composite sits on top: it owns the factors (``transition``, ``emitter``, ``inference``), the
workers' embeddings and nodes, and passes them, with ``step_parameters``, to the functions of
``filtering`` and ``sampling``, none of which sees it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from bdsgd.config import ModelConfig
from bdsgd.runtime_model.emitter import Emitter
from bdsgd.runtime_model.filtering import (
    FilterState,
    filter_step,
    node_posterior,
    observe_components,
    predictive_mixture,
)
from bdsgd.runtime_model.gaussian import Mixture, gaussian_entropy
from bdsgd.runtime_model.inference import InferenceNetwork
from bdsgd.runtime_model.parameters import StepParameters
from bdsgd.runtime_model.sampling import Noise, draw_noise, next_step, sample_runtimes
from bdsgd.runtime_model.transition import Nodes, Transition
from bdsgd.traces.schema import Trace, from_arrays


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

    def step_parameters(self) -> StepParameters:
        """The factors' parameters as a step reads them (``parameters``): computed once per
        training batch or per predictor, not once per iteration."""
        return StepParameters(*self.transition.u_regimes(), self.transition.rho,
                              *self.transition.episode_parameters(),
                              self.emitter.stall_parameters(), self.emitter.project(self.embedding),
                              self.inference.project(self.embedding))

    def step(self, s: FilterState, x: torch.Tensor, censored: torch.Tensor,
             params: StepParameters | None = None) -> FilterState:
        """One filtering step (``filtering.filter_step``). ``params``: ``step_parameters()``,
        when the caller has them already (the policy's predictor)."""
        return filter_step(self.inference, self.transition, self.emitter, self.nodes,
                           params or self.step_parameters(), s, x, censored)

    def log_likelihood(self, mix: Mixture, x: torch.Tensor, censored: torch.Tensor,
                       params: StepParameters) -> torch.Tensor:
        """log p(x) of all workers under ``mix`` (..., n) (log P(X > x) where censored), as a
        density over x~ (the lognormal's Jacobian included)."""
        v = self.emitter.space(x)
        log_joint = mix.log_w + observe_components(mix, v, censored)[0]
        log_norm = node_posterior(log_joint, self.nodes, params.log_w_j, mix.log_p_c)[1]
        if self.emitter.emission == "lognormal":
            log_norm = log_norm - torch.where(censored, 0.0, v).sum(-1)
        return log_norm

    def elbo(self, x: torch.Tensor, censored: torch.Tensor, generator=None,
             seen: tuple[torch.Tensor, torch.Tensor] | None = None, term=None,
             start: FilterState | None = None) -> torch.Tensor:
        """The objective per sequence of x (B, T, n), normalised (see the package docstring).

        ``seen`` = (x', censored') is what the filter runs on (default: x itself) while the
        likelihood scores x: a more censored view teaches the filter the observations it gets in
        deployment, and the score asks it to forecast the truth from them. ``term``: what
        computes ``elbo_term`` (its torch.compile'd version when training compiles it).
        ``start``: q(z) before x's first iteration (default: z_0, ``initial_state``).
        """
        seen_x, seen_censored = seen if seen is not None else (x, censored)
        term = term or self.elbo_term
        s = start if start is not None else self.initial_state(x.shape[0])
        total = torch.zeros(x.shape[0])
        params = self.step_parameters()
        for t in range(x.shape[1]):
            noise = torch.randn(s.mu_g.shape, generator=generator)
            s, value = term(s, seen_x[:, t], seen_censored[:, t], x[:, t], censored[:, t], noise,
                            params)
            total = total + value
        return total

    def elbo_term(self, s: FilterState, seen_x, seen_censored, x, censored, noise,
                  params: StepParameters) -> tuple[FilterState, torch.Tensor]:
        """One iteration of ``elbo``: the filtering step on what was seen, then the score of x_t
        at g_t = mu^g_t + sigma^g_t noise, a draw of q(g_t) (``noise`` (B, d) standard normal,
        drawn outside: a seeded generator would break a compiled graph)."""
        new = self.step(s, seen_x, seen_censored, params)
        mix = predictive_mixture(self.emitter, self.nodes, params, s,
                                 new.mu_g + new.var_g.sqrt() * noise)
        value = (self.log_likelihood(mix, x, censored, params) + gaussian_entropy(new.var_g)
                 + self.transition.log_prior_g(s.mu_g, s.var_g, new.mu_g, new.var_g))
        return new, value

    def predictive(self, s: FilterState, samples: int, generator=None,
                   params: StepParameters | None = None) -> Mixture:
        """p(v_{t+1} | x_{1:t}) as S draws of g_{t+1}, each with every worker's exact mixture
        (u_{t+1} integrated out, ``filtering.predictive_mixture``): a Mixture of shape
        (18, S, n)."""
        mu_g, var_g = self.transition.predict_g(s.mu_g, s.var_g)
        g = mu_g + var_g.sqrt() * torch.randn((samples, mu_g.shape[-1]), generator=generator)
        return predictive_mixture(self.emitter, self.nodes, params or self.step_parameters(), s,
                                  g)

    def noise(self, samples: int, generator=None) -> Noise:
        """The random numbers of S joint draws (``sampling.draw_noise``)."""
        return draw_noise(samples, self.config.latent_dim, self.nodes, self.n_workers, generator)

    def draws(self, s: FilterState, noise: Noise,
              params: StepParameters | None = None) -> torch.Tensor:
        """Joint draws (S, n) of v_{t+1} | x_{1:t} at ``noise`` (``RuntimeModel.noise``'s, S
        rows; ``sampling.next_step``)."""
        return next_step(self.transition, self.emitter, self.nodes,
                         params or self.step_parameters(), s, noise)[0]

    def forecast(self, s: FilterState, noise: Noise, params: StepParameters) -> torch.Tensor:
        """``draws`` as run-times x_{t+1} in seconds: a function of tensors alone, which the
        policy's predictor may compile."""
        return self.emitter.unspace(self.draws(s, noise, params)) * self.scale_s

    @torch.no_grad()
    def sample_trace(self, iterations: int, seed: int) -> Trace:
        """A synthetic trace of ``iterations`` drawn from the model, in the training trace's
        unit and with its nodes (``sampling.sample_runtimes``)."""
        x = sample_runtimes(self.transition, self.emitter, self.nodes, self.step_parameters(),
                            self.initial_state(1), iterations, seed)
        return from_arrays(x.double().numpy() * self.scale_s,
                           meta={"source": "model-sample", "time_unit": self.time_unit,
                                 "seed": seed}, node=self.node)
