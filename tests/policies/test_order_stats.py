"""Expected order statistics against outside numbers, brute force and known distributions."""

import itertools

import numpy as np
import pytest

from bdsgd.policies import order_stats


@pytest.mark.parametrize("n, expected_max", [(2, 0.5642), (5, 1.1630), (10, 1.5388)])
def test_exact_normal_order_stats_match_tables(n, expected_max):
    e = order_stats.normal_exact(n)
    assert e[-1] == pytest.approx(expected_max, abs=5e-5)
    np.testing.assert_allclose(e, -e[::-1], atol=1e-10)  # symmetry of the normal
    assert e.sum() == pytest.approx(0.0, abs=1e-9)  # the order statistics sum to n * mean


# Elfving's error, measured against the exact values: largest at n = 2 (0.0359), 0.0050 at
# n = 50, then creeping up to 0.0076 at n = 1000 (the extreme order statistics).
@pytest.mark.parametrize("n, bound", [(2, 0.037), (3, 0.037), (5, 0.031), (10, 0.021),
                                      (20, 0.013), (50, 0.0055), (100, 0.0055), (200, 0.0065),
                                      (500, 0.0075), (1000, 0.008)])
def test_elfving_error_bound(n, bound):
    err = np.abs(order_stats.elfving(n) - order_stats.normal_exact(n)).max()
    assert err <= bound
    assert err >= bound - 0.002  # the bound is the measured error, not a loose one


def test_from_quantiles_matches_brute_force_on_a_discrete_distribution():
    values, probs = np.array([1.0, 2.0, 5.0]), np.array([0.5, 0.3, 0.2])
    for n in (1, 2, 3, 5):
        exact = np.zeros(n)
        for idx in itertools.product(range(3), repeat=n):
            exact += probs[list(idx)].prod() * np.sort(values[list(idx)])
        np.testing.assert_allclose(order_stats.from_quantiles(values, probs, n), exact,
                                   rtol=2e-3)


@pytest.mark.parametrize("n", [4, 158, 2048])
def test_from_quantiles_matches_exponential_order_stats(n):
    # Exp(1): E[X_(r:n)] = sum_{i=n-r+1}^{n} 1/i.
    m = 200_000
    u = (np.arange(m) + 0.5) / m
    e = order_stats.from_quantiles(-np.log1p(-u), np.full(m, 1 / m), n)
    exact = np.cumsum(1 / np.arange(n, 0, -1))
    np.testing.assert_allclose(e, exact, rtol=1.5e-3)


def test_kaplan_meier_without_censoring_is_the_empirical_distribution():
    times = np.array([3.0, 1.0, 2.0, 2.0])
    values, probs = order_stats.kaplan_meier(times, np.zeros(4, bool), np.ones(4))
    np.testing.assert_allclose(values, [1.0, 2.0, 2.0, 3.0])
    np.testing.assert_allclose(probs, [0.25] * 4)


def test_kaplan_meier_textbook_example():
    # Six workers: events at 1, 3 and 4, one censored at 2, two censored at 5 (one record).
    # S(1) = 5/6, S(3) = S(1) * 3/4 (4 at risk), S(4) = S(3) * 2/3 (3 at risk: the two at 5).
    times = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    censored = np.array([False, True, False, False, True])
    values, probs = order_stats.kaplan_meier(times, censored, np.array([1, 1, 1, 1, 2.0]))
    s1 = 5 / 6
    s3 = s1 * 3 / 4
    s4 = s3 * 2 / 3
    np.testing.assert_allclose(values, [1.0, 3.0, 4.0, 5.0])
    np.testing.assert_allclose(probs, [1 - s1, s1 - s3, s3 - s4, s4])  # the rest at 5 (Efron)


def test_kaplan_meier_recovers_a_censored_exponential():
    rng = np.random.default_rng(0)
    x, c = rng.exponential(1.0, 20_000), rng.exponential(2.0, 20_000)
    values, probs = order_stats.kaplan_meier(np.minimum(x, c), c < x, np.ones(20_000))
    grid = np.array([0.25, 0.5, 1.0, 2.0])
    cdf = np.cumsum(probs)[np.searchsorted(values, grid, side="right") - 1]
    np.testing.assert_allclose(cdf, 1 - np.exp(-grid), atol=0.015)
    # Ignoring the censoring (treating cut-off workers as finished) is far off: the test can fail.
    naive = np.mean(np.minimum(x, c) <= 1.0)
    assert abs(naive - (1 - np.exp(-1.0))) > 0.1


def test_windowed_kaplan_meier_is_kaplan_meiers():
    """kaplan_meier_sorted (one worker per event, sorted; the window's censorings apart) and the
    sorted window kept by merge_sorted / remove_sorted give kaplan_meier's answer, ties and a
    censoring at the last event included: the values exactly, the probabilities to rounding."""
    rng = np.random.default_rng(1)
    for _ in range(300):
        n, window = rng.integers(1, 30), rng.integers(1, 8)
        seen = [np.sort(np.round(rng.lognormal(0, 0.3, n), 1))[: rng.integers(1, n + 1)]
                for _ in range(window)]
        tau = np.array([s[-1] + (rng.random() < 0.3) * 0.1 for s in seen])
        count = np.array([n - len(s) for s in seen], dtype=float)
        times = np.concatenate(seen + [tau])
        censored = np.arange(len(times)) >= len(times) - window
        counts = np.concatenate([np.ones(len(times) - window), count])
        keep = counts > 0
        expected = order_stats.kaplan_meier(times[keep], censored[keep], counts[keep])
        events = np.empty(0)
        for s in seen:
            events = order_stats.merge_sorted(events, s)
        np.testing.assert_array_equal(events, np.sort(np.concatenate(seen)))
        np.testing.assert_array_equal(order_stats.remove_sorted(events, seen[0]),
                                      np.sort(np.concatenate(seen[1:] or [np.empty(0)])))
        values, probs = order_stats.kaplan_meier_sorted(events, tau[count > 0], count[count > 0])
        np.testing.assert_array_equal(values, expected[0])
        np.testing.assert_allclose(probs, expected[1], rtol=1e-12, atol=1e-15)
