"""The generative cluster: its statistics match its parameters (tolerances stated per test), it is
seeded, its truth sidecar round-trips, its predictive draws are calibrated, its default
scenarios match the real PAI jobs' per-iteration CoV, and the scenarios for what real clusters
show (iid-heavy, data-dependent, heterogeneous, calm-spikes) and for a worker effect that changes
(intermittent-straggler, rack-event) have their defining properties and a truth that bayes
predicts from; the scenarios that were there before draw the same traces from the same seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from bdsgd.cluster.cutoff import observation
from bdsgd.config import SimulateConfig
from bdsgd.config.validate import SCHEMA_PATH
from bdsgd.errors import UserError
from bdsgd.policies.predictors import TruthPredictor
from bdsgd.traces.describe import iteration_cov
from bdsgd.traces.io import read_trace, write_trace
from bdsgd.traces.simulate import SCENARIOS, simulate
from bdsgd.traces.truth import read_truth, truth_path, write_truth

DATA = Path(__file__).parents[1] / "data"
QUIET = dict(speed_sigma=0.0, jitter_sigma=0.05, contention_start=0.0, contention_stop=0.0,
             contention_slowdown=1.0, stall_prob=0.0, stall_alpha=2.0, stall_scale=0.1,
             stall_max=30.0, stragglers=0, straggler_start=0.5, straggler_slowdown=1.0,
             load_shift_at=0.5, load_shift_factor=1.0, comm_s=0.0)


NEW_SCENARIOS = ("iid-heavy", "data-dependent", "heterogeneous", "calm-spikes")
CHANGING = ("intermittent-straggler", "rack-event")


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
    _, truth = simulate(SimulateConfig(scenario="intermittent-straggler", workers=8, iterations=100,
                                       rack_start=0.3, rack_length=0.4, rack_slowdown=2.0), 2)
    path = truth_path(tmp_path / "sim.parquet")
    assert path == tmp_path / "sim.truth.npz"
    write_truth(truth, path)
    assert [p.name for p in tmp_path.iterdir()] == ["sim.truth.npz"]
    back = read_truth(path)
    for name in ("base_s", "contention", "straggler", "straggler_path", "load", "rack_struck",
                 "stall_t", "stall_s", "node"):
        np.testing.assert_array_equal(getattr(back, name), getattr(truth, name))
    assert back.params == truth.params and back.straggler_onset == truth.straggler_onset
    assert (back.rack_onset, back.rack_end) == (truth.rack_onset, truth.rack_end) == (30, 70)
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


# ------------------------------------------------------- scenarios for what real clusters show
def lag1(x: np.ndarray) -> float:
    """Lag-1 autocorrelation of each worker's run-times about its own mean, averaged."""
    d = x - x.mean(axis=0)
    return float(((d[1:] * d[:-1]).sum(axis=0) / (d * d).sum(axis=0)).mean())


@pytest.mark.parametrize("scenario", NEW_SCENARIOS + CHANGING)
def test_new_scenarios_draw_valid_seeded_traces(scenario, tmp_path):
    """Each draws a trace that passes the file schema's validation, the same from the same seed."""
    cfg = SimulateConfig(scenario=scenario, workers=12, iterations=200)
    trace, _ = simulate(cfg, 5)
    back = read_trace(write_trace(trace, tmp_path / "sim.parquet"))
    np.testing.assert_array_equal(back.runtimes, trace.runtimes)
    np.testing.assert_array_equal(simulate(cfg, 5)[0].runtimes, trace.runtimes)
    assert not np.array_equal(simulate(cfg, 6)[0].runtimes, trace.runtimes)


def test_iid_heavy_has_no_memory_and_a_heavy_tail():
    """|lag-1| < 0.1 (real job: 0.03) and p99/p50 > 2.5 (calm's is ~1.2); workers alike."""
    x = simulate(SimulateConfig(scenario="iid-heavy", workers=32, iterations=1000), 0)[0].runtimes
    assert abs(lag1(x)) < 0.1
    p50, p99 = np.percentile(x, [50, 99])
    assert p99 / p50 > 2.5
    means = x.mean(axis=0)
    assert means.std() / means.mean() < 0.05


