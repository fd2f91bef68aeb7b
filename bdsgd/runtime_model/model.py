"""The BDSGD run-time model: a deep generative dynamical model of every worker's run-time.

Run-times are divided by the training trace's median m (kept in the checkpoint), so the model is
unit-free: x~_{t,w} = x_{t,w} / m for iteration t and worker w = 1..n. The emitter is Gaussian in
v = log x~ (``lognormal``, the default: positive, heavy right tail) or in v = x~ (``gaussian``, the
paper's; draws below zero are clamped to a tiny positive).

Generative model. The latent state z_t = (g_t, u_t, C_t, k_t) has a cluster part g_t in R^d
(load shared by all workers, its dynamics), a worker part u_t in R^n (each worker's own level: a
slow node, a straggler), an episode C_{t,k} in {0, 1} per node k (a node's workers slowed
together for a while: contention, a noisy neighbour) and u's regime: a jump indicator J_{t,k} per
node (a node's workers change level together) and a reset indicator R_{t,w} per worker::

    g_t     ~ N(A g_{t-1} + b, diag q_g)                                       (Transition)
    u_{t,w} ~ N(rho u_{t-1,w} + (1 - rho) mean_w' u_{t-1,w'}, q),
              q = q_r if R_{t,w}, else q_j if J_{t,k(w)}, else q_u;
              J_{t,k} ~ Bernoulli(p_j), R_{t,w} ~ Bernoulli(p_r)
    P(C_{t,k} = 1 | C_{t-1,k}) = p_on if C_{t-1,k} = 0, 1 - p_off if 1
    v_{t,w} | z_t ~ (1 - B_{t,w}) [(1 - pi) N(m_{t,w}, s^2)                    (Emitter)
                                   + pi N(m_{t,w} + delta, s^2 + s_stall^2)]   (long stall)
                    + B_{t,w} [N(m_{t,w} + delta_s, s^2) + Exp(lambda)],  s = s(g_t, e_w),
    P(B_{t,w} = 1 | B_{t-1,w}) = pi_s if B_{t-1,w} = 0, kappa if 1             (short stall)
    m_{t,w} = f(g_t, e_w) + u_{t,w} + C_{t,k(w)} (delta_c + eps_{t,k(w)}),
    eps_{t,k} ~ N(0, s_c^2)

independently over w given z_t. u is a random walk with occasional jumps, each worker pulled
slowly (rho near 1, learnt) towards the workers' mean level: a contention episode or a load the
training trace never had is followed in one iteration (the jump); a shift of the whole cluster is
kept (the mean moves with it). An episode is the transient kind of a node's slowdown: it ends
with probability p_off (at least 5 %) per iteration, and a node-mate seen at its usual pace ends
it for the node's workers that were cut off too. With only u, the level of a worker cut off
after an episode came back only through the slow pull, and in the meantime it was cut off for
nothing (6 of bdsgd's 14 wrong cutoffs on the emerging-straggler trace). C and J are shared by a
node's workers (the trace's ``node`` column; without one, or with ``model.node_jumps: false``,
every worker is its own node): a node whose workers slow down together is one event of
probability p_j (or p_on), not one per worker, so independent jumps do not inflate the
forecast's slowest order statistics, and a node's slowdown is told from its workers' transient
stalls after one iteration. For the same reason an episode's size eps is the node's, not each
worker's: drawn per worker, it spread a contended node's forecasts apart, and the gap it opened
between the two slowest made cutting the slowest look worth it when it was not (calm cluster:
+0.2 gradients predicted where the simulator's truth gives -0.04). The filter's likelihood
approximates eps as independent per worker (each worker's variance + C s_c^2; shared, it would
couple a node's 18-component mixtures); for a node of one worker the two are the same.
A worker that turned slow stays slow in the forecast while it is cut off and unobserved, but
not for ever (its censored run-times say little once it is believed slow, so without the pull
a worker that recovered while cut off would never be tried again).
The reset regime (fixed, not learnt: p_r = 1e-4, q_r = 4, a factor e^2 either way) keeps the
filter open to changes far larger than any the training trace had (a worker turning 7x slower),
which the learnt parts would otherwise explain away as stall after stall.
The emitter's other two parts are transient stalls: a heavy right tail that a single Gaussian
could only fake by widening everyone's spread. A long stall (probability pi) is a wide Gaussian
shifted by delta > 0; learnt, it reaches the rare 30x stalls (log-space sd 1.6-2.9). A short
stall (it starts with probability pi_s) is delta_s > 0 longer plus an exponential length (rate
lambda in v = log x~: a Pareto tail in x~); most of its mass sits just above delta_s, where the
common 1.2-1.7x stalls are; it goes on into the next iteration with probability kappa (learnt: a
simulated stall never does, an Alibaba trace holds each sampled value for two iterations). With
the long stall alone (models up to format 4) a 1.67x stall had so little density that it left a
fifth of the posterior on a lasting change, and bdsgd cut a healthy worker for it. With the
short stall alone (format 5) the Pareto(1.2) stalls of the mixed scenario were underweighted;
with both but no kappa (format 6) a spike seen twice was no stall, so an episode, which then
outlived the spike while the worker was cut off and unobserved. e_w is worker w's identity
embedding; f and s are bilinear in an MLP of g_t and e_w, so one emitter serves any n and a pass
over S draws x n workers is two matrix products.

Inference (amortised, filtering online). q(z_t | x_{1:t}) costs one pass over the workers per
iteration and no optimisation. The cluster part is a learnt recursion, as in Pyro's dmm.py::

    h_t = GRU(h_{t-1}, mean_w phi(log x~_{t,w}, c_{t,w}, e_w))              (InferenceNetwork)
    q(g_t) = N(mu^g_t, diag sigma^g_t^2) = Combiner(A mu^g_{t-1} + b, h_t)

with c = 1 for a worker cut off at tau (x~ then holds tau~). The worker part is exact given g:
u_{t,w} is conditionally a mixture of 2 x 3 x 3 components (episode x regime x the emitter's
part; a short stall's is an exponentially modified Gaussian, whose posterior of u is still
closed form, ``observe_components``) whose posterior after an observed v, or after the censored
fact v > log tau~, is moment-matched back to one Gaussian (assumed-density filtering,
``worker_update``); the shared C and J are weighed on all of a node's observations at once, and
P(C_{t,k} = 1 | x_{1:t}) and P(B_{t,w} = 1 | x_{1:t}) are carried exactly (two-state forward
filters, per node and per worker). It has no learnt part, so it behaves the same in states that
training never visited.

Objective. The worker part is integrated out (Rao-Blackwellised), so per iteration the model
scores the one-step predictive of u together with q(g_t):
    L = sum_t E_{q(g_t)}[log p(x_t | g_t, x_{1:t-1})] + E_q[log p(g_t | g_{t-1})] + H[q(g_t)],
p(x_t | g_t, x_{1:t-1}) the worker mixtures' joint marginal (``node_posterior``'s normaliser)
and the last two terms analytic. A censored worker contributes log P(x > tau | ...) (``censoring:
likelihood``, unbiased), or, as the paper did, is replaced by an uncensored run-time of the same
iteration drawn at random (``censoring: impute``, biased low: the uncensored ones are short).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bdsgd.config import ModelConfig
from bdsgd.errors import UserError
from bdsgd.policies.base import Observation, draw_count
from bdsgd.traces.schema import Trace, from_arrays

FORMAT = "bdsgd-runtime-model/7"  # 5 and 6: stall parts measured and not kept
MIN_X = 1e-4  # smallest normalised run-time a gaussian draw is clamped to
LOG_2PI = math.log(2 * math.pi)
RESET_PROB, RESET_VAR = 1e-4, 4.0  # u's reset regime (see the module docstring): fixed
MIN_OFF = 0.05  # an episode ends with probability >= 5 % per iteration (``Transition.switch``)
EMITTER_PARTS, SHORT = 3, 2  # the emitter's parts (normal, long stall, short stall), the last's index


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


@dataclass
class Mixture:
    """A per-worker mixture of K components in emission space, stacked on the first axis, that
    cycle through the emitter's parts (normal, long stall, short stall): v ~ sum_k w_k p_k,
    p_k = N(mean_k, var_k) for the first two and N(mean_k, var_k) + Exp(rate) (an exponentially
    modified Gaussian) for a short stall. var_k = u_var_k + the emitter's variance, u_var_k the
    prior variance of u in that component. w_k is each worker's marginal weight; ``log_p_c`` is
    the node-level prior of the episode C that the weights of a ``mixture`` include (per
    worker), for the node's joint likelihood."""

    mean: torch.Tensor  # (K, ..., n)
    var: torch.Tensor  # (K, ..., n)
    log_w: torch.Tensor  # (K, ..., n) or broadcastable to it
    u_var: torch.Tensor  # (K, ..., n)  prior variance of u in component k
    u_mean: torch.Tensor  # (..., n)  prior mean of u (the same in every component)
    rate: torch.Tensor  # ()  lambda, the rate of a short stall's exponential length
    log_p_c: torch.Tensor | None = None  # (2, ..., K) log P(C = 0, 1) per node

    def sample(self, generator=None) -> torch.Tensor:
        """One draw of v per entry (component by inverse CDF of the weights, then its Gaussian,
        plus an exponential length for a short stall)."""
        cdf = self.log_w.exp().cumsum(0)
        pick = (torch.rand(self.mean.shape[1:], generator=generator) > cdf[:-1]).sum(0)
        mean = torch.gather(self.mean, 0, pick[None]).squeeze(0)
        sd = torch.gather(self.var, 0, pick[None]).squeeze(0).sqrt()
        short = (pick % EMITTER_PARTS == SHORT) * exponential(mean.shape, generator) / self.rate
        return mean + sd * torch.randn(mean.shape, generator=generator) + short


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


