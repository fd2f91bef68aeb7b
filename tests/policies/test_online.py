"""Learning while serving (bdsgd/runtime_model/online.py): the model keeps fitting the censored
observations it serves on, and so recovers from a change its training trace never showed."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from bdsgd.cluster.cutoff import observation
from bdsgd.config import SimulateConfig, default_config
from bdsgd.policies.averaging import log_score
from bdsgd.policies.build import make_policy
from bdsgd.policies.model_predictor import ModelPredictor
from bdsgd.runtime_model.checkpoint import load_model
from bdsgd.runtime_model.online import regime_parameters
from bdsgd.runtime_model.train import train_model
from bdsgd.traces.simulate import simulate

N = 6
ONLINE = (4, 8, 0.05)  # every, window, learning rate


@pytest.fixture(scope="module")
def calm_model(tmp_path_factory):
    """A small model trained on a calm cluster: stalls are rare to it."""
    cfg = dataclasses.replace(default_config().model, latent_dim=4, worker_dim=4, hidden_dim=16,
                              chunk=16, batch_size=4, epochs=6, samples=32)
    trace, _ = simulate(SimulateConfig(scenario="calm", workers=N, iterations=120), 0)
    out = tmp_path_factory.mktemp("online") / "calm.pt"
    return load_model(train_model(trace, cfg, 0, out, progress=False))


def serve(model, runtimes: np.ndarray, online=(0, 2, 0.0), cut: int = N - 1):
    """Forecast each iteration, score it (``averaging.log_score``), then observe it with the
    slowest ``N - cut`` workers cut off: (scores, the predictor)."""
    predictor = ModelPredictor(model, seed=0, online=online)
    scores = []
    for t, row in enumerate(runtimes):
        obs = observation(t, row, cut, 0.0)
        if t:
            scores.append(log_score(predictor.expected_order_stats(), obs, 0.03))
        predictor.observe(obs)
    return np.array(scores), predictor


def test_serving_recovers_from_stalls_its_training_never_showed(calm_model):
    """Trained on a calm cluster, served on one with heavy-tailed stalls in 15 % of
    worker-iterations: learning while serving raises the stall rate it expects, and its
    forecasts of the later iterations come true more often than those of the frozen model."""
    trace, _ = simulate(SimulateConfig(scenario="iid-heavy", workers=N, iterations=240), 1)
    frozen, _ = serve(calm_model, trace.runtimes)
    learnt, predictor = serve(calm_model, trace.runtimes, ONLINE)
    assert predictor.online.steps > 40
    late = slice(160, None)
    assert learnt[late].mean() > frozen[late].mean() + 2.0, (learnt[late].mean(),
                                                             frozen[late].mean())
    stall = lambda m: torch.sigmoid(m.emitter.short_logit.detach()).item()  # noqa: E731
    assert stall(predictor.model) > 3 * stall(calm_model)


def test_only_the_laws_of_events_are_learnt_and_the_shared_model_stays(calm_model):
    before = {k: v.clone() for k, v in calm_model.state_dict().items()}
    trace, _ = simulate(SimulateConfig(scenario="iid-heavy", workers=N, iterations=40), 2)
    _, predictor = serve(calm_model, trace.runtimes, ONLINE)
    learnt = {id(p) for p in regime_parameters(predictor.model)}
    changed = {name for name, p in predictor.model.named_parameters()
               if not torch.equal(p, before[name])}
    assert changed and changed <= {name for name, p in predictor.model.named_parameters()
                                   if id(p) in learnt}
    # the policies of a replay share one loaded model: a learning one learns on its own copy
    assert all(torch.equal(v, before[k]) for k, v in calm_model.state_dict().items())


def test_the_probe_reads_the_episode_chain_of_the_parameters_served(calm_model):
    """The probe's episode chain is kept once per parameters, and learning while serving
    changes them: after its steps the chain is that of the learnt parameters, not the
    trained ones."""
    trace, _ = simulate(SimulateConfig(scenario="iid-heavy", workers=N, iterations=40), 2)
    _, predictor = serve(calm_model, trace.runtimes, ONLINE)
    assert predictor.online.steps > 0
    transition = calm_model.transition
    learnt = transition.episode_chain(predictor.params.switch)
    trained = transition.episode_chain(transition.switch().detach())
    assert float(learnt.stay) != float(trained.stay)
    stay, start = predictor.chain.stay, predictor.chain.start
    assert (float(stay), float(start)) == (float(learnt.stay), float(learnt.start))


def test_serving_and_learning_is_the_same_on_every_run(calm_model):
    """A step fits the window of a fixed number of iterations before and is seeded: the
    forecasts do not depend on the machine or its timing."""
    trace, _ = simulate(SimulateConfig(scenario="iid-heavy", workers=N, iterations=40), 3)
    first, _ = serve(calm_model, trace.runtimes, ONLINE, cut=N - 2)
    again, _ = serve(calm_model, trace.runtimes, ONLINE, cut=N - 2)
    assert np.array_equal(first, again)


def test_a_step_taken_while_the_server_waits_is_the_same_step(calm_model):
    """bdsgd as built for a server, asked to use its idle time (``Policy.idle``, as the
    parameter server does once it has sent the parameters) in some iterations: it takes the
    period's step there instead of in the decision at the period's end, and draws the next
    decision's random numbers, and decides as one never asked."""
    cfg = default_config().policies
    cfg = dataclasses.replace(cfg, online_every=ONLINE[0], online_window=ONLINE[1])
    trace, _ = simulate(SimulateConfig(scenario="iid-heavy", workers=N, iterations=60), 4)
    plain = make_policy("bdsgd", N, cfg, model=calm_model)
    waiting = make_policy("bdsgd", N, cfg, model=calm_model)
    model = waiting.predictor.inner.components["model"]
    fit = model.online
    taken = []
    step = fit.step
    fit.step = lambda seen: taken.append(fit.count) or step(seen)
    for t, row in enumerate(trace.runtimes):
        c = plain.choose()
        assert waiting.choose() == c
        assert model.ahead is None  # the decision took the random numbers drawn ahead
        if t % 3:  # idle time in two iterations of three
            waiting.idle()
            assert model.ahead is not None  # the next decision's, drawn while it waits
        plain.observe(observation(t, row, c, 0.0))
        waiting.observe(observation(t, row, c, 0.0))
    assert fit.steps > 10
    # a step in idle time follows an observation that is not a period's end
    assert sum(count % ONLINE[0] for count in taken) > 0
    assert np.array_equal(plain.expected, waiting.expected)


