"""Importing the two real Alibaba PAI samples and the generic CSV; numbers checked against plain
pandas computations on the raw files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bdsgd.errors import UserError
from bdsgd.traces.describe import describe
from bdsgd.traces.formats import import_trace
from bdsgd.traces.io import read_trace, write_trace

DATA = Path(__file__).parents[1] / "data"
HEADER = ",worker,gpu,time,batch_time_norm\n"


def pai_reference(job: int) -> pd.DataFrame:
    """Independent reading: pivot to (time x worker), drop sampled iterations lacking a worker."""
    raw = pd.read_csv(DATA / f"alibaba_pai_job_{job}_norm.csv")
    wide = raw.pivot_table(index="time", columns="worker", values="batch_time_norm")
    return wide.dropna()


def best_rate_by_bisection(x: np.ndarray) -> float:
    """max over cutoff sequences of sum c / sum x_(c), by bisection on lambda:
    F(lambda) = sum_t max_c (c - lambda x_t,(c)) is decreasing and zero at the optimum."""
    xs = np.sort(x, axis=1)
    c = np.arange(1, x.shape[1] + 1)
    lo, hi = 0.0, float(c[-1] / xs.min())
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if (c - mid * xs).max(axis=1).sum() > 0 else (lo, mid)
    return lo


@pytest.mark.parametrize("job, iterations, dropped", [(1, 300, 0), (2, 238, 16)])
def test_alibaba_import_matches_pandas(job, iterations, dropped):
    trace = import_trace(DATA / f"alibaba_pai_job_{job}_norm.csv", "alibaba-pai")
    ref = pai_reference(job)
    assert trace.runtimes.shape == (iterations, 10) == ref.shape
    np.testing.assert_array_equal(trace.runtimes, ref.to_numpy())
    np.testing.assert_array_equal(trace.iterations, ref.index.to_numpy())
    assert trace.meta["dropped_iterations"] == dropped
    assert trace.meta["time_unit"] == "normalised 0-1000"
    assert trace.meta["source"] == "alibaba-pai" and trace.complete


@pytest.mark.parametrize("job", [1, 2])
def test_alibaba_describe_matches_independent_numbers(job):
    stats = describe(import_trace(DATA / f"alibaba_pai_job_{job}_norm.csv", "alibaba-pai"))
    x = pai_reference(job).to_numpy()
    flat = np.sort(x.ravel())
    cov = pd.DataFrame(x).std(axis=1, ddof=0) / pd.DataFrame(x).mean(axis=1)
    assert stats["workers"] == 10 and stats["iterations"] == len(x)
    assert stats["mean_s"] == pytest.approx(flat.sum() / flat.size)
    assert stats["p50_s"] == pytest.approx(pd.Series(flat).median())
    assert stats["p99_s"] == pytest.approx(pd.Series(flat).quantile(0.99))
    assert stats["cov_mean"] == pytest.approx(cov.mean())
    assert stats["cov_p50"] == pytest.approx(cov.median())
    assert stats["cov_p90"] == pytest.approx(cov.quantile(0.9))
    # The hindsight optimum: per iteration c_t = argmax c - lambda* x_(c) at the best rate.
    rate = best_rate_by_bisection(x)
    xs = np.sort(x, axis=1)
    cut = np.argmax(np.arange(1, 11) - rate * (1 - 1e-9) * xs, axis=1) + 1
    assert stats["frac_best_cutoff_below_n"] == pytest.approx((cut < 10).mean())
    sync = 10 * len(x) / xs[:, -1].sum()
    assert stats["hindsight_speedup_over_sync"] == pytest.approx(rate / sync, rel=1e-6)


def test_alibaba_job1_known_values():
    """Numbers read off the raw file by hand-checkable means (all 3000 rows are complete)."""
    stats = describe(import_trace(DATA / "alibaba_pai_job_1_norm.csv", "alibaba-pai"))
    assert stats["mean_s"] == pytest.approx(443.672)
    assert stats["max_s"] == 1000 and stats["min_s"] == 380
    assert stats["p50_s"] == 438


def test_alibaba_round_trip(tmp_path):
    trace = import_trace(DATA / "alibaba_pai_job_2_norm.csv", "alibaba-pai")
    back = read_trace(write_trace(trace, tmp_path / "pai.parquet"))
    np.testing.assert_array_equal(back.runtimes, trace.runtimes)
    assert back.meta["dropped_iteration_labels"][:3] == [2372, 2373, 2375]


def write(tmp_path, text: str, name: str = "j.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_alibaba_bad_files(tmp_path):
    def fails(text, field, message):
        with pytest.raises(UserError) as info:
            import_trace(write(tmp_path, text), "alibaba-pai")
        assert info.value.file.endswith("j.csv") and info.value.field == field
        assert message in info.value.message

    fails("", "-", "empty")
    fails(HEADER, "-", "no rows")
    fails(",worker,time,batch_time_norm\n0,0,1,5\n", "gpu", "required column missing")
    fails(HEADER + "0,0,25,1,500\n1,x,25,1,400\n", "row 1, worker", "whole number")
    fails(HEADER + "0,0,25,1,500\n1,1,25,1,slow\n", "row 1, batch_time_norm", "not a number")
    fails(HEADER + "0,0,25,1,500\n1,1,25,1,0\n", "row 1, batch_time_norm", "> 0")
    fails(HEADER + "0,0,25,1,500\n1,1,25,1,400\n2,1,25,1,400\n", "row 2, time/worker",
          "duplicate")


def test_alibaba_incomplete_iterations_dropped(tmp_path):
    text = HEADER + "0,0,25,1,500\n1,1,25,1,400\n2,0,25,11,300\n3,0,25,21,200\n4,1,25,21,100\n"
    trace = import_trace(write(tmp_path, text), "alibaba-pai")
    assert trace.iterations.tolist() == [1, 21] and trace.runtimes.tolist() == [[500, 400],
                                                                                [200, 100]]
    assert trace.meta["dropped_iteration_labels"] == [11]


def test_csv_not_a_csv_and_missing(tmp_path):
    path = tmp_path / "t.parquet"
    write_trace(import_trace(DATA / "alibaba_pai_job_1_norm.csv", "alibaba-pai"), path)
    with pytest.raises(UserError, match="t.parquet: -: not a CSV file"):
        import_trace(path, "csv")
    with pytest.raises(UserError, match="absent.csv: -: file not found"):
        import_trace(tmp_path / "absent.csv", "csv")
    with pytest.raises(UserError, match="format: unknown format"):
        import_trace(path, "xlsx")


def test_csv_optional_columns(tmp_path):
    text = ("iteration,worker,runtime_s,censored,node,compute_s,comm_s\n"
            "0,0,1.0,0,0,0.9,0.1\n0,1,2.0,1,1,1.8,0.2\n")
    trace = import_trace(write(tmp_path, text), "csv")
    assert trace.node.tolist() == [0, 1] and trace.censored.tolist() == [[False, True]]
    assert trace.comm_s.tolist() == [[0.1, 0.2]] and trace.meta["source"] == "csv"