class Nodes:
    """Which node each worker is on, for the node-shared jump indicator J: sums over a node's
    workers (``total``) and a node's value back to each of its workers (``spread``), along the
    last axis. Every worker its own node (``node`` None) makes both the identity."""

    def __init__(self, node: np.ndarray | None, n_workers: int):
        ids = np.arange(n_workers) if node is None else np.unique(node, return_inverse=True)[1]
        self.index = torch.as_tensor(ids, dtype=torch.long)
        self.count = int(ids.max()) + 1
        self.singletons = self.count == n_workers
        self.onehot = F.one_hot(self.index, self.count).float()

    def total(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.singletons else x @ self.onehot

    def spread(self, y: torch.Tensor) -> torch.Tensor:
        return y if self.singletons else y.index_select(-1, self.index)


def softplus(x: torch.Tensor) -> torch.Tensor:
    """log(1 + e^x) as max(x, 0) + log(1 + e^-|x|): F.softplus's log1p is not vectorised on CPU
    (here 6x slower on the S x n draws of a decision)."""
    return x.clamp_min(0) + (1 + (-x.abs()).exp()).log()


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


class Transition(nn.Module):
    """p(z_t | z_{t-1}): g_t ~ N(A g_{t-1} + b, diag q_g); u_{t,w} ~ N(u_{t-1,w}, q_u), or
    of variance q_j with probability p_j (a jump), or q_r with probability p_r (a reset);
    u_0 ~ N(0, p_0); a node's episode C_{t,k} switches on with probability p_on and off with
    p_off, C_0 from the stationary law p_on / (p_on + p_off)."""

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

    def predict_g(self, s: FilterState):
        """Moments of p(g_t | x_{1:t-1}): mean and the diagonal of A Sigma A^T + Q."""
        return s.mu_g @ self.A.T + self.b, s.var_g @ (self.A**2).T + self.q_g

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

    def episode_parts(self):
        """(p_on, p_off) and (delta_c, s_c^2) of the episode C."""
        return self.switch(), torch.stack([F.softplus(self.episode_shift),
                                           self.episode_log_var.exp()])

    def stationary_c(self):
        """P(C = 1) of the chain's stationary law, p_on / (p_on + p_off)."""
        p_on, p_off = self.switch()
        return p_on / (p_on + p_off)

    @staticmethod
    def predict_c(p_c, switch):
        """P(C_t = 1 | x_{1:t-1}) from P(C_{t-1} = 1 | x_{1:t-1}): the two-state chain's step."""
        p_on, p_off = switch
        return p_c * (1 - p_off) + (1 - p_c) * p_on

    def log_prior_g(self, prev: FilterState, mu_g, var_g):
        """E_q[log p(g_t | g_{t-1})] under q(g_{t-1}) q(g_t), per sequence (analytic)."""
        return gaussian_cross_entropy(mu_g, var_g, prev.mu_g @ self.A.T + self.b,
                                      prev.var_g @ (self.A**2).T, self.q_g)


class Emitter(nn.Module):
    """p(v_{t,w} | z_t): a short stall N(f + u + delta_s, s^2) + Exp(lambda) if B_{t,w} = 1,
    else the normal part N(f + u, s^2) or, with probability pi, a long stall
    N(f + u + delta, s^2 + s_st^2); B is a chain that starts with probability pi_s and goes on
    with probability kappa.

    h = tanh(W_1 g + c_1);  f(g, e) = (W_f [h, g] + c_f)^T [e, 1];
    s(g, e) = softplus((W_s h + c_s)^T [e, 1]); pi, pi_s, kappa = sigmoid(.),
    delta, delta_s = softplus(.), s_st and lambda are learnt.
    """

    def __init__(self, latent_dim: int, worker_dim: int, hidden_dim: int, emission: str):
        super().__init__()
        if emission not in ("lognormal", "gaussian"):
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
        loc = torch.cat([h, g], -1) @ loc_w + loc_b
        return loc, softplus(h @ scale_w + scale_b) + 1e-3

    def stall_parts(self):
        """Per part (normal, long stall, short stall): shifts (0, delta, delta_s), added
        variances (0, s_st^2, 0); the short stall's rate lambda; (pi, pi_s, kappa)."""
        zero = torch.zeros(())
        shift = torch.stack([zero, F.softplus(self.stall_shift), F.softplus(self.short_shift)])
        var = torch.stack([zero, (2 * self.stall_log_scale).exp(), zero])
        probs = torch.sigmoid(torch.stack([self.stall_logit, self.short_logit, self.short_stay_logit]))
        return shift, var, self.short_log_rate.exp(), probs

    def stationary_short(self):
        """P(B = 1) of the short stall chain's stationary law, pi_s / (1 - kappa + pi_s)."""
        pi_s, kappa = torch.sigmoid(self.short_logit), torch.sigmoid(self.short_stay_logit)
        return pi_s / (1 - kappa + pi_s)

    @staticmethod
    def predict_short(p_b, probs):
        """P(B_t = 1 | x_{1:t-1}) from P(B_{t-1} = 1 | x_{1:t-1}): the short stall's chain."""
        _, pi_s, kappa = probs
        return p_b * kappa + (1 - p_b) * pi_s

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


class InferenceNetwork(nn.Module):
    """q(g_t | x_{1:t}), the amortised filter of the cluster part.

    phi encodes each worker's (log x~, censored flag, e_w) with a shared MLP and is mean-pooled
    over workers, so the network serves any n; a GRU cell carries h_t; a DMM-style combiner gives
    q(g_t). The worker part's posterior is analytic (``worker_update``).
    """

    def __init__(self, latent_dim: int, worker_dim: int, hidden_dim: int):
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(2 + worker_dim, hidden_dim), nn.ReLU(),
                                 nn.Linear(hidden_dim, hidden_dim), nn.ReLU())
        self.rnn = nn.GRUCell(hidden_dim, hidden_dim)
        self.prior_to_hidden = nn.Linear(latent_dim, hidden_dim)
        self.hidden_to_loc = nn.Linear(hidden_dim, latent_dim)
        self.hidden_to_scale = nn.Linear(hidden_dim, latent_dim)

    def project(self, embedding: torch.Tensor) -> torch.Tensor:
        """phi's first layer on the embeddings alone, (n, H): the part of it fixed per worker."""
        first = self.phi[0]
        return embedding @ first.weight[:, 2:].T + first.bias

    def summarise(self, h, y, censored, projected):
        """h_t = GRU(h_{t-1}, mean_w phi(y_w, c_w, e_w)); ``projected``: ``project(e)``."""
        w = self.phi[0].weight
        first = projected + y[..., None] * w[:, 0] + censored[..., None] * w[:, 1]
        return self.rnn(self.phi[1:](first).mean(-2), h)

    def combine_g(self, prior_mu_g, h):
        """Combiner: q(g_t | g-prior mean, h_t), mean and variance. The mean is the prior mean
        plus a correction, so the filter can walk away from the states seen in training."""
        hc = 0.5 * (torch.tanh(self.prior_to_hidden(prior_mu_g)) + h)
        mu = prior_mu_g + self.hidden_to_loc(hc)
        return mu, F.softplus(self.hidden_to_scale(hc)) ** 2 + 1e-6


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


