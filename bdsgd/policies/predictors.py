"""Predictors of next iteration's expected order statistics E[x_(1)] <= ... <= E[x_(n)].

Each learns only from ``Observation``s: the accepted run-times, and for the other workers only
that they ran longer than the cutoff time (right-censored). ``PredictivePolicy`` turns the
prediction into a cutoff with the ``ratio`` or ``rate`` rule.

* ``Elfving``: run-times i.i.d. Gaussian; mean and spread by maximum likelihood over the recent
  window, censoring included (EM); order statistics by Elfving's approximation, none below the
  fastest run-time in the window.
* ``Ecdf``: the Kaplan-Meier estimate of the run-time distribution over the recent window, and
  the exact order statistics of that distribution.
* ``Bandit``: arms c = 1..n, each with its own discounted mean duration x_(c); an iteration cut
  at c reveals x_(1..c), so every arm c' <= c is updated, not only the arm played. Optimism in
  the face of uncertainty: the rule sees a lower confidence bound on each duration.
* ``PerWorkerLevel``: each worker's own level of log run-time (``ewma``: exponentially weighted;
  ``persist``: the last value), censored workers raised to at least the cutoff, optionally each
  level's deviation from the others' kept only as far as such deviations came true, and a joint
  bootstrap of recent forecast errors. Unlike the pooled predictors above it tells workers
  apart: a persistently slow worker is forecast slow.
* ``TruthPredictor``: the simulator's true predictive distribution (the Bayes-optimal
  reference ``bayes``), by Monte Carlo.
"""

from __future__ import annotations

from collections import deque

import numpy as np
from scipy.special import erfcx

from bdsgd.cluster.cutoff import Observation
from bdsgd.policies import order_stats
from bdsgd.policies.base import Predictor, draw_count


class _Window:
    """The last ``size`` observations, as (accepted run-times, cutoff time, number censored)."""

    def __init__(self, n_workers: int, size: int):
        self.n = n_workers
        self.items: deque[tuple[np.ndarray, float, int]] = deque(maxlen=size)

    def add(self, obs: Observation) -> None:
        self.items.append((obs.seen, obs.cutoff_time, self.n - len(obs.seen)))


class Elfving(Predictor):
    """Censored-Gaussian maximum likelihood over the window, then Elfving's approximation.

    EM for right-censored normal data: a worker known only to exceed tau contributes, with
    alpha = (tau - mu)/sigma and the inverse Mills ratio h = phi(alpha)/(1 - Phi(alpha)),
    E[X | X > tau] = mu + sigma h  and  E[X^2 | X > tau] = mu^2 + sigma^2 + sigma (mu + tau) h,
    where h = sqrt(2/pi) / erfcx(alpha/sqrt 2) stays finite however far out alpha is. The M step
    is the ordinary mean and variance of the completed data. Warm-started from the last fit, a
    few steps per iteration suffice.

    No forecast order statistic lies below m, the fastest run-time in the window (never
    censored: every iteration accepts one). The model's own i.i.d. assumption demands it: the
    fastest of n fresh run-times is no faster, in expectation, than the fastest of the window's
    W n >= n, of which m is one draw. A Gaussian fit to right-skewed run-times breaks it by
    mirroring the tail to the left, most of all on a fully observed window (a warm-up history
    gathered under sync), which shows every stall at full length: one 17.5 s stall among 320
    run-times of 1.2-3.7 s doubles sigma and puts E[x_(1)] at 0.08 s (m: 1.18 s), a saving the
    rate rule bought at the measured lambda_hat with c = 1 (and ratio too at min_gain 0). On
    Gaussian run-times the floor does not bind: the fastest of W n = 320 draws lies above
    E[x_(1:16)] = mu - 1.77 sigma with probability 4e-6.
    """

    def __init__(self, n_workers: int, window: int, tol: float = 1e-9, max_steps: int = 200):
        self.window = _Window(n_workers, window)
        self.z = order_stats.elfving(n_workers)
        self.tol, self.max_steps = tol, max_steps
        self.mu: float | None = None
        self.sigma: float | None = None
        self.fastest: float | None = None  # m, the fastest run-time in the window

    def observe(self, obs: Observation) -> None:
        self.window.add(obs)
        seen = np.concatenate([s for s, _, _ in self.window.items])
        self.fastest = float(seen.min())
        cut = [(t, m) for _, t, m in self.window.items if m > 0]
        tau, count = np.array(cut, dtype=float).reshape(-1, 2).T
        total = len(seen) + count.sum()
        s1, s2 = seen.sum(), (seen**2).sum()
        mu = seen.mean() if self.mu is None else self.mu
        sigma = seen.std() if self.sigma is None else self.sigma
        floor = 1e-9 * max(abs(mu), 1e-300)  # all-equal run-times: sigma -> 0 is the answer
        for _ in range(self.max_steps):
            sigma = max(sigma, floor)
            alpha = (tau - mu) / sigma
            h = np.sqrt(2 / np.pi) / erfcx(alpha / np.sqrt(2))
            e1 = mu + sigma * h
            e2 = mu**2 + sigma**2 + sigma * (mu + tau) * h
            new_mu = (s1 + count @ e1) / total
            new_sigma = np.sqrt(max((s2 + count @ e2) / total - new_mu**2, 0.0))
            done = abs(new_mu - mu) + abs(new_sigma - sigma) <= self.tol * (abs(mu) + sigma)
            mu, sigma = new_mu, new_sigma
            if done:
                break
        self.mu, self.sigma = float(mu), float(sigma)

    def expected_order_stats(self) -> np.ndarray | None:
        if self.mu is None:
            return None
        return np.maximum(self.mu + self.sigma * self.z, self.fastest)


