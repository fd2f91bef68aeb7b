"""The one trace validator: every bad-trace case fails with a one-line error naming file and field;
good traces round-trip through Parquet with their metadata."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bdsgd.errors import UserError
from bdsgd.traces.formats import import_trace
from bdsgd.traces.io import read_trace, write_trace
from bdsgd.traces.schema import from_arrays, from_frame

GOOD = "iteration,worker,runtime_s\n0,0,1.0\n0,1,2.0\n1,0,1.5\n1,1,2.5\n"


def import_csv(tmp_path, text: str, name: str = "t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return import_trace(path, "csv")


def expect_error(tmp_path, text: str, field: str, message: str) -> UserError:
    with pytest.raises(UserError) as info:
        import_csv(tmp_path, text)
    err = info.value
    line = str(err)
    assert "\n" not in line
    assert err.file.endswith("t.csv") and line.startswith(err.file)
    assert err.field == field, line
    assert message in err.message, line
    return err


def test_good_csv_builds_dense_trace(tmp_path):
    trace = import_csv(tmp_path, GOOD)
    assert trace.runtimes.tolist() == [[1.0, 2.0], [1.5, 2.5]]
    assert trace.complete and trace.n_workers == 2 and trace.meta["n_workers"] == 2


def test_rows_in_any_order_and_labels_kept(tmp_path):
    trace = import_csv(tmp_path, "iteration,worker,runtime_s\n7,5,3\n3,9,2\n3,5,1\n7,9,4\n")
    assert trace.iterations.tolist() == [3, 7] and trace.workers.tolist() == [5, 9]
    assert trace.runtimes.tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1.5"])
def test_bad_runtime_rejected(tmp_path, value):
    text = f"iteration,worker,runtime_s\n0,0,1.0\n0,1,{value}\n"
    expect_error(tmp_path, text, "row 1, runtime_s", "finite and > 0")


def test_empty_value_is_nan_and_rejected(tmp_path):
    expect_error(tmp_path, "iteration,worker,runtime_s\n0,0,1.0\n0,1,\n", "row 1, runtime_s",
                 "finite and > 0")


@pytest.mark.parametrize("text, field, message", [
    ("iteration,worker,runtime_s\n0,0,1\n0,1,1\n0,1,2\n", "row 2, iteration/worker",
     "duplicate (iteration 0, worker 1)"),
    ("iteration,worker,runtime_s,node\n0,0,1,0\n0,1,1,0\n1,0,1,0\n1,1,1,1\n", "node",
     "worker 1 changes node"),
    ("iteration,worker,runtime_s,comm_s\n0,0,1,0.1\n0,1,1,-0.1\n", "row 1, comm_s", ">= 0"),
], ids=["duplicate", "worker changing node", "negative comm"])
def test_bad_table_rejected(tmp_path, text, field, message):
    expect_error(tmp_path, text, field, message)


def test_missing_worker_rejected_but_censored_row_ok(tmp_path):
    text = "iteration,worker,runtime_s\n0,0,1\n0,1,1\n1,0,1\n"
    expect_error(tmp_path, text, "iteration 1", "missing workers [1]")
    # The same iteration with the slow worker present as a censored row is a valid trace.
    trace = import_csv(tmp_path, "iteration,worker,runtime_s,censored\n0,0,1,false\n0,1,1,false\n"
                                 "1,0,1,false\n1,1,1,true\n")
    assert trace.censored.tolist() == [[False, False], [False, True]] and not trace.complete


def test_non_numeric_column_rejected(tmp_path):
    expect_error(tmp_path, "iteration,worker,runtime_s\n0,0,1.0\n0,1,fast\n", "row 1, runtime_s",
                 "not a number: 'fast'")
    expect_error(tmp_path, "iteration,worker,runtime_s\n0,0,1.0\n0,w1,1.0\n", "row 1, worker",
                 "not a number: 'w1'")
    expect_error(tmp_path, "iteration,worker,runtime_s\n0.5,0,1.0\n", "row 0, iteration",
                 "whole number")
    expect_error(tmp_path, "iteration,worker,runtime_s,censored\n0,0,1,maybe\n", "censored",
                 "boolean")


def test_empty_files_rejected(tmp_path):
    expect_error(tmp_path, "", "-", "empty")
    expect_error(tmp_path, "iteration,worker,runtime_s\n", "-", "empty")


def test_missing_required_column(tmp_path):
    expect_error(tmp_path, "iteration,runtime_s\n0,1\n", "worker", "required column missing")


def test_unknown_column_strict_and_lenient(tmp_path):
    text = "iteration,worker,runtime_s,gpu_temp\n0,0,1\n0,1,2\n".replace("1\n", "1,40\n").replace(
        "2\n", "2,41\n")
    expect_error(tmp_path, text, "gpu_temp", "unknown column")
    df = pd.read_csv(tmp_path / "t.csv")
    trace = from_frame(df, "t.csv", strict=False)
    assert trace.runtimes.tolist() == [[1.0, 2.0]]
    # Parquet loading follows the same switch.
    pq.write_table(pa.Table.from_pandas(df), tmp_path / "x.parquet")
    with pytest.raises(UserError, match="x.parquet: gpu_temp: unknown column"):
        read_trace(tmp_path / "x.parquet")
    assert read_trace(tmp_path / "x.parquet", strict=False).n_workers == 2


def test_row_named_by_index_label_after_filtering():
    df = pd.DataFrame({"iteration": [0, 0, 1, 1], "worker": [0, 1, 0, 1],
                       "runtime_s": [1.0, 1.0, 1.0, -2.0]}).iloc[[2, 3]]
    with pytest.raises(UserError, match="f.csv: row 3, runtime_s"):
        from_frame(df, "f.csv")


def test_parquet_round_trip_keeps_everything(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.uniform(1, 2, size=(5, 4))
    censored = np.zeros((5, 4), bool)
    censored[2, 3] = True
    meta = {"source": "test", "cluster": {"nodes": 2, "gpu": "none"}, "gatherer": {"workers": 4}}
    trace = from_arrays(x, meta, censored=censored, node=np.array([0, 0, 1, 1]),
                        compute_s=x * 0.9, comm_s=x * 0.1)
    path = write_trace(trace, tmp_path / "t.parquet")
    back = read_trace(path)
    np.testing.assert_array_equal(back.runtimes, x)
    np.testing.assert_array_equal(back.censored, censored)
    np.testing.assert_array_equal(back.node, [0, 0, 1, 1])
    np.testing.assert_allclose(back.comm_s, x * 0.1)
    assert back.meta["cluster"] == meta["cluster"] and back.meta["gatherer"] == {"workers": 4}
    assert back.meta["n_workers"] == 4 and back.meta["time_unit"] == "s"
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # no temporary file left


def test_bad_parquet_files(tmp_path):
    with pytest.raises(UserError, match="nope.parquet: -: trace file not found"):
        read_trace(tmp_path / "nope.parquet")
    (tmp_path / "junk.parquet").write_text("iteration,worker\n")
    with pytest.raises(UserError, match="junk.parquet: -: not a Parquet trace"):
        read_trace(tmp_path / "junk.parquet")
    empty = pd.DataFrame({"iteration": pd.Series([], dtype="int64"),
                          "worker": pd.Series([], dtype="int64"),
                          "runtime_s": pd.Series([], dtype="float64")})
    pq.write_table(pa.Table.from_pandas(empty), tmp_path / "empty.parquet")
    with pytest.raises(UserError, match="empty.parquet: -: trace is empty"):
        read_trace(tmp_path / "empty.parquet")


def test_split_and_slice():
    trace = from_arrays(np.arange(1, 21, dtype=float).reshape(10, 2), {"source": "t"})
    train, test = trace.split(0.3)
    assert (train.n_iterations, test.n_iterations) == (3, 7)
    assert test.iterations[0] == 3 and test.meta["slice"] == [3, None]
