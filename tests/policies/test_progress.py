"""The objective-aware cutoff: the gradient noise scale's estimator, worth(c), and decisions that
reduce to the throughput rule exactly when asked to."""

import numpy as np
import pytest

from bdsgd.cluster.cutoff import observation
from bdsgd.config import default_config, from_dict
from bdsgd.errors import UserError
from bdsgd.policies.base import PredictivePolicy, Predictor, decide
from bdsgd.policies.build import make_policy
from bdsgd.policies.progress import GradientNoise, worth
from tests.helpers import tiny_config

CFG = default_config().policies


def decide_before(expected, rule, rate, comm_s=0.0, min_gain=0.0):
    """``decide`` as it was before the progress objective, the reference for bit-identity."""
    n = len(expected)
    c = np.arange(1, n + 1)
    counted = c - min_gain * (n - c)
    cost = np.asarray(expected, dtype=float) + comm_s
    score = counted - rate * cost if rule == "rate" and rate is not None else counted / cost
    return int(np.argmax(score)) + 1


class Fixed(Predictor):
    """Test double of a predictor: the same expected order statistics every iteration."""

    def __init__(self, expected):
        self.expected = np.asarray(expected, dtype=float)

    def expected_order_stats(self):
        return self.expected

    def observe(self, obs):
        pass


def feed(target, trace, sq_norm, b_small=8.0, b_big=32.0):
    """Squared norms whose estimates are exactly tr(Sigma) = trace and |g|^2 = sq_norm, to a
    GradientNoise or a policy."""
    observe = getattr(target, "observe_gradients", None) or target.observe
    observe(sq_norm + trace / b_small, sq_norm + trace / b_big, b_small, b_big)


# ---------------------------------------------------------------------------- the estimator
def test_estimator_recovers_known_signal_and_noise():
    """Per-worker gradients g + N(0, Sigma / b): the estimates of |g|^2, tr(Sigma) and B_noise
    from two disjoint groups and the full average match the truth."""
    rng = np.random.default_rng(0)
    d, n, b = 40, 8, 4
    g = rng.normal(size=d)
    g *= 1.5 / np.linalg.norm(g)  # |g|^2 = 2.25
    var = rng.uniform(0.5, 4.0, d)  # per-sample variances: tr(Sigma) = sum
    noise = GradientNoise(halflife=1e6)  # ~ a plain mean over the run
    for _ in range(6000):
        c = int(rng.integers(2, n + 1))
        grads = g + rng.normal(size=(c, d)) * np.sqrt(var / b)
        half = c // 2
        group_a, group_b = grads[:half], grads[half:]  # disjoint, sizes differ when c is odd
        b_a, b_b = half * b, (c - half) * b
        small_sq = (np.sum(group_a.mean(0) ** 2) + np.sum(group_b.mean(0) ** 2)) / 2
        b_small = 2.0 / (1.0 / b_a + 1.0 / b_b)
        noise.observe(small_sq, np.sum(grads.mean(0) ** 2), b_small, c * b)
    assert noise.sq_norm == pytest.approx(2.25, rel=0.1)
    assert noise.trace == pytest.approx(var.sum(), rel=0.1)
    assert noise.scale == pytest.approx(var.sum() / 2.25, rel=0.15)


def test_estimator_edge_cases():
    noise = GradientNoise(halflife=10)
    assert noise.scale is None and noise.trace is None and noise.sq_norm is None
    with pytest.raises(ValueError, match="b_small < b_big"):
        noise.observe(1.0, 0.5, 32.0, 32.0)
    noise.observe(float("nan"), 1.0, 8.0, 32.0)  # a diverged step is left out
    assert noise.skipped == 1 and noise.scale is None
    feed(noise, trace=10.0, sq_norm=-1.0)  # G2 <= 0: no usable estimate yet
    assert noise.trace == pytest.approx(10.0) and noise.scale is None
    noise = GradientNoise(halflife=10)
    feed(noise, trace=-5.0, sq_norm=1.0)  # a negative noise estimate is clipped at 0
    assert noise.scale == 0.0
    with pytest.raises(ValueError, match="halflife"):
        GradientNoise(halflife=0)


def test_estimator_halflife_weights_recent_observations():
    noise = GradientNoise(halflife=1)
    feed(noise, trace=100.0, sq_norm=1.0)
    feed(noise, trace=300.0, sq_norm=1.0)
    assert noise.trace == pytest.approx((0.5 * 100 + 300) / 1.5)
    assert noise.scale == pytest.approx((0.5 * 100 + 300) / 1.5)


