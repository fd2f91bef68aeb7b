"""A forecast calibrated rank by rank against what the server saw (bdsgd.policies.calibration)."""

from __future__ import annotations

import numpy as np
import pytest

from bdsgd.config import from_dict
from bdsgd.policies.build import make_policy
from bdsgd.policies.calibration import Calibrated
from bdsgd.policies.probe import Hypotheses
from tests.helpers import Fixed, Regimes, cut_observation

N = 4
FORECAST = np.array([1.0, 2.0, 3.0, 4.0])


def test_a_forecast_overstating_the_slowest_is_scaled_to_what_came():
    # every iteration shows the slowest at 3.6 where 4 was forecast, the rest as forecast
    cal = Calibrated(Fixed(FORECAST), halflife=100, weight=0)
    truth = np.array([1.0, 2.0, 3.0, 3.6])
    for t in range(3):
        cal.observe(cut_observation(truth, N, t))
    np.testing.assert_allclose(cal.expected_order_stats(), truth)


def test_the_weight_shrinks_a_few_iterations_towards_the_forecast():
    cal = Calibrated(Fixed(FORECAST), halflife=1e9, weight=3)
    cal.observe(cut_observation(2 * FORECAST, N))
    # (3 x 1 + 1 x 2) / (3 + 1): a quarter of the way
    np.testing.assert_allclose(cal.expected_order_stats(), 1.25 * FORECAST)


def test_a_correction_narrows_the_gaps_it_saw_overstated():
    # the load shift's case: the slowest forecast 4 % above the next, 3 % realised
    forecast = np.array([1.0, 1.0, 1.0, 1.04])
    cal = Calibrated(Fixed(forecast), halflife=100, weight=0)
    for t in range(5):
        cal.observe(cut_observation(np.array([1.0, 1.0, 1.0, 1.03]), N, t))
    expected = cal.expected_order_stats()
    assert expected[-1] / expected[-2] == pytest.approx(1.03)


def test_a_correction_never_widens_a_gap_which_would_hide_the_ranks_it_learnt_from():
    cal = Calibrated(Fixed(FORECAST), halflife=100, weight=0)
    for t in range(5):  # the slowest 10 % above its forecast, the next 5 % below
        cal.observe(cut_observation(np.array([1.0, 2.0, 0.95 * 3, 1.1 * 4]), N, t))
    # cutting the slowest on a widened gap would censor it: the gap stays the forecast's own,
    # the level follows the rank below
    np.testing.assert_allclose(cal.factors(), [1.0, 1.0, 0.95, 0.95])


def test_a_rank_the_policy_cut_learns_nothing_and_its_correction_fades():
    cal = Calibrated(Fixed(FORECAST), halflife=1, weight=1)
    truth = np.array([1.0, 2.0, 3.0, 3.2])  # every rank seen, the slowest at 0.8 of its forecast
    for t in range(20):
        cal.observe(cut_observation(truth, N, t))
    before = cal.factors()
    cal.observe(cut_observation(truth, N - 1, 20))  # it is cut
    # (1 + 2 x 0.8) / (1 + 2) at a = 1/2; cut, (1 + 0.8) / (1 + 1): back towards 1, not towards
    # what a lower bound would suggest
    np.testing.assert_allclose(before, [1.0, 1.0, 1.0, 2.6 / 3], rtol=1e-5)
    np.testing.assert_allclose(cal.factors(), [1.0, 1.0, 1.0, 0.9], rtol=1e-5)


def test_the_calibrated_forecast_stays_sorted():
    inner = Fixed(FORECAST)
    cal = Calibrated(inner, halflife=100, weight=0)
    cal.observe(cut_observation(np.array([1.0, 2.0, 3.0, 3.2]), N))  # kappa [1, 1, 1, 0.8]
    inner.expected = np.array([1.0, 2.0, 3.0, 3.1])  # 3.1 x 0.8 would fall below 3
    np.testing.assert_allclose(cal.expected_order_stats(), [1.0, 2.0, 3.0, 3.0])


def test_the_warm_up_history_calibrates_and_the_inner_predictor_sees_every_observation():
    inner = Fixed(FORECAST)
    cal = Calibrated(inner, halflife=100, weight=0)
    for t in range(4):  # observed with no decision asking for a forecast
        cal.observe(cut_observation(1.1 * FORECAST, N, t))
    assert inner.seen == 4
    np.testing.assert_allclose(cal.expected_order_stats(), 1.1 * FORECAST)


def test_the_probes_hypotheses_are_calibrated_alike():
    class WithHypotheses(Fixed):
        def hypotheses(self):
            return Hypotheses(np.array([0.5, 0.5]), np.ones((2, 2, N)) * self.expected, 0.9,
                              0.1, np.array([0.5]))

    cal = Calibrated(WithHypotheses(FORECAST), halflife=100, weight=0)
    cal.observe(cut_observation(2 * FORECAST, N))
    np.testing.assert_allclose(cal.hypotheses().expected, np.ones((2, 2, N)) * 2 * FORECAST)


@pytest.mark.parametrize("halflife, weight, match", [(0, 1, "halflife"), (1, -1, "weight")])
def test_halflife_and_weight_are_checked(halflife, weight, match):
    with pytest.raises(ValueError, match=match):
        Calibrated(Fixed(FORECAST), halflife, weight)


@pytest.mark.parametrize("calibrate, calibrated", [
    ([], set()), (True, {"ewma", "persist"}), (["persist", "bayes"], {"persist"})])
def test_policies_calibrate_names_the_policies_and_never_the_ceiling(calibrate, calibrated):
    cfg = from_dict({"experiment": "x", "traces": {"t": {"source": "simulate"}},
                    "policies": {"calibrate": calibrate}}, "<test>").policies
    found = {name for name in ("ewma", "persist", "bayes")
             if isinstance(make_policy(name, N, cfg, truth=Regimes(N)).predictor, Calibrated)}
    assert found == calibrated
