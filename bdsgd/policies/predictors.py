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
  ``persist``: the last value), censored workers raised to at least the cutoff, and a joint
  bootstrap of recent residual vectors around the levels. Unlike the pooled predictors above it
  tells workers apart: a persistently slow worker is forecast slow.
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


# Residual vectors the bootstrap needs before it predicts (the policy waits for all until then).
MIN_RESIDUALS = 3


class PerWorkerLevel(Predictor):
    """Per-worker levels of log run-time and a joint bootstrap of recent residuals.

    With y_t,i = log x_t,i and level m_t,i, a worker's value at iteration t is y_t,i if it was
    accepted, and if it was cut the pseudo-observation y'_t,i = max(m_t-1,i, log tau_t): it ran
    longer than tau_t, and it stays at least as slow as it was believed (y'_t,i = y_t,i for an
    accepted one). Its residual is e_t,i = y'_t,i - m_t-1,i, and the level moves to
      m_t,i = m_t-1,i + alpha e_t,i  (accepted),   m_t,i = y'_t,i  (cut),
    so a cut never lowers a level and lifts it to at least log tau_t. alpha = 1 - 2^(-1/h) for a
    half-life of h iterations (``ewma``); alpha = 1 (``persist``) makes m_t the last value and
    e_t the one-step change. The forecast is x_t+1,i = exp(m_t,i + e_s,i) with s uniform over the
    last W iterations, the same s for every worker (a joint bootstrap: a slowdown that workers
    share, such as a contended node's, stays shared), and
      E[x_(c)] = 1/W sum_s sort(exp(m_t + e_s))_c
    is that bootstrap's expectation exactly, over its W equally likely vectors: W x n numbers
    and no Monte Carlo draws, whose noise the rule's argmax would exploit (``draw_count``).

    A cut worker's residual is unknown: only e_t,i > log tau_t - m_t-1,i. It enters the pool at
    the level update's lower bound, max(log tau_t - m_t-1,i, 0): the smallest residual consistent
    with both what the server saw and the level rule, so every vector stays whole (dropping the
    entry would break the joint draw). On a trace where one worker is always cut, its level
    stays above tau and its residuals are 0: it is forecast at its level, as slow as it was last
    seen. Imputing at the bound itself (negative for a worker believed slower than tau) would
    instead forecast it at the cutoff time, as fast as the c-th worker, and the rule would wait
    for it again (docs/decisions.md). The price: an always-cut worker's spread is taken as none,
    and a cut worker that is faster than its level is not seen to be, until it beats the cutoff
    again and its value is observed.
    """

    def __init__(self, n_workers: int, alpha: float, window: int):
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        self.alpha = alpha
        self.level: np.ndarray | None = None
        # a ring buffer of the last W vectors, in float32: a forecast sorts W x n draws, and
        # float32 moves half the bytes; 1e-7 of a log run-time is far below what the rule can
        # tell apart
        self.residuals = np.zeros((window, n_workers), dtype=np.float32)
        self.count = 0  # residual vectors seen
        self.ready = min(window, MIN_RESIDUALS)
        self.expected: np.ndarray | None = None  # the forecast, until the next observation

    def observe(self, obs: Observation) -> None:
        # accepted: the log run-time; cut: log tau, the lower bound
        y = np.log(np.where(obs.observed, obs.runtimes, obs.cutoff_time))
        self.expected = None
        if self.level is None:
            self.level = y  # a cut worker starts at its lower bound
            return
        target = np.where(obs.observed, y, np.maximum(self.level, y))
        residual = target - self.level
        self.residuals[self.count % len(self.residuals)] = residual
        self.count += 1
        self.level = np.where(obs.observed, self.level + self.alpha * residual, target)

    def log_draws(self) -> np.ndarray | None:
        """The bootstrap's W equally likely joint vectors of log run-times, m_t + e_s (float32,
        a fresh array)."""
        if self.count < self.ready:
            return None
        return self.level.astype(np.float32) + self.residuals[: min(self.count, len(self.residuals))]

    def expected_order_stats(self) -> np.ndarray | None:
        if self.expected is not None:
            return self.expected
        draws = self.log_draws()
        if draws is not None:
            np.exp(draws, out=draws)  # a fresh array: exp and sort in place
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