# -------------------------------------------------------------------------------- worth(c)
@pytest.mark.parametrize(("n", "batch"), [(1, 1), (8, 32), (158, 4)])
def test_worth_limits(n, batch):
    c = np.arange(1, n + 1)
    np.testing.assert_array_equal(worth(c, n, batch, None), c)  # no estimate: throughput
    # infinite noise under linear scaling: every gradient counts alike
    np.testing.assert_allclose(worth(c, n, batch, float("inf")), c, rtol=1e-12)
    np.testing.assert_allclose(worth(c, n, batch, 1e15), c, rtol=1e-9)
    # no noise: at one rate for every c each step is worth the full batch's; under linear
    # scaling a small batch's step is as useful per unit of rate, and shorter
    np.testing.assert_array_equal(worth(c, n, batch, 0.0, "none"), np.full(n, n))
    np.testing.assert_allclose(worth(c, n, batch, 0.0), c * (2 * n - c) / n)
    for scale in (1e-3, 1.0, 37.5, n * batch, 1e6):
        w = worth(c, n, batch, scale)
        assert w[-1] == n  # exactly
        np.testing.assert_allclose(w, c * (scale + (2 * n - c) * batch) / (scale + n * batch))
        assert np.all(w >= c * (1 - 1e-12)) and np.all(w <= c * (2 * n - c) / n * (1 + 1e-12))
        assert np.all(np.diff(w) >= 0)
        assert worth(c, n, batch, scale, "sqrt")[-1] == n
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="noise scale"):
            worth(c, n, batch, bad)


def test_worth_is_the_quadratic_models_loss_decrease():
    """worth(c) / n = dL(eps_c, c b) / dL(eps_n, n b) on dL(eps, B) = eps |g|^2 - eps^2 g'Hg
    (1 + B_noise / B) / 2 with eps_n the best step for n b samples, for each lr scaling."""
    n, b, noise = 16, 8, 200.0
    g2, ghg = 3.0, 1.5
    eps_n = (g2 / ghg) / (1 + noise / (n * b))  # eps_opt(n b)
    c = np.arange(1, n + 1)

    def decrease(eps, B):
        return eps * g2 - eps ** 2 * ghg * (1 + noise / B) / 2

    for scaling, s in (("linear", c / n), ("sqrt", np.sqrt(c / n)), ("none", np.ones(n))):
        expected = n * decrease(s * eps_n, c * b) / decrease(eps_n, n * b)
        np.testing.assert_allclose(worth(c, n, b, noise, scaling), expected, rtol=1e-12)


# ------------------------------------------------------------------------------- decisions
def test_decide_without_worth_is_bit_identical_to_before():
    rng = np.random.default_rng(1)
    for _ in range(2000):
        n = int(rng.integers(1, 24))
        expected = np.sort(rng.lognormal(0.0, rng.uniform(0.05, 1.5), n))
        rule = ("rate", "ratio")[int(rng.integers(2))]
        rate = None if rng.random() < 0.2 else float(rng.uniform(0.1, 20.0))
        comm_s = float(rng.choice([0.0, rng.uniform(0, 2)]))
        min_gain = float(rng.choice([0.0, 0.2, rng.uniform(0, 1)]))
        before = decide_before(expected, rule, rate, comm_s, min_gain)
        assert decide(expected, rule, rate, comm_s, min_gain) == before
        assert decide(expected, rule, rate, comm_s, min_gain, worth=None) == before
        c = np.arange(1, n + 1)
        assert decide(expected, rule, rate, comm_s, min_gain, worth=worth(c, n, 32, None)) == before


def test_decide_checks_worth_shape():
    with pytest.raises(ValueError, match="shape"):
        decide(np.array([1.0, 2.0, 3.0]), "ratio", None, worth=np.array([1.0, 2.0]))


def test_large_noise_decides_as_throughput_and_tiny_noise_takes_the_fastest():
    rng = np.random.default_rng(2)
    n, batch = 12, 32
    c = np.arange(1, n + 1)
    for _ in range(300):
        expected = np.sort(rng.lognormal(0.0, rng.uniform(0.1, 1.0), n))
        rule = ("rate", "ratio")[int(rng.integers(2))]
        rate = float(rng.uniform(0.5, 10.0))
        min_gain = float(rng.choice([0.0, 0.2]))
        assert decide(expected, rule, rate, 0.1, min_gain, worth(c, n, batch, 1e12)) == \
            decide(expected, rule, rate, 0.1, min_gain)
        assert decide(expected, rule, rate, 0.1, min_gain, worth(c, n, batch, 1e-9, "none")) == 1


