"""The generative cluster: its statistics match its parameters (tolerances stated per test), it is
seeded, its truth sidecar round-trips, its predictive draws are calibrated, and its default
scenarios match the real PAI jobs' per-iteration CoV."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bdsgd.config import SimulateConfig
from bdsgd.errors import UserError
from bdsgd.traces.describe import iteration_cov
from bdsgd.traces.simulate import SCENARIOS, read_truth, simulate, truth_path, write_truth

DATA = Path(__file__).parent / "data"
QUIET = dict(speed_sigma=0.0, jitter_sigma=0.05, contention_start=0.0, contention_stop=0.0,
             contention_slowdown=1.0, stall_prob=0.0, stall_alpha=2.0, stall_scale=0.1,
             stall_max=30.0, stragglers=0, straggler_start=0.5, straggler_slowdown=1.0,
             load_shift_at=0.5, load_shift_factor=1.0, comm_s=0.0)


def sim(seed=0, **kw):
    return simulate(SimulateConfig(**{"scenario": "calm", **QUIET, **kw}), seed)


def test_trace_layout_and_meta():
    trace, truth = simulate(SimulateConfig(scenario="mixed", workers=10, iterations=30,
                                           workers_per_node=4), seed=3)
    assert trace.runtimes.shape == (30, 10) and trace.complete
    assert trace.node.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    np.testing.assert_allclose(trace.compute_s + trace.comm_s, trace.runtimes)
    assert (trace.runtimes > 0).all() and np.isfinite(trace.runtimes).all()
    assert trace.meta["source"] == "simulate" and trace.meta["seed"] == 3
    # Unset parameters take the scenario's value, set ones override it.
    assert trace.meta["params"]["stall_alpha"] == SCENARIOS["mixed"]["stall_alpha"]
    assert truth.contention.shape == (30, 3) and truth.params == trace.meta["params"]


def test_config_overrides_scenario_and_bad_values():
    trace, _ = simulate(SimulateConfig(scenario="mixed", workers=4, iterations=5, comm_s=0.5), 0)
    assert trace.meta["params"]["comm_s"] == 0.5
    with pytest.raises(UserError, match="simulate.stragglers"):
        simulate(SimulateConfig(scenario="emerging-straggler", workers=1, iterations=5), 0)
    with pytest.raises(UserError, match="simulate.scenario"):
        simulate(SimulateConfig(scenario="stormy", workers=1, iterations=5), 0)


def test_seeded_determinism():
    a, ta = simulate(SimulateConfig(scenario="mixed", workers=12, iterations=200), 7)
    b, tb = simulate(SimulateConfig(scenario="mixed", workers=12, iterations=200), 7)
    c, _ = simulate(SimulateConfig(scenario="mixed", workers=12, iterations=200), 8)
    np.testing.assert_array_equal(a.runtimes, b.runtimes)
    np.testing.assert_array_equal(ta.contention, tb.contention)
    assert not np.array_equal(a.runtimes, c.runtimes)


def test_base_speed_spread_and_jitter():
    """sd of log worker means ~ speed_sigma (sampling sd sigma/sqrt(2n) ~ 4%: tolerance 15%);
    each worker's mean ~ b_i exp(sigma_j^2 / 2) (sd 0.7%: tolerance 4%); log(compute / b_i) has
    sd jitter_sigma (tolerance 3%)."""
    trace, truth = sim(workers=400, iterations=200, speed_sigma=0.2, jitter_sigma=0.1)
    assert np.log(trace.compute_s.mean(axis=0)).std() == pytest.approx(0.2, rel=0.15)
    np.testing.assert_allclose(trace.compute_s.mean(axis=0),
                               truth.base_s * np.exp(0.1**2 / 2), rtol=0.04)
    assert np.log(trace.compute_s / truth.base_s).std() == pytest.approx(0.1, rel=0.03)


def test_contention_fraction_duration_and_slowdown():
    """Contended fraction ~ start/(start+stop) = 0.2 (+-0.03 over 2000 x 50 node-iterations with
    ~1 500 episodes), mean episode length ~ 1/stop = 10 (+-15%), run-time ratio = slowdown (2%)."""
    trace, truth = sim(workers=200, iterations=2000, workers_per_node=4, contention_start=0.025,
                       contention_stop=0.1, contention_slowdown=2.0)
    c = truth.contention
    assert c.mean() == pytest.approx(0.2, abs=0.03)
    starts = (c[1:] & ~c[:-1]).sum()
    assert c.sum() / starts == pytest.approx(10, rel=0.15)
    on = c[:, truth.node]
    ratio = (trace.compute_s[on] / truth.base_s[np.nonzero(on)[1]]).mean() / (
        trace.compute_s[~on] / truth.base_s[np.nonzero(~on)[1]]).mean()
    assert ratio == pytest.approx(2.0, rel=0.02)


def test_stall_rate_and_pareto_lengths():
    """Stall count within 4 binomial sds of p T n; lengths in [x_min, cap] with median
    x_min 2^(1/alpha) (tolerance 5%) and P(cut at cap) = (x_min/cap)^alpha = 2.3% (+-0.7 points);
    each stall adds its length to that worker's compute time."""
    trace, truth = sim(workers=100, iterations=1000, stall_prob=0.02, stall_alpha=1.5,
                       stall_scale=0.4, stall_max=5.0, base_runtime_s=2.0)
    n_cells, p = 100 * 1000, 0.02
    assert abs(len(truth.stall_s) - p * n_cells) < 4 * np.sqrt(n_cells * p * (1 - p))
    x_min = 0.4 * 2.0
    assert truth.stall_s.min() >= x_min and truth.stall_s.max() == 10.0
    assert (truth.stall_s == 10.0).mean() == pytest.approx((x_min / 10.0) ** 1.5, abs=0.007)
    assert np.median(truth.stall_s) == pytest.approx(x_min * 2 ** (1 / 1.5), rel=0.05)
    stalled = trace.compute_s[truth.stall_t, truth.stall_worker]
    assert (stalled > truth.stall_s).all()


