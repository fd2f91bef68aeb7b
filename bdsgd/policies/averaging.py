"""bdsgd-averaged's predictor: the run-time model averaged with simple per-worker and pooled
predictors.

A learnt joint model wins where the cluster has structure it learnt (contended nodes, stalls
that persist, a straggler that comes and goes), and loses where the cluster is unlike its
training trace: a calm cluster whose forecast it spreads too wide, run-times with no memory
that it forecasts with memory. Which holds is a question the server's own observations answer,
so bdsgd-averaged weighs its candidate forecasts by how well each predicted what it then saw:
dynamic Bayesian model averaging (Raftery, Karny & Ettler 2010) with a censored likelihood.

Components k (``policies.averaging`` names the simple ones beside the model): each gives S_k
joint draws of the next iteration's log run-times (``log_draws``), sorted into draws y^(s) of
the log order statistics. The server saw y_(1..c), and that the other n - c ran longer than
tau. Component k's one-step predictive log score of that is

    l_k = 1/n [ sum_{r <= c} log p_k,r(y_(r)) + sum_{r > c} log P_k(Y_(r) > log tau) ],

    p_k,r(y) = 1/S sum_s N(y; y_(r)^(s), h_r^2),   P_k(Y_(r) > t) = 1/S sum_s Phi((y_(r)^(s) - t) / h_r),

a Gaussian kernel on each order statistic's draws (Silverman's bandwidth h_r, at least
``MIN_BANDWIDTH``) so that draws that are atoms (the bootstrap's, the empirical distribution's)
have a density. Why order statistics and not workers: the decision reads only E[x_(c)], so a
forecast is judged on the quantities the decision uses. Scored worker by worker, a pooled
distribution that fits every worker's marginal well but spreads its few tail draws thin (ecdf
on i.i.d. heavy-tailed run-times) outscored the model whose order statistics, and decisions,
were better. The score is a mean over r (the composite likelihood of n dependent order
statistics would count the evidence they share n times) and censored exactly as the server
censors.

The weights are a posterior with forgetting,

    log w_k <- alpha log w_k + l_k,   w normalised,

alpha = ``policies.forgetting``: a model's evidence fades over about 1 / (1 - alpha) iterations,
so the weights follow a cluster that changes (a load shift, a straggler that leaves). The
forecast is the mixture's: E[x_(c)] = sum_k w_k E_k[x_(c)], exact since an expectation is linear
in the mixture, each E_k the component's own (exact where it has one).

What it does not do (benchmarks/README.md, "Averaging"): a better predictive score is not a
better decision. On the simulator's mixed scenario the weights swing to ewma for a stretch
whose forecasts score higher and whose cutoffs are worse, and bdsgd-averaged ends 2.8 points
below the model alone; it is not bdsgd's default for that reason.
"""

from __future__ import annotations

import numpy as np
from scipy.special import log_ndtr, logsumexp

from bdsgd.cutoff import Observation

# Kernel width floor in log run-time: 1 % of a run-time. The bootstrap's atoms for a worker whose
# residuals are all 0 (one always cut) would otherwise have no width at all.
MIN_BANDWIDTH = 0.01


def log_score(draws: np.ndarray, obs: Observation) -> float:
    """l_k above: the mean over order statistics of the censored log predictive density of
    ``obs`` under the kernel density of ``draws`` (S, n) of joint log run-times, sorted."""
    S = len(draws)
    draws = np.sort(draws, axis=1)
    q25, q75 = np.percentile(draws, [25, 75], axis=0)
    spread = np.minimum(draws.std(axis=0), (q75 - q25) / 1.34)
    h = np.maximum(0.9 * spread * S ** -0.2, MIN_BANDWIDTH)
    accepted = np.arange(len(obs.runtimes)) < obs.cutoff
    # y_(1..c), then log tau for the n - c order statistics only known to be above it
    y = np.log(np.concatenate([np.sort(obs.runtimes[obs.accepted]),
                               np.full(len(obs.runtimes) - obs.cutoff, obs.cutoff_time)]))
    z = (draws - y) / h  # (S, n)
    density = logsumexp(-0.5 * z**2, axis=0) - np.log(S * h * np.sqrt(2 * np.pi))
    survival = logsumexp(log_ndtr(z), axis=0) - np.log(S)
    return float(np.where(accepted, density, survival).mean())


class Averaged:
    """Components' forecasts weighted by their recent censored predictive scores (above).

    ``components`` maps a name to a predictor with ``log_draws()`` ((S, n) log run-times, or None
    until it can predict) besides the ``Predictor`` protocol. A component that cannot predict
    yet is left out of the forecast and its weight stays where it was; ``weights`` are the
    current posterior, by name. Scoring starts once every component predicts (a few
    iterations): a late joiner's accumulated log score would not be comparable.
    """

    def __init__(self, components: dict, forgetting: float):
        if not 0 < forgetting <= 1:
            raise ValueError(f"forgetting must be in (0, 1], got {forgetting}")
        self.components, self.forgetting = components, forgetting
        self.log_w = dict.fromkeys(components, 0.0)

    @property
    def weights(self) -> dict[str, float]:
        names = list(self.log_w)
        w = np.exp(np.array([self.log_w[k] for k in names]) - max(self.log_w.values()))
        return dict(zip(names, w / w.sum(), strict=True))

    def observe(self, obs: Observation) -> None:
        # score each forecast made before this observation, then let the components learn from it
        draws = {name: c.log_draws() for name, c in self.components.items()}
        if all(d is not None for d in draws.values()):
            for name, d in draws.items():
                self.log_w[name] = self.forgetting * self.log_w[name] + log_score(d, obs)
        for component in self.components.values():
            component.observe(obs)

    def expected_order_stats(self) -> np.ndarray | None:
        ready = {k: e for k, c in self.components.items()
                 if (e := c.expected_order_stats()) is not None}
        if not ready:
            return None
        w = np.exp(np.array([self.log_w[k] for k in ready]) - max(self.log_w[k] for k in ready))
        return (w / w.sum()) @ np.array(list(ready.values()))
