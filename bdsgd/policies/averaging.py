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

The weights are a posterior with forgetting and a fixed share (Herbster & Warmuth 1998),

    log w_k <- alpha log w_k + l_k,   w normalised,   w_k <- (1 - gamma) w_k + gamma / K,

alpha = ``policies.forgetting``: a component's evidence fades over about 1 / (1 - alpha)
iterations, so the weights follow a cluster that changes; the share gamma = 1 - alpha, the
prior's chance that the best component switches in an iteration, keeps each of the K at
gamma / K or more. Without it one iteration can sink a component for hundreds: a forecast 0.4
off in log run-time (the model's, the iteration a load shift begins, before its filter follows)
scores about -0.4^2 / (2 s^2), -90 at s = 0.03, which the forgetting takes back at 1 - alpha
an iteration. With it, a component is back as soon as its forecasts are the better ones. The
warm-up history counts, with the same forgetting and share: on its complete iterations every
order statistic is seen. The forecast is the mixture's, E[x_(c)] = sum_k w_k m_k,c (exact: an
expectation is linear in the mixture).
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


class Averaged(Predictor):
    """Components' forecasts weighted by their recent scores (above).

    ``components`` maps a name to a ``Predictor``. A component that cannot predict yet is left
    out of the forecast and its weight stays where it was; ``weights`` are the current
    posterior, by name. Scoring starts once every component predicts (a few iterations): a late
    joiner's accumulated score would not be comparable.
    """

    def __init__(self, components: dict, forgetting: float, scale: float):
        if not 0 < forgetting <= 1:
            raise ValueError(f"forgetting must be in (0, 1], got {forgetting}")
        if scale <= 0:
            raise ValueError(f"scale must be positive, got {scale}")
        self.components, self.forgetting, self.scale = components, forgetting, scale
        self.log_w = dict.fromkeys(components, 0.0)
        self.ready: dict[str, np.ndarray] | None = None  # this iteration's forecasts

    @property
    def weights(self) -> dict[str, float]:
        return dict(zip(self.log_w, self._normalised(self.log_w), strict=True))

    def _normalised(self, names) -> np.ndarray:
        """The posterior weights of ``names`` renormalised among them."""
        log_w = np.array([self.log_w[k] for k in names])
        w = np.exp(log_w - log_w.max())
        return w / w.sum()

    def observe(self, obs: Observation) -> None:
        # score each forecast made before this observation, then let the components learn from it
        forecasts = self._ready()
        if len(forecasts) == len(self.components):
            scores = log_score(np.array(list(forecasts.values())), obs, self.scale)
            for name, score in zip(forecasts, scores, strict=True):
                self.log_w[name] = self.forgetting * self.log_w[name] + float(score)
            share = 1 - self.forgetting  # gamma
            if share:  # forgetting 1: the plain posterior, whose weights may reach 0
                shared = (1 - share) * self._normalised(self.log_w) + share / len(self.log_w)
                self.log_w = dict(zip(self.log_w, np.log(shared).tolist(), strict=True))
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
