"""The throughput benchmark: replay, the async reference, outputs, and the CLI."""

import json
import logging
import sys
import types

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from bdsgd.cli import main
from bdsgd.cluster.cutoff import hindsight_optimum
from bdsgd.cluster.schedules import async_reference
from bdsgd.config import default_config, from_dict
from bdsgd.errors import UserError
from bdsgd.throughput import run_benchmark
from bdsgd.traces.io import write_trace
from bdsgd.traces.schema import from_arrays
from tests.helpers import LastIteration, Regimes, bdsgd_in_process  # the test doubles

KEYS = {"gradients_per_s", "relative_to_oracle", "mean_cutoff", "decision_ms_p50",
        "decision_ms_p99", "cutoff_std", "rule"}


def tiny_trace(path, T=40, n=6, censored=None):
    rng = np.random.default_rng(0)
    x = rng.lognormal(0, 0.3, (T, n)) * np.where(rng.random((T, n)) < 0.1, 3, 1)
    write_trace(from_arrays(x, {"source": "test"}, censored=censored), path)
    return x


def test_async_reference_by_hand():
    # Worker 0 takes 1 s per gradient, worker 1 takes 2 s: arrivals 1, 2, 3 and 2 (4, 6 are past
    # the horizon 3). At t = 2 worker 0's arrival is applied first (ties by worker index), so
    # worker 1's first gradient saw two updates (at 1 and 2) while it computed.
    result = async_reference(np.array([[1.0, 2.0]] * 3))
    assert result == {"gradients_per_s": 4 / 3, "mean_staleness": 0.5, "max_staleness": 2}
    assert async_reference(np.array([[1.0, 2.0]] * 3), exchange_s=1.0)["gradients_per_s"] == 5 / 6


def test_benchmark_table_decisions_and_determinism(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="bdsgd")
    x = tiny_trace(tmp_path / "t.parquet")
    names = ["sync", "static", "elfving", "ecdf", "bandit", "explore-ecdf", "oracle",
             "oracle-myopic", "async"]
    outs = []
    for k in range(2):
        result = run_benchmark(tmp_path / "t.parquet", names, rule="both", comm_s=0.1,
                               late="abandon", json_out=tmp_path / f"out{k}.json",
                               decisions_out=tmp_path / f"d{k}.parquet", seed=3)
        outs.append((tmp_path / f"d{k}.parquet").read_bytes())
    assert outs[0] == outs[1]  # decisions are byte-identical for the same inputs
    table = json.loads((tmp_path / "out0.json").read_text())["policies"]
    for name in ("elfving", "ecdf", "bandit", "explore-ecdf"):
        assert table[f"{name}/rate"]["rule"] == "rate" and table[f"{name}/ratio"]["rule"] == "ratio"
        assert table[name] == table[f"{name}/{default_config().policies.rule}"]  # the default
    for row in table.values():
        assert row.keys() >= KEYS
        assert row["relative_to_oracle"] <= 1 + 1e-12 or row is table["async"]
    assert table["oracle"]["relative_to_oracle"] == 1.0
    assert table["oracle"]["gradients_per_s"] == hindsight_optimum(np.sort(x, axis=1), 0.1)[1]
    assert table["sync"]["mean_cutoff"] == 6 and table["sync"]["rule"] is None
    assert {"explored_fraction", "explore_cost"} <= table["explore-ecdf"].keys()
    assert table["async"]["mean_staleness"] > 0 and "note" in table["async"]
    assert result["trace"]["n_workers"] == 6 and result["trace"]["comm_s"] == 0.1
    assert result["provenance"]["seed"] == 3

    decisions = pq.read_table(tmp_path / "d0.parquet").to_pandas()
    assert list(decisions.columns) == ["policy", "iteration", "cutoff", "duration_s",
                                       "cutoff_time_s", "forecast_s", "realised_s"]
    sync = decisions[decisions.policy == "sync"]
    np.testing.assert_allclose(sync.duration_s, x.max(axis=1) + 0.1)
    assert set(decisions.policy) == set(table) - {"async"}
    assert "oracle-myopic" in caplog.text  # the table, logged


