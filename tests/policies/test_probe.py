"""The probe (bdsgd.policies.probe): the value of learning the cut workers' state, its
cross-fitting, and the policy that waits for every worker when that value exceeds the wait's
cost."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bdsgd.cluster.cutoff import Observation
from bdsgd.config import default_config
from bdsgd.policies.averaging import Averaged
from bdsgd.policies.base import PredictivePolicy, Predictor, scores
from bdsgd.policies.model_predictor import ModelPredictor
from bdsgd.policies.probe import HORIZON, Hypotheses, horizon, probe_value
from bdsgd.runtime_model.model import RuntimeModel

N = 4
BACK = np.array([1.0, 1.0, 1.0, 1.05])  # the cut worker has recovered: wait for it
SLOW = np.array([1.0, 1.0, 1.0, 3.0])  # it is still slow: cut it


RATE = 3.0


def rate(expected: np.ndarray) -> np.ndarray:
    """The rate rule's score at lambda_hat = RATE: linear in the forecast."""
    return scores(expected, "rate", RATE)


def both_halves(*forecasts: np.ndarray) -> np.ndarray:
    """The same forecasts from either half of the draws: (2, G, n)."""
    return np.array([forecasts, forecasts])


def hypotheses(p_slow: float, expected: np.ndarray, lam: float = 0.95) -> Hypotheses:
    """One cut node, in an episode with probability ``p_slow`` (an episode's stationary
    probability 0): its two hypotheses, back (0) and slow (1)."""
    return Hypotheses(np.array([1 - p_slow, p_slow]), expected, lam, 0.0, np.array([p_slow]))


def test_the_value_is_what_knowing_the_state_adds_to_the_decision():
    hyp = hypotheses(0.5, both_halves(BACK, SLOW))
    mixed = 0.5 * BACK + 0.5 * SLOW  # (1, 1, 1, 2.025): cut the fourth
    assert np.argmax(rate(mixed)) + 1 == 3
    known = 0.5 * rate(BACK)[3] + 0.5 * rate(SLOW)[2]  # wait if it is back, else cut
    assert probe_value(hyp, rate) == pytest.approx(known - rate(mixed)[2])
    assert probe_value(hyp, rate) == pytest.approx(0.5 * (4 - RATE * 1.05))


def test_no_value_where_every_state_makes_the_same_decision():
    slower = SLOW * np.array([1, 1, 1, 1.5])
    assert probe_value(hypotheses(0.7, both_halves(SLOW, slower)), rate) == 0.0


def test_noise_that_flatters_one_half_is_not_value():
    """The halves disagree under the second state, one saying 'cut', the other 'wait': chosen
    on one half and scored on the other, the value is below what each half claims of itself."""
    halves = np.array([[BACK, SLOW], [BACK, BACK]])
    honest = probe_value(hypotheses(0.5, halves), rate)
    claimed = np.mean([probe_value(hypotheses(0.5, both_halves(*h)), rate) for h in halves])
    assert honest < claimed


def test_the_wait_is_worth_the_iterations_the_rule_would_go_on_cutting_without_it():
    """Unobserved, P(slow) = 0.5 lambda^j; the rule cuts while it exceeds 0.85 / 5.85 (cutting
    gains 5 if slow and loses 0.85 if back): for k* iterations."""
    gain_if_slow, loss_if_back = 5.0, 4 - RATE * 1.05
    threshold = loss_if_back / (gain_if_slow + loss_if_back)
    for lam in (0.5, 0.9, 0.95):
        k = int(np.floor(np.log(threshold / 0.5) / np.log(lam) + 1e-12))
        assert horizon(hypotheses(0.5, both_halves(BACK, SLOW), lam), rate, 3) == pytest.approx(
            sum(lam**j for j in range(1, k + 1)))
    # where the rule would cut even with every episode over, the whole (capped) horizon counts
    assert horizon(hypotheses(0.5, both_halves(SLOW, SLOW * 2), 0.5), rate, 3) == \
        pytest.approx(sum(0.5**j for j in range(1, HORIZON + 1)))


class Believes(Predictor):
    """A forecast with a fixed belief that the cut worker is still slow."""

    def __init__(self, p_slow: float, lam: float):
        self.p, self.lam = p_slow, lam

    def expected_order_stats(self):
        return self.p * SLOW + (1 - self.p) * BACK

    def hypotheses(self):
        return hypotheses(self.p, both_halves(BACK, SLOW), self.lam)

    def observe(self, obs):
        pass


