"""What a cutoff policy is, and what it may see.

Before iteration t a policy picks c_t in 1..n: the parameter server will wait for the first c_t
gradients and discard the rest. Afterwards it sees only what a parameter server sees: the
run-times of the c_t workers that made the cutoff, and, for the others, only that they ran
longer than the cutoff time tau_t = x_t,(c_t) (censored): ``bdsgd.cutoff.Observation``. The server
loop (``bdsgd.server``) builds it; no policy ever receives a censored value.

A predictive policy is a ``Predictor`` of next iteration's expected order statistics
E[x_(1)] <= ... <= E[x_(n)] combined with a decision rule (``ratio`` or ``rate``), so that
predictors and rules combine freely.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from bdsgd.cutoff import Observation
from bdsgd.policies import RULES

# Worker-draws per decision a Monte Carlo predictor affords at least, S = max(samples,
# DRAW_BUDGET / n): a small cluster gets more draws where they are cheap. E[x_(n)] of a heavy tail
# is noisy at S = 64, and the argmax over noisy E[x_(c)] favours the cutoffs whose noise flatters
# them (on a calm 16-worker cluster, bayes at S = 64 cut the slowest worker ~30 times in 500
# iterations, 0.11 point behind sync; at 512, 0.02).
DRAW_BUDGET = 8192


def draw_count(samples: int, n_workers: int) -> int:
    """S = max(samples, ceil(DRAW_BUDGET / n)): joint draws per decision for n workers."""
    return max(samples, -(-DRAW_BUDGET // n_workers))


class Policy(Protocol):
    """The interface every cutoff policy shares, and nothing else."""

    name: str

    def choose(self) -> int:
        """The cutoff c in 1..n for the next iteration."""

    def observe(self, obs: Observation) -> None:
        """Learn from what the server saw at the iteration just finished."""


class Predictor(Protocol):
    """A forecast of the next iteration's order statistics from censored observations."""

    def expected_order_stats(self) -> np.ndarray | None:
        """E[x_(c)] for c = 1..n (sorted), or None before there is anything to predict from."""

    def observe(self, obs: Observation) -> None:
        """Update on an iteration's censored observation."""


def decide(expected: np.ndarray, rule: str, rate: float | None, comm_s: float = 0.0,
           min_gain: float = 0.0) -> int:
    """Turn predicted order statistics into a cutoff.

    ``ratio`` (the paper's): c* = argmax_c c / (E[x_(c)] + comm).
    ``rate`` (renewal-reward): c* = argmax_c c - lambda_hat (E[x_(c)] + comm), with lambda_hat the
    throughput achieved so far; long-run throughput is a ratio of expectations, which this rule
    maximises when decisions do not change the cluster's future. Before any iteration has
    finished (``rate`` is None) it falls back to ``ratio``.

    ``min_gain`` delta charges each discarded gradient 1 + delta instead of 1 (c counts as
    c - delta (n - c)): a cutoff below n must save (1 + delta) / lambda_hat seconds per gradient
    it discards. Both rules are otherwise myopic and take the forecast at its word, and a learnt
    forecast's errors do not cancel here: the argmax picks the cutoffs whose gain it overstates
    (the optimiser's curse), and a cut worker is censored, so the forecast learns least about
    the workers it cut (a worker believed slow stays cut after it recovered).
    """
    n = len(expected)
    c = np.arange(1, n + 1)
    counted = c - min_gain * (n - c)
    cost = np.asarray(expected, dtype=float) + comm_s
    if rule == "rate" and rate is not None:
        score = counted - rate * cost
    elif rule in ("rate", "ratio"):
        score = counted / cost
    else:
        raise ValueError(f"unknown decision rule {rule!r}")
    return int(np.argmax(score)) + 1



class PredictivePolicy:
    """A ``Predictor`` plus a decision rule: c = decide(E[x_(1..n)], rule, lambda_hat,
    min_gain).

    lambda_hat = sum c / sum duration over the iterations this policy chose the cutoff of, each
    weighted by 2^(-age / halflife): the throughput it achieved recently, as the server measures
    it. Recent, because the cluster drifts and the rule wants the rate it can get now (a plain
    average over a long run never follows a load shift). Its own, because a warm-up history
    (iterations observed without a ``choose()``, gathered under another policy, usually sync)
    says what that policy achieved: it informs the predictor, not lambda_hat. Before the predictor
    has anything to go on it waits for every worker (sync), which also shows it every run-time
    once.
    """

    def __init__(self, name: str, predictor: Predictor, rule: str, comm_s: float, n_workers: int,
                 halflife: float = 100.0, min_gain: float = 0.0):
        if rule not in RULES:
            raise ValueError(f"unknown decision rule {rule!r}; choose from {RULES}")
        self.name, self.predictor, self.rule = name, predictor, rule
        self.comm_s, self.n, self.min_gain = comm_s, n_workers, min_gain
        self.decay = 0.5 ** (1.0 / halflife)
        self.gradients, self.seconds = 0.0, 0.0  # exponentially weighted sums
        self.chosen = False  # whether the iteration being observed was this policy's choice

    @property
    def rate(self) -> float | None:
        return self.gradients / self.seconds if self.seconds > 0 else None

    def choose(self) -> int:
        self.chosen = True
        expected = self.predictor.expected_order_stats()
        if expected is None:
            return self.n
        return decide(expected, self.rule, self.rate, self.comm_s, self.min_gain)

    def observe(self, obs: Observation) -> None:
        if self.chosen:
            self.gradients = self.decay * self.gradients + obs.cutoff
            self.seconds = self.decay * self.seconds + obs.duration
        self.chosen = False
        self.predictor.observe(obs)