class Ecdf(Predictor):
    """Kaplan-Meier over the window; E[x_(r:n)] of that distribution (``order_stats``).

    The window's accepted run-times are kept sorted from one observation to the next: each
    moves W n numbers once (the newest record merged in, the oldest taken out) instead of
    sorting them anew.
    """

    def __init__(self, n_workers: int, window: int):
        self.n = n_workers
        self.window = _Window(n_workers, window)
        self.events = np.empty(0)  # the window's accepted run-times, sorted
        self.expected: np.ndarray | None = None
        order_stats.grid(n_workers)  # built once per n, here rather than in the first decision

    def observe(self, obs: Observation) -> None:
        items = self.window.items
        if len(items) == items.maxlen:  # the oldest record leaves the window
            self.events = order_stats.remove_sorted(self.events, items[0][0])
        self.window.add(obs)
        self.events = order_stats.merge_sorted(self.events, items[-1][0])
        cut = np.array([(t, m) for _, t, m in items if m > 0], dtype=float).reshape(-1, 2)
        values, probs = order_stats.kaplan_meier_sorted(self.events, cut[:, 0], cut[:, 1])
        self.expected = order_stats.from_quantiles(values, probs, self.n)

    def expected_order_stats(self) -> np.ndarray | None:
        return self.expected


class Bandit(Predictor):
    """Arms c = 1..n with discounted statistics of the duration x_(c), and optimism.

    After an iteration cut at c, arms 1..c each get one observation x_(c') (what they would have
    cost); every statistic decays by ``discount`` per iteration so the bandit follows a drifting
    cluster. The rule is given a lower confidence bound
    L_c = m_c / (1 + beta s_c / (m_c sqrt(N_c)))  (~ m_c - beta s_c / sqrt N_c, but positive),
    with m_c, s_c the discounted mean and spread and N_c the discounted count. Since x_(c) is
    non-decreasing in c, a lower bound on arm c' <= c bounds arm c too: L is made non-decreasing.
    Arms not seen lately (N_c small) look cheap, so they get tried again: exploration.
    The reward is therefore the throughput sum c / sum x_(c) itself, not a mean of per-iteration
    ratios, which would optimise a different objective.
    """

    def __init__(self, n_workers: int, discount: float, confidence: float):
        self.discount, self.confidence = discount, confidence
        self.count = np.zeros(n_workers)
        self.sum = np.zeros(n_workers)
        self.sum_sq = np.zeros(n_workers)

    def observe(self, obs: Observation) -> None:
        x = obs.seen
        for stat, value in ((self.count, 1.0), (self.sum, x), (self.sum_sq, x**2)):
            stat *= self.discount
            stat[: len(x)] += value

    def expected_order_stats(self) -> np.ndarray | None:
        if self.count[0] == 0:
            return None
        seen = self.count > 0
        count = np.where(seen, self.count, 1.0)
        mean = self.sum / count
        spread = np.sqrt(np.maximum(self.sum_sq / count - mean**2, 0.0))
        lower = np.where(seen, mean / (1 + self.confidence * spread / (mean * np.sqrt(count))), 0.0)
        return np.maximum.accumulate(lower)


# The bound, in spreads, beyond which a deviation is taken as real and kept (PerWorkerLevel)
PULL_SPREADS = 5.0
# Residual vectors the bootstrap needs before it predicts (the policy waits for all until then).
MIN_RESIDUALS = 3


def median(a: np.ndarray) -> float:
    """``np.median`` of a 1-D array without NaN, the same value from one partition: a decision
    takes two, and np.median's own checks cost more than the partition at a few hundred values."""
    k = len(a) // 2
    if len(a) % 2:
        return np.partition(a, k)[k]
    middle = np.partition(a, (k - 1, k))
    return (middle[k - 1] + middle[k]) / 2