@pytest.mark.parametrize(("lam", "probe", "waits"),
                         [(0.95, True, True), (0.0, True, False), (0.95, False, False)])
def test_the_policy_waits_where_the_value_over_the_horizon_exceeds_the_cost(lam, probe, waits):
    """At lambda 0.95 the wait informs 13.4 iterations' worth at 0.425 each, against a cost of
    2.075 (0 against -2.075 at lambda_hat 3); at lambda 0, nothing after it."""
    policy = PredictivePolicy("p", Believes(0.5, lam), "ratio", 0.0, N, probe=probe)
    assert policy.choose() == (N if waits else N - 1)
    assert policy.probed == (int(waits) if probe else None)


def test_a_certain_belief_never_probes():
    policy = PredictivePolicy("p", Believes(1.0, 0.999), "ratio", 0.0, N, probe=True)
    assert policy.choose() == N - 1 and policy.probes == 0


def test_averaging_mixes_the_models_hypotheses_with_the_other_forecasts():
    class Level(Believes):
        def hypotheses(self):
            return None

    averaged = Averaged({"model": Believes(0.5, 0.9), "level": Level(0.0, 0.0)}, 0.99, 0.03,
                        0.9)
    averaged.log_w[:, 1] = np.log(3.0)  # weights 1/4 and 3/4 under every share
    hyp = averaged.hypotheses()
    assert hyp.lam == 0.9
    np.testing.assert_allclose(hyp.expected[0], [0.25 * BACK + 0.75 * BACK,
                                                 0.25 * SLOW + 0.75 * BACK])
    np.testing.assert_allclose(hyp.weights @ hyp.expected[0], averaged.expected_order_stats())


def model_predictor(n: int = N) -> ModelPredictor:
    torch.manual_seed(0)
    return ModelPredictor(RuntimeModel(default_config().model, n), seed=0)


def test_the_model_states_nothing_when_no_worker_was_cut():
    predictor = model_predictor()
    predictor.observe(Observation(0, N, np.ones(N), 1.0))
    assert predictor.hypotheses() is None


def even_odds(predictor: ModelPredictor, nodes: list[int]):
    """Set P(C_{t+1} = 1) = 1/2 on ``nodes``; returns the episode chain."""
    chain = predictor.model.transition.episode_chain(predictor.params.switch)
    p_c = predictor.state.p_c.clone()
    p_c[0, nodes] = float((0.5 - chain.start) / (chain.stay - chain.start))
    predictor.state.p_c = p_c
    return chain


def test_the_models_hypotheses_are_the_cut_workers_episode():
    predictor = model_predictor()
    predictor.observe(Observation(0, N - 1, np.array([1.0, 1.0, 1.0, np.nan]), 1.0))
    chain = even_odds(predictor, [2, 3])  # node 2's worker was not cut: not a hypothesis
    hyp = predictor.hypotheses()
    assert hyp.expected.shape == (2, 2, N)
    assert hyp.weights.sum() == pytest.approx(1.0)
    assert abs(hyp.weights[1] - 0.5) < 4 * 0.5 / np.sqrt(predictor.samples)
    # in an episode the node's worker is slower: the slowest order statistic with it
    assert (hyp.expected[:, 1, -1] > hyp.expected[:, 0, -1]).all()
    assert hyp.lam == pytest.approx(float(chain.stay - chain.start))
    assert hyp.stationary == pytest.approx(float(chain.stationary()))
    np.testing.assert_allclose(hyp.p_on, [0.5], rtol=1e-5)  # the cut node's, not node 2's
    # the hypotheses split the forecast's own draws: together they are near it
    pooled = (hyp.weights @ hyp.expected).mean(0)
    np.testing.assert_allclose(pooled, predictor.expected_order_stats(), rtol=0.05)


def test_two_cut_nodes_are_three_hypotheses_by_how_many_are_slow():
    predictor = model_predictor()
    predictor.observe(Observation(0, N - 2, np.array([1.0, 1.0, np.nan, np.nan]), 1.0))
    even_odds(predictor, [2, 3])
    hyp = predictor.hypotheses()
    assert hyp.expected.shape == (2, 3, N)
    np.testing.assert_allclose(hyp.weights, [0.25, 0.5, 0.25], atol=4 * 0.5 / np.sqrt(
        predictor.samples))
