"""The per-worker censored baselines ewma and persist (``PerWorkerLevel``)."""

import dataclasses

import numpy as np
import pytest

from bdsgd.cluster.cutoff import observation
from bdsgd.cluster.server import replay
from bdsgd.config import default_config
from bdsgd.policies.build import make_policy, warm_up
from bdsgd.policies.predictors import MIN_RESIDUALS, PerWorkerLevel, median
from bdsgd.traces.schema import from_arrays

CFG = default_config().policies
SIMPLE = ("ewma", "persist")
# the per-worker baselines alone, with and without the pull towards the others (policies.pull)
PULLS = {"plain": dataclasses.replace(CFG, pull=False), "pulled": dataclasses.replace(CFG, pull=True)}


def straggler_trace(T=300, n=8, slow=3, factor=5.0, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.lognormal(0.0, 0.1, (T, n))
    x[:, slow] *= factor
    return x


@pytest.mark.parametrize("n", [1, 2, 7, 158])
def test_the_levels_median_is_numpys_to_the_bit(n):
    rng = np.random.default_rng(n)
    for a in (rng.normal(size=n), np.round(rng.normal(size=n), 1)):  # ties too
        assert median(a) == np.median(a)


@pytest.mark.parametrize("name", SIMPLE)
def test_a_persistently_slow_worker_is_forecast_the_slowest(name):
    x = straggler_trace()
    policy = make_policy(name, 8, CFG)
    for t in range(40):
        policy.observe(observation(t, x[t], 8, 0.0))
    level = policy.predictor.level
    assert np.argmax(level) == 3
    assert level[3] - np.delete(level, 3).max() > np.log(3.0)
    expected = policy.predictor.expected_order_stats()
    assert expected[-1] > 3 * expected[-2]


@pytest.mark.parametrize("pull", [False, True])
@pytest.mark.parametrize("alpha", [0.1, 1.0])
def test_a_cut_never_lowers_a_level_and_lifts_it_to_the_cutoff(alpha, pull):
    rng = np.random.default_rng(1)
    predictor = PerWorkerLevel(6, alpha, 10, pull)
    for t in range(30):
        x = rng.lognormal(0.0, 0.5, 6)
        obs = observation(t, x, int(rng.integers(1, 7)), 0.0)
        before = None if predictor.level is None else predictor.level.copy()
        predictor.observe(obs)
        cut = ~obs.accepted
        assert (predictor.level[cut] >= np.log(obs.cutoff_time)).all()
        if before is not None:
            assert (predictor.level[cut] >= before[cut]).all()
            # the pool holds the least error the forecast allows: never negative for a cut worker
            residual = predictor.residuals[(predictor.count - 1) % 10]
            assert (residual[cut] >= 0).all()
    # a cut worker already believed slower than the cutoff keeps its level
    predictor.level[:] = np.log([1.0, 1.0, 1.0, 1.0, 1.0, 9.0])
    predictor.observe(observation(30, np.array([1.0, 1.1, 1.2, 1.3, 1.4, 20.0]), 5, 0.0))
    assert predictor.level[5] == pytest.approx(np.log(9.0))


@pytest.mark.parametrize("pull", PULLS)
@pytest.mark.parametrize("name", SIMPLE)
def test_iid_order_statistics_approach_the_true_ones(name, pull):
    """On run-times with no memory, pulled forecasts approach the generating distribution's order
    statistics: a level's deviation from the others is noise, and the slope pulls it back.
    Plain, ewma's does too; persist's is a random walk's from each worker's last value (its
    changes: differences of two i.i.d. draws, sqrt(2) sigma), which is what persist assumes."""
    rng = np.random.default_rng(2)
    n, sigma, draws = 16, 0.3, 100_000
    cfg = dataclasses.replace(PULLS[pull], residual_window=400, ewma_halflife=20)
    policy = make_policy(name, n, cfg)
    for t in range(400):
        policy.observe(observation(t, rng.lognormal(0.0, sigma, n), n, 0.0))
    predictor = policy.predictor
    if name == "persist" and pull == "plain":
        x = np.exp(predictor.level + np.sqrt(2) * sigma * rng.standard_normal((draws, n)))
    else:
        x = rng.lognormal(0.0, sigma, (draws, n))
    expected = predictor.expected_order_stats()
    np.testing.assert_allclose(expected, np.sort(x, axis=1).mean(axis=0), rtol=0.06)
    assert np.all(np.diff(expected) >= 0)
    if pull == "plain":
        np.testing.assert_array_equal(predictor.centre(), predictor.level)
    else:
        assert predictor.beta < (-0.9 if name == "persist" else 0)


@pytest.mark.parametrize("name", SIMPLE)
def test_a_deviation_far_beyond_the_spread_is_kept_whole(name):
    """The others' noise is pulled back by the share beta; a 5x straggler, far beyond their
    spread, is taken as real and forecast at its level."""
    x = straggler_trace(T=200)
    policy = make_policy(name, 8, PULLS["pulled"])
    for t in range(200):
        policy.observe(observation(t, x[t], 8, 0.0))
    predictor = policy.predictor
    level, centre = predictor.level, predictor.centre()
    deviation, bound = predictor.deviation()
    others = np.delete(np.arange(8), 3)
    assert deviation[3] > bound > np.abs(deviation[others]).max()
    assert centre[3] == level[3]
    np.testing.assert_allclose(centre[others], level[others] + predictor.beta * deviation[others])
    if name == "persist":
        assert predictor.beta < -0.5  # the others' last values are mostly noise


def test_a_cut_workers_level_is_a_bound_and_kept_whole():
    """A worker cut at the last iteration has a lower bound for a level, not a noisy value: its
    deviation is not pulled back, the seen workers' are."""
    rng = np.random.default_rng(3)
    predictor = PerWorkerLevel(8, 1.0, 50, pull=True)
    for t in range(60):
        predictor.observe(observation(t, rng.lognormal(0.0, 0.3, 8), 8, 0.0))
    x = rng.lognormal(0.0, 0.3, 8)
    predictor.observe(observation(60, x, 7, 0.0))
    cut = int(np.argmax(x))
    deviation, bound = predictor.deviation()
    assert 0 < deviation[cut] < bound and predictor.beta < -0.5
    centre = predictor.centre()
    assert centre[cut] == predictor.level[cut]
    seen = np.delete(np.arange(8), cut)
    inside = seen[np.abs(deviation[seen]) < bound]
    np.testing.assert_allclose(centre[inside],
                               predictor.level[inside] + predictor.beta * deviation[inside])


def test_the_slope_learns_only_from_complete_iterations():
    """A cut leaves the slowest workers unseen, and fitting on the rest would bias the slope: an
    iteration with a censored worker leaves it where it was."""
    rng = np.random.default_rng(3)
    predictor = PerWorkerLevel(8, 1.0, 50, pull=True)
    for t in range(60):
        predictor.observe(observation(t, rng.lognormal(0.0, 0.3, 8), 8, 0.0))
    moments = predictor.moments.copy()
    for t in range(60, 80):
        predictor.observe(observation(t, rng.lognormal(0.0, 0.3, 8), 6, 0.0))
    np.testing.assert_array_equal(predictor.moments, moments)
    assert predictor.beta < -0.5


@pytest.mark.parametrize("pull", PULLS)
@pytest.mark.parametrize("name", SIMPLE)
def test_cold_start_waits_for_every_worker(pull, name):
    x = straggler_trace(T=10)
    policy = make_policy(name, 8, PULLS[pull])
    cutoffs = []
    for t in range(MIN_RESIDUALS + 2):
        cutoffs.append(policy.choose())
        policy.observe(observation(t, x[t], cutoffs[-1], 0.0))
    assert cutoffs[: MIN_RESIDUALS + 1] == [8] * (MIN_RESIDUALS + 1)
    assert cutoffs[-1] == 7


@pytest.mark.parametrize("pull", PULLS)
@pytest.mark.parametrize("rule", ["rate", "ratio"])
@pytest.mark.parametrize("name", SIMPLE)
def test_a_persistent_straggler_is_cut_and_only_it(pull, name, rule):
    x = straggler_trace(T=400)
    history, test = from_arrays(x[:100]), from_arrays(x[100:])
    policy = make_policy(name, 8, PULLS[pull], rule=rule)
    warm_up(policy, history)
    run = replay(test, policy)
    assert np.mean(run.cutoffs == 7) > 0.9


@pytest.mark.parametrize("pull", PULLS)
@pytest.mark.parametrize("rule", ["rate", "ratio"])
@pytest.mark.parametrize("name", SIMPLE)
def test_no_harm_on_a_zero_variance_trace(pull, name, rule):
    for x in (np.full((50, 6), 2.0), np.repeat(np.linspace(1.0, 3.0, 50)[:, None], 6, axis=1)):
        run = replay(from_arrays(x), make_policy(name, 6, PULLS[pull], rule=rule))
        assert (run.cutoffs == 6).all()
