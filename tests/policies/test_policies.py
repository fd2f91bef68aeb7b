"""Cutoff policies: the oracle is exact and never beaten; policies see only censored feedback."""

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bdsgd.cluster.clock import SyncClock
from bdsgd.cluster.cutoff import fixed_optimum, hindsight_optimum, myopic_optimum, observation, throughput
from bdsgd.cluster.server import replay
from bdsgd.config import default_config, from_dict
from bdsgd.policies.base import Policy, PredictivePolicy, decide
from bdsgd.policies.baselines import Scripted
from bdsgd.policies.build import make_policy, warm_up
from bdsgd.policies.periodic import Periodic
from bdsgd.traces.schema import from_arrays
from tests.helpers import LastIteration, Regimes

CFG = default_config().policies


class FakeModel:
    """Test double of a loaded run-time model; its predictor is ``LastIteration``."""


@pytest.fixture(autouse=True)
def fake_model_predictor(monkeypatch):
    monkeypatch.setattr("bdsgd.policies.model_predictor.ModelPredictor",
                        lambda model, seed, online: LastIteration())


CAUSAL = ["sync", "static", "elfving", "ecdf", "bandit", "ewma", "persist", "bdsgd", "bdsgd-model",
          "bayes",
          "explore-elfving", "explore-ecdf", "explore-bandit", "explore-ewma", "explore-persist",
          "explore-bdsgd"]


def build(name, n, runtimes, rule="rate", seed=0, cfg=CFG, comm_s=0.0):
    return make_policy(name, n, cfg, rule=rule, seed=seed, comm=comm_s, runtimes=runtimes,
                       model=FakeModel(), truth=Regimes(n))


def sorted_rows(x):
    return np.sort(np.asarray(x, dtype=float), axis=1)


# ------------------------------------------------------------------------------ the oracles
def test_issue_example_oracle_is_not_the_per_iteration_argmax():
    x = sorted_rows([[1, 3], [10, 10.5]])
    assert throughput(x, myopic_optimum(x)) == pytest.approx(3 / 11.5)
    cutoffs, rate = hindsight_optimum(x)
    assert rate == pytest.approx(4 / 13.5)
    np.testing.assert_array_equal(cutoffs, [2, 2])


@pytest.mark.parametrize("seed", range(30))
def test_dinkelbach_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    T, n = rng.integers(1, 6), rng.integers(1, 5)
    x = sorted_rows(rng.lognormal(0, rng.uniform(0.1, 1.5), (T, n)))
    comm = float(rng.choice([0.0, 0.3]))
    best = max(throughput(x, np.array(c), comm)
               for c in itertools.product(range(1, n + 1), repeat=T))
    cutoffs, rate = hindsight_optimum(x, comm)
    assert rate == pytest.approx(best, rel=1e-12)
    assert throughput(x, cutoffs, comm) == rate


def test_sync_is_the_oracle_on_zero_variance_traces():
    x = np.repeat(np.array([[1.0], [2.5], [0.7]]), 6, axis=1)  # workers equal, iterations not
    trace = from_arrays(x)
    assert replay(trace, build("sync", 6, x)).gradients_per_s == hindsight_optimum(x)[1]
    constant = np.full((12, 6), 2.0)  # nothing to learn either: every learner waits for all
    learners = [p for p in CAUSAL if p not in ("static", "bayes")]  # bayes: its own truth
    for name, rule in itertools.product(learners, ("rate", "ratio")):
        run = replay(from_arrays(constant), build(name, 6, constant, rule))
        assert run.gradients_per_s == 3.0, (name, rule)


def test_static_without_backups_is_sync():
    x = np.random.default_rng(0).lognormal(0, 0.5, (20, 7))
    trace = from_arrays(x)
    static = build("static", 7, x, cfg=dataclasses.replace(CFG, static_backups=0))
    sync, run = replay(trace, build("sync", 7, x)), replay(trace, static)
    np.testing.assert_array_equal(run.cutoffs, sync.cutoffs)
    assert run.gradients_per_s == sync.gradients_per_s
    backups = build("static", 7, x, cfg=dataclasses.replace(CFG, static_backups=2))
    assert backups.choose() == 5


