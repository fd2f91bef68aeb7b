"""Three fixes: elfving after a warm-up, static's backups on small jobs, and the torch threads
that decision latencies are measured under (throughput, model evaluate, convergence runs)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from bdsgd.cli import main
from bdsgd.cluster.cutoff import observation
from bdsgd.cluster.server import replay
from bdsgd.config import default_config, from_dict
from bdsgd.policies import order_stats
from bdsgd.policies.baselines import Static
from bdsgd.policies.build import build_policy
from bdsgd.policies.predictors import Elfving
from bdsgd.throughput import run_benchmark
from bdsgd.traces.simulate import simulate
from tests.helpers import make_cfg, write

LEARNERS = ("elfving", "ecdf", "bandit", "ewma", "persist")


# --------------------------------------------------------------- 1. elfving after a warm-up
@pytest.fixture(scope="module")
def skewed_run():
    """16 simulated workers (mixed scenario) whose training half ends with a 17.5 s stall among
    run-times of 1.2-3.7 s: the history that made a warmed-up elfving choose c = 1."""
    cfg = default_config()
    sim = dataclasses.replace(cfg.trace("t").simulate, workers=16, iterations=400,
                              scenario="mixed")
    trace, _ = simulate(sim, seed=2)
    train, test = trace.split(0.5)
    return cfg, train, test


def test_elfving_forecast_is_never_below_the_fastest_run_time_in_its_window():
    rng = np.random.default_rng(0)
    n, window = 16, 20
    skewed = Elfving(n, window)
    for t in range(window):  # fully observed, as a warm-up shows them: fast body, one stall
        x = np.concatenate([rng.uniform(1.2, 1.5, n // 2), rng.uniform(2.0, 2.5, n // 2)])
        if t == window - 2:
            x[-1] = 17.5
        skewed.observe(observation(t, x, n, 0.0))
    gaussian = skewed.mu + skewed.sigma * order_stats.elfving(n)
    assert gaussian[0] < 0.5 * skewed.fastest  # the Gaussian mirrors the stall to the left
    expected = skewed.expected_order_stats()
    assert expected[0] == skewed.fastest >= 1.2
    assert np.all(np.diff(expected) >= 0)
    np.testing.assert_array_equal(expected[gaussian >= skewed.fastest],
                                  gaussian[gaussian >= skewed.fastest])

    normal = Elfving(n, window)  # Gaussian run-times: the floor does not bind
    for t in range(window):
        normal.observe(observation(t, rng.normal(10.0, 1.0, n), int(rng.integers(8, n + 1)), 0.0))
    np.testing.assert_array_equal(normal.expected_order_stats(),
                                  normal.mu + normal.sigma * order_stats.elfving(n))


def test_elfving_warmed_up_under_the_rate_rule_does_not_cut_to_one(skewed_run):
    """The reported run: elfving with --history under the default rule (rate) chose c = 1 on the
    second replayed iteration (the Gaussian's E[x_(1)] was 0.08 s, the fastest seen 1.18 s)."""
    cfg, train, test = skewed_run
    assert cfg.policies.rule == "rate"
    policy = build_policy("elfving", cfg, seed=0, n_workers=16, trace=test, history=train)
    predictor = policy.predictor
    assert predictor.mu + predictor.sigma * predictor.z[0] < 0.1 * predictor.fastest
    cutoffs = replay(test, policy).cutoffs
    assert cutoffs[1] > 2 and cutoffs.min() > 2, cutoffs[:20]


@pytest.mark.parametrize("name", LEARNERS)
@pytest.mark.parametrize("rule", ["rate", "ratio"])
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_no_learning_policy_cuts_to_one_or_two_of_16_on_the_skewed_run(skewed_run, name, rule,
                                                                       warm):
    cfg, train, test = skewed_run
    policy = build_policy(name, cfg, seed=0, n_workers=16, trace=test, rule=rule,
                          history=train if warm else None)
    assert replay(test, policy).cutoffs.min() > 2


# ------------------------------------------------------------ 2. static keeps one backup
@pytest.mark.parametrize("n, c", [(2, 1), (3, 2), (4, 3), (5, 4), (8, 7), (16, 14), (158, 142)])
def test_a_fraction_of_backups_keeps_at_least_one(n, c):
    assert Static(n, 0.1).c == c


def test_static_backups_unchanged_where_the_fraction_rounds_to_one_or_more():
    for n in range(6, 200):  # round(0.1 n) >= 1: the backups are round(0.1 n), as before
        assert Static(n, 0.1).c == n - int(round(0.1 * n)), n
    assert Static(8, 0.1).c == 7 and Static(16, 0.1).c == 14
    assert Static(16, 0.05).c == 15 and Static(8, 0.05).c == 7  # 0.4 rounds to none: one
    assert Static(1, 0.1).c == 1  # a lone worker is always waited for


def test_no_backups_and_counts_are_unchanged():
    assert Static(3, 0.0).c == 3 and Static(16, 0.0).c == 16  # 0: sync
    assert Static(8, 2).c == 6 and Static(4, 1).c == 3 and Static(3, 2.5).c == 1


def test_the_default_config_gives_a_small_job_a_backup():
    cfg = default_config()
    assert cfg.policies.static_backups == 0.1
    for n in (3, 4):
        assert build_policy("static", cfg, seed=0, n_workers=n).choose() == n - 1


# ------------------------------------------------------------ 3. the threads of a timing
@pytest.fixture
def small_trace(tmp_path):
    return write(tmp_path, np.random.default_rng(1).lognormal(0.0, 0.4, (30, 6)))


def test_throughput_runs_on_the_threads_asked_and_records_them(small_trace, monkeypatch):
    from bdsgd.cluster.virtual import VirtualCluster

    seen = []
    real = VirtualCluster.replay

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(VirtualCluster, "replay", spy)
    before = torch.get_num_threads()
    asked = 2 if before == 1 else 1
    result = run_benchmark(small_trace, ["sync", "ecdf", "async"], rule="both", threads=asked)
    assert seen and set(seen) == {asked}
    assert torch.get_num_threads() == before  # restored
    assert result["threads"] == asked
    for name, row in result["policies"].items():
        assert row["threads"] == asked and "decision_ms_p50" in row, name
    assert {"default_rule", "trace", "history", "provenance", "policies"} <= result.keys()


def test_throughput_threads_default_to_the_config(small_trace):
    cfg = from_dict({"experiment": "x", "traces": {"t": {"source": "simulate"}},
                     "resources": {"throughput_threads": 3}})
    assert run_benchmark(small_trace, ["sync"], cfg=cfg)["threads"] == 3
    assert run_benchmark(small_trace, ["sync"])["threads"] == 1  # the schema's default


def test_cli_threads_flag_and_the_stage_config(small_trace, tmp_path):
    out = tmp_path / "t.json"
    main(["throughput", str(small_trace), "--policies", "sync,static", "--json", str(out),
          "--threads", "2"])
    assert json.loads(out.read_text())["threads"] == 2
    # the workflow's stage config file: what STAGE_READS declares for throughput, threads included
    stage = tmp_path / "throughput.yaml"
    stage.write_text("experiment: x\nseed: 0\ntraces: {t: {source: simulate}}\n"
                     "policies: {rule: rate}\nthroughput: {comm_s: 0.0}\n"
                     "resources: {throughput_threads: 2}\n")
    out.unlink()
    main(["throughput", str(small_trace), "--policies", "sync", "--config", str(stage),
          "--json", str(out)])
    table = json.loads(out.read_text())
    assert table["threads"] == 2 and table["policies"]["sync"]["threads"] == 2
    out.unlink()
    assert main(["throughput", str(small_trace), "--policies", "sync", "--json", str(out),
                 "--threads", "0"]) == 2
    assert not out.exists()


def test_model_evaluate_records_its_threads(tmp_path):
    from bdsgd.evaluation import evaluate_model
    from bdsgd.runtime_model.checkpoint import load_model
    from bdsgd.runtime_model.train import train_model
    from bdsgd.traces.schema import from_arrays

    base = default_config().model
    mcfg = dataclasses.replace(base, latent_dim=4, worker_dim=4, hidden_dim=16, chunk=16,
                               batch_size=4, epochs=1, samples=16)
    x = np.random.default_rng(2).lognormal(0.0, 0.3, (40, 4))
    train_model(from_arrays(x[:30]), mcfg, seed=0, out=tmp_path / "m.pt", progress=False)
    result, _ = evaluate_model(load_model(tmp_path / "m.pt"), from_arrays(x[30:]))
    assert result["threads"] == torch.get_num_threads() and "decision_ms_p50" in result


def test_a_convergence_run_records_its_threads(tmp_path, small_trace):
    from bdsgd.training import train_run

    cfg = make_cfg(max_iterations=6, eval_every=3, threads=1)
    train_run(cfg, task="digits", policy="ecdf", seed=0, trace_path=small_trace,
              out_dir=tmp_path / "run")
    wallclock = json.loads((tmp_path / "run" / "result.json").read_text())["wallclock"]
    assert wallclock["threads"] == 1 and "decision_latency_p50_s" in wallclock
