"""bdsgd's predictor: the run-time model's forecast averaged with simple per-worker and pooled
predictors, weighted by how well each forecast what the decision reads (bdsgd-model is the model
alone).

A learnt joint model wins where the cluster has structure it learnt (contended nodes, stalls
that persist, a straggler that comes and goes), and loses where the cluster is unlike its
training trace: a straggler episode the training part never showed, run-times with no memory
that it forecasts with memory. Which holds is a question the server's own observations answer,
so the forecasts are weighed by their recent errors: exponentially weighted averaging with
forgetting (dynamic model averaging, Raftery, Karny & Ettler 2010).

Components k (``policies.averaging`` names the simple ones beside the model) each forecast
m_k,r = E_k[x_(r)], r = 1..n, the expected order statistics: the only thing the decision rule
reads. The server then saw y_(1..c) and that the other n - c ran longer than tau. Component k's
loss on order statistic r is QLIKE, the Bregman divergence of -log (Patton 2011),

    L(m, y) = y / m - log(y / m) - 1 >= 0,      with
    y = y_(r)                                  r <= c   (seen)
    y = max(tau, m_k,r)                        r > c    (known only to exceed tau: the least
                                                         loss any y > tau gives; a forecast is
                                                         wrong only where it is below tau)

and its score is l_k = -1/s^2 * 1/n sum_r L(m_k,r, y_r) at a common scale s
(``policies.score_scale``). Its expectation is least at m = E[y]: it scores a forecast of the
mean, which the rule reads, not the whole predictive distribution: a density (log) score would
judge the spread and the tails as well, which the rule never reads, and reward a component whose
cutoffs are worse (docs/decisions.md, "Scores"). It depends on y / m alone, so one s serves any
time unit, and near m = y it is (log m - log y)^2 / 2: s is an error in log run-time. The squared
log error itself is least at exp E[log y], below the mean of a heavy tail, and rewards the
component that forecasts the slowest workers too fast. The mean over r, not the sum, because n
order statistics of one iteration share most of their evidence.

The weights are a posterior with forgetting and a share (Herbster & Warmuth 1998),

    log w_k <- alpha log w_k + l_k,   w normalised,   w_k <- (1 - gamma) w_k + gamma / K,

alpha = ``policies.forgetting``: a component's evidence fades over about 1 / (1 - alpha)
iterations, so the weights follow a cluster that changes. The share gamma, the prior's chance
that the best component switches in an iteration, keeps each of the K at gamma / K or more:
without it one iteration can sink a component for hundreds (a forecast 0.4 off in log run-time,
the model's as a load shift begins, scores about -0.4^2 / (2 s^2), -90 at s = 0.03). But on an
iteration that cut workers no score checks what a component believes of them, and the share
alone moves the weight back to a component whose belief of the cut workers was last seen wrong;
its forecast then decides a wait for them, a probe whose worth is whether such switches happen on
this cluster. So gamma is learnt, not fixed (Monteleoni & Jaakkola 2003): G copies of the
weights, one per gamma_g in {0, 1 - alpha}, each forecasting its mixture f_g = sum_k w_g,k m_k,
are weighted by the same score, with their own forgetting beta = ``policies.share_forgetting``,

    log v_g <- beta log v_g + l(f_g),

and the forecast is sum_g v_g f_g (exact: an expectation is linear in the mixture). A wait the
share caused scores the copies apart: where the cut workers were still slow the copy with the
share loses, and its revivals with it, for about 1 / (1 - beta) iterations: whether the share
pays is a question about the episodes under way, which end. The warm-up history counts, with
the same forgettings and shares: on its complete iterations every order statistic is seen.
"""

from __future__ import annotations

import numpy as np

from bdsgd.cluster.cutoff import Observation
from bdsgd.policies.base import Predictor
from bdsgd.policies.probe import Hypotheses


def log_score(expected: np.ndarray, obs: Observation, scale: float) -> float | np.ndarray:
    """l_k above, the log of the weight a forecast earns: minus the censored QLIKE loss per
    order statistic of what ``obs`` shows under the forecast ``expected`` (n,) = E[x_(1..n)], at
    error scale ``scale``; forecasts stacked (K, n) give the K scores of one observation."""
    n, c = len(obs.runtimes), len(obs.seen)
    seen = np.concatenate([obs.seen, np.full(n - c, obs.cutoff_time)])
    ratio = seen / expected
    ratio[..., c:] = np.maximum(ratio[..., c:], 1.0)  # y = max(tau, m)
    return -np.mean(ratio - np.log(ratio) - 1, axis=-1) / scale**2


