"""The learning policies on a skewed run: elfving's forecast never below the fastest run-time in
its window, and no learner warmed up (or cold) cuts 16 workers to one or two."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bdsgd.cluster.cutoff import observation
from bdsgd.cluster.server import replay
from bdsgd.config import default_config
from bdsgd.policies import order_stats
from bdsgd.policies.build import build_policy
from bdsgd.policies.predictors import Elfving
from bdsgd.traces.simulate import simulate

LEARNERS = ("elfving", "ecdf", "bandit", "ewma", "persist")


# --------------------------------------------------------------- 1. elfving after a warm-up
@pytest.fixture(scope="module")
def skewed_run():
    """16 simulated workers (mixed scenario) whose training half ends with a 17.5 s stall among
    run-times of 1.2-3.7 s: the history that made a warmed-up elfving choose c = 1."""
    cfg = default_config()
    sim = dataclasses.replace(cfg.trace("t").simulate, workers=16, iterations=400,
                              scenario="mixed")
    trace, _ = simulate(sim, seed=2)
    train, test = trace.split(0.5)
    return cfg, train, test


def test_elfving_forecast_is_never_below_the_fastest_run_time_in_its_window():
    rng = np.random.default_rng(0)
    n, window = 16, 20
    skewed = Elfving(n, window)
    for t in range(window):  # fully observed, as a warm-up shows them: fast body, one stall
        x = np.concatenate([rng.uniform(1.2, 1.5, n // 2), rng.uniform(2.0, 2.5, n // 2)])
        if t == window - 2:
            x[-1] = 17.5
        skewed.observe(observation(t, x, n, 0.0))
    gaussian = skewed.mu + skewed.sigma * order_stats.elfving(n)
    assert gaussian[0] < 0.5 * skewed.fastest  # the Gaussian mirrors the stall to the left
    expected = skewed.expected_order_stats()
    assert expected[0] == skewed.fastest >= 1.2
    assert np.all(np.diff(expected) >= 0)
    np.testing.assert_array_equal(expected[gaussian >= skewed.fastest],
                                  gaussian[gaussian >= skewed.fastest])

    normal = Elfving(n, window)  # Gaussian run-times: the floor does not bind
    for t in range(window):
        normal.observe(observation(t, rng.normal(10.0, 1.0, n), int(rng.integers(8, n + 1)), 0.0))
    np.testing.assert_array_equal(normal.expected_order_stats(),
                                  normal.mu + normal.sigma * order_stats.elfving(n))


def test_elfving_warmed_up_under_the_rate_rule_does_not_cut_to_one(skewed_run):
    """The reported run: elfving with --history under the default rule (rate) chose c = 1 on the
    second replayed iteration (the Gaussian's E[x_(1)] was 0.08 s, the fastest seen 1.18 s)."""
    cfg, train, test = skewed_run
    assert cfg.policies.rule == "rate"
    policy = build_policy("elfving", cfg, seed=0, n_workers=16, trace=test, history=train)
    predictor = policy.predictor
    assert predictor.mu + predictor.sigma * predictor.z[0] < 0.1 * predictor.fastest
    cutoffs = replay(test, policy).cutoffs
    assert cutoffs[1] > 2 and cutoffs.min() > 2, cutoffs[:20]


@pytest.mark.parametrize("name", LEARNERS)
@pytest.mark.parametrize("rule", ["rate", "ratio"])
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_no_learning_policy_cuts_to_one_or_two_of_16_on_the_skewed_run(skewed_run, name, rule,
                                                                       warm):
    cfg, train, test = skewed_run
    policy = build_policy(name, cfg, seed=0, n_workers=16, trace=test, rule=rule,
                          history=train if warm else None)
    assert replay(test, policy).cutoffs.min() > 2


# ------------------------------------------------------------ 2. static keeps one backup