def test_config_sets_rule_and_comm(tmp_path):
    tiny_trace(tmp_path / "t.parquet")
    cfg = from_dict({"experiment": "x", "traces": {"t": {"source": "simulate"}},
                     "train": {"trace": "t", "tasks": ["digits"]},
                     "policies": {"rule": "ratio"}, "throughput": {"comm_s": 0.25}})
    result = run_benchmark(tmp_path / "t.parquet", ["ecdf"], cfg=cfg)
    assert result["policies"]["ecdf"]["rule"] == "ratio"
    assert result["trace"]["comm_s"] == 0.25
    assert result["provenance"]["config_hash"] == cfg.hash()


def test_bdsgd_and_bayes_take_their_inputs(tmp_path, monkeypatch):
    tiny_trace(tmp_path / "t.parquet", n=4)
    model = types.SimpleNamespace(n_workers=4)
    checkpoint = types.SimpleNamespace(load_model=lambda path: model)
    monkeypatch.setitem(sys.modules, "bdsgd.runtime_model.checkpoint", checkpoint)

    def predictor(given, seed, online):
        assert given is model
        return LastIteration()

    adapter = types.SimpleNamespace(ModelPredictor=predictor)
    monkeypatch.setitem(sys.modules, "bdsgd.policies.model_predictor", adapter)
    truth_file = tmp_path / "t.truth.npz"
    truth_module = types.SimpleNamespace(truth_path=lambda p: truth_file,
                                       read_truth=lambda p: Regimes(4))
    monkeypatch.setitem(sys.modules, "bdsgd.traces.truth", truth_module)

    result = run_benchmark(tmp_path / "t.parquet", ["bdsgd", "explore-bdsgd"], model_path="m.pt")
    assert result["policies"]["bdsgd"]["rule"] == default_config().policies.rule
    with pytest.raises(UserError, match="--model"):
        run_benchmark(tmp_path / "t.parquet", ["sync", "bdsgd"])
    with pytest.raises(UserError, match="truth"):
        run_benchmark(tmp_path / "t.parquet", ["bayes"])
    truth_file.write_bytes(b"")
    assert run_benchmark(tmp_path / "t.parquet", ["bayes"])["policies"]["bayes"]["mean_cutoff"]


def test_cli_writes_the_table(tmp_path, capsys):
    tiny_trace(tmp_path / "t.parquet")
    names = "sync,static,elfving,ecdf,bandit,oracle,oracle-myopic"
    proc = bdsgd_in_process(capsys, "throughput", tmp_path / "t.parquet", "--policies", names,
                            "--json", tmp_path / "out.json")
    assert proc.returncode == 0, proc.stderr
    table = json.loads((tmp_path / "out.json").read_text())["policies"]
    assert set(table) == set(names.split(","))
    assert all(row.keys() >= KEYS for row in table.values())
    assert "bandit" in proc.stdout

    tiny_trace(tmp_path / "c.parquet", censored=np.eye(40, 6, dtype=bool))
    proc = bdsgd_in_process(capsys, "throughput", tmp_path / "c.parquet", "--policies", "sync",
                            "--json", tmp_path / "bad.json")
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "censored" in proc.stderr
    assert not (tmp_path / "bad.json").exists()