def run(policy, x, gradients=None):
    """Replay run-times x through ``policy``, feeding (trace, sq_norm) gradient norms each
    iteration; the cutoffs it chose."""
    chosen = []
    for t, row in enumerate(x):
        c = policy.choose()
        chosen.append(c)
        policy.observe(observation(t, row, c, 0.05))
        if gradients is not None and c >= 2:
            feed(policy, *gradients)
    return chosen


@pytest.mark.parametrize("rule", ["rate", "ratio"])
def test_policy_progress_objective(rule):
    n, batch = 8, 16
    x = np.random.default_rng(3).lognormal(0.0, 0.6, (80, n))
    expected = np.linspace(1.0, 2.0, n)

    def policy(objective, lr_scaling="none"):
        return PredictivePolicy("p", Fixed(expected), rule, 0.05, n, 20.0, 0.2, objective, batch,
                                lr_scaling)

    throughput = run(policy("throughput"), x)
    # no gradient norms (or only under "throughput"): the throughput rule exactly
    assert run(policy("progress"), x) == throughput
    assert run(policy("throughput"), x, gradients=(1e3, 1.0)) == throughput
    # a huge noise scale under linear scaling: every gradient counts alike
    noisy = policy("progress", "linear")
    assert run(noisy, x, gradients=(1e14, 1.0)) == throughput
    assert noisy.noise_scale == pytest.approx(1e14)
    # almost no noise, one rate for every c: one worker's batch makes as much progress as n's,
    # so take the fastest
    quiet = policy("progress")
    chosen = run(quiet, x, gradients=(1e-8, 1.0))
    assert chosen == [n] + [1] * (len(x) - 1)  # n first: no noise estimate before an iteration
    assert max(throughput) > 1


def test_lambda_hat_counts_worth():
    n, batch = 4, 8
    policy = PredictivePolicy("p", Fixed(np.arange(1.0, n + 1)), "rate", 0.0, n, 1e9, 0.0,
                              "progress", batch)
    feed(policy, trace=64.0, sq_norm=2.0)  # B_noise = 32
    row = np.array([1.0, 2.0, 3.0, 4.0])
    c = policy.choose()
    policy.observe(observation(0, row, c, 0.0))
    w = worth(np.array([c]), n, batch, 32.0)[0]
    assert policy.rate == pytest.approx(w / row[c - 1])
    assert policy.rate != pytest.approx(c / row[c - 1])


def test_make_policy_passes_the_objective_through_explore():
    policy = make_policy("explore-ecdf", 4, CFG, objective="progress", batch=8)
    feed(policy, trace=64.0, sq_norm=2.0)
    assert policy.inner.objective == "progress" and policy.inner.batch == 8
    assert policy.inner.noise_scale == pytest.approx(32.0)
    plain = make_policy("ecdf", 4, CFG)
    feed(plain, trace=64.0, sq_norm=2.0)  # a no-op under throughput
    assert plain.objective == "throughput" and plain.noise_scale is None
    # the trainer measures gradient statistics only for a policy that learns from them
    assert policy.measures_noise and not plain.measures_noise
    assert not make_policy("sync", 4, CFG, objective="progress").measures_noise
    with pytest.raises(ValueError, match="objective"):
        make_policy("ecdf", 4, CFG, objective="loss")
    with pytest.raises(ValueError, match="objective"):
        PredictivePolicy("p", Fixed([1.0]), "rate", 0.0, 1, objective="loss")


# ---------------------------------------------------------------------------------- config
def test_config_objective_default_and_choices():
    assert from_dict(tiny_config()).train.objective == "throughput"
    train = {**tiny_config()["train"], "objective": "progress"}
    assert from_dict(tiny_config(train=train)).train.objective == "progress"


def test_config_bad_objective_names_the_key():
    train = {**tiny_config()["train"], "objective": "bogus"}
    with pytest.raises(UserError) as exc:
        from_dict(tiny_config(train=train), "cfg.yaml")
    assert exc.value.field == "train.objective"
    assert "bogus" in str(exc.value) and "throughput" in str(exc.value)
    assert "\n" not in str(exc.value)
