"""The hand-made results folder that tests/figures/ draw from: one trace, its throughput replay
and model predictions, the convergence runs of RUNS and one distributed job, laid out as the DAG
lays them out. tests/conftest.py imports the fixture ``results`` and runs ``render_results`` as
the session's run ``rendered``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bdsgd.cluster.clock import replay_cutoffs
from bdsgd.cluster.schedules import MODES
from bdsgd.outputs.io import write_json
from bdsgd.traces.io import write_trace
from bdsgd.traces.schema import from_arrays
from tests.helpers import run_stoppable

REPO = Path(__file__).resolve().parents[1]
N_WORKERS, ROWS, EVAL_EVERY, TARGET, DECISIONS = 4, 30, 5, 0.5, 40
# (policy, seed, iteration at which the run reaches the target or None, staleness columns?)
RUNS = [("sync", s, 20 + 2 * s, True) for s in range(3)] + \
       [("async", s, [10, None][s], True) for s in range(2)] + \
       [("bdsgd", s, 15, False) for s in range(2)] + [("explore-bdsgd", 0, 25, True)] + \
       [("bdsgd-paper", s, 20, False) for s in range(2)] + \
       [("bdsgd+progress", s, 10 + 5 * s, False) for s in range(2)] + \
       [("bdsgd+lr-none", s, None, False) for s in range(2)]  # bdsgd's variants: test_ablations.py


def _metrics(policy: str, seed: int, reach: int | None, new_style: bool) -> pd.DataFrame:
    """One run's metrics.parquet: accuracy climbs to 0.6 at ``reach`` (never: stays at 0.4)."""
    it = np.arange(1, ROWS + 1)
    step = 1.0 + 0.1 * seed + (0.5 if policy == "sync" else 0.0)
    acc = np.where(it >= reach, 0.6, 0.4) if reach else np.full(ROWS, 0.4)
    evaluated = (it % EVAL_EVERY == 0) | (it == ROWS)
    cutoff = np.full(ROWS, N_WORKERS) if policy == "sync" else 2 + it % 2
    df = pd.DataFrame({
        "iteration": it, "virtual_time_s": step * it, "cutoff": cutoff,
        "iteration_time_s": np.full(ROWS, step), "lr": np.full(ROWS, 0.1),
        "train_loss": 2.0 / np.sqrt(it) + 0.01 * seed, "test_accuracy": np.where(evaluated, acc, np.nan),
        "test_loss": np.where(evaluated, 1.0 - acc, np.nan)})
    if new_style:
        df["gradients"] = N_WORKERS if policy == "async" else cutoff
        df["staleness"] = 1.5 if policy == "async" else 0.0
    return df


def _write_run(results: Path, policy: str, seed: int, reach: int | None, new_style: bool):
    # an old result names no trace, and its metrics have no gradients or staleness
    run = results / f"runs/sim/digits/{policy}/seed{seed}"
    run.mkdir(parents=True)
    metrics = _metrics(policy, seed, reach, new_style)
    metrics.to_parquet(run / "metrics.parquet", index=False)
    hit = metrics["virtual_time_s"][metrics["test_accuracy"] >= TARGET]
    summary = {"task": "digits", "policy": policy, "seed": seed, "target_accuracy": TARGET,
               "time_to_target_s": float(hit.iloc[0]) if len(hit) else None,
               "final_accuracy": float(metrics["test_accuracy"].iloc[-1]),
               "final_test_loss": float(metrics["test_loss"].iloc[-1]),
               "gradients_per_s": 3.0, "mean_cutoff": float(metrics["cutoff"].mean()),
               "iterations": ROWS, "virtual_time_s": float(metrics["virtual_time_s"].iloc[-1]),
               "n_workers": N_WORKERS, **({"trace": "sim"} if new_style else {})}
    if policy in MODES:
        summary |= {"mean_staleness": 1.5, "max_staleness": 3, "staleness_p50": 1.0,
                    "staleness_p90": 3.0}
    (run / "result.json").write_text(json.dumps({"summary": summary}))


# a distributed job: DIST_WORKERS workers, worker 2 five times slower, cutoff DIST_CUTOFF; its
# server spends OVERHEAD_S per iteration beyond the cutoff time (what the virtual clock leaves out);
# its replayed policy waits for all workers in the first REPLAY_SYNC iterations
DIST_WORKERS, DIST_CUTOFF, OVERHEAD_S, REPLAY_SYNC = 3, 2, 0.002, 3


def _dist_runtimes() -> np.ndarray:
    x = np.random.default_rng(1).uniform(0.02, 0.03, size=(ROWS, DIST_WORKERS))
    x[:, 2] *= 5
    return x