def test_the_papers_bdsgd_serves_frozen_and_ours_learns(calm_model):
    """Teng & Wood trained their model once, offline: bdsgd-paper never learns while serving,
    whatever policies.online_every; bdsgd-model does."""
    cfg = dataclasses.replace(default_config().policies, online_every=ONLINE[0])
    assert make_policy("bdsgd-paper", N, cfg, model=calm_model).predictor.online is None
    assert make_policy("bdsgd-model", N, cfg, model=calm_model).predictor.online is not None


def test_imputation_draws_no_random_numbers_ahead(calm_model):
    """The paper's imputation draws from the predictor's generator as it observes: idle time
    between a decision and the next observation draws nothing ahead, so that the forecasts are
    those of a server that never had idle time."""
    model = copy.deepcopy(calm_model)
    model.config = dataclasses.replace(model.config, censoring="impute")
    plain, waiting = ModelPredictor(model, seed=0), ModelPredictor(model, seed=0)
    trace, _ = simulate(SimulateConfig(scenario="iid-heavy", workers=N, iterations=12), 5)
    for t, row in enumerate(trace.runtimes):
        assert np.array_equal(waiting.expected_order_stats(), plain.expected_order_stats())
        waiting.idle()  # as the server does, after its decision and before it observes
        assert waiting.ahead is None
        for predictor in (plain, waiting):
            predictor.observe(observation(t, row, N - 2, 0.0))
