"""bdsgd's averaging of forecasts (bdsgd.policies.averaging): the censored score of a forecast of
the order statistics, and weights that move to the component whose forecasts come true."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from bdsgd.policies.averaging import Averaged, log_score, log_sum_exp
from tests.helpers import Fixed, cut_observation

SCALE = 0.03


def test_the_score_is_nought_at_the_truth_and_near_it_half_the_squared_log_error():
    x = np.array([1.0, 1.2, 1.5, 2.0])
    full = cut_observation(x, 4)
    assert log_score(x, full, SCALE) == 0.0
    # off by a factor e^s on every order statistic: about -1/2; by e^-2s: about -2
    assert log_score(x * np.exp(SCALE), full, SCALE) == pytest.approx(-0.5, rel=0.02)
    assert log_score(x * np.exp(-2 * SCALE), full, SCALE) == pytest.approx(-2.0, rel=0.05)


def test_the_forecast_of_the_mean_scores_best_on_a_heavy_tail():
    """What the rule reads is the mean: on lognormal run-times of spread 1 the forecast e^0.5
    (their mean) out-scores e^0 (the exp of their mean log, which a squared log error would
    prefer) and any other."""
    y = np.random.default_rng(0).lognormal(0.0, 1.0, 20_000)
    forecasts = np.array([np.exp(0.5), 1.0, 1.3, 2.0])
    # the four forecasts stacked (4, 1): one call scores them all on an observation
    scores = np.mean([log_score(forecasts[:, None], cut_observation(np.array([v]), 1), SCALE)
                      for v in y], axis=0)
    assert np.argmax(scores) == 0


def test_a_cut_worker_is_a_lower_bound():
    """All but the slowest accepted: the slowest only ran longer than tau. A forecast of x_(n)
    above tau agrees with that whatever its size; one below tau is wrong by log(tau / m)."""
    x = np.array([1.0, 1.1, 1.2, 4.0])
    cut = cut_observation(x, 3)  # tau = 1.2
    far_above = np.array([1.0, 1.1, 1.2, 40.0])
    assert log_score(far_above, cut, SCALE) == 0.0
    below = np.array([1.0, 1.1, 1.2, 1.2 * np.exp(-2 * SCALE)])
    assert log_score(below, cut, SCALE) == pytest.approx(-0.5 * 4 / 4, rel=0.05)


def test_workers_are_scored_as_order_statistics():
    """What decisions read is E[x_(c)]: a forecast that swaps two workers' speeds predicts the
    same order statistics, and scores the same."""
    x = np.array([1.0, 1.1, 1.2, 4.0])
    obs = cut_observation(x, 3)
    forecast = np.array([4.2, 1.05, 1.1, 1.25])
    assert log_score(np.sort(forecast), obs, SCALE) == log_score(
        np.sort(forecast[[3, 1, 2, 0]]), obs, SCALE)


def test_weights_move_to_the_component_whose_forecasts_come_true():
    n = 6
    fast, slow = Fixed(np.ones(n)), Fixed(np.full(n, 3.0))
    avg = Averaged({"fast": fast, "slow": slow}, forgetting=0.99, scale=SCALE,
                   share_forgetting=0.9)
    assert avg.weights == {"fast": 0.5, "slow": 0.5}
    rng = np.random.default_rng(2)
    for t in range(5):
        avg.observe(cut_observation(np.exp(rng.normal(0.0, 0.05, n)), n - 1, t))
    # all the weight but at most the share, (1 - forgetting) / 2, stays with the other
    assert 0.995 - 1e-9 <= avg.weights["fast"] < 1 and fast.seen == slow.seen == 5
    np.testing.assert_allclose(avg.expected_order_stats(),
                               avg.weights["fast"] * 1.0 + avg.weights["slow"] * 3.0)
    # the cluster slows down: the weights follow within a few iterations
    for t in range(5, 15):
        avg.observe(cut_observation(3.0 * np.exp(rng.normal(0.0, 0.05, n)), n - 1, t))
    assert avg.weights["slow"] > 0.99


def test_a_component_one_iteration_sank_is_back_once_its_forecasts_are_the_better():
    """The share: an iteration that a component forecast 1.5x too fast (the model's, as a
    load shift begins and before its filter follows) leaves it about (1 - forgetting) / K of the
    weight, not e^-100 of it; once its forecasts are the better ones it has the weight back
    within a few iterations, where the forgetting alone would hold it down for many."""
    n = 6
    lagging, right = Fixed(np.ones(n)), Fixed(np.full(n, 1.5))
    rng = np.random.default_rng(3)
    weights = {}
    for forgetting in (0.99, 1.0):  # 1.0: no forgetting and no share
        lagging.expected, right.expected = np.ones(n), np.full(n, 1.5)
        avg = Averaged({"lagging": lagging, "right": right}, forgetting=forgetting,
                       scale=SCALE, share_forgetting=0.9)
        avg.observe(cut_observation(1.5 * np.exp(rng.normal(0.0, 0.02, n)), n))
        weights[forgetting] = [avg.weights["lagging"]]
        # now the lagging one forecasts right, the other 10 % too slow
        lagging.expected, right.expected = np.full(n, 1.5), np.full(n, 1.5 * 1.1)
        for t in range(1, 6):
            avg.observe(cut_observation(1.5 * np.exp(rng.normal(0.0, 0.02, n)), n, t))
        weights[forgetting].append(avg.weights["lagging"])
    assert 1e-3 < weights[0.99][0] <= 0.005
    assert weights[0.99][1] > 0.9
    assert weights[1.0][0] < 1e-30 and weights[1.0][1] < 1e-20


def test_a_share_whose_revivals_are_seen_wrong_is_held_back_for_a_stretch():
    """The slowest worker is cut (c = n - 1) for 40 iterations, then waited for once, and it is
    still 3x slow. ``hopeful`` forecasts it fast again, ``right`` slow; on the cut iterations
    no score tells them apart, so the share alone brings ``hopeful`` back, and each wait it
    would cause shows it wrong. The copy with the share loses on those waits: just after one,
    ``hopeful`` keeps far less than the share's own weights give it (the copies were even before,
    so half is the most it could keep); about 1 / (1 - share_forgetting) iterations later the
    evidence has faded and the copies are even again."""
    n = 8
    runtimes = np.r_[np.ones(n - 1), 3.0]
    hopeful, right = Fixed(np.r_[np.ones(n - 1), 1.2]), Fixed(runtimes)
    avg = Averaged({"hopeful": hopeful, "right": right}, 0.99, SCALE, share_forgetting=0.9)
    shared = avg.shares.argmax()
    t, kept = 0, []
    for _ in range(3):
        for _ in range(40):
            avg.observe(cut_observation(runtimes, n - 1, t))
            t += 1
        avg.observe(cut_observation(runtimes, n, t))
        t += 1
    for _ in range(40):
        avg.observe(cut_observation(runtimes, n - 1, t))
        t += 1
        alone = avg._mixing(avg.components)[shared, 0]  # the share's own weight of hopeful
        kept.append(avg.weights["hopeful"] / alone)
    assert kept[0] < 0.25 and kept[-1] > 0.45
    assert avg._mixing(avg.components)[shared, 0] > 0.2


def test_without_forgetting_there_is_no_share_and_a_weight_may_reach_nought():
    """forgetting 1, the plain posterior: a component 3x off loses its weight entirely (it
    falls below what a float holds), quietly."""
    n = 4
    avg = Averaged({"off": Fixed(np.full(n, 3.0)), "on": Fixed(np.ones(n))}, forgetting=1.0,
                   scale=SCALE, share_forgetting=1.0)
    for t in range(3):
        avg.observe(cut_observation(np.ones(n), n, t))
    assert avg.weights == {"off": 0.0, "on": 1.0}


def test_the_weights_log_normaliser_is_scipys_to_the_last_bit():
    # the averaging's weights, and every decision after them, are those scipy's logsumexp gives
    rng = np.random.default_rng(0)
    a = rng.normal(0, 50, (500, 2, 3))
    a[::3, :, 1] = a[::3, :, 0]  # ties at the largest
    a[1::3, 0, 2] = -np.inf  # a weight at nought
    for rows in a:
        assert np.array_equal(log_sum_exp(rows), logsumexp(rows, axis=1, keepdims=True))


def test_the_forecast_is_the_weighted_mixture_of_the_components():
    a, b = Fixed(np.array([1.0, 2.0])), Fixed(np.array([3.0, 4.0]))
    avg = Averaged({"a": a, "b": b}, forgetting=1.0, scale=SCALE, share_forgetting=1.0)
    avg.log_w = np.log([[0.25, 0.75]])
    np.testing.assert_allclose(avg.expected_order_stats(), [2.5, 3.5])


def test_nothing_is_scored_until_every_component_predicts():
    class Late(Fixed):
        def expected_order_stats(self):
            return None if self.seen < 2 else super().expected_order_stats()

    n = 4
    ready, late = Fixed(np.ones(n)), Late(np.ones(n))
    avg = Averaged({"ready": ready, "late": late}, forgetting=0.98, scale=SCALE,
                   share_forgetting=0.9)
    np.testing.assert_allclose(avg.expected_order_stats(), ready.expected_order_stats())
    slower = 1.1 * np.ones(n)
    avg.observe(cut_observation(slower, n))
    avg.observe(cut_observation(slower, n, 1))
    # both learnt, neither was scored
    assert not avg.log_w.any() and not avg.log_v.any()
    avg.observe(cut_observation(slower, n, 2))
    assert avg.log_v.all()
    np.testing.assert_allclose(avg.log_w[:, 0], avg.log_w[:, 1])


@pytest.mark.parametrize(("forgetting", "scale", "share_forgetting", "match"),
                         [(0.0, SCALE, 0.9, "^forgetting"), (1.5, SCALE, 0.9, "^forgetting"),
                          (0.9, 0.0, 0.9, "scale"), (0.9, SCALE, 0.0, "share_forgetting")])
def test_forgetting_and_scale_are_checked(forgetting, scale, share_forgetting, match):
    with pytest.raises(ValueError, match=match):
        Averaged({}, forgetting=forgetting, scale=scale, share_forgetting=share_forgetting)