def _write_distributed(results: Path) -> None:
    """A distributed job's files as ``bdsgd.distributed.ps`` writes them: result.json, metrics,
    the recorded trace (the worker the cutoff cut censored at the cutoff time) and its replay."""
    job = results / "distributed/straggler"
    job.mkdir(parents=True)
    x = _dist_runtimes()
    tau = np.sort(x, axis=1)[:, DIST_CUTOFF - 1]
    cut = x > tau[:, None]
    recorded = np.where(cut, tau[:, None], x)
    own = np.where(np.arange(ROWS) < REPLAY_SYNC, DIST_WORKERS, DIST_CUTOFF)
    comm = np.zeros(DIST_WORKERS)
    pd.DataFrame({"iteration": np.arange(1, ROWS + 1),
                  "virtual_s": replay_cutoffs(recorded, np.full(ROWS, DIST_CUTOFF), comm),
                  "replay_cutoff": own, "replay_s": replay_cutoffs(recorded, own, comm)}
                 ).to_parquet(job / "result.replay.parquet", index=False)
    write_trace(from_arrays(recorded, {
        "source": "distributed", "policy": "static", "late": "abandon", "time_unit": "s",
        "workers": DIST_WORKERS}, censored=cut), job / "result.trace.parquet")
    it = np.arange(1, ROWS + 1)
    pd.DataFrame({"iteration": it, "wall_time_s": np.cumsum(tau + OVERHEAD_S),
                  "cutoff": DIST_CUTOFF, "iteration_time_s": tau, "lr": 0.1,
                  "train_loss": 1.0 / it, "live_workers": DIST_WORKERS, "stale": 0,
                  "decision_s": 1e-5, "test_accuracy": np.where(it % 10 == 0, 0.5, np.nan)}
                 ).to_parquet(job / "result.metrics.parquet", index=False)
    write_json(job / "result.json", {
        "policy": "static", "late": "abandon", "workers": DIST_WORKERS, "iterations": ROWS,
        "job": {"policy": "static", "late": "abandon", "workers": DIST_WORKERS,
                "iterations": ROWS, "task": "digits", "seed": 0}})


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """The hand-made results folder (``write_results``), written for the module."""
    return write_results(tmp_path_factory.mktemp("figures") / "results")


def render_results(workdir: Path, config: Path, env: dict[str, str]) -> list[Path]:
    """The session's run ``rendered``: the hand-made results folder written under ``workdir``
    and drawn by `bdsgd figures` into ``workdir/figures`` (a process of its own, beside the
    tests; ``config`` is the tiny DAG's, not read here): the files it wrote."""
    results, out = write_results(workdir / "results"), workdir / "figures"
    proc = run_stoppable([sys.executable, "-m", "bdsgd", "figures", str(results), "--out",
                          str(out)], timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return sorted(p for p in out.iterdir() if p.is_file())


def write_results(results: Path) -> Path:
    """A results folder as the DAG lays it out: one trace, its throughput replay and model
    predictions, the convergence runs of RUNS and one distributed job."""
    rng = np.random.default_rng(0)
    for sub in ("traces/sim", "throughput/sim", "models/sim"):
        (results / sub).mkdir(parents=True)
    pd.DataFrame({"runtime_s": rng.lognormal(size=200)}).to_parquet(
        results / "traces/sim/trace.parquet")
    policies = {"sync": None, "static": None, "bdsgd": "rate", "bdsgd/ratio": "ratio",
                "oracle": None, "explore-bdsgd": "rate", "bdsgd-paper": "ratio"}
    (results / "throughput/sim/throughput.json").write_text(json.dumps({"policies": {
        name: {"rule": rule, "gradients_per_s": 3.0, "relative_to_oracle": 0.9 - 0.1 * i,
               "mean_cutoff": 3.0, "cutoff_std": 0.5, "iteration_rate_cv": 0.1 * i,
               "cutoff_cv": 0.05 * i, "idle_fraction": 0.3 - 0.04 * i,
               "wasted_fraction": 0.02 * i, "decision_ms_p50": 0.01 * (i + 1),
               "decision_ms_p99": 0.03 * (i + 1), "mean_iteration_s": 1.5}
        for i, (name, rule) in enumerate(policies.items())},
        "trace": {"n_workers": N_WORKERS, "runtime_median": 1.0, "time_unit": "s",
                  "in_seconds": True}}))
    # a sampled recorded trace's iteration ids: from 500, every third
    pd.DataFrame([{"policy": p, "iteration": 500 + 3 * t, "cutoff": 1 + (t + i) % N_WORKERS,
                   "duration_s": 1.0 + 0.1 * ((t + i) % N_WORKERS) + 0.01 * (t % 7)}
                  for i, p in enumerate(policies) for t in range(DECISIONS)]).to_parquet(
        results / "throughput/sim/decisions.parquet")
    pd.DataFrame([{"period": k, "policy": p, "gradients_per_s": 3.0,
                   "relative_to_oracle": 0.95 if p == "oracle-fixed" else 0.97 - 0.001 * k,
                   "mean_cutoff": 3.0, "fixed_ratio": 1.02, "fixed_low": 1.01 if k == 1 else 0.99,
                   "fixed_high": 1.03} for k in (1, 10) for p in ("bdsgd", "bdsgd-paper", "oracle-fixed")]
                 ).to_csv(results / "throughput/sim/period_sweep.csv", index=False)
    pd.DataFrame([{"ratio": ratio, "topology": topology, "policy": p, "gradients_per_s": 3.0,
                   "relative_to_oracle": 0.9, "relative_to_sync": 1.1 - ratio / 10,
                   "mean_cutoff": 3.0, "sync_low": 1.05 - ratio / 10, "sync_high": 1.15 - ratio / 10}
                  for ratio in (0.1, 1.0) for topology in ("ps", "sharded", "ring")
                  for p in ("sync", "bdsgd", "bdsgd-paper", "oracle")]).to_csv(
        results / "throughput/sim/comm_sweep.csv", index=False)
    # realised inside the 90% interval but on every fourth iteration
    pd.DataFrame([{"order": c, "iteration": 100 + t, "predicted_mean": 1.0 + c, "lo90": 0.5 + c,
                   "hi90": 1.5 + c, "realised": 1.0 + c + (1.0 if t % 4 == 0 else 0.1)}
                  for c in range(1, N_WORKERS + 1) for t in range(20)]).to_parquet(
        results / "models/sim/predictions.parquet")
    for run in RUNS:
        _write_run(results, *run)
    _write_distributed(results)
    return results