traces = st.integers(1, 5).flatmap(lambda n: st.lists(
    st.lists(st.one_of(st.floats(0.1, 10.0), st.sampled_from([1.0, 2.0])), min_size=n,
             max_size=n), min_size=1, max_size=8))


@settings(max_examples=100, deadline=None)
@given(rows=traces, comm=st.sampled_from([0.0, 0.5]), seed=st.integers(0, 3))
def test_no_policy_beats_the_oracle(rows, comm, seed):
    x = np.array(rows)
    trace, n = from_arrays(x), x.shape[1]
    best = hindsight_optimum(np.sort(x, axis=1), comm)[1]
    cfg = dataclasses.replace(CFG, explore_prob=0.3)
    for name in [*CAUSAL, "oracle", "oracle-myopic"]:
        for rule in ("rate", "ratio"):
            run = replay(trace, build(name, n, x, rule, seed, cfg, comm), comm)
            assert run.gradients_per_s <= best * (1 + 1e-12), (name, rule)
    assert replay(trace, build("oracle", n, x, comm_s=comm), comm).gradients_per_s == best


# ------------------------------------------------------------------- what a policy may see
def poison(x, cutoffs):
    """The trace with every value the server never saw replaced by a much larger one."""
    out = x.copy()
    for t, c in enumerate(cutoffs):
        order = np.argsort(x[t], kind="stable")
        tau = x[t, order[c - 1]]
        out[t, order[c:]] = tau * 1000 + np.arange(len(order) - c) + 1
    return out


class Peeker(Policy):
    """A cheating policy that reads the whole trace: what the poisoned test must catch."""

    name = "peeker"

    def __init__(self, x):
        self.x, self.t = x, 0

    def choose(self):
        return 1 if self.t == 0 or self.x[self.t - 1].max() > 100 else len(self.x[0])

    def observe(self, obs):
        self.t += 1


@pytest.mark.parametrize("rule", ["rate", "ratio"])
def test_policies_never_see_censored_values(rule):
    rng = np.random.default_rng(3)
    x = rng.lognormal(0, 0.4, (60, 8)) * np.where(rng.random((60, 8)) < 0.1, 4, 1)
    censored_somewhere = 0
    for name in CAUSAL:
        first = replay(from_arrays(x), build(name, 8, x, rule, seed=1))
        poisoned = poison(x, first.cutoffs)
        second = replay(from_arrays(poisoned), build(name, 8, poisoned, rule, seed=1))
        np.testing.assert_array_equal(second.cutoffs, first.cutoffs, err_msg=name)
        np.testing.assert_array_equal(second.durations, first.durations, err_msg=name)
        censored_somewhere += (first.cutoffs < 8).sum()
    assert censored_somewhere > 100  # the poison reached values the policies could have used
    cheat = replay(from_arrays(x), Peeker(x))
    poisoned = poison(x, cheat.cutoffs)
    assert (replay(from_arrays(poisoned), Peeker(poisoned)).cutoffs != cheat.cutoffs).any()


def test_observation_hides_the_censored_workers():
    obs = observation(4, np.array([3.0, 1.0, 2.0, 2.0]), 2, 0.5)
    np.testing.assert_array_equal(obs.runtimes, [np.nan, 1.0, 2.0, np.nan])
    assert obs.cutoff_time == 2.0 and obs.duration == 2.5 and obs.accepted.sum() == 2


# ---------------------------------------------------------------------- rules and policies
def test_decision_rules():
    expected = np.array([1.0, 3.0])
    assert decide(expected, "ratio", None) == 1
    assert decide(expected, "rate", None) == 1  # nothing achieved yet: falls back to ratio
    assert decide(expected, "rate", 4 / 13.5) == 2  # 2 - 0.3 * 3 > 1 - 0.3 * 1
    assert decide(expected, "ratio", None, comm=10.0) == 2
    with pytest.raises(ValueError):
        decide(expected, "greedy", None)


