"""Asynchronous SGD on the virtual clock: equivalence with sync, staleness, cost, resume, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

import bdsgd.sgd as sgd
import bdsgd.training.asynchronous as asynchronous
from bdsgd.cluster.schedules import async_schedule as schedule
from bdsgd.training import run_spec, train_run
from bdsgd.training.record import COLUMNS
from tests.helpers import (
    N_WORKERS,
    STALENESS,
    T_ROWS,
    bdsgd_in_process,
    crash_at_call,
    interrupted_then_resumed,
    make_cfg,
    metrics,
    summary,
    write,
)


@pytest.fixture
def equal_trace(tmp_path: Path) -> Path:
    return write(tmp_path, np.ones((T_ROWS, N_WORKERS)), "equal")


@pytest.fixture
def slow_trace(tmp_path: Path) -> Path:
    runtimes = np.ones((T_ROWS, N_WORKERS))
    runtimes[:, 0] = 10.0  # worker 0 always 10x slower
    return write(tmp_path, runtimes, "slow")


@pytest.mark.parametrize("scaling", ["none", "linear"])
def test_equally_fast_workers_make_async_equal_to_sync(tmp_path, equal_trace, scaling):
    """n updates at lr/n (staleness_lr none) from the same parameters (all pull after the
    round's instant) are, with momentum 0, one synchronous step at lr on the mean of the n
    gradients."""
    cfg = make_cfg(max_iterations=4, eval_every=2, momentum=0.0, lr_scaling=scaling,
                   staleness_lr="none")
    sync = train_run(run_spec(cfg, "digits", "sync", 0, equal_trace, tmp_path / "sync"))
    async_ = train_run(run_spec(cfg, "digits", "async", 0, equal_trace, tmp_path / "async"))
    expected = torch.load(sync / "model.pt", weights_only=True)
    trained = torch.load(async_ / "model.pt", weights_only=True)
    assert trained.keys() == expected.keys()
    for name, value in expected.items():
        torch.testing.assert_close(trained[name], value, rtol=1e-5, atol=1e-6)

    m, s = metrics(async_), metrics(sync)
    assert list(m.columns) == list(COLUMNS)
    assert m["iteration"].tolist() == [1, 2, 3, 4] and (m["cutoff"] == N_WORKERS).all()
    np.testing.assert_allclose(m["virtual_time_s"], s["virtual_time_s"])
    np.testing.assert_allclose(m["iteration_time_s"], 1.05)
    np.testing.assert_allclose(m["lr"], 0.1 / N_WORKERS)
    np.testing.assert_allclose(m["train_loss"], s["train_loss"], rtol=1e-5)
    assert m["test_accuracy"].notna().tolist() == [False, True, False, True]
    sched = schedule(np.ones((T_ROWS, N_WORKERS)), 0.05, 4 * N_WORKERS)
    assert sched.staleness.tolist() == list(range(N_WORKERS)) * 4  # 0..n-1 within each round
    got = summary(async_)
    assert got["policy"] == "async" and got["iterations"] == 4
    assert got["mean_staleness"] == (N_WORKERS - 1) / 2 and got["max_staleness"] == N_WORKERS - 1
    assert got["gradients_per_s"] == pytest.approx(N_WORKERS / 1.05)


def test_the_slow_workers_gradients_are_the_stale_ones(tmp_path, slow_trace):
    """Worker 0 takes 10.05 s a gradient, the others 1.05 s: its first gradient (pulled at 0,
    arriving at 10.05) sees the fast workers' 9 instants of 5 updates, its second (10.05 to
    20.10) their 10 instants; a fast gradient sees at most its instant's earlier ones and one
    slow update."""
    cfg = make_cfg(max_iterations=20, eval_every=10)
    run = train_run(run_spec(cfg, "digits", "async", 0, slow_trace, tmp_path / "run"))
    runtimes = np.ones((T_ROWS, N_WORKERS))
    runtimes[:, 0] = 10.0
    sched = schedule(runtimes, 0.05, 20 * N_WORKERS)
    slow = sched.worker == 0
    assert sched.staleness[slow].tolist() == [45, 50]
    assert sched.staleness[~slow].max() <= N_WORKERS - 1
    got = summary(run)
    assert got["max_staleness"] == 50
    assert 0 < got["mean_staleness"] == pytest.approx(sched.staleness.mean())
    assert got["staleness_p50"] <= got["staleness_p90"] <= got["max_staleness"]
    # the clock: 120 updates = 2 slow + 5 per fast instant, the 120th in the 24th instant
    assert metrics(run)["virtual_time_s"].iloc[-1] == pytest.approx(1.05 * 24)


@pytest.mark.parametrize("rounds", [5, 10])
def test_one_gradient_is_computed_per_applied_gradient(tmp_path, trace_path, monkeypatch, rounds):
    calls = []
    gradient = asynchronous.worker_gradient

    def counted(*args):
        calls.append(1)
        return gradient(*args)

    monkeypatch.setattr(asynchronous, "worker_gradient", counted)
    cfg = make_cfg(max_iterations=rounds, eval_every=5)
    run = train_run(run_spec(cfg, "digits", "async", 0, trace_path, tmp_path / "run"))
    applied = rounds * N_WORKERS
    # only gradients whose arrival falls within the budget are computed (none left in flight)
    assert applied <= len(calls) <= applied + N_WORKERS
    assert len(calls) == applied
    assert summary(run)["gradients_per_s"] == pytest.approx(
        applied / metrics(run)["virtual_time_s"].iloc[-1])


@pytest.mark.parametrize(("mode", "crash"), [
    ("async", (asynchronous, "worker_gradient", 7 * N_WORKERS)),  # in round 7
    ("cyclic", (sgd, "apply_gradient", 8 * N_WORKERS)),  # in a round after the 5th
])
def test_resumed_run_of_a_mode_equals_uninterrupted_run(tmp_path, trace_path, monkeypatch, mode,
                                                        crash):
    """Killed after the checkpoint of round 5, the same call resumes to identical metrics,
    parameters and staleness."""
    cfg = make_cfg(max_iterations=12, checkpoint_every=5)
    whole = train_run(run_spec(cfg, "digits", mode, 0, trace_path, tmp_path / "whole"))

    crash_at_call(monkeypatch, *crash)
    resumed = interrupted_then_resumed(
        monkeypatch, lambda out: train_run(run_spec(cfg, "digits", mode, 0, trace_path, out)),
        tmp_path / "resumed")
    assert (resumed / "metrics.parquet").read_bytes() == (whole / "metrics.parquet").read_bytes()
    assert json.loads((resumed / "result.json").read_text())["wallclock"][
        "resumed_from_iteration"] == 5
    a = torch.load(whole / "model.pt", weights_only=True)
    b = torch.load(resumed / "model.pt", weights_only=True)
    for name in a:
        assert torch.equal(a[name], b[name])
    assert {k: summary(whole)[k] for k in STALENESS} == {k: summary(resumed)[k] for k in STALENESS}


@pytest.mark.parametrize("mode", ["async", "cyclic"])
def test_cli_train_mode_writes_metrics_and_staleness(tmp_path, trace_path, mode, capsys):
    """`bdsgd train --policy MODE`, in this process (the program: tests/cli/test_cli.py)."""
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "experiment": "cli", "traces": {"t": {"source": "simulate"}},
        "train": {"trace": "t", "tasks": ["digits"], "max_iterations": 6, "eval_every": 3,
                  "batch_size": 8, "target_accuracy": {"digits": 0.5}}}))
    out = tmp_path / "run"
    proc = bdsgd_in_process(capsys, "train", "--config", config, "--task", "digits",
                            "--policy", mode, "--seed", "0", "--trace", trace_path, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert f"{mode} staleness" in proc.stdout, proc.stdout
    assert metrics(out)["iteration"].iloc[-1] == 6 and list(metrics(out).columns) == list(COLUMNS)
    result = json.loads((out / "result.json").read_text())
    assert result["policy"] == mode
    assert set(STALENESS) <= result["summary"].keys()
    assert result["summary"]["mean_staleness"] > 0