def test_heterogeneous_slow_workers_every_iteration():
    """The configured count of slow workers, each at a factor within the configured range, is the
    slowest set in every iteration; a fraction counts workers (0.5 of 10 is 5)."""
    b = 2.0
    trace, truth = simulate(SimulateConfig(scenario="heterogeneous", workers=12, iterations=300,
                                           base_runtime_s=b, slow_workers=3, slow_factor_min=2.5,
                                           slow_factor_max=4.0), 0)
    slow = truth.base_s > 1.5 * b
    assert slow.sum() == 3
    # base_s = b exp(sigma_s z) h with sigma_s = 0.04: h within its range up to 4 sigma_s.
    factor = truth.base_s[slow] / b
    assert (factor > 2.5 * np.exp(-0.16)).all() and (factor < 4.0 * np.exp(0.16)).all()
    x = trace.runtimes
    slowest = np.argsort(x, axis=1)[:, -3:]
    assert (np.sort(slowest, axis=1) == np.flatnonzero(slow)).all()
    ratio = x[:, slow] / np.median(x[:, ~slow], axis=1, keepdims=True)
    assert (ratio > 2.0).all() and (ratio < 5.0).all()
    _, half = simulate(SimulateConfig(scenario="heterogeneous", workers=10, iterations=2), 1)
    assert (half.base_s > 1.5).sum() == 5


def test_heterogeneous_bad_values():
    for kw, key in ((dict(slow_workers=2.5), "slow_workers"), (dict(slow_workers=11), "slow_workers"),
                    (dict(slow_factor_min=5.0, slow_factor_max=3.0), "slow_factor_min")):
        with pytest.raises(UserError, match=f"simulate.{key}"):
            simulate(SimulateConfig(scenario="heterogeneous", workers=10, iterations=5, **kw), 0)


def test_data_dependent_slowness_is_the_datas():
    """Widely spread run-times (median CoV > 0.3) whose slowness sticks to no worker: per-worker
    means within 3% (their sampling sd ~1%), each worker slowest in 6.25% +- 3 points of the
    iterations (binomial sd 0.5 points), no memory (|lag-1| < 0.1)."""
    n = 16
    x = simulate(SimulateConfig(scenario="data-dependent", workers=n, iterations=2000),
                 0)[0].runtimes
    assert np.median(iteration_cov(x)) > 0.3
    means = x.mean(axis=0)
    assert means.std() / means.mean() < 0.03
    share = np.bincount(x.argmax(axis=1), minlength=n) / len(x)
    np.testing.assert_allclose(share, 1 / n, atol=0.03)
    assert abs(lag1(x)) < 0.1


def test_calm_spikes_are_rare_and_single():
    """CoV small (p95 < 0.1) but for rare spikes (CoV > 0.25 in 0.05-1% of iterations), nearly
    all of them single iterations."""
    cov = iteration_cov(simulate(SimulateConfig(scenario="calm-spikes", workers=10,
                                                iterations=10000), 0)[0].runtimes)
    assert np.quantile(cov, 0.95) < 0.1
    spike = cov > 0.25
    assert 0.0005 < spike.mean() < 0.01
    assert (spike[1:] & spike[:-1]).sum() <= 0.1 * spike.sum()


@pytest.mark.parametrize("scenario", NEW_SCENARIOS + CHANGING)
def test_truth_lets_bayes_predict_new_scenarios(scenario, tmp_path):
    """TruthPredictor on the truth sidecar: its E[x_(c)] averaged over the iterations matches the
    realised order statistics' averages within 5% (errors measured <= 2%; a truth without the
    scenario's mechanism is off by 7% (calm-spikes' maximum) to 130%)."""
    n, T = 12, 400
    trace, truth = simulate(SimulateConfig(scenario=scenario, workers=n, iterations=T), 3)
    truth = read_truth(write_truth(truth, tmp_path / "sim.truth.npz"))
    bayes = TruthPredictor(truth, offset=0, samples=64, seed=0)
    predicted = []
    for t in range(T):
        predicted.append(bayes.expected_order_stats())
        bayes.observe(observation(t, trace.runtimes[t], n, 0.0))
    realised = np.sort(trace.runtimes, axis=1).mean(axis=0)
    np.testing.assert_allclose(np.mean(predicted, axis=0), realised, rtol=0.05)


def test_bayes_puts_the_slow_workers_last():
    """On heterogeneous, bayes's expected order stats put the slow workers' run-times last."""
    _, truth = simulate(SimulateConfig(scenario="heterogeneous", workers=10, iterations=20,
                                       slow_workers=4), 0)
    eos = TruthPredictor(truth, offset=10, samples=64, seed=0).expected_order_stats()
    slow = np.sort(truth.base_s[truth.base_s > 1.5])
    assert (eos[:6] < 1.5).all()
    np.testing.assert_allclose(eos[6:], slow, rtol=0.1)


