"""The objective-aware cutoff: expected loss decrease per second, not gradients per second.

Accepting c of n workers, each with a mini-batch of b samples, averages B = c b samples. On a
locally quadratic loss (McCandlish, Kaplan, Amodei et al. 2018, "An Empirical Model of
Large-Batch Training", section 2 and appendix A) one SGD step of size eps on that average
decreases the loss in expectation by

    dL(eps, B) = eps |g|^2 - (eps^2 / 2) g'Hg (1 + B_noise / B),   B_noise ~ tr(Sigma) / |g|^2,

g the true gradient, H the Hessian, Sigma the covariance of one sample's gradient (B_noise is
the "simple" noise scale, exact when H is a multiple of the identity). Its best step is
eps_opt(B) = eps_max / (1 + B_noise / B), eps_max = |g|^2 / g'Hg. The trainer's step at cutoff
c is eps_c = s(c) eps_n, with s the train.lr_scaling factor of c / n (``LR_SCALING``: c / n,
sqrt(c / n) or 1) and eps_n train.learning_rate, the rate at c = n. Taking that rate as tuned
for the full batch, eps_n = eps_opt(n b), so eps_max = eps_n (1 + B_noise / (n b)), and

    dL(c) / dL(n) = 2 s - s^2 r,    r = (1 + B_noise / (c b)) / (1 + B_noise / (n b)).

The worth of cutoff c is that ratio in gradient units, worth(c) = n (2 s - s^2 r), so worth(n)
= n. Under linear scaling it is c (B_noise + (2n - c) b) / (B_noise + n b): c itself as B_noise
-> inf (every gradient counts alike: the throughput rule exactly) and up to c (2n - c) / n as
B_noise -> 0 (a small batch's step is as useful, only shorter). Under lr_scaling none and no
noise every c is worth n: take the fastest. The decision rules (``bdsgd.policies.base.decide``)
then maximise worth(c) / D(c) (ratio) or worth(c) - lambda_hat D(c) (rate), D(c) the
network's end of an iteration at the forecast arrivals, with lambda_hat the recent worth per second.

Estimating B_noise (McCandlish et al., Appendix A). For a gradient average G_B over B samples,
E|G_B|^2 = |g|^2 + tr(Sigma) / B. Each iteration the trainer gives the server two averages
over disjoint groups A, B of the accepted samples (the first ceil(c / 2) accepted workers and
the rest, or the two halves of one worker's batch when c = 1) and the average over all of them:
small_sq = (|G_A|^2 + |G_B|^2) / 2 with 1 / b_small = (1 / b_A + 1 / b_B) / 2, and
big_sq = |G|^2 with b_big = c b. Then E[small_sq] = |g|^2 + tr(Sigma) / b_small, and

    S  = (small_sq - big_sq) / (1 / b_small - 1 / b_big)    (unbiased for tr(Sigma)),
    G2 = big_sq - S / b_big                                   (unbiased for |g|^2).

Their ratio is not unbiased (nor is a ratio of single, noisy estimates stable), so S and G2 are
averaged separately, exponentially weighted, and B_noise = max(0, S_ema / G2_ema): None before
the first estimate, or while G2_ema <= 0, where the policy falls back to worth(c) = c.
"""

from __future__ import annotations

import math

import numpy as np

from bdsgd.sgd import LR_SCALING

OBJECTIVES = ("throughput", "progress")  # train.objective: what a predictive policy maximises


def worth(c: np.ndarray, n: int, batch: int, noise: float | None,
          lr_scaling: str = "linear") -> np.ndarray:
    """worth(c) = n (2 s - s^2 r) for cutoffs c (gradient units, worth(n) = n; the module's
    docstring). ``noise`` B_noise in samples; None (no estimate yet) gives c itself."""
    c = np.asarray(c, dtype=float)
    if noise is None:
        return c
    if not noise >= 0:  # also NaN
        raise ValueError(f"noise scale must be >= 0, got {noise}")
    s = LR_SCALING[lr_scaling](c / n)
    r = n / c if math.isinf(noise) else (1 + noise / (c * batch)) / (1 + noise / (n * batch))
    return np.where(c == n, float(n), n * (2 * s - s * s * r))


class GradientNoise:
    """The simple noise scale B_noise = tr(Sigma) / |g|^2 (in samples), from McCandlish et al.'s
    two-batch-size estimator, S and G2 each an exponentially weighted mean with ``halflife`` in
    observations."""

    def __init__(self, halflife: float = 100.0):
        if not halflife > 0:
            raise ValueError(f"halflife must be > 0, got {halflife}")
        self.decay = 0.5 ** (1.0 / halflife)
        self.weight = 0.0  # the weights' sum, so the means are not biased towards 0 early on
        self.s_sum = 0.0  # weighted sums of the per-iteration S and G2
        self.g2_sum = 0.0
        self.skipped = 0  # observations with a non-finite norm (a diverged step), left out

    def observe(self, small_sq: float, big_sq: float, b_small: float, b_big: float) -> None:
        """One iteration's squared norms: ``small_sq`` the mean of two disjoint groups' |G|^2
        (harmonic-style batch ``b_small``), ``big_sq`` that of the average over all accepted
        samples (``b_big``); b_small < b_big."""
        if not 0 < b_small < b_big:
            raise ValueError(f"need 0 < b_small < b_big, got b_small={b_small}, b_big={b_big}")
        if not (math.isfinite(small_sq) and math.isfinite(big_sq)):
            self.skipped += 1
            return
        s = (small_sq - big_sq) / (1.0 / b_small - 1.0 / b_big)
        self.weight = self.decay * self.weight + 1.0
        self.s_sum = self.decay * self.s_sum + s
        self.g2_sum = self.decay * self.g2_sum + (big_sq - s / b_big)

    @property
    def trace(self) -> float | None:
        """tr(Sigma): the estimated variance of one sample's gradient, summed over parameters."""
        return self.s_sum / self.weight if self.weight > 0 else None

    @property
    def sq_norm(self) -> float | None:
        """|g|^2: the estimated squared norm of the true gradient."""
        return self.g2_sum / self.weight if self.weight > 0 else None

    @property
    def scale(self) -> float | None:
        """B_noise = max(0, S_ema / G2_ema) in samples; None before any estimate or while
        G2_ema <= 0."""
        if self.weight == 0 or self.g2_sum <= 0:
            return None
        return max(0.0, self.s_sum / self.g2_sum)