def log_phi(z: torch.Tensor) -> torch.Tensor:
    """log of the standard normal density."""
    return -0.5 * (LOG_2PI + z**2)


def above(z: torch.Tensor, log_phi_z: torch.Tensor):
    """log P(Z > z) and the standardised moments of Z | Z > z, Z ~ N(0, 1): mean h(z) (the
    inverse Mills ratio phi / (1 - Phi)) and variance 1 + z h - h^2. ``log_phi_z``: log_phi(z)."""
    log_tail = torch.special.log_ndtr(-z)
    h = torch.exp(log_phi_z - log_tail)
    return log_tail, h, (1 + z * h - h**2).clamp(0, 1)


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
    log_e = b * (0.5 * b - a_s) + torch.special.log_ndtr(beta)  # log P(G <= v, E > v - G)
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
    """The paper's imputation: every censored run-time becomes an uncensored run-time of the same
    iteration drawn uniformly at random (needs at least one uncensored worker per iteration)."""
    ranked = torch.where(censored, torch.inf, x).sort(dim=-1).values  # uncensored first
    k = (~censored).sum(-1, keepdim=True)
    pick = (torch.rand(x.shape, generator=generator) * k).long()
    return torch.where(censored, torch.gather(ranked, -1, pick), x)


class RuntimeModel(nn.Module):
    """Transition, emitter, inference network and the workers' identity embeddings.

    Run-times enter and leave in seconds (or the trace's unit) through ``predictor`` and
    ``sample_trace``; inside, everything is divided by ``scale_s`` (the training median).
    ``node`` (n,): the node of each worker (the training trace's), whose workers share J.
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
        """z_0: g_0 ~ N(0, I), u_0 ~ N(0, p_0)."""
        d, n = self.config.latent_dim, self.n_workers
        return FilterState(
            h=torch.zeros(batch, self.config.hidden_dim), mu_g=torch.zeros(batch, d),
            var_g=torch.ones(batch, d), mu_u=torch.zeros(batch, n),
            # full tensors, not expanded views: a compiled step then serves t = 0 too
            var_u=self.transition.p0_u * torch.ones(batch, n),
            p_c=self.transition.stationary_c() * torch.ones(batch, self.nodes.count),
            p_b=self.emitter.stationary_short() * torch.ones(batch, n),
        )

    def parts(self) -> Parts:
        return Parts(*self.transition.u_regimes(), self.transition.rho,
                     *self.transition.episode_parts(),
                     *self.emitter.stall_parts(), self.emitter.project(self.embedding),
                     self.inference.project(self.embedding))

    def emission(self, g: torch.Tensor, u: torch.Tensor, p_short: torch.Tensor,
                 parts: Parts | None = None) -> Mixture:
        """p(v_t | g_t, u_t): the emitter's three parts at level f(g, e_w) + u, with each
        worker's P(B_t = 1) = ``p_short`` (..., n)."""
        parts = parts or self.parts()
        loc, scale = self.emitter(g, parts.emitter_e)
        shift, stall_var = stack(parts.shift, loc), stack(parts.stall_var, loc)
        return Mixture(loc + u + shift, scale**2 + stall_var,
                       self.emitter.part_log_w(p_short, parts.stall_probs),
                       torch.zeros_like(shift), u, parts.stall_rate)

    def mixture(self, g: torch.Tensor, s: FilterState, parts: Parts | None = None) -> Mixture:
        """p(v_t | g_t, x_{1:t-1}): the node's episode C_t (off, on) x u_t's three regimes x the
        emitter's three parts, given q(z_{t-1}) ``s`` and the cluster state g (..., d)."""
        parts = parts or self.parts()
        mu_u, var_u = self.transition.carry_u(s.mu_u, s.var_u, parts.rho)
        p_short = self.emitter.predict_short(s.p_b, parts.stall_probs).clamp(1e-7, 1 - 1e-7)
        part = self.emission(g, mu_u, p_short, parts)
        step, log_w_u = stack(parts.step, part.mean[0]), stack(parts.log_w_u, part.mean[0])
        k = len(parts.step)
        u_var = (var_u + step).repeat_interleave(len(parts.shift), 0)
        mean = part.mean.repeat(k, *([1] * mu_u.dim()))
        var = u_var + part.var.repeat(k, *([1] * mu_u.dim()))
        log_w = (log_w_u[:, None] + part.log_w[None]).flatten(0, 1)
        p_c = self.transition.predict_c(s.p_c, parts.switch).clamp(1e-7, 1 - 1e-7)
        log_p_c = torch.stack([(-p_c).log1p(), p_c.log()])  # (2, ..., K)
        shift, extra = parts.episode
        return Mixture(torch.cat([mean, mean + shift]), torch.cat([var, var + extra]),
                       torch.cat([log_w + self.nodes.spread(c) for c in log_p_c]),
                       torch.cat([u_var, u_var]), part.u_mean, part.rate, log_p_c)

    def step(self, s: FilterState, x: torch.Tensor, censored: torch.Tensor,
             parts: Parts | None = None) -> FilterState:
        """One filtering step: q(z_t | x_{1:t}) from q(z_{t-1} | x_{1:t-1}) and x_t (B, n),
        normalised; where ``censored``, x holds the cutoff time tau~ instead. ``parts``: the
        model's scalar parameters, when the caller has them already (``Predictor``)."""
        parts = parts or self.parts()
        h = self.inference.summarise(s.h, x.log(), censored, parts.phi_e)
        mu_g, var_g = self.inference.combine_g(self.transition.predict_g(s)[0], h)
        mix = self.mixture(mu_g, s, parts)
        mu_u, var_u, _, p_c, p_b = worker_update(mix, self.emitter.space(x), censored,
                                                 self.nodes, parts.log_w_j)
        return FilterState(h, mu_g, var_g, mu_u, var_u, p_c, p_b)

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
        """The objective per sequence of x (B, T, n), normalised (see the module docstring).

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

    def step_variances(self, parts: Parts, samples: int, generator=None,
                       resets: bool = True) -> torch.Tensor:
        """Draws (S, n) of u's step variance: J per node, then R per worker (if ``resets``)."""
        q_u, q_j, q_r = parts.step
        jump = torch.rand((samples, self.nodes.count), generator=generator) < parts.log_w_j[1].exp()
        step = self.nodes.spread(jump * (q_j - q_u) + q_u)
        if not resets:
            return step
        reset = torch.rand(step.shape, generator=generator) < RESET_PROB
        return step + reset * (q_r - step)

    def draws(self, s: FilterState, samples: int, generator=None,
              parts: Parts | None = None) -> torch.Tensor:
        """S joint draws (S, n) of v_{t+1} | x_{1:t}: g_{t+1} from the transition, then per
        worker its regime (J shared by its node) and emitter part (normal, long or short
        stall), one Gaussian, and a short stall's exponential length.

        A fresh reset at t+1 is left out. It moves E[x_(c)] by about its probability, n p_r
        (0.2 % at n = 16), but drawn, it puts a 7x-50x outlier into some of the S draws: the
        estimate of E[x_(n)] then jumps by 5-100 % at random, and bdsgd cut a worker for nothing
        in 5 % of a calm cluster's iterations. The reset stays in the filter, whose posterior is
        what follows a change larger than training had (the worker_update test, the 7x smoke)."""
        parts = parts or self.parts()
        mu_u, var_u = self.transition.carry_u(s.mu_u, s.var_u, parts.rho)
        mu_g, var_g = self.transition.predict_g(s)
        g = mu_g + var_g.sqrt() * torch.randn((samples, mu_g.shape[-1]), generator=generator)
        loc, scale = self.emitter(g, parts.emitter_e)
        var = scale.square_().add_(var_u).add_(self.step_variances(parts, samples, generator,
                                                                   resets=False))
        p_c = self.transition.predict_c(s.p_c, parts.switch)
        on = self.nodes.spread(self.episodes(p_c, samples, generator))
        # A stall: short with P(B_{t+1} = 1), else long with probability pi. Stalls are rare,
        # so they are indexed rather than masked over all S x n draws: one uniform picks the
        # part, and for a short stall u = which / P(B = 1) is a fresh uniform on [0, 1), whose
        # -log(1 - u) is its Exp(1) length (not -log u: torch.rand returns exactly 0 once in
        # 2^24, about once in 2,000 decisions at n = 16, and a clamped -log 0 made a stall of
        # 10^2-10^4 x that forecast a cut for nothing); a long stall's extra spread is its own
        # normal draw.
        which = torch.rand(loc.shape, generator=generator)
        p_short = self.emitter.predict_short(s.p_b, parts.stall_probs).expand_as(which)
        i, w = (which < p_short + (1 - p_short) * parts.stall_probs[0]).nonzero(as_tuple=True)
        u = which[i, w] / p_short[i, w]
        long_stall = parts.shift[1] + parts.stall_var[1].sqrt() * torch.randn(
            u.shape, generator=generator)
        short_stall = parts.shift[SHORT] - (-u).log1p() / parts.stall_rate
        v = var.sqrt_().mul_(torch.randn(loc.shape, generator=generator)).add_(loc).add_(mu_u)
        v.index_put_((i, w), torch.where(u < 1, short_stall, long_stall), accumulate=True)
        return v.add_(on * self.episode_levels(parts, samples, generator))

    def episode_levels(self, parts: Parts, samples: int, generator=None) -> torch.Tensor:
        """Draws (S, n) of a node's episode shift delta_c + eps_k, eps_k ~ N(0, s_c^2), one per
        node and spread to its workers: an episode slows a node's workers together."""
        shift, extra = parts.episode
        eps = torch.randn((samples, self.nodes.count), generator=generator)
        return self.nodes.spread(shift + extra.sqrt() * eps)

    def episodes(self, p_c: torch.Tensor, samples: int, generator=None) -> torch.Tensor:
        """Draws (S, K) of every node's C_t in {0., 1.}, at P(C_t = 1) = p_c (..., K)."""
        return (torch.rand((samples, self.nodes.count), generator=generator) < p_c).float()

    def predictor(self, samples: int | None = None, seed: int = 0,
                  compile: bool = False) -> Predictor:
        return Predictor(self, samples or self.config.samples, seed, compile)

    @torch.no_grad()
    def sample_trace(self, iterations: int, seed: int) -> Trace:
        """Ancestral sampling from the generative model: a synthetic trace of ``iterations``."""
        gen = torch.Generator().manual_seed(seed)
        tr, parts = self.transition, self.parts()
        g = torch.randn((1, self.config.latent_dim), generator=gen)
        u = tr.p0_u.sqrt() * torch.randn((1, self.n_workers), generator=gen)
        p_c = tr.stationary_c().expand(self.nodes.count)  # P(C_t = 1 | C_{t-1}); at t = 0 stationary
        p_b = self.emitter.stationary_short().expand(1, self.n_workers)  # the same for B_t
        rows = []
        for _ in range(iterations):
            g = g @ tr.A.T + tr.b + tr.q_g.sqrt() * torch.randn(g.shape, generator=gen)
            step = self.step_variances(parts, 1, gen)
            u = tr.carry_u(u, torch.zeros_like(u), parts.rho)[0]
            u = u + step.sqrt() * torch.randn(u.shape, generator=gen)
            c = self.episodes(p_c, 1, gen)
            p_c = tr.predict_c(c, parts.switch)
            level = u + self.nodes.spread(c) * self.episode_levels(parts, 1, gen)
            b = (torch.rand(p_b.shape, generator=gen) < p_b).float()
            p_b = self.emitter.predict_short(b, parts.stall_probs)
            rows.append(self.emitter.unspace(self.emission(g, level, b, parts).sample(gen)))
        runtimes = torch.cat(rows).double().numpy() * self.scale_s
        return from_arrays(runtimes, meta={"source": "model-sample", "time_unit": self.time_unit,
                                           "seed": seed}, node=self.node)

    def checkpoint(self, **extra) -> dict:
        """What ``load_model`` reads back: plain data and tensors only (safe to load)."""
        return {"format": FORMAT, "state_dict": self.state_dict(),
                "config": dataclasses.asdict(self.config), "n_workers": self.n_workers,
                "node": None if self.node is None else self.node.tolist(),
                "normalisation": {"scale_s": self.scale_s, "time_unit": self.time_unit}, **extra}