class PerWorkerLevel(Predictor):
    """Per-worker levels of log run-time, optionally pulled towards the others' as far as such
    deviations came true, and a joint bootstrap of recent forecast errors.

    With y_t,i = log x_t,i and level m_t,i, a worker's value at iteration t is y_t,i if it was
    accepted, and if it was cut the pseudo-observation y'_t,i = max(m_t-1,i, log tau_t): it ran
    longer than tau_t, and it stays at least as slow as it was believed (y'_t,i = y_t,i for an
    accepted one). The level moves to
      m_t,i = m_t-1,i + alpha (y'_t,i - m_t-1,i)  (accepted),   m_t,i = y'_t,i  (cut),
    so a cut never lowers a level and lifts it to at least log tau_t. alpha = 1 - 2^(-1/h) for a
    half-life of h iterations (``ewma``); alpha = 1 (``persist``) makes m_t the last value.

    A level is a noisy estimate: where a worker's slowness has no memory, the slowest level is
    slowest by chance and its next run-time regresses towards the others'. Sorting the levels
    would forecast the slowest workers too slow and the gap between the last order statistics,
    which the rule's cut turns on, too wide (the argmax then cuts on noise). So where ``pull``
    is set each worker is forecast at
      mu_t,i = m_t,i + beta d_t,i 1{|d_t,i| < k s_t, i seen at t},  d_t,i = m_t,i - median_j m_t,j,
    s_t the levels' spread (1.4826 x their median absolute deviation) and k = ``PULL_SPREADS``:
    a deviation within what noise makes of the spread is pulled back by the share beta; one far
    beyond it (a rack that slowed, a straggler) is taken as real and kept whole (a spike-and-slab
    prior's posterior mean, roughly: noise, or a real deviation that dwarfs it). A worker cut at t
    keeps its level whole too: its level is a lower bound, not a noisy value (and where cut
    workers finish their gradient, it starts the next iteration late). beta is the least-squares
    slope of the next change y_t+1,i - m_t,i on d_t,i over the seen workers within the bound,
    both centred (a shift all workers share is not a deviation), accumulated over the
    iterations that waited for every worker, with forgetting 1 - 1/W, and clipped to [-1, 0]:
    0 where deviations last (the plain level), -1 where they are noise. Only those iterations:
    which workers a cut leaves unseen (or which late ones arrive before the next decision)
    depends on their run-times, and fitting on the seen ones would bias the slope; whether an
    iteration waited for all depends only on what was forecast, the slope's regressor. Without
    ``pull``, mu_t = m_t: the classical per-worker baselines.

    The forecast is x_t+1,i = exp(mu_t,i + r_s,i) with s uniform over the last W iterations, the
    same s for every worker (a joint bootstrap: a slowdown that workers share, such as a
    contended node's, stays shared), r_s,i = y'_s,i - mu_s-1,i the forecast's error at s, and
      E[x_(c)] = 1/W sum_s sort(exp(mu_t + r_s))_c
    is that bootstrap's expectation exactly, over its W equally likely vectors: W x n numbers
    and no Monte Carlo draws, whose noise the rule's argmax would exploit (``draw_count``).

    A cut worker's error is unknown: only y_s,i > log tau_s. It enters the pool at the least
    error consistent with that and with the forecast, max(log tau_s - mu_s-1,i, 0), so every
    vector stays whole (dropping the entry would break the joint draw). On a trace where one
    worker is always cut, its errors are 0: it is forecast where it was forecast, as slow as its
    level and beta allow. Imputing at the bound itself (negative for a worker forecast slower
    than tau) would instead forecast it at the cutoff time, as fast as the c-th worker, and the
    rule would wait for it again (docs/decisions.md). The price: an always-cut worker's spread is
    taken as none, and a cut worker that is faster than forecast is not seen to be, until it
    beats the cutoff again and its value is observed.
    """

    def __init__(self, n_workers: int, alpha: float, window: int, pull: bool = False):
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha, self.pull = alpha, pull
        self.level: np.ndarray | None = None
        # a ring buffer of the last W error vectors, in float32: a forecast sorts W x n draws,
        # and float32 moves half the bytes; 1e-7 of a log run-time is far below what the rule
        # can tell apart
        self.residuals = np.zeros((window, n_workers), dtype=np.float32)
        # exp(r_s), each taken once as its vector enters: a forecast is then exp(mu_t) exp(r_s),
        # W x n products where exp(mu_t + r_s) would be W x n exponentials a decision
        self.factors = np.ones((window, n_workers), dtype=np.float32)
        self.count = 0  # error vectors seen
        self.ready = min(window, MIN_RESIDUALS)
        self.forgetting = 1 - 1 / window
        self.moments = np.zeros(2)  # forgotten sums of d * change and d^2, within the bound
        self.seen = np.ones(n_workers, dtype=bool)  # whose level the last observation showed
        # mu_t, and with pull d_t and the workers it pulls: once an observation (``_recentre``)
        self.mu: np.ndarray | None = None
        self.pulling: tuple[np.ndarray, np.ndarray] | None = None
        self.expected: np.ndarray | None = None  # the forecast, until the next observation

    @property
    def beta(self) -> float:
        """The slope of a worker's next change on its deviation within the bound: -1 where such
        deviations are noise, 0 where they last."""
        cross, square = self.moments
        return float(np.clip(cross / square, -1.0, 0.0)) if square > 0 else 0.0

    def deviation(self) -> tuple[np.ndarray, float]:
        """d_t, each level's deviation from the median level, and the bound beyond which one is
        kept whole: PULL_SPREADS times the levels' spread (1.4826 x their median absolute
        deviation)."""
        deviation = self.level - median(self.level)
        return deviation, PULL_SPREADS * 1.4826 * float(median(np.abs(deviation)))

    def centre(self) -> np.ndarray:
        """mu_t: each worker's forecast log run-time before the errors are added."""
        return self.mu

    def _recentre(self) -> None:
        """mu_t from the levels, the seen workers and beta as they are now; with pull, d_t and
        the workers it pulls (seen, within the bound) are kept for the slope's fit."""
        if not self.pull:
            self.mu = self.level
            return
        deviation, bound = self.deviation()
        inside = (np.abs(deviation) < bound) & self.seen  # none where every level is the same
        self.pulling = deviation, inside
        self.mu = self.level + self.beta * np.where(inside, deviation, 0.0)

    def observe(self, obs: Observation) -> None:
        # accepted: the log run-time; cut: log tau, the lower bound
        y = np.log(np.where(obs.observed, obs.runtimes, obs.cutoff_time))
        self.expected = None
        if self.level is None:
            self.level, self.seen = y, obs.observed  # a cut worker starts at its lower bound
            self._recentre()
            return
        centre = self.mu  # the forecast this observation answers
        if self.pull and obs.cutoff == len(y):
            self._fit_slope(y)
        row = self.count % len(self.residuals)
        self.residuals[row] = np.where(obs.observed, y - centre, np.maximum(y - centre, 0.0))
        np.exp(self.residuals[row], out=self.factors[row])
        self.count += 1
        self.seen = obs.observed
        self.level = np.where(obs.observed, self.level + self.alpha * (y - self.level),
                              np.maximum(self.level, y))
        self._recentre()

    def _fit_slope(self, y: np.ndarray) -> None:
        """Add an iteration that waited for every worker, run-times y (log), to beta's sums,
        over the workers it would pull only (seen, within the bound): the slope moves no other
        forecast."""
        deviation, inside = self.pulling
        if inside.any():
            pulled, change = deviation[inside], (y - self.level)[inside]
            pulled, change = pulled - pulled.mean(), change - change.mean()
            self.moments = self.forgetting * self.moments + [pulled @ change, pulled @ pulled]

    def expected_order_stats(self) -> np.ndarray | None:
        if self.expected is None and self.count >= self.ready:
            # the bootstrap's W equally likely joint vectors exp(mu_t + r_s), sorted in place
            draws = np.exp(self.mu).astype(np.float32) * self.factors[: min(self.count,
                                                                           len(self.factors))]
            draws.sort(axis=1)
            self.expected = draws.mean(axis=0, dtype=np.float64)
        return self.expected


class TruthPredictor(Predictor):
    """E[x_(c)] under the simulator's true dynamics: the mean of sorted joint draws.

    ``truth.predictive_draws(t, S, rng)`` draws x_t given the true latent state up to t - 1,
    with t the absolute iteration of the simulated trace; the replayed trace starts at
    ``offset`` (a test slice). It ignores the observations: it already knows the state. It takes
    as many draws as bdsgd's predictor (``draw_count``), so that the gap between the two is the
    model's error, not Monte Carlo noise.
    """

    def __init__(self, truth, offset: int, samples: int, seed: int):
        self.truth, self.t = truth, offset
        self.samples = draw_count(samples, truth.n_workers)
        self.rng = np.random.default_rng(seed)

    def observe(self, obs: Observation) -> None:
        self.t += 1

    def expected_order_stats(self) -> np.ndarray:
        draws = self.truth.predictive_draws(self.t, self.samples, self.rng)
        return np.sort(draws, axis=1).mean(axis=0)