@pytest.mark.parametrize("args, words", [
    (["--policies", "sync,bdsgd"], "--model"),
    (["--policies", "sync,greedy"], "greedy"),
    (["--policies", "explore-oracle"], "explore-oracle"),
    (["--policies", "bayes"], "bayes"),
    (["--policies", "sync", "--draw", "-1"], "--draw"),
])
def test_cli_bad_input_is_one_line(tmp_path, capsys, monkeypatch, args, words):
    tiny_trace(tmp_path / "t.parquet")
    truth_module = types.SimpleNamespace(truth_path=lambda p: tmp_path / "absent.npz",
                                       read_truth=None)
    monkeypatch.setitem(sys.modules, "bdsgd.traces.truth", truth_module)
    code = main(["throughput", str(tmp_path / "t.parquet"), *args, "--json",
                 str(tmp_path / "o.json")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("bdsgd: error: ") and err.count("\n") == 1
    assert words in err
    assert main(["throughput", str(tmp_path / "missing.parquet"), "--policies", "sync",
                 "--json", str(tmp_path / "o.json")]) == 2
    assert not (tmp_path / "o.json").exists()


def test_a_draw_of_a_recorded_trace_starts_elsewhere_in_it(tmp_path):
    """--draw d > 0 replays the half of a recorded trace that starts at an offset (wrapping
    round), so that sync's throughput differs from draw to draw; a simulated trace's draws are
    files of their own, replayed whole."""
    x = tiny_trace(tmp_path / "t.parquet")
    first, other = (run_benchmark(tmp_path / "t.parquet", ["sync", "oracle"], draw=d)
                    for d in (0, 1))
    k = round(0.618 * 40)
    assert first["trace"]["starts_at"] == 0 and other["trace"]["starts_at"] == k
    assert other["trace"]["n_iterations"] == 20
    block = np.r_[x[k:], x[:k]][:20]
    assert other["policies"]["sync"]["gradients_per_s"] == pytest.approx(
        6 * 20 / block.max(axis=1).sum(), rel=0.05)
    assert other["policies"]["sync"]["gradients_per_s"] != pytest.approx(
        first["policies"]["sync"]["gradients_per_s"], rel=1e-3)
    write_trace(from_arrays(x, {"source": "simulate"}), tmp_path / "s.parquet")
    assert run_benchmark(tmp_path / "s.parquet", ["sync"], draw=3)["trace"]["starts_at"] == 0


def test_history_warms_up_the_learning_policies(tmp_path):
    """Worker 0 is 3x slower all along. Started cold, bandit waits for every worker at first;
    warmed up on the run's earlier iterations (--history) it cuts worker 0 from the first
    iteration on. Policies that do not learn (sync, static, the oracles, bayes) are unaffected."""
    rng = np.random.default_rng(1)
    x = rng.lognormal(0, 0.05, (60, 6))
    x[:, 0] *= 3
    write_trace(from_arrays(x[:30], {"source": "test"}), tmp_path / "history.parquet")
    write_trace(from_arrays(x[30:], {"source": "test"}), tmp_path / "t.parquet")
    names = ["sync", "static", "bandit", "oracle"]
    cold = run_benchmark(tmp_path / "t.parquet", names, decisions_out=tmp_path / "cold.parquet")
    warm = run_benchmark(tmp_path / "t.parquet", names, decisions_out=tmp_path / "warm.parquet",
                         history_path=tmp_path / "history.parquet")
    first = {}
    for kind in ("cold", "warm"):
        d = pq.read_table(tmp_path / f"{kind}.parquet").to_pandas()
        first[kind] = d[d.policy == "bandit"].cutoff.iloc[0]
    assert first == {"cold": 6, "warm": 5}
    assert warm["policies"]["bandit"]["gradients_per_s"] > cold["policies"]["bandit"]["gradients_per_s"]
    for name in ("sync", "static", "oracle"):  # the same decisions (timings aside)
        assert warm["policies"][name]["gradients_per_s"] == cold["policies"][name]["gradients_per_s"]
        assert warm["policies"][name]["cutoff_std"] == cold["policies"][name]["cutoff_std"]
    assert warm["history"]["n_iterations"] == 30 and cold["history"] is None
    write_trace(from_arrays(x[:30, :4], {"source": "test"}), tmp_path / "narrow.parquet")
    with pytest.raises(UserError, match="narrow.parquet.*4 workers"):
        run_benchmark(tmp_path / "t.parquet", names, history_path=tmp_path / "narrow.parquet")


def test_the_communication_sweep(tmp_path):
    """Every policy and the optimum for each ratio and topology: nothing beats the optimum, the
    optimum never loses to sync, and where communication dominates a single server, what
    cutting workers gains shrinks to little (each iteration is mostly the server's transfers)."""
    tiny_trace(tmp_path / "t.parquet")
    cfg = from_dict({"experiment": "x", "traces": {"t": {"source": "simulate"}},
                     "throughput": {"comm_ratios": [0.01, 10.0]}, "network": {"late": "abandon"}})
    names = ["sync", "static", "ecdf", "oracle"]
    run_benchmark(tmp_path / "t.parquet", names, cfg=cfg, sweep_out=tmp_path / "sweep.csv")
    sweep = pd.read_csv(tmp_path / "sweep.csv")
    assert len(sweep) == 2 * 3 * len(names)
    assert (sweep["relative_to_oracle"] <= 1 + 1e-9).all()
    oracle = sweep[sweep["policy"] == "oracle"].set_index(["ratio", "topology"])
    assert (oracle["relative_to_oracle"] == 1.0).all() and (oracle["relative_to_sync"] >= 1).all()
    assert sweep[sweep["policy"] == "sync"]["relative_to_sync"].tolist() == pytest.approx([1.0] * 6)
    gain = oracle["relative_to_sync"]
    assert gain[10.0, "ps"] < 1.1 < gain[0.01, "ps"] and gain[10.0, "ps"] < gain[10.0, "ring"]
    # each policy's gain over sync with its interval, paired by iteration on the same network
    policies = sweep[sweep["policy"] != "oracle"]
    assert (policies["sync_low"] <= policies["relative_to_sync"]).all()
    assert (policies["relative_to_sync"] <= policies["sync_high"]).all()
    assert sweep[sweep["policy"] == "oracle"]["sync_low"].isna().all()


def test_a_ring_has_no_server_for_the_async_reference(tmp_path):
    tiny_trace(tmp_path / "t.parquet")
    cfg = from_dict({"experiment": "x", "traces": {"t": {"source": "simulate"}},
                     "network": {"topology": "ring", "late": "abandon"}})
    with pytest.raises(UserError, match="network.topology: ring has no server"):
        run_benchmark(tmp_path / "t.parquet", ["sync", "async"], cfg=cfg)


def test_period_sweep_and_the_replay_measures(tmp_path):
    """The period sweep replays the period policies among --policies at each period, beside
    oracle-fixed; every cutoff policy's row says how steady and how busy its replay was."""
    x = tiny_trace(tmp_path / "t.parquet")
    cfg = from_dict({"experiment": "x", "traces": {"t": {"source": "simulate"}},
                     "train": {"trace": "t", "tasks": ["digits"]},
                     "throughput": {"decide_every": [1, 4], "period_policies": ["ecdf", "bdsgd"]}})
    result = run_benchmark(tmp_path / "t.parquet", ["sync", "ecdf", "oracle-fixed"], cfg=cfg,
                           comm_s=0.1, period_out=tmp_path / "p.csv")
    sweep = pd.read_csv(tmp_path / "p.csv")
    assert list(sweep.columns) == ["period", "policy", "gradients_per_s", "relative_to_oracle",
                                   "mean_cutoff", "fixed_ratio", "fixed_low", "fixed_high"]
    fixed = sweep[sweep["policy"] == "oracle-fixed"]  # against itself: 1, an interval of width 0
    assert (fixed["fixed_ratio"] == 1).all() and (fixed["fixed_low"] == fixed["fixed_high"]).all()
    assert set(zip(sweep.period, sweep.policy, strict=True)) == {
        (1, "ecdf"), (4, "ecdf"), (1, "oracle-fixed"), (4, "oracle-fixed")}
    table = result["policies"]
    at = sweep.set_index(["period", "policy"])["gradients_per_s"]
    # the plain replay (the CSV keeps six digits)
    assert at[1, "ecdf"] == pytest.approx(table["ecdf"]["gradients_per_s"], rel=1e-5)
    assert at[4, "oracle-fixed"] == pytest.approx(table["oracle-fixed"]["gradients_per_s"], rel=1e-5)
    assert table["oracle-fixed"]["cutoff_std"] == 0.0
    assert table["oracle-fixed"]["relative_to_oracle"] >= table["sync"]["relative_to_oracle"]
    # sync waits for the slowest: never drops a gradient; each worker idles max - own
    sync = table["sync"]
    assert sync["wasted_fraction"] == 0.0
    idle = ((x.max(axis=1, keepdims=True) - x).sum() + 6 * 0.1 * len(x)) / \
        (6 * (x.max(axis=1) + 0.1).sum())
    assert sync["idle_fraction"] == pytest.approx(idle)
    assert sync["cutoff_cv"] == 0.0
    rate = 6 / (x.max(axis=1) + 0.1)
    assert sync["iteration_rate_cv"] == pytest.approx(rate.std() / rate.mean())
