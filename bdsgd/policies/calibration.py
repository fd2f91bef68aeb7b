"""A forecast of the order statistics calibrated against what the server saw of them.

The decision rule reads ratios of the forecast's top order statistics: cutting the slowest
worker pays when E[x_(n)] / E[x_(n-1)] - 1 exceeds a few per cent. A forecast built from
estimated per-worker levels overstates that gap: the largest of n noisy estimates lies above
the largest true level (the same curse the argmax has, one step earlier), and averaging
forecasts that share the bias keeps it. The server sees the order statistics it waited for, so
each rank's bias is measurable: the forecast m_r is scaled by

    kappa_r = min over q <= r of (k + sum_t a^(T-t) [q <= c_t] y_t,(q) / m_t,q)
                                 / (k + sum_t a^(T-t) [q <= c_t]),

each rank's recent mean ratio of what came to what was forecast, over the iterations that saw
it, shrunk towards 1 by k pseudo-iterations (``policies.calibration_weight``). The mean ratio,
not the mean log ratio, because the rule reads means. A rank above the cutoff c_t is censored:
it adds nothing, and with a = 2^(-1 / halflife) its evidence fades. The minimum over the ranks
below makes kappa non-increasing, so a calibrated gap m_r kappa_r / (m_(r-1) kappa_(r-1)) is
never wider than the forecast's own: a correction that widens a gap cuts the very workers whose
run-times it was learnt from, and censored they cannot show it wrong, so a correction
learnt in one regime would hold the cut through the next; one that narrows a gap waits for them,
which shows it. The scaled forecast is kept sorted.
"""

from __future__ import annotations

import numpy as np

from bdsgd.cluster.cutoff import Observation
from bdsgd.policies.base import Predictor
from bdsgd.policies.probe import Hypotheses


class Calibrated(Predictor):
    """``inner``'s forecast scaled rank by rank by kappa_r above, with fading of ``halflife``
    iterations and ``weight`` k."""

    def __init__(self, inner: Predictor, halflife: float, weight: float):
        if halflife <= 0:
            raise ValueError(f"halflife must be positive, got {halflife}")
        if weight < 0:
            raise ValueError(f"weight must be >= 0, got {weight}")
        self.inner, self.decay, self.weight = inner, 0.5 ** (1.0 / halflife), weight
        self.ratios = self.counts = None  # (n,) faded sums of y / m and of the iterations
        self.raw: np.ndarray | None = None  # this iteration's forecast as the inner one made it

    def factors(self) -> np.ndarray | float:
        """kappa_r (n,), or 1 before anything was seen."""
        if self.ratios is None:
            return 1.0
        return np.minimum.accumulate((self.weight + self.ratios) / (self.weight + self.counts))

    def expected_order_stats(self) -> np.ndarray | None:
        if self.raw is None:
            self.raw = self.inner.expected_order_stats()
        if self.raw is None:
            return None
        return np.maximum.accumulate(self.raw * self.factors())

    def observe(self, obs: Observation) -> None:
        # the forecast of this iteration, asked here where no decision asked for it (a warm-up
        # history): the inner predictor keeps it for its own observe
        forecast = self.raw if self.raw is not None else self.inner.expected_order_stats()
        if forecast is not None:
            if self.ratios is None:
                self.ratios, self.counts = np.zeros(len(forecast)), np.zeros(len(forecast))
            c = len(obs.seen)
            self.ratios *= self.decay
            self.counts *= self.decay
            self.ratios[:c] += obs.seen / forecast[:c]
            self.counts[:c] += 1.0
        self.raw = None
        self.inner.observe(obs)

    def idle(self) -> None:
        self.inner.idle()

    def hypotheses(self) -> Hypotheses | None:
        hyp = self.inner.hypotheses()
        return None if hyp is None else hyp._replace(expected=hyp.expected * self.factors())
