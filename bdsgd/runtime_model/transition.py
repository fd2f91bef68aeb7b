"""p(z_t | z_{t-1}): the latent state's dynamics, and which workers share a node.

    g_t     ~ N(A g_{t-1} + b, diag q_g),                 g_0 ~ N(0, I)
    u_{t,w} ~ N(rho u_{t-1,w} + (1 - rho) mean_w' u_{t-1,w'}, q),   u_0 ~ N(0, p_0)
              q = q_r if R_{t,w}, else q_j if J_{t,k(w)}, else q_u
    J_{t,k} ~ Bernoulli(p_j),  R_{t,w} ~ Bernoulli(p_r)
    C_{t,k}: a two-state chain, on with p_on, off with p_off        (a node's episode)
    B_{t,w}: a two-state chain, on with pi_s, stays on with kappa   (a worker's short stall)

The reset regime (p_r, q_r) is fixed, not learnt: it keeps the filter open to changes far larger
than any the training trace had, which the learnt regimes would otherwise explain away as stall
after stall. B's parameters are the emitter's (a short stall is one of its parts), its chain is
this module's ``TwoStateChain``, as C's is.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bdsgd.runtime_model.gaussian import gaussian_cross_entropy

RESET_PROB, RESET_VAR = 1e-4, 4.0  # u's reset regime, p_r and q_r (a factor e^2 either way)
MIN_OFF = 0.05  # an episode ends with probability >= 5 % per iteration (``Transition.switch``)


class Nodes:
    """Which node each worker is on, for the node-shared J and C: sums over a node's workers
    (``total``) and a node's value back to each of its workers (``spread``), along the last axis.
    Every worker its own node (``node`` None) makes both the identity."""

    def __init__(self, node: np.ndarray | None, n_workers: int):
        ids = np.arange(n_workers) if node is None else np.unique(node, return_inverse=True)[1]
        self.index = torch.as_tensor(ids, dtype=torch.long)
        self.count = int(ids.max()) + 1
        self.singletons = self.count == n_workers

    def total(self, x: torch.Tensor) -> torch.Tensor:
        # a sum by index, not a product with a one-hot (n, K) matrix: O(n), not O(n K)
        if self.singletons:
            return x
        return x.new_zeros(*x.shape[:-1], self.count).index_add(-1, self.index, x)

    def spread(self, y: torch.Tensor) -> torch.Tensor:
        return y if self.singletons else y.index_select(-1, self.index)


class TwoStateChain(NamedTuple):
    """A Markov chain S_t in {0, 1}: P(S_t = 1 | S_{t-1} = 0) = start,
    P(S_t = 1 | S_{t-1} = 1) = stay = 1 - stop. Both stay and stop are kept as the chain's
    parameters give them, so that neither is computed as 1 - (1 - x)."""

    start: torch.Tensor
    stay: torch.Tensor
    stop: torch.Tensor

    def predict(self, p: torch.Tensor) -> torch.Tensor:
        """P(S_t = 1) from P(S_{t-1} = 1) = p: one step of the chain (a forward filter's
        prediction, or, at p in {0, 1}, the law of the next state)."""
        return p * self.stay + (1 - p) * self.start

    def stationary(self) -> torch.Tensor:
        """P(S = 1) of the stationary law, start / (start + stop)."""
        return self.start / (self.start + self.stop)


class Transition(nn.Module):
    """p(z_t | z_{t-1}): g's linear Gaussian step, u's regimes and pull, C's and B's chains."""

    def __init__(self, latent_dim: int):
        super().__init__()
        self.A = nn.Parameter(0.9 * torch.eye(latent_dim))
        self.b = nn.Parameter(torch.zeros(latent_dim))
        self.log_q_g = nn.Parameter(torch.full((latent_dim,), math.log(0.1)))
        self.log_q_u = nn.Parameter(torch.tensor(math.log(1e-4)))
        self.log_q_j = nn.Parameter(torch.tensor(math.log(0.25)))
        self.jump_logit = nn.Parameter(torch.tensor(-6.0))  # p_j ~ 0.25 %: the data must ask for more
        self.log_p0_u = nn.Parameter(torch.tensor(math.log(0.01)))
        self.rho_logit = nn.Parameter(torch.tensor(4.6))  # rho = sigmoid(.) ~ 0.99
        # episodes start rare (0.25 %), last ~5 iterations and slow a node by ~35 %
        self.switch_logit = nn.Parameter(torch.tensor([-4.37, -1.67]))  # see ``switch``
        self.episode_shift = nn.Parameter(torch.tensor(-1.05))  # delta_c = softplus(.) ~ 0.3
        self.episode_log_var = nn.Parameter(torch.tensor(math.log(0.01)))

    @property
    def rho(self):
        return torch.sigmoid(self.rho_logit)

    @property
    def q_g(self):
        return self.log_q_g.exp()

    @property
    def p0_u(self):
        return self.log_p0_u.exp()

    def predict_g(self, mu_g: torch.Tensor, var_g: torch.Tensor):
        """Moments of p(g_t | x_{1:t-1}) from q(g_{t-1}) = N(mu_g, diag var_g): mean and the
        diagonal of A Sigma A^T + Q."""
        return mu_g @ self.A.T + self.b, var_g @ (self.A**2).T + self.q_g

    @staticmethod
    def carry_u(mu_u, var_u, rho):
        """Moments of rho u_{t-1,w} + (1 - rho) mean_w' u_{t-1,w'} (the mean's own variance,
        O(1/n), is left out)."""
        return rho * mu_u + (1 - rho) * mu_u.mean(-1, keepdim=True), rho**2 * var_u

    def u_regimes(self):
        """Step variances (q_u, q_j, q_r), log probabilities of a worker's regime (stay, jump,
        reset) = ((1 - p_j)(1 - p_r), p_j (1 - p_r), p_r), and of the node's J (1 - p_j, p_j)."""
        step = torch.cat([torch.stack([self.log_q_u, self.log_q_j]).exp(),
                          torch.tensor([RESET_VAR])])
        log_w_j = torch.stack([F.logsigmoid(-self.jump_logit), F.logsigmoid(self.jump_logit)])
        log_w = torch.cat([log_w_j + math.log1p(-RESET_PROB),
                           torch.tensor([math.log(RESET_PROB)])])
        return step, log_w, log_w_j

    def switch(self):
        """(p_on, p_off), kept an episode's: p_off >= MIN_OFF and p_on < p_off (a node is in an
        episode less than half the time). Unconstrained, training found an optimum where C
        stood for a node's lasting level (p_off ~ 1 %, P(C = 1) ~ 1 on half the nodes): the
        same fit as u's, and no episode left to end."""
        p_off = MIN_OFF + (1 - MIN_OFF) * torch.sigmoid(self.switch_logit[1])
        return torch.stack([p_off * torch.sigmoid(self.switch_logit[0]), p_off])

    def episode_parameters(self):
        """(p_on, p_off) and (delta_c, s_c^2) of the episode C."""
        return self.switch(), torch.stack([F.softplus(self.episode_shift),
                                           self.episode_log_var.exp()])

    @staticmethod
    def episode_chain(switch: torch.Tensor) -> TwoStateChain:
        """C's chain from ``switch`` = (p_on, p_off)."""
        p_on, p_off = switch
        return TwoStateChain(p_on, 1 - p_off, p_off)

    @staticmethod
    def stall_chain(probs: torch.Tensor) -> TwoStateChain:
        """B's chain from ``probs`` = (pi, pi_s, kappa), ``Emitter.stall_probs``."""
        _, pi_s, kappa = probs
        return TwoStateChain(pi_s, kappa, 1 - kappa)

    def log_prior_g(self, prev_mu_g, prev_var_g, mu_g, var_g):
        """E_q[log p(g_t | g_{t-1})] under q(g_{t-1}) = N(prev_mu_g, diag prev_var_g) and
        q(g_t) = N(mu_g, diag var_g), per sequence (analytic)."""
        return gaussian_cross_entropy(mu_g, var_g, prev_mu_g @ self.A.T + self.b,
                                      prev_var_g @ (self.A**2).T, self.q_g)