def test_a_truth_from_before_a_mechanism_existed_reads_with_it_switched_off(tmp_path):
    """A sidecar whose params lack the newer mechanisms' keys (slow workers, sequence lengths,
    stragglers that come and go, the rack event) and whose arrays lack the straggler path and the
    struck rack had them off: it reads, and predicts as the same truth with them written out."""
    _, truth = simulate(SimulateConfig(scenario="mixed", workers=8, iterations=100), 2)
    newer = {"slow_workers", "slow_factor_min", "slow_factor_max", "seq_batch", "seq_alpha",
             "seq_max", "straggler_on", "straggler_off", "nodes_per_rack", "rack_start",
             "rack_length", "rack_slowdown"}
    assert newer <= set(truth.params)
    header = json.dumps({"params": {k: v for k, v in truth.params.items() if k not in newer},
                         "seed": truth.seed, "straggler_onset": truth.straggler_onset})
    older = ("node", "base_s", "contention", "straggler", "load", "stall_t", "stall_worker",
             "stall_s")
    with open(tmp_path / "old.truth.npz", "wb") as f:
        np.savez_compressed(f, header=np.array(header),
                            **{name: getattr(truth, name) for name in older})
    back = read_truth(tmp_path / "old.truth.npz")
    assert back.params == truth.params
    np.testing.assert_array_equal(back.straggler_path, truth.straggler_path)
    assert not back.rack_struck.any()
    for t in (50, 85):  # before and after the straggler's onset at 80
        rng1, rng2 = np.random.default_rng(5), np.random.default_rng(5)
        np.testing.assert_array_equal(back.predictive_draws(t, 4, rng1),
                                      truth.predictive_draws(t, 4, rng2))


# --------------------------------------------------------- stragglers that come and go; a rack event
# Each earlier scenario's run-times (12 workers, 200 iterations, seed 0) by their sum and sum of
# squares, as the committed results drew them: a changed random draw moves these by far more
# than rel 1e-9.
BEFORE = {
    "calm": (2452.852495233489, 2515.719776585601),
    "emerging-straggler": (2807.918270159139, 3760.7482475917723),
    "node-contention": (3145.4758410258264, 4648.822280516104),
    "load-shift": (3052.9913070719363, 4045.987457437076),
    "mixed": (3721.4331892719565, 8452.650757620704),
    "iid-heavy": (2908.0202259125836, 5854.605154849849),
    "data-dependent": (2931.865424987488, 4407.484785239611),
    "heterogeneous": (5754.809092068597, 19760.834822584795),
    "calm-spikes": (2453.6635630226547, 2520.676055452709),
}


@pytest.mark.parametrize("scenario", BEFORE)
def test_scenarios_draw_the_recorded_traces(scenario):
    """A mechanism that is off draws no random numbers: committed results stay reproducible."""
    x = simulate(SimulateConfig(scenario=scenario, workers=12, iterations=200), 0)[0].runtimes
    assert (x.sum(), (x**2).sum()) == pytest.approx(BEFORE[scenario], rel=1e-9)


def test_every_scenario_is_in_the_schema():
    defs = yaml.safe_load(SCHEMA_PATH.read_text())["$defs"]
    assert defs["simulate"]["properties"]["scenario"]["enum"] == list(SCENARIOS)