def test_load_shift_and_straggler_slowdown():
    """Means after/before the load shift ~ factor; stragglers' after/before ~ factor x slowdown,
    others ~ factor (tolerance 2%: 1 000 x 30 jittered values per side)."""
    trace, truth = sim(workers=30, iterations=2000, stragglers=3, straggler_start=0.5,
                       straggler_slowdown=3.0, load_shift_at=0.25, load_shift_factor=1.5)
    x = trace.compute_s
    assert truth.straggler.sum() == 3 and truth.straggler_onset == 1000
    assert (truth.load[:500] == 1).all() and (truth.load[500:] == 1.5).all()
    normal = ~truth.straggler
    assert x[500:1000, normal].mean() / x[:500, normal].mean() == pytest.approx(1.5, rel=0.02)
    s = truth.straggler
    assert x[1000:, s].mean() / x[500:1000, s].mean() == pytest.approx(3.0, rel=0.02)
    assert x[1000:, normal].mean() / x[500:1000, normal].mean() == pytest.approx(1.0, rel=0.02)


def test_comm_mean_and_spread():
    """comm ~ Gamma(4, comm_s/4): mean comm_s (1%), CoV 0.5 (3%)."""
    trace, _ = sim(workers=100, iterations=500, comm_s=0.2)
    assert trace.comm_s.mean() == pytest.approx(0.2, rel=0.01)
    assert trace.comm_s.std() / trace.comm_s.mean() == pytest.approx(0.5, rel=0.03)