def test_min_gain_charges_each_discarded_gradient_one_plus_delta():
    """A cut must save (1 + delta) / lambda_hat per gradient it drops: a marginal one is not made,
    a clear one still is, under either rule."""
    expected = np.array([1.0, 1.1])
    assert decide(expected, "rate", 11.0) == 1  # saves 0.1 s: worth 1.1 gradients at 11 / s
    assert decide(expected, "rate", 11.0, min_gain=0.2) == 2  # but not 1.2
    assert decide(expected, "rate", 20.0, min_gain=0.2) == 1  # worth 2
    assert decide(np.array([1.0, 2.1]), "ratio", None) == 1  # 1 / 1.0 > 2 / 2.1
    assert decide(np.array([1.0, 2.1]), "ratio", None, min_gain=0.2) == 2  # 0.8 / 1.0 < 2 / 2.1
    two_slow = np.array([1.0, 1.1, 2.1, 2.2])  # dropping 2 saves 1.1 s, worth 2.2 at 2 / s
    assert decide(two_slow, "rate", 2.0) == 2
    assert decide(two_slow, "rate", 2.0, min_gain=0.2) == 4  # less than 2 x 1.2
    assert decide(np.array([1.0, 1.1, 1.2, 5.0]), "rate", 2.0, min_gain=0.2) == 3


def test_lag_charges_each_cut_worker_the_delay_its_late_start_adds():
    """kappa counts D(c) as D(c) + kappa (n - c): a marginal cut is no longer made, a cut that
    saves more than the delay it hands on still is."""
    expected = np.array([1.0, 1.1, 1.2, 2.0])  # cutting the last saves 0.8 s at 2 / s
    assert decide(expected, "rate", 2.0) == 3
    assert decide(expected, "rate", 2.0, lag=0.2) == 3  # 3 - 2 x 1.4 > 4 - 2 x 2
    assert decide(expected, "rate", 2.0, lag=0.5) == 4  # the delay outweighs the saving
    assert decide(np.array([1.0, 1.1, 1.2, 5.0]), "rate", 2.0, lag=0.5) == 3
    assert decide(expected, "ratio", None) == 3
    assert decide(expected, "ratio", None, lag=0.5) == 4  # 3 / 1.7 < 4 / 2


def test_the_lag_is_measured_from_late_starts_that_delay_the_cutoff():
    """kappa: the cutoff time beyond the accepted workers' own run-times (their late starts),
    per worker the iteration before cut. Cut workers that abandon their gradient (or a policy
    that does not charge it, as the paper's BDSGD) leave it 0; the clock's late starts show it."""
    clock = SyncClock(0.0, 4, late="finish")
    policy = PredictivePolicy("p", LastIteration(), "rate", 0.0, 4, charge_lag=True)
    plain = PredictivePolicy("p", LastIteration(), "rate", 0.0, 4)
    calm = np.array([1.0, 1.0, 1.0, 1.0])
    for obs in (clock.iteration(0, np.array([1.0, 1.0, 1.0, 1.6]), 3),  # worker 3 cut, 0.6 late
                clock.iteration(1, calm, 4)):  # waited for: its late start delays the cutoff
        policy.observe(obs)
        plain.observe(obs)
    assert obs.cutoff_time == pytest.approx(1.6) and policy.lag == pytest.approx(0.6)
    assert plain.lag == 0.0
    abandon = SyncClock(0.0, 4, late="abandon")
    policy = PredictivePolicy("p", LastIteration(), "rate", 0.0, 4, charge_lag=True)
    for t, x in enumerate((np.array([1.0, 1.0, 1.0, 1.6]), calm)):
        policy.observe(abandon.iteration(t, x, 3 if t == 0 else 4))
    assert policy.lag == 0.0
    cfg = dataclasses.replace(CFG, charge_lag=True)
    assert build("bdsgd", 4, None, cfg=cfg).charge_lag
    assert build("persist", 4, None, cfg=cfg).charge_lag
    assert not build("bdsgd-paper", 4, None, cfg=cfg).charge_lag


def test_by_default_the_models_policies_and_bayes_charge_the_lag_and_the_baselines_do_not():
    """policies.charge_lag's default list; a config's own list, and false, replace it."""
    assert CFG.charge_lag == ("bdsgd", "bdsgd-model", "bayes")
    assert build("bdsgd", 4, None, cfg=CFG).charge_lag
    assert build("bdsgd-model", 4, None, cfg=CFG).charge_lag
    assert not build("persist", 4, None, cfg=CFG).charge_lag
    assert not build("ecdf", 4, None, cfg=CFG).charge_lag
    listed = from_dict({"experiment": "t", "traces": {"t": {"source": "simulate"}},
                        "train": {"trace": "t", "tasks": ["digits"]},
                        "policies": {"charge_lag": ["persist"]}}).policies
    assert build("persist", 4, None, cfg=listed).charge_lag
    assert not build("bdsgd", 4, None, cfg=listed).charge_lag
    assert not build("bdsgd", 4, None, cfg=dataclasses.replace(CFG, charge_lag=False)).charge_lag