def log_sum_exp(a: np.ndarray) -> np.ndarray:
    """log sum_k exp a_k over the last axis of ``a`` (G, K), kept as (G, 1): scipy's logsumexp,
    term for term (the largest taken out, the rest through log1p), so the weights are the same
    to the last bit, without its array-API dispatch, which costs more than the sum on a (2, 2)
    array every decision (benchmarks/results.md, "bench_decision.py")."""
    top = a.max(axis=-1, keepdims=True)
    tied = a == top
    ties = tied.sum(axis=-1, keepdims=True)
    rest = np.where(tied, 0.0, np.exp(a - top)).sum(axis=-1, keepdims=True)
    return np.log1p(rest / ties) + np.log(ties) + top


class Averaged(Predictor):
    """Components' forecasts weighted by their recent scores, under a learnt share (above).

    ``components`` maps a name to a ``Predictor``. A component that cannot predict yet is left
    out of the forecast and its weight stays where it was; ``weights`` are the current
    posterior, by name, averaged over the shares. Scoring starts once every component predicts
    (a few iterations): a late joiner's accumulated score would not be comparable.
    """

    def __init__(self, components: dict, forgetting: float, scale: float,
                 share_forgetting: float):
        for name, value in (("forgetting", forgetting), ("share_forgetting", share_forgetting)):
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        if scale <= 0:
            raise ValueError(f"scale must be positive, got {scale}")
        self.components, self.forgetting, self.scale = components, forgetting, scale
        self.share_forgetting = share_forgetting
        # forgetting 1 is the plain posterior: no share
        self.shares = np.unique([0.0, 1 - forgetting])  # gamma_g
        with np.errstate(divide="ignore"):  # log 0 = -inf: the copy without a share
            self._log_share = np.log(self.shares / len(components))[:, None]
        self.log_w = np.zeros((len(self.shares), len(components)))  # (G, K)
        self.log_v = np.zeros(len(self.shares))  # (G,)
        self.ready: dict[str, np.ndarray] | None = None  # this iteration's forecasts

    @property
    def weights(self) -> dict[str, float]:
        return dict(zip(self.components, self._normalised(self.components), strict=True))

    def _mixing(self, names) -> np.ndarray:
        """w_g,k (G, K') of ``names``, each share's weights renormalised among them."""
        cols = [list(self.components).index(k) for k in names]
        w = np.exp(self.log_w[:, cols] - self.log_w[:, cols].max(axis=1, keepdims=True))
        return w / w.sum(axis=1, keepdims=True)

    def _normalised(self, names) -> np.ndarray:
        """The weights of ``names`` renormalised among them, averaged over the shares."""
        v = np.exp(self.log_v - self.log_v.max())
        return (v / v.sum()) @ self._mixing(names)

    def observe(self, obs: Observation) -> None:
        # score each forecast made before this observation, then let the components learn from it
        forecasts = self._ready()
        if len(forecasts) == len(self.components):
            m = np.array(list(forecasts.values()))  # (K, n)
            mixtures = self._mixing(self.components) @ m  # f_g, (G, n)
            self.log_v = (self.share_forgetting * self.log_v
                          + log_score(mixtures, obs, self.scale))
            self.log_w = self.forgetting * self.log_w + log_score(m, obs, self.scale)
            # w <- (1 - gamma) w + gamma / K, in logs: no share leaves w normalised, not 0
            log_w = self.log_w - log_sum_exp(self.log_w)
            self.log_w = np.logaddexp(np.log1p(-self.shares)[:, None] + log_w, self._log_share)
        for component in self.components.values():
            component.observe(obs)
        self.ready = None

    def idle(self) -> None:
        for component in self.components.values():
            component.idle()

    def expected_order_stats(self) -> np.ndarray | None:
        ready = self._ready()
        if not ready:
            return None
        return self._normalised(ready) @ np.array(list(ready.values()))

    def _ready(self) -> dict[str, np.ndarray]:
        """The forecasts of the components that predict now, by name (asked once an
        iteration)."""
        if self.ready is None:
            self.ready = {k: e for k, c in self.components.items()
                          if (e := c.expected_order_stats()) is not None}
        return self.ready

    def hypotheses(self) -> Hypotheses | None:
        """The hypotheses of the one component with a latent state a wait reveals (the run-time
        model), each forecast averaged with the other components' at the current weights: they
        forecast the same under every hypothesis."""
        ready = self._ready()
        found = [(k, h) for k in ready if (h := self.components[k].hypotheses()) is not None]
        if len(found) != 1:
            return None
        (name, hyp), w = found[0], dict(zip(ready, self._normalised(ready), strict=True))
        rest = sum(w[k] * e for k, e in ready.items() if k != name)
        return hyp.mixed(rest, w[name])