def test_predictive_draws_are_calibrated():
    """Over many iterations the realised x_t averages to the predictive mean (within 3 standard
    errors), and falls below the predictive 10%/50%/90% quantiles at those rates (+-2 points):
    the true dynamics, including Markov contention persistence, are what the draws follow."""
    trace, truth = simulate(SimulateConfig(scenario="node-contention", workers=16,
                                           iterations=600), 1)
    rng = np.random.default_rng(0)
    ts = np.arange(100, 600)
    draws = np.stack([truth.predictive_draws(int(t), 200, rng) for t in ts])  # (500, 200, 16)
    assert draws.shape == (500, 200, 16)
    real = trace.runtimes[ts]
    diff = real.mean(axis=1) - draws.mean(axis=(1, 2))
    assert abs(diff.mean()) < 3 * diff.std() / np.sqrt(len(diff))
    for q in (0.1, 0.5, 0.9):
        below = (real < np.quantile(draws, q, axis=1)).mean()
        assert below == pytest.approx(q, abs=0.02)
    # A node contended at t-1 is predicted slower than a calm one (persistence is used).
    c = truth.contention[:-1]
    t = int(np.flatnonzero(c.any(axis=1) & ~c.all(axis=1))[0]) + 1
    hot = truth.contention[t - 1][truth.node]
    d = truth.predictive_draws(t, 400, rng) / truth.base_s
    assert d[:, hot].mean() > 1.5 * d[:, ~hot].mean()


def test_predictive_draws_at_start_and_speed():
    _, truth = simulate(SimulateConfig(scenario="mixed", workers=1000, iterations=20), 0)
    rng = np.random.default_rng(0)
    assert truth.predictive_draws(0, 64, rng).shape == (64, 1000)
    import time

    start = time.perf_counter()
    for t in range(1, 11):
        truth.predictive_draws(t, 64, rng)
    assert (time.perf_counter() - start) / 10 < 0.05  # a few ms each; generous for a busy box


def test_truth_round_trip_and_errors(tmp_path):
    _, truth = simulate(SimulateConfig(scenario="mixed", workers=8, iterations=100), 2)
    path = truth_path(tmp_path / "sim.parquet")
    assert path == tmp_path / "sim.truth.npz"
    write_truth(truth, path)
    assert [p.name for p in tmp_path.iterdir()] == ["sim.truth.npz"]
    back = read_truth(path)
    for name in ("base_s", "contention", "straggler", "load", "stall_t", "stall_s", "node"):
        np.testing.assert_array_equal(getattr(back, name), getattr(truth, name))
    assert back.params == truth.params and back.straggler_onset == truth.straggler_onset
    rng1, rng2 = np.random.default_rng(5), np.random.default_rng(5)
    np.testing.assert_array_equal(back.predictive_draws(50, 4, rng1),
                                  truth.predictive_draws(50, 4, rng2))
    with pytest.raises(UserError, match="absent.truth.npz: -: simulator truth file not found"):
        read_truth(tmp_path / "absent.truth.npz")
    (tmp_path / "bad.truth.npz").write_bytes(b"not a zip")
    with pytest.raises(UserError, match="bad.truth.npz: -: not a simulator truth file"):
        read_truth(tmp_path / "bad.truth.npz")


def real_cov() -> np.ndarray:
    cov = pd.read_csv(DATA / "alibaba_pai_coefficient_variation.csv", index_col=0).to_numpy()
    return cov[~np.isnan(cov)]


def scenario_cov(scenario: str, seeds: int = 10) -> np.ndarray:
    return np.concatenate([iteration_cov(simulate(SimulateConfig(scenario=scenario), s)[0].runtimes)
                           for s in range(seeds)])


def test_calm_matches_typical_real_job():
    """calm's median per-iteration CoV lies in the middle of the real jobs' per-job medians
    (between their 25th and 50th percentiles); its p95 stays below the real pooled p75."""
    job_medians = pd.read_csv(DATA / "alibaba_pai_coefficient_variation.csv",
                              index_col=0).median(axis=1)
    calm = scenario_cov("calm", seeds=3)
    assert job_medians.quantile(0.25) < np.median(calm) < job_medians.quantile(0.5)
    assert np.quantile(calm, 0.95) < np.quantile(real_cov(), 0.75)


def test_mixed_matches_real_cov_distribution():
    """mixed (n = 16, 10 seeds) follows the pooled real per-iteration CoV distribution: its
    ECDF is within 0.1 of the real one at CoV 0.05, 0.1, 0.3, 0.6, 1.0 and 1.5."""
    points = np.array([0.05, 0.1, 0.3, 0.6, 1.0, 1.5])
    ecdf = [np.mean(c[:, None] <= points, axis=0) for c in (scenario_cov("mixed"), real_cov())]
    np.testing.assert_allclose(ecdf[0], ecdf[1], atol=0.1)
