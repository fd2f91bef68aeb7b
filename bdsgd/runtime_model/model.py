"""The BDSGD run-time model: a deep generative dynamical model of every worker's run-time.

Run-times are divided by the training trace's median m (kept in the checkpoint), so the model is
unit-free: x~_{t,w} = x_{t,w} / m for iteration t and worker w = 1..n.

Generative model. The latent state z_t = (g_t, u_t) has a cluster part g_t in R^d (load shared by
all workers, node or rack contention) and a worker part u_t in R^n (each worker's own slowdown)::

    g_t     ~ N(A g_{t-1} + b, diag q_g)                                  (Transition)
    u_{t,w} ~ N(rho u_{t-1,w}, q_u)
    x~_{t,w} | z_t ~ F(loc = f(g_t, e_w) + u_{t,w}, scale = s(g_t, e_w))   (Emitter)

independently over w given z_t. The transition is linear-Gaussian (A is block-diagonal: A on g,
rho*I on u) and all the non-linearity sits in the emitter. e_w is worker w's identity
embedding; f and s are bilinear in an MLP of g_t and e_w, so one emitter serves any n and a pass
over S samples x n workers is two matrix products. F is ``lognormal`` (log x~ ~ N(loc, scale^2):
positive, heavy right tail) or ``gaussian`` (x~ ~ N(loc, scale^2), the paper's; draws below zero
are clamped to a tiny positive).

Inference (amortised, filtering online). q(z_t | x_{1:t}) = N(mu_t, diag sigma_t^2) comes from a
recursion that costs one pass over the workers per iteration, no optimisation::

    h_t = GRU(h_{t-1}, mean_w phi(y_{t,w}, c_{t,w}, e_w))                 (InferenceNetwork)
    (mu^g_t, sigma^g_t) = Combiner(A mu^g_{t-1} + b, h_t)                  (as Pyro's dmm.py)
    (mu^u_{t,w}, sigma^u_{t,w}) = psi(prior moments of u_{t,w}, r_{t,w}, c_{t,w}, s(mu^g_t, e_w))

with y = log x~ for a worker that reported, y = log tau~ and c = 1 for one cut off at tau
(censored), and r the standardised residual of that observation under the emitter at mu^g_t.

ELBO. With q(z_{1:T}) = prod_t q(z_t | x_{1:t}) (each factor a function of the past only),
    L = sum_t E_q[log p(x_t | z_t)] + E_q[log p(z_t | z_{t-1})] + H[q(z_t)],
the last two terms analytic for a linear-Gaussian transition and Gaussian q. A censored worker
contributes log P(x > tau | z_t) (``censoring: likelihood``, unbiased), or, as the paper did, is
replaced by an uncensored run-time of the same iteration drawn at random (``censoring: impute``,
biased low: the uncensored run-times are the short ones).
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
from bdsgd.policies.base import Observation
from bdsgd.traces.schema import Trace, from_arrays

FORMAT = "bdsgd-runtime-model/1"
MIN_X = 1e-4  # smallest normalised run-time a gaussian draw is clamped to
LOG_2PI = math.log(2 * math.pi)


@dataclass
class FilterState:
    """q(z_t | x_{1:t}) and the recurrent summary h_t, for a batch of B sequences."""

    h: torch.Tensor  # (B, H)
    mu_g: torch.Tensor  # (B, d)
    var_g: torch.Tensor  # (B, d)
    mu_u: torch.Tensor  # (B, n)
    var_u: torch.Tensor  # (B, n)


def gaussian_cross_entropy(mu, var, prior_mu, prior_var_extra, q):
    """E_q[log N(z; prior_mu, q)] where z ~ N(mu, var) and prior_mu carries extra variance
    prior_var_extra from z_{t-1} (= (A Sigma_{t-1} A^T)_ii), summed over the last axis."""
    return -0.5 * (LOG_2PI + q.log() + ((mu - prior_mu) ** 2 + var + prior_var_extra) / q).sum(-1)


def gaussian_entropy(var):
    return 0.5 * (LOG_2PI + 1 + var.log()).sum(-1)


class Transition(nn.Module):
    """p(z_t | z_{t-1}): g_t ~ N(A g_{t-1} + b, diag q_g); u_{t,w} ~ N(rho u_{t-1,w}, q_u)."""

    def __init__(self, latent_dim: int):
        super().__init__()
        self.A = nn.Parameter(0.9 * torch.eye(latent_dim))
        self.b = nn.Parameter(torch.zeros(latent_dim))
        self.log_q_g = nn.Parameter(torch.full((latent_dim,), math.log(0.1)))
        self.rho_logit = nn.Parameter(torch.tensor(2.0))  # rho = 0.999 sigmoid(.) ~ 0.88
        self.log_q_u = nn.Parameter(torch.tensor(math.log(0.01)))

    @property
    def rho(self):
        return 0.999 * torch.sigmoid(self.rho_logit)

    @property
    def q_g(self):
        return self.log_q_g.exp()

    @property
    def q_u(self):
        return self.log_q_u.exp()

    def stationary_var_u(self):
        return self.q_u / (1 - self.rho**2)

    def predict(self, s: FilterState):
        """Moments of p(z_t | x_{1:t-1}) (the one-step predictive): means and variances."""
        mu_g = s.mu_g @ self.A.T + self.b
        var_g = s.var_g @ (self.A**2).T + self.q_g  # diagonal of A Sigma A^T + Q
        mu_u = self.rho * s.mu_u
        var_u = self.rho**2 * s.var_u + self.q_u
        return mu_g, var_g, mu_u, var_u

    def log_prior(self, prev: FilterState, new: FilterState):
        """E_q[log p(z_t | z_{t-1})] under q(z_{t-1}) q(z_t), per sequence (analytic)."""
        g = gaussian_cross_entropy(new.mu_g, new.var_g, prev.mu_g @ self.A.T + self.b,
                                   prev.var_g @ (self.A**2).T, self.q_g)
        u = gaussian_cross_entropy(new.mu_u, new.var_u, self.rho * prev.mu_u,
                                   self.rho**2 * prev.var_u, self.q_u)
        return g + u


class Emitter(nn.Module):
    """p(x~_{t,w} | z_t): loc = f(g_t, e_w) + u_{t,w}, scale = s(g_t, e_w), family ``emission``.

    h = tanh(W_1 g + c_1);  f(g, e) = (W_f [h, g] + c_f)^T [e, 1];
    s(g, e) = softplus((W_s h + c_s)^T [e, 1]).
    """

    def __init__(self, latent_dim: int, worker_dim: int, hidden_dim: int, emission: str):
        super().__init__()
        if emission not in ("lognormal", "gaussian"):
            raise ValueError(f"unknown emission {emission!r}")
        self.emission = emission
        self.hidden = nn.Sequential(nn.Linear(latent_dim, hidden_dim), nn.Tanh())
        self.to_loc = nn.Linear(hidden_dim + latent_dim, worker_dim + 1)
        self.to_scale = nn.Linear(hidden_dim, worker_dim + 1)
        with torch.no_grad():  # start near x~ = 1 with a 10 % spread
            self.to_loc.bias[-1] = 0.0 if emission == "lognormal" else 1.0
            self.to_scale.bias[-1] = -2.2

    def forward(self, g: torch.Tensor, embedding: torch.Tensor):
        """(f, s), each (..., n), at cluster state g (..., d): the emitter without u."""
        e = F.pad(embedding, (0, 1), value=1.0)  # [e_w, 1]
        h = self.hidden(g)
        # g also enters linearly, so a load the training trace never had is still expressible
        loc = self.to_loc(torch.cat([h, g], -1)) @ e.T
        return loc, F.softplus(self.to_scale(h) @ e.T) + 1e-3

    def space(self, x: torch.Tensor) -> torch.Tensor:
        """The space the family is Gaussian in: log x~ (lognormal) or x~ (gaussian)."""
        return x.log() if self.emission == "lognormal" else x

    def log_prob(self, x, loc, scale, censored):
        """log p(x~ | loc, scale) per worker; log P(x~ > tau~) where censored (x holds tau~)."""
        v = self.space(x)
        z = (v - loc) / scale
        density = -0.5 * (LOG_2PI + z**2) - scale.log()
        if self.emission == "lognormal":
            density = density - v  # Jacobian of log: a density over x~, comparable to gaussian's
        return torch.where(censored, torch.special.log_ndtr(-z), density)

    def sample(self, loc, scale, generator=None):
        v = loc + scale * torch.randn(loc.shape, generator=generator)
        return v.exp() if self.emission == "lognormal" else v.clamp_min(MIN_X)


class InferenceNetwork(nn.Module):
    """q(z_t | x_{1:t}), the amortised filter (see the module docstring for the recursion).

    phi encodes each worker's (y, censored flag, e_w) with a shared MLP and is mean-pooled over
    workers, so the network serves any n; a GRU cell carries h_t; a DMM-style combiner gives
    q(g_t); a small shared MLP psi gives each worker's q(u_{t,w}) from its residual.
    """

    def __init__(self, latent_dim: int, worker_dim: int, hidden_dim: int):
        super().__init__()
        self.phi = nn.Sequential(nn.Linear(2 + worker_dim, hidden_dim), nn.ReLU(),
                                 nn.Linear(hidden_dim, hidden_dim), nn.ReLU())
        self.rnn = nn.GRUCell(hidden_dim, hidden_dim)
        self.prior_to_hidden = nn.Linear(latent_dim, hidden_dim)
        self.hidden_to_loc = nn.Linear(hidden_dim, latent_dim)
        self.hidden_to_scale = nn.Linear(hidden_dim, latent_dim)
        self.psi = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 2))
        with torch.no_grad():
            self.psi[-1].bias[1] = -3.0  # small per-worker posterior spread at the start

    def summarise(self, h, y, censored, embedding):
        """h_t = GRU(h_{t-1}, mean_w phi(y_w, c_w, e_w))."""
        e = embedding.expand(*y.shape, -1)
        features = self.phi(torch.cat([y[..., None], censored[..., None].float(), e], -1))
        return self.rnn(features.mean(-2), h)

    def combine_g(self, prior_mu_g, h):
        """Combiner: q(g_t | g-prior mean, h_t), mean and variance. The mean is the prior mean
        plus a correction, so the filter can walk away from the states seen in training."""
        hc = 0.5 * (torch.tanh(self.prior_to_hidden(prior_mu_g)) + h)
        mu = prior_mu_g + self.hidden_to_loc(hc)
        return mu, F.softplus(self.hidden_to_scale(hc)) ** 2 + 1e-6

    def combine_u(self, prior_mu_u, prior_var_u, residual, censored, log_scale):
        """q(u_{t,w}): prior mean plus a learnt correction (an amortised Kalman update)."""
        out = self.psi(torch.stack(
            [prior_mu_u, prior_var_u.log(), residual, censored.float(), log_scale], -1))
        return prior_mu_u + out[..., 0], F.softplus(out[..., 1]) ** 2 + 1e-6


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
    """

    def __init__(self, config: ModelConfig, n_workers: int, scale_s: float = 1.0,
                 time_unit: str = "s"):
        super().__init__()
        self.config, self.n_workers = config, n_workers
        self.scale_s, self.time_unit = float(scale_s), time_unit
        self.embedding = nn.Parameter(0.1 * torch.randn(n_workers, config.worker_dim))
        self.transition = Transition(config.latent_dim)
        self.emitter = Emitter(config.latent_dim, config.worker_dim, config.hidden_dim,
                               config.emission)
        self.inference = InferenceNetwork(config.latent_dim, config.worker_dim, config.hidden_dim)

    def initial_state(self, batch: int) -> FilterState:
        """z_0: g_0 ~ N(0, I), u_0 at the stationary spread of the worker part."""
        d, n = self.config.latent_dim, self.n_workers
        return FilterState(
            h=torch.zeros(batch, self.config.hidden_dim), mu_g=torch.zeros(batch, d),
            var_g=torch.ones(batch, d), mu_u=torch.zeros(batch, n),
            var_u=self.transition.stationary_var_u().expand(batch, n),
        )

    def step(self, s: FilterState, x: torch.Tensor, censored: torch.Tensor) -> FilterState:
        """One filtering step: q(z_t | x_{1:t}) from q(z_{t-1} | x_{1:t-1}) and x_t (B, n),
        normalised; where ``censored``, x holds the cutoff time tau~ instead."""
        prior_mu_g, _, prior_mu_u, prior_var_u = self.transition.predict(s)
        h = self.inference.summarise(s.h, x.log(), censored, self.embedding)
        mu_g, var_g = self.inference.combine_g(prior_mu_g, h)
        loc, scale = self.emitter(mu_g, self.embedding)
        residual = (self.emitter.space(x) - loc - prior_mu_u) / scale
        mu_u, var_u = self.inference.combine_u(prior_mu_u, prior_var_u, residual, censored,
                                               scale.log())
        return FilterState(h, mu_g, var_g, mu_u, var_u)

    def elbo(self, x: torch.Tensor, censored: torch.Tensor, generator=None,
             seen: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """The ELBO per sequence of x (B, T, n), normalised (see the module docstring).

        ``seen`` = (x', censored') is what the inference network filters on (default: x itself).
        Any q gives a lower bound, so q may see a more censored view of x than the likelihood
        scores: that teaches the filter the censored observations it gets in deployment.
        """
        seen_x, seen_censored = seen if seen is not None else (x, censored)
        s = self.initial_state(x.shape[0])
        total = torch.zeros(x.shape[0])
        for t in range(x.shape[1]):
            new = self.step(s, seen_x[:, t], seen_censored[:, t])
            g = new.mu_g + new.var_g.sqrt() * torch.randn(new.mu_g.shape, generator=generator)
            u = new.mu_u + new.var_u.sqrt() * torch.randn(new.mu_u.shape, generator=generator)
            loc, scale = self.emitter(g, self.embedding)
            loglik = self.emitter.log_prob(x[:, t], loc + u, scale, censored[:, t]).sum(-1)
            total = total + loglik + self.transition.log_prior(s, new)
            total = total + gaussian_entropy(new.var_g) + gaussian_entropy(new.var_u)
            s = new
        return total

    def predictive(self, s: FilterState, samples: int, generator=None):
        """p(x~_{t+1} | x_{1:t}) given z_{t+1}'s cluster part: S draws of g_{t+1} and, per draw,
        each worker's (loc, scale) with u_{t+1,w} integrated out (it is Gaussian and additive)."""
        mu_g, var_g, mu_u, var_u = self.transition.predict(s)
        g = mu_g + var_g.sqrt() * torch.randn((samples, mu_g.shape[-1]), generator=generator)
        loc, scale = self.emitter(g, self.embedding)
        return loc + mu_u, (scale**2 + var_u).sqrt()

    def predictor(self, samples: int | None = None, seed: int = 0) -> Predictor:
        return Predictor(self, samples or self.config.samples, seed)

    @torch.no_grad()
    def sample_trace(self, iterations: int, seed: int) -> Trace:
        """Ancestral sampling from the generative model: a synthetic trace of ``iterations``."""
        gen = torch.Generator().manual_seed(seed)
        tr = self.transition
        g = torch.randn((1, self.config.latent_dim), generator=gen)
        u = tr.stationary_var_u().sqrt() * torch.randn((1, self.n_workers), generator=gen)
        rows = []
        for _ in range(iterations):
            g = g @ tr.A.T + tr.b + tr.q_g.sqrt() * torch.randn(g.shape, generator=gen)
            u = tr.rho * u + tr.q_u.sqrt() * torch.randn(u.shape, generator=gen)
            loc, scale = self.emitter(g, self.embedding)
            rows.append(self.emitter.sample(loc + u, scale, gen))
        runtimes = torch.cat(rows).double().numpy() * self.scale_s
        return from_arrays(runtimes, meta={"source": "model-sample", "time_unit": self.time_unit,
                                           "seed": seed})

    def checkpoint(self, **extra) -> dict:
        """What ``load_model`` reads back: plain data and tensors only (safe to load)."""
        return {"format": FORMAT, "state_dict": self.state_dict(),
                "config": dataclasses.asdict(self.config), "n_workers": self.n_workers,
                "normalisation": {"scale_s": self.scale_s, "time_unit": self.time_unit}, **extra}


class Predictor:
    """Online posterior predictive of the next iteration's run-times from censored observations.

    ``observe`` runs one filtering step on what the server saw (accepted run-times, and tau for
    the rest); ``expected_order_stats`` sorts S joint draws of x_{t+1} and averages them.
    """

    def __init__(self, model: RuntimeModel, samples: int, seed: int):
        self.model, self.samples = model.eval(), samples
        self.generator = torch.Generator().manual_seed(seed)
        self.impute = model.config.censoring == "impute"
        with torch.no_grad():
            self.state = model.initial_state(1)

    @torch.no_grad()
    def observe(self, obs: Observation) -> None:
        seen = torch.as_tensor(obs.runtimes, dtype=torch.float32)
        censored = seen.isnan()
        x = torch.where(censored, obs.cutoff_time, seen) / self.model.scale_s
        if self.impute:
            x, censored = impute(x, censored, self.generator), torch.zeros_like(censored)
        self.state = self.model.step(self.state, x[None], censored[None])

    @torch.no_grad()
    def draws(self) -> torch.Tensor:
        """S joint draws of x_{t+1} (S, n), in seconds."""
        loc, scale = self.model.predictive(self.state, self.samples, self.generator)
        return self.model.emitter.sample(loc, scale, self.generator) * self.model.scale_s

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
                             norm["scale_s"], norm["time_unit"])
        model.load_state_dict(ckpt["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        why = str(exc).splitlines()[0]
        raise UserError(str(path), "config", f"incompatible checkpoint ({why})") from None
    return model.eval()
