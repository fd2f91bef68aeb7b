"""Importing public run-time traces into the bdsgd schema.

Two formats:

``csv``
    The generic long table, one row per (iteration, worker): the header ``iteration,worker,
    runtime_s`` plus any of ``censored, node, compute_s, comm_s``; seconds. Validated by
    ``schema.from_frame`` exactly as a Parquet trace is (strict: an unknown column is an error;
    a worker missing from an iteration is an error; iterations missing from the middle are a
    warning naming the first one, and the labels are kept).

``alibaba-pai``
    The mini-batch-time job files of Alibaba's PAI GPU cluster trace (cluster-trace-gpu-v2020):
    ``,worker,gpu,time,batch_time_norm``, one row per worker and sampled iteration. ``time`` is
    the iteration number (sampled, mostly every 10th), ``batch_time_norm`` the mini-batch time
    scaled per job to 0-1000 (the job's slowest observed batch is 1000). We read:

    - iteration = ``time``, worker = ``worker``, runtime_s = ``batch_time_norm``. The unit stays
      "normalised 0-1000"; throughput treats it as seconds, which only rescales throughput
      (cutoff decisions and throughput ratios do not change under a common scale).
    - ``gpu`` is constant per job in the released files and its meaning is not documented
      (neither a per-worker device id nor a node), so it goes into the metadata, not a column.
    - Sampled iterations that lack some workers (the logger lost rows; this happens at the end
      of a job) are dropped: we do not know whether those workers were slow or the rows were
      lost, so marking them censored would invent a lower bound. The number and labels of the
      dropped iterations are recorded in the metadata (``dropped_iterations``).
    - An exact repetition of a row only occurs inside such incomplete iterations in the released
      samples; anywhere else a repeated (time, worker) is rejected as a duplicate.
    - The gaps between sampled iterations (and those the dropped ones leave) are the format's:
      the metadata declares the sampling, so they are no warning, here or when the Parquet
      trace is read again.

Any bad file (missing, empty, not a CSV, missing or non-numeric columns) is a one-line
``UserError`` naming the file, the row (0-based data row, as the file's index column counts) and
the field.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bdsgd.errors import UserError
from bdsgd.traces.schema import Trace, from_frame

FORMATS = ("csv", "alibaba-pai")
PAI_COLUMNS = ("worker", "gpu", "time", "batch_time_norm")
PAI_UNIT = "normalised 0-1000"


def _read_csv(path: Path, index_col: int | None = None) -> pd.DataFrame:
    if not path.is_file():
        raise UserError(str(path), "-", "file not found")
    try:
        return pd.read_csv(path, index_col=index_col)
    except pd.errors.EmptyDataError:
        raise UserError(str(path), "-", "file is empty") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(str(path), "-", f"not a CSV file ({str(exc).splitlines()[0]})") from None


def _import_csv(path: Path) -> Trace:
    df = _read_csv(path)
    meta = {"source": "csv", "source_file": path.name, "time_unit": "s",
            "cluster": f"imported from {path.name}"}
    return from_frame(df, str(path), meta, strict=True)


def _whole_numbers(df: pd.DataFrame, col: str, path: Path) -> None:
    """Reject a non-numeric, missing or fractional value before we group rows by it."""
    values = pd.to_numeric(df[col], errors="coerce")
    bad = values.isna().to_numpy() | (values.to_numpy() != np.round(values.to_numpy()))
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise UserError(str(path), f"row {df.index[pos]}, {col}",
                        f"must be a whole number, got {df[col].iloc[pos]}")


def _import_alibaba_pai(path: Path) -> Trace:
    df = _read_csv(path)
    if len(df) == 0:
        raise UserError(str(path), "-", "file has a header but no rows")
    missing = [c for c in PAI_COLUMNS if c not in df.columns]
    if missing:
        raise UserError(str(path), missing[0], f"required column missing (have {list(df.columns)};"
                        f" expected ',{','.join(PAI_COLUMNS)}')")
    # The leading unnamed column is the row index the file was saved with; keep it as our index
    # so error messages name the file's own row numbers.
    index = df.columns[0]
    if index not in PAI_COLUMNS:
        _whole_numbers(df, index, path)
        df = df.set_index(index)
        df.index.name = None
    for col in ("worker", "time"):
        _whole_numbers(df, col, path)

    workers_per_iteration = df.groupby("time")["worker"].nunique()
    n = df["worker"].nunique()
    dropped = workers_per_iteration.index[workers_per_iteration < n]
    kept = df[~df["time"].isin(dropped)]
    if len(kept) == 0:
        raise UserError(str(path), "time", "no sampled iteration has all workers")

    gpu = sorted(int(g) for g in pd.to_numeric(df["gpu"], errors="coerce").dropna().unique())
    meta = {
        "source": "alibaba-pai",
        "source_file": path.name,
        "time_unit": PAI_UNIT,
        "time_unit_note": "batch times scaled per job so the slowest is 1000; throughput reads "
                          "them as seconds (a common scale leaves cutoffs and ratios unchanged)",
        "cluster": f"Alibaba PAI GPU cluster (cluster-trace-gpu-v2020), one job of {n} workers",
        "gpu": gpu,
        "sampling": "sampled iterations ('time' column), mostly every 10th",
        "dropped_iterations": int(len(dropped)),
        "dropped_iteration_labels": [int(t) for t in dropped],
    }
    frame = kept.rename(columns={"time": "iteration", "batch_time_norm": "runtime_s"})
    try:
        return from_frame(frame[["iteration", "worker", "runtime_s"]], str(path), meta)
    except UserError as exc:  # name the fields as the user's file does
        field = exc.field.replace("runtime_s", "batch_time_norm").replace("iteration", "time")
        raise UserError(exc.file, field, exc.message) from None


def import_trace(path: str | Path, fmt: str) -> Trace:
    """Read a public trace file in format ``fmt`` ("csv" or "alibaba-pai") as a validated Trace."""
    path = Path(path)
    if fmt == "csv":
        return _import_csv(path)
    if fmt == "alibaba-pai":
        return _import_alibaba_pai(path)
    raise UserError(str(path), "format", f"unknown format {fmt!r}; choose from {FORMATS}")