def test_policies_pull_names_the_policies_whose_per_worker_predictors_pull():
    """policies.pull: bdsgd's averaged persist by default, the baselines plain; a list names the
    policies, true every one, false none."""
    assert CFG.pull == ("bdsgd",)
    assert build("bdsgd", 4, None, cfg=CFG).predictor.inner.components["persist"].pull
    assert not build("persist", 4, None, cfg=CFG).predictor.pull
    none = dataclasses.replace(CFG, pull=False)
    assert not build("bdsgd", 4, None, cfg=none).predictor.inner.components["persist"].pull
    assert build("persist", 4, None, cfg=dataclasses.replace(CFG, pull=True)).predictor.pull
    listed = dataclasses.replace(CFG, pull=("bdsgd",))
    assert build("bdsgd", 4, None, cfg=listed).predictor.inner.components["persist"].pull
    assert not build("persist", 4, None, cfg=listed).predictor.pull
    assert not build("ewma", 4, None, cfg=listed).predictor.pull


def test_the_learning_policies_get_the_margin_and_bayes_does_not():
    cfg = dataclasses.replace(CFG, min_gain=0.3)
    for name in ("elfving", "ecdf", "bandit", "ewma", "persist", "bdsgd"):
        assert build(name, 4, None, cfg=cfg).min_gain == 0.3
    assert build("bayes", 4, None, cfg=cfg).min_gain == 0.0


def test_predictive_policy_waits_for_all_until_it_can_predict_and_tracks_the_rate():
    policy = PredictivePolicy("p", LastIteration(), "rate", 0.5, 3)
    assert policy.choose() == 3 and policy.rate is None
    policy.observe(observation(0, np.array([1.0, 1.2, 6.0]), 3, 0.5))
    assert policy.rate == pytest.approx(3 / 6.5)
    assert policy.choose() == 2  # 2 - 3/6.5 * 1.7 beats 3 - 3/6.5 * 6.5 and 1 - 3/6.5 * 1.5


def test_the_rate_is_the_policys_own_recent_throughput():
    """lambda_hat counts the iterations the policy chose (a warm-up history, gathered under sync,
    trains the predictor only) and weighs each by 2^(-age / halflife)."""
    policy = PredictivePolicy("p", LastIteration(), "rate", 0.0, 3, halflife=2.0)
    warm_up(policy, from_arrays(np.array([[1.0, 1.2, 6.0]] * 2)))
    assert policy.rate is None
    assert policy.choose() == 2  # the predictor learnt from the history; ratio: 2 / 1.2 is best
    policy.observe(observation(0, np.array([1.0, 1.2, 6.0]), 2, 0.0))
    assert policy.rate == pytest.approx(2 / 1.2)
    policy.choose()
    policy.observe(observation(1, np.array([1.0, 2.0, 6.0]), 2, 0.0))
    assert policy.rate == pytest.approx((2 * 0.5 ** 0.5 + 2) / (1.2 * 0.5 ** 0.5 + 2.0))
    for t in range(2, 42):  # 20 half-lives on, the first two iterations weigh 1e-6
        policy.choose()
        policy.observe(observation(t, np.array([1.0, 3.0, 6.0]), 2, 0.0))
    assert policy.rate == pytest.approx(2 / 3.0, rel=1e-5)


def test_rate_beats_ratio_with_a_perfect_predictor_on_a_changing_cluster():
    rng = np.random.default_rng(0)
    truth = Regimes(4)
    x = np.vstack([truth.predictive_draws(t, 1, rng) for t in range(200)])
    trace = from_arrays(x)
    rates = {rule: replay(trace, build("bayes", 4, x, rule)).gradients_per_s
             for rule in ("rate", "ratio")}
    oracle = hindsight_optimum(np.sort(x, axis=1))[1]
    assert rates["rate"] > 1.08 * rates["ratio"]
    assert rates["rate"] > 0.98 * oracle