class Predictor:
    """Online posterior predictive of the next iteration's run-times from censored observations.

    ``observe`` runs one filtering step on what the server saw (accepted run-times, and tau for
    the rest); ``expected_order_stats`` sorts S joint draws of x_{t+1} and averages them, with S
    at least ``samples`` and at least DRAW_BUDGET / n (``policies.base.draw_count``).
    ``compile``: the filtering step through torch.compile (fused kernels: a few times faster at
    n = 158, where eager time is per-operation overhead; the first step compiles, ~30 s). The
    draws stay eager: a seeded torch.Generator breaks the graph.
    """

    def __init__(self, model: RuntimeModel, samples: int, seed: int, compile: bool = False):
        self.model = model.eval()
        self.step = torch.compile(model.step, dynamic=False) if compile else model.step
        self.samples = draw_count(samples, model.n_workers)
        self.generator = torch.Generator().manual_seed(seed)
        self.impute = model.config.censoring == "impute"
        with torch.inference_mode():
            self.state = model.initial_state(1)
            self.parts = model.parts()

    @torch.inference_mode()
    def observe(self, obs: Observation) -> None:
        seen = torch.as_tensor(obs.runtimes, dtype=torch.float32)
        censored = seen.isnan()
        x = torch.where(censored, obs.cutoff_time, seen) / self.model.scale_s
        if self.impute:
            x, censored = impute(x, censored, self.generator), torch.zeros_like(censored)
        self.state = self.step(self.state, x[None], censored[None], self.parts)

    @torch.inference_mode()
    def draws(self) -> torch.Tensor:
        """S joint draws of x_{t+1} (S, n), in seconds (``RuntimeModel.draws``)."""
        v = self.model.draws(self.state, self.samples, self.generator, self.parts)
        return self.model.emitter.unspace(v) * self.model.scale_s

    def expected_order_stats(self) -> np.ndarray:
        """E[x_(c)], c = 1..n, in seconds: the mean of the sorted joint draws."""
        # numpy's vectorised sort is several times faster than torch.sort on one core
        return np.sort(self.draws().numpy(), axis=-1).mean(0, dtype=np.float64)


def load_model(path: str | Path) -> RuntimeModel:
    """Read a checkpoint written by ``bdsgd model train``; a bad file is a UserError naming it."""
    path = Path(path)
    if not path.is_file():
        raise UserError(str(path), "-", "model file not found")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many types on a corrupt file
        why = str(exc).splitlines()[0]
        raise UserError(str(path), "-", f"not a model checkpoint ({why})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise UserError(str(path), "format", f"not a {FORMAT} checkpoint")
    try:
        norm = ckpt["normalisation"]
        model = RuntimeModel(ModelConfig(**ckpt["config"]), int(ckpt["n_workers"]),
                             norm["scale_s"], norm["time_unit"], ckpt["node"])
        model.load_state_dict(ckpt["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        why = str(exc).splitlines()[0]
        raise UserError(str(path), "config", f"incompatible checkpoint ({why})") from None
    return model.eval()
