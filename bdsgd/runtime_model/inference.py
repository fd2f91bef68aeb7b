"""q(g_t | x_{1:t}): the amortised filter of the cluster part, a learnt recursion as in Pyro's
deep Markov model (examples/dmm.py)::

    h_t = GRU(h_{t-1}, mean_w phi(log x~_{t,w}, c_{t,w}, e_w))
    q(g_t) = N(mu^g_t, diag sigma^g_t^2) = Combiner(A mu^g_{t-1} + b, h_t)

with c = 1 for a worker cut off at tau (x~ then holds tau~). Only g is amortised: the worker
part's posterior is exact given g (``filtering``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class InferenceNetwork(nn.Module):
    """phi encodes each worker's (log x~, censored flag, e_w) with a shared MLP and is mean-pooled
    over workers, so the network serves any n; a GRU cell carries h_t; a DMM-style combiner gives
    q(g_t)."""

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
        # the two per-iteration inputs through phi's first layer as one (n, 2) x (2, H) product,
        # not two broadcast products that each write n x H numbers
        inputs = torch.stack([y, censored.to(y.dtype)], -1)
        first = projected + inputs @ self.phi[0].weight[:, :2].T
        return self.rnn(self.phi[1:](first).mean(-2), h)

    def combine_g(self, prior_mu_g, h):
        """Combiner: q(g_t | g-prior mean, h_t), mean and variance. The mean is the prior mean
        plus a correction, so the filter can walk away from the states seen in training."""
        hc = 0.5 * (torch.tanh(self.prior_to_hidden(prior_mu_g)) + h)
        mu = prior_mu_g + self.hidden_to_loc(hc)
        return mu, F.softplus(self.hidden_to_scale(hc)) ** 2 + 1e-6