def test_bayes_starts_at_the_slice_offset():
    truth = Regimes(4)
    at0 = make_policy("bayes", 4, CFG, rule="ratio", truth=truth, offset=0)
    at10 = make_policy("bayes", 4, CFG, rule="ratio", truth=truth, offset=10)
    assert at0.choose() == 2 and at10.choose() == 4  # fast regime vs slow regime


def test_bandit_converges_to_the_best_static_cutoff():
    rng = np.random.default_rng(1)
    T, n = 400, 8
    x = 1 + 0.05 * rng.standard_normal((T, n))
    stragglers = rng.permuted(np.tile(np.arange(n) < 2, (T, 1)), axis=1)  # two per iteration
    x[stragglers] *= rng.uniform(1.5, 4.0, 2 * T)
    sorted_x = np.sort(x, axis=1)
    static = [throughput(sorted_x, np.full(T, c)) for c in range(1, n + 1)]
    best = int(np.argmax(static)) + 1
    run = replay(from_arrays(x), build("bandit", n, x, "ratio"))
    late = run.cutoffs[T // 2:]
    assert np.mean(late == best) > 0.9
    assert run.gradients_per_s > 0.95 * max(static)


def test_elfving_fits_a_censored_gaussian():
    rng = np.random.default_rng(2)
    x = rng.normal(10.0, 1.0, (20, 200))
    policy, seen = build("elfving", 200, x, "ratio"), []
    for t, c in enumerate(rng.integers(20, 150, 20)):  # heavy censoring, varying cutoffs
        obs = observation(t, x[t], int(c), 0.0)
        policy.observe(obs)
        seen.append(obs.runtimes[obs.accepted])
    assert policy.predictor.mu == pytest.approx(10.0, abs=0.1)
    assert policy.predictor.sigma == pytest.approx(1.0, abs=0.1)
    assert np.concatenate(seen).mean() < 9.5  # the accepted values alone are biased


def test_ecdf_predicts_the_order_statistics_of_a_known_distribution():
    rng = np.random.default_rng(4)
    n = 50
    policy = build("ecdf", n, None, cfg=dataclasses.replace(CFG, window=400))
    for t in range(400):
        policy.observe(observation(t, rng.exponential(1.0, n), int(rng.integers(25, n + 1)), 0.0))
    exact = np.cumsum(1 / np.arange(n, 0, -1))
    body = slice(0, 40)  # the top order statistics lean on the censored tail
    np.testing.assert_allclose(policy.predictor.expected_order_stats()[body], exact[body],
                               rtol=0.05)


def test_explore_wrapper_waits_for_all_at_the_configured_rate():
    x = np.random.default_rng(0).lognormal(0, 0.5, (500, 6))
    cfg = dataclasses.replace(CFG, explore_prob=0.2)
    policy = build("explore-ecdf", 6, x, "rate", cfg=cfg)
    run = replay(from_arrays(x), policy)
    assert policy.name == "explore-ecdf"
    assert policy.explored / 500 == pytest.approx(0.2, abs=0.05)
    assert (run.cutoffs == 6).sum() >= policy.explored


def test_unknown_names_and_missing_inputs():
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("greedy", 4, CFG)
    with pytest.raises(ValueError, match="run-time model"):
        make_policy("bdsgd", 4, CFG)
    with pytest.raises(ValueError, match="truth"):
        make_policy("bayes", 4, CFG)
    with pytest.raises(ValueError, match="run-times"):
        make_policy("oracle", 4, CFG)
    with pytest.raises(ValueError, match="rule"):
        make_policy("ecdf", 4, CFG, rule="greedy")


def test_scripted_oracle_cycles_for_longer_runs():
    x = sorted_rows([[1, 3], [10, 10.5]])
    policy = make_policy("oracle-myopic", 2, CFG, runtimes=x)
    assert isinstance(policy, Scripted)
    picks = []
    for t in range(4):
        picks.append(policy.choose())
        policy.observe(observation(t, x[t % 2], picks[-1], 0.0))
    assert picks == [1, 2, 1, 2]


# ------------------------------------------------------------------------------ oracle-fixed
def test_oracle_fixed_is_the_best_single_cutoff_in_hindsight():
    """Rows (1, 3) and (10, 10.5): c = 1 gives 2 / 11, c = 2 gives 4 / 13.5 (the best); the
    sequence optimum is the same here, but a fixed c cannot follow a change."""
    x = sorted_rows([[1, 3], [10, 10.5]])
    assert fixed_optimum(x) == (2, pytest.approx(4 / 13.5))
    assert fixed_optimum(x, comm=np.array([0.0, 100.0])) == (1, pytest.approx(2 / 11))
    # calm then stragglers: any fixed c loses to the sequence optimum
    x = sorted_rows([[1, 1, 1]] * 5 + [[1, 1, 9]] * 5)
    c, rate = fixed_optimum(x)
    assert c == 2 and rate == pytest.approx(20 / 10) and rate < hindsight_optimum(x)[1]
    policy = make_policy("oracle-fixed", 3, CFG, runtimes=x)
    assert [policy.choose() for _ in range(3)] == [2, 2, 2]
    assert replay(from_arrays(x), make_policy("oracle-fixed", 3, CFG, runtimes=x)) \
        .gradients_per_s == pytest.approx(rate)


@pytest.mark.parametrize("seed", range(10))
def test_oracle_fixed_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    x = sorted_rows(rng.lognormal(0, 1.0, (rng.integers(1, 8), rng.integers(1, 6))))
    best = max(throughput(x, np.full(len(x), c), 0.2) for c in range(1, x.shape[1] + 1))
    assert fixed_optimum(x, 0.2)[1] == best


# ------------------------------------------------------------------------------ decide_every
def _every(k: int):
    return dataclasses.replace(CFG, decide_every=k)


def test_deciding_every_k_holds_the_cutoff_and_observes_every_iteration():
    """persist predicts the last iteration's run-times: deciding every 3rd iteration, it holds
    the cutoff it chose at 0, 3, 6 and still learns from every iteration in between."""
    x = np.array([[1.0, 1.0, 1.0, 9.0]] * 2 + [[1.0, 9.0, 9.0, 9.0]] * 4
                 + [[1.0, 1.0, 1.0, 1.0]] * 3)
    trace = from_arrays(x)
    plain = replay(trace, build("persist", 4, x, cfg=_every(1)))
    held = replay(trace, build("persist", 4, x, cfg=_every(3)))
    for start in (0, 3, 6):  # held between decisions
        assert len(set(held.cutoffs[start:start + 3])) == 1
    # a decision at 3 or 6 sees what iteration 2 or 5 showed, as the plain policy does there
    assert held.cutoffs[3] == plain.cutoffs[3] and held.cutoffs[6] == plain.cutoffs[6]
    assert not np.array_equal(held.cutoffs, plain.cutoffs)


@pytest.mark.parametrize("name", ["elfving", "ecdf", "ewma", "bdsgd", "explore-ecdf"])
def test_deciding_every_iteration_is_the_plain_policy(name):
    x = np.random.default_rng(1).lognormal(0, 0.6, (60, 5))
    trace = from_arrays(x)
    plain = replay(trace, build(name, 5, x)).cutoffs
    np.testing.assert_array_equal(replay(trace, build(name, 5, x, cfg=_every(1))).cutoffs, plain)
    if not name.startswith("explore-"):
        np.testing.assert_array_equal(replay(trace, Periodic(build(name, 5, x), 1)).cutoffs, plain)
    assert isinstance(build("elfving", 5, x, cfg=_every(4)), Periodic)
    # the references and the constant policies are not wrapped: nothing to re-decide
    for name in ("sync", "static", "oracle", "oracle-fixed"):
        assert not isinstance(build(name, 5, x, cfg=_every(4)), Periodic)


def test_a_held_cutoff_counts_in_the_achieved_rate():
    """The first decision waits for all 3 (nothing to predict from) and holds it at iteration 1:
    lambda_hat = (d 3 + 3) / (d 4 + 2) with d = 2^(-1/100), not 3 / 4."""
    policy = Periodic(PredictivePolicy("p", LastIteration(), "rate", 0.0, 3), 2)
    for t, row in enumerate([[1.0, 1.0, 4.0], [1.0, 1.0, 2.0]]):
        c = policy.choose()
        policy.observe(observation(t, np.array(row), c, 0.0))
    d = 0.5 ** 0.01
    assert policy.inner.rate == pytest.approx((d * 3 + 3) / (d * 4 + 2))
