"""bdsgd's averaging of forecasts (bdsgd.policies.averaging): the censored predictive score, and
weights that move to the component whose forecasts come true."""

from __future__ import annotations

import numpy as np
import pytest

from bdsgd.cutoff import Observation
from bdsgd.policies.averaging import MIN_BANDWIDTH, Averaged, log_score


def observation(runtimes: np.ndarray, cutoff: int, t: int = 0) -> Observation:
    """What a server sees when it stops at the c-th fastest: the rest are NaN, cut at tau."""
    tau = np.sort(runtimes)[cutoff - 1]
    seen = np.where(runtimes <= tau, runtimes, np.nan)
    return Observation(t, cutoff, seen, float(tau))


class Fixed:
    """A component whose forecast never changes: log-normal around ``level`` (seconds)."""

    def __init__(self, level: np.ndarray, spread: float = 0.05, samples: int = 200):
        rng = np.random.default_rng(0)
        self.draws = np.log(level) + spread * rng.standard_normal((samples, len(level)))
        self.seen = 0

    def log_draws(self):
        return self.draws

    def expected_order_stats(self):
        return np.sort(np.exp(self.draws), axis=1).mean(0)

    def observe(self, obs):
        self.seen += 1


def test_the_score_prefers_the_forecast_that_came_true_and_reads_a_cut_as_a_lower_bound():
    rng = np.random.default_rng(1)
    x = np.exp(rng.normal(0.0, 0.1, 8))
    right = np.log(x) + 0.1 * rng.standard_normal((500, 8))
    wrong = right + np.log(3.0)
    full = observation(x, 8)
    assert log_score(right, full) > log_score(wrong, full) + 1.0
    # all but the slowest accepted; the slowest ran longer than tau: a forecast whose x_(n) is
    # far above tau loses nothing for it, one whose x_(n) is below does
    cut = observation(x, 7)
    slow = int(np.argmax(x))
    above, below = right.copy(), right.copy()
    above[:, slow] = np.log(10 * x[slow])
    below[:, slow] = np.log(0.1 * x[slow])
    assert log_score(above, cut) > log_score(below, cut) + 1.0
    per_worker = log_score(above, cut) * 8
    assert per_worker == pytest.approx(log_score(right[:, np.arange(8) != slow],
                                                 Observation(0, 7, np.delete(cut.runtimes, slow),
                                                             cut.cutoff_time)) * 7, abs=1e-6)


def test_workers_are_scored_as_order_statistics():
    """What decisions read is E[x_(c)]: a forecast that swaps two workers' speeds predicts the
    same order statistics, and scores the same."""
    rng = np.random.default_rng(4)
    x = np.array([1.0, 1.1, 1.2, 4.0])
    draws = np.log(x) + 0.05 * rng.standard_normal((300, 4))
    swapped = draws[:, [3, 1, 2, 0]]
    obs = observation(x, 3)
    assert log_score(swapped, obs) == pytest.approx(log_score(draws, obs))


def test_atoms_get_the_minimum_kernel_width():
    obs = observation(np.ones(4), 4)
    exact = np.zeros((3, 4))  # three identical draws at log 1 = 0
    expected = -np.log(MIN_BANDWIDTH * np.sqrt(2 * np.pi))  # the kernel's peak
    assert log_score(exact, obs) == pytest.approx(expected)


def test_weights_move_to_the_component_whose_forecasts_come_true():
    n = 6
    fast, slow = Fixed(np.ones(n)), Fixed(np.full(n, 3.0))
    avg = Averaged({"fast": fast, "slow": slow}, forgetting=0.9)
    assert avg.weights == {"fast": 0.5, "slow": 0.5}
    rng = np.random.default_rng(2)
    for t in range(5):
        avg.observe(observation(np.exp(rng.normal(0.0, 0.05, n)), n - 1, t))
    assert avg.weights["fast"] > 0.999 and fast.seen == slow.seen == 5
    np.testing.assert_allclose(avg.expected_order_stats(), fast.expected_order_stats(), rtol=1e-3)
    # the cluster slows down: forgetting lets the weights follow within a few iterations
    for t in range(5, 15):
        avg.observe(observation(3.0 * np.exp(rng.normal(0.0, 0.05, n)), n - 1, t))
    assert avg.weights["slow"] > 0.999


def test_nothing_is_scored_until_every_component_predicts():
    class Late(Fixed):
        def log_draws(self):
            return None if self.seen < 2 else self.draws

        def expected_order_stats(self):
            return None if self.seen < 2 else super().expected_order_stats()

    n = 4
    ready, late = Fixed(np.ones(n)), Late(np.ones(n))
    avg = Averaged({"ready": ready, "late": late}, forgetting=0.98)
    np.testing.assert_allclose(avg.expected_order_stats(), ready.expected_order_stats())
    avg.observe(observation(np.ones(n), n))
    avg.observe(observation(np.ones(n), n, 1))
    assert avg.log_w == {"ready": 0.0, "late": 0.0}  # both learnt, neither was scored
    avg.observe(observation(np.ones(n), n, 2))
    assert avg.log_w["ready"] == pytest.approx(avg.log_w["late"]) != 0.0


def test_forgetting_must_be_a_fraction():
    with pytest.raises(ValueError, match="forgetting"):
        Averaged({}, forgetting=0.0)
