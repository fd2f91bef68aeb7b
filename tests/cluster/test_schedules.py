"""One asynchronous schedule: the throughput stage's async reference and the async trainer read
the same updates, ties included, so they report the same staleness."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from bdsgd.cluster.schedules import async_reference, async_schedule
from bdsgd.throughput import run_benchmark
from bdsgd.traces.formats import import_trace
from bdsgd.traces.io import write_trace
from bdsgd.traces.schema import from_arrays
from bdsgd.training import run_spec, train_run
from tests.helpers import REPO, make_cfg


def trainer_staleness(tmp_path: Path, runtimes: np.ndarray, rounds: int) -> pd.Series:
    """The async trainer's staleness per round of n gradients, on ``runtimes`` without comm."""
    trace = write_trace(from_arrays(runtimes), tmp_path / "trace.parquet")
    cfg = make_cfg(comm_s=0.0, max_iterations=rounds, eval_every=rounds)
    run = train_run(run_spec(cfg, "digits", "async", 0, trace, tmp_path / "run"))
    assert json.loads((run / "result.json").read_text())["summary"]["mean_staleness"] >= 0
    return pd.read_parquet(run / "metrics.parquet")["staleness"]


def test_equal_run_times_have_one_staleness(tmp_path):
    """n workers always equally fast: each instant applies n gradients one after the other, so
    their staleness is 0, 1, ..., n-1 in the reference, the throughput stage and the trainer."""
    n, T = 4, 6
    x = np.ones((T, n))
    expected = (n - 1) / 2
    assert async_reference(x)["mean_staleness"] == expected
    trace = write_trace(from_arrays(x), tmp_path / "equal.parquet")
    table = run_benchmark(trace, ["async"], comm_s=0.0, json_out=tmp_path / "t.json")
    assert table["policies"]["async"]["mean_staleness"] == expected
    np.testing.assert_array_equal(trainer_staleness(tmp_path, x, T), expected)


def test_integer_run_times_have_one_staleness(tmp_path):
    """Alibaba PAI job 1 (integer run-times, many ties): the trainer's rounds carry the
    reference's staleness, update for update."""
    x = import_trace(REPO / "tests/data/alibaba_pai_job_1_norm.csv", "alibaba-pai").runtimes[:60]
    n = x.shape[1]
    horizon = np.cumsum(x, axis=0)[-1].min()
    updates = int((np.cumsum(x, axis=0) <= horizon).sum())
    reference = async_schedule(x, 0.0, updates).staleness
    assert async_reference(x)["mean_staleness"] == reference.mean()
    rounds = updates // n
    got = trainer_staleness(tmp_path, x, rounds)
    np.testing.assert_allclose(got, reference[:rounds * n].reshape(rounds, n).mean(axis=1))