def test_intermittent_stragglers_fraction_and_episode_length():
    """From the onset each straggler is slow at first, then slow a fraction on / (on + off) = 0.2
    of the time (+-0.02; sd ~0.004 over 20 chains x 3 000 steps) in episodes of 1 / off = 5
    iterations on average (+-10%; ~2 400 episodes); no one else is ever slow, no one before the
    onset; a slow straggler's run-time is the slowdown times its own (exact without jitter)."""
    T, onset = 4000, 1000
    trace, truth = sim(workers=40, iterations=T, stragglers=20, straggler_start=0.25,
                       straggler_slowdown=3.0, straggler_on=0.05, straggler_off=0.2,
                       jitter_sigma=0.0)
    g = truth.straggler_path
    assert not g[:onset].any() and not g[:, ~truth.straggler].any()
    assert g[onset, truth.straggler].all()
    chains = g[onset + T // 10:, truth.straggler]  # its start forgotten
    assert chains.mean() == pytest.approx(0.2, abs=0.02)
    after = g[onset:, truth.straggler]
    episodes = (after[1:] & ~after[:-1]).sum() + after.shape[1]
    assert after.sum() / episodes == pytest.approx(5, rel=0.1)
    np.testing.assert_allclose(trace.compute_s / truth.base_s, np.where(g, 3.0, 1.0))
    assert all(truth.straggling(t).tolist() == g[t].tolist() for t in (0, onset, T - 1))


def test_stragglers_stay_slow_without_straggler_off():
    """straggler_off = 0: slow from the onset to the end, whatever straggler_on, drawing the
    same numbers as before the chain existed."""
    kw = dict(workers=10, iterations=300, stragglers=3, straggler_start=0.5,
              straggler_slowdown=2.0)
    trace, truth = sim(**kw, straggler_on=0.5, straggler_off=0.0)
    expected = truth.straggler & (np.arange(300)[:, None] >= 150)
    np.testing.assert_array_equal(truth.straggler_path, expected)
    np.testing.assert_array_equal(sim(**kw)[0].runtimes, trace.runtimes)


def test_rack_event_slows_one_rack_in_its_window():
    """Exactly the struck rack's workers (nodes // nodes_per_rack), exactly over
    [floor(start T), floor(start T) + floor(length T)), by exactly the slowdown; each rack is
    struck from some seed."""
    kw = dict(workers=24, workers_per_node=2, iterations=200, nodes_per_rack=3, rack_start=0.3,
              rack_length=0.2, rack_slowdown=2.0, jitter_sigma=0.0)
    trace, truth = sim(**kw)
    rack = truth.node // 3
    struck = np.unique(rack[truth.rack_struck])
    assert len(struck) == 1 and (truth.rack_struck == (rack == struck[0])).all()
    assert (truth.rack_onset, truth.rack_end) == (60, 100)
    window = (np.arange(200) >= 60) & (np.arange(200) < 100)
    np.testing.assert_allclose(trace.compute_s / truth.base_s,
                               np.where(window[:, None] & truth.rack_struck, 2.0, 1.0))
    chosen = {int(rack[sim(seed, **kw)[1].rack_struck][0]) for seed in range(30)}
    assert chosen == {0, 1, 2, 3}


def test_predictive_draws_follow_the_straggler_chain_and_the_rack_event():
    """Without jitter, stalls or contention a draw over b_i is its factors exactly: before the
    onset 1, at it rho for S; after it a straggler slow at t-1 is slow again with prob 1 - off,
    a recovered one turns slow with prob on (+-0.03 over 4 000 draws), no one else is; inside
    the rack window the struck rack's workers are phi slower, outside it no one is."""
    rng = np.random.default_rng(0)
    _, truth = sim(workers=16, iterations=400, stragglers=8, straggler_start=0.25,
                   straggler_slowdown=3.0, straggler_on=0.2, straggler_off=0.3, jitter_sigma=0.0)
    s, g = truth.straggler, truth.straggler_path
    draw = truth.predictive_draws
    np.testing.assert_array_equal(draw(99, 50, rng), np.broadcast_to(truth.base_s, (50, 16)))
    np.testing.assert_allclose(draw(100, 50, rng) / truth.base_s,
                               np.broadcast_to(np.where(s, 3.0, 1.0), (50, 16)))
    t = next(t for t in range(101, 400) if (g[t - 1] & s).any() and (~g[t - 1] & s).any())
    factor = draw(t, 4000, rng) / truth.base_s
    assert np.isin(np.round(factor, 9), [1.0, 3.0]).all()
    slow = factor > 2
    assert not slow[:, ~s].any()
    assert slow[:, g[t - 1]].mean() == pytest.approx(0.7, abs=0.03)
    assert slow[:, s & ~g[t - 1]].mean() == pytest.approx(0.2, abs=0.03)

    _, truth = sim(workers=16, iterations=400, rack_start=0.5, rack_length=0.25,
                   rack_slowdown=2.0, jitter_sigma=0.0)
    assert truth.rack_struck.sum() == 8  # 2 racks of 2 nodes of 4 workers
    for t, rack in ((199, 1.0), (200, 2.0), (299, 2.0), (300, 1.0)):
        expected = truth.base_s * np.where(truth.rack_struck, rack, 1.0)
        np.testing.assert_allclose(truth.predictive_draws(t, 50, rng),
                                   np.broadcast_to(expected, (50, 16)))
