"""The trace: every worker's mini-batch run-time, iteration by iteration.

On disk a trace is a long Parquet table, one row per (iteration, worker)::

    iteration  int    the iteration's label (need not start at 0 or be contiguous)
    worker     int    the worker's label
    runtime_s  float  seconds (or the unit in the metadata); if censored, a lower bound
    censored   bool   True: the worker was cut off, its run-time only known to exceed runtime_s
    node       int    optional: the node (machine) the worker runs on
    compute_s  float  optional: the compute part of runtime_s
    comm_s     float  optional: the communication part

with the trace's metadata (source, time unit, number of workers, cluster description, the
gatherer's config) as JSON under the Parquet key ``bdsgd``. In memory it is a dense
(iterations x workers) array, and ``Trace.file`` names the file it was read from (what every
message about the trace names: its metadata's ``source`` says only where it came from, e.g.
"csv"). ``from_frame`` is the one validator: everything else trusts a ``Trace``.

Iterations missing from the middle (labels that jump, e.g. 3, 4, 7) are legal but probably not
meant: the dense array makes the iterations either side of a gap neighbours, which the run-time
model and the policies read as consecutive. So a gap is a warning (``bdsgd.traces.schema``'s
logger, WARNING) naming the first missing iteration, for a Parquet trace and an imported CSV
alike, and the trace loads. A trace whose metadata declares its iterations sampled
(``sampling``, as an Alibaba PAI import does: its job files log about every 10th iteration and
lose some) loads without one. A worker missing from an iteration is an error (give it a censored
row); the Alibaba PAI importer drops such iterations instead and records them in the metadata.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from bdsgd.errors import UserError

logger = logging.getLogger(__name__)

REQUIRED = ("iteration", "worker", "runtime_s")
OPTIONAL = ("censored", "node", "compute_s", "comm_s")
INT_COLUMNS = ("iteration", "worker", "node")


@dataclass(frozen=True)
class Trace:
    runtimes: np.ndarray  # (T, n) float64, > 0 and finite
    censored: np.ndarray  # (T, n) bool
    iterations: np.ndarray  # (T,) int64 labels
    workers: np.ndarray  # (n,) int64 labels
    meta: dict[str, Any] = field(default_factory=dict)
    node: np.ndarray | None = None  # (n,) int64
    compute_s: np.ndarray | None = None  # (T, n)
    comm_s: np.ndarray | None = None  # (T, n)
    file: str = field(default="<trace>", compare=False)  # what messages about the trace name

    @property
    def n_iterations(self) -> int:
        return self.runtimes.shape[0]

    @property
    def n_workers(self) -> int:
        return self.runtimes.shape[1]

    @property
    def complete(self) -> bool:
        """True when no run-time is censored, so the trace can be replayed exactly."""
        return not self.censored.any()

    def slice(self, start: int, stop: int | None = None) -> Trace:
        """Iterations [start, stop) as a new trace (metadata records the cut)."""
        rows = slice(start, stop)

        def cut(a):
            return None if a is None else a[rows]

        meta = dict(self.meta, slice=[int(start), None if stop is None else int(stop)])
        return replace(
            self, runtimes=self.runtimes[rows], censored=self.censored[rows],
            iterations=self.iterations[rows], meta=meta,
            compute_s=cut(self.compute_s), comm_s=cut(self.comm_s),
        )

    def rotated(self, start: int) -> Trace:
        """The iterations from ``start`` to the end, then the first ``start``: a replay of the
        same cluster that starts elsewhere (metadata records where)."""
        start = int(start) % self.n_iterations
        order = np.r_[start:self.n_iterations, 0:start]

        def roll(a):
            return None if a is None else a[order]

        return replace(self, runtimes=self.runtimes[order], censored=self.censored[order],
                       iterations=self.iterations[order], meta=dict(self.meta, rotated=start),
                       compute_s=roll(self.compute_s), comm_s=roll(self.comm_s))

    def split(self, train_fraction: float) -> tuple[Trace, Trace]:
        """The first ``train_fraction`` of iterations (model training) and the rest (replay)."""
        k = int(round(self.n_iterations * train_fraction))
        k = min(max(k, 1), self.n_iterations - 1)
        return self.slice(0, k), self.slice(k)

    def cut_at(self, c: int) -> Trace:
        """What a server waiting for the first ``c`` workers records (late ones abandoning their
        work): each iteration's n - c slowest run-times censored at the cutoff time x_(c), a
        lower bound of each."""
        if not 1 <= c < self.n_workers:
            raise UserError(self.file, "cutoff", f"{c}: wait for at least one of the "
                            f"{self.n_workers} workers and cut at least one")
        rank = self.runtimes.argsort(axis=1, kind="stable").argsort(axis=1, kind="stable")
        tau = np.sort(self.runtimes, axis=1)[:, c - 1:c]
        cut = rank >= c
        return replace(self, runtimes=np.where(cut, tau, self.runtimes),
                       censored=self.censored | cut, meta=dict(self.meta, cut_at=c))

    def to_frame(self) -> pd.DataFrame:
        T, n = self.runtimes.shape
        cols: dict[str, np.ndarray] = {
            "iteration": np.repeat(self.iterations, n),
            "worker": np.tile(self.workers, T),
            "runtime_s": self.runtimes.ravel(),
            "censored": self.censored.ravel(),
        }
        if self.node is not None:
            cols["node"] = np.tile(self.node, T)
        for name in ("compute_s", "comm_s"):
            values = getattr(self, name)
            if values is not None:
                cols[name] = values.ravel()
        return pd.DataFrame(cols)


def _fail(source: str, where: str, message: str) -> UserError:
    return UserError(source, where, message)


def _row(df: pd.DataFrame, position: int) -> str:
    """The row as the user knows it: the frame's index label (the data row of a file as read,
    also after a reader dropped some rows), not its position."""
    return f"row {df.index[position]}"


def from_frame(df: pd.DataFrame, source: str, meta: dict[str, Any] | None = None,
               strict: bool = True) -> Trace:
    """Validate a long table and build a Trace; a bad table raises a one-line UserError naming
    ``source``, the row and the field: its columns, their types, their values, then the
    (iteration, worker) grid, in that order."""
    df = _known_columns(df, source, strict)
    _check_types(df, source)
    _check_values(df, source)
    iterations, it_idx, workers, wk_idx = _grid(df, source, meta)
    T, n = len(iterations), len(workers)

    def dense(values: np.ndarray, dtype) -> np.ndarray:
        out = np.empty((T, n), dtype=dtype)
        out[it_idx, wk_idx] = values
        return out

    node = None
    if "node" in df.columns:
        node_dense = dense(df["node"].to_numpy(dtype=np.int64), np.int64)
        changes = (node_dense != node_dense[0]).any(axis=0)
        if changes.any():
            w = int(workers[np.flatnonzero(changes)[0]])
            raise _fail(source, "node", f"worker {w} changes node during the trace")
        node = node_dense[0]

    censored = (df["censored"].to_numpy().astype(bool) if "censored" in df.columns
                else np.zeros(len(df), dtype=bool))
    meta = dict(meta or {})
    meta.setdefault("time_unit", "s")
    meta["n_workers"] = int(n)
    columns = {col: dense(df[col].to_numpy(dtype=float), np.float64) if col in df.columns else None
               for col in ("compute_s", "comm_s")}
    return Trace(runtimes=dense(df["runtime_s"].to_numpy(dtype=float), np.float64),
                 censored=dense(censored, bool), iterations=iterations.astype(np.int64),
                 workers=workers.astype(np.int64), meta=meta, node=node, file=source, **columns)


def _known_columns(df: pd.DataFrame, source: str, strict: bool) -> pd.DataFrame:
    """The table's rows, the required columns present and (``strict``) no unknown one: its
    known columns, in the schema's order."""
    if len(df) == 0:
        raise _fail(source, "-", "trace is empty (no rows)")
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise _fail(source, missing[0], f"required column missing (have {list(df.columns)})")
    unknown = [c for c in df.columns if c not in REQUIRED + OPTIONAL]
    if unknown and strict:
        allowed = ", ".join(REQUIRED + OPTIONAL)
        raise _fail(source, unknown[0], f"unknown column (allowed: {allowed})")
    return df[[c for c in REQUIRED + OPTIONAL if c in df.columns]]


def _check_types(df: pd.DataFrame, source: str) -> None:
    """censored boolean (or 0/1), every other column a number, the labels whole numbers."""
    for col in df.columns:
        values = df[col]
        if col == "censored":
            ok = pd.api.types.is_bool_dtype(values) or (
                pd.api.types.is_integer_dtype(values) and values.isin([0, 1]).all())
            if not ok:
                raise _fail(source, col, "must be boolean (true/false or 0/1)")
            continue
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            bad = pd.to_numeric(values, errors="coerce").isna() & values.notna()
            row = int(np.flatnonzero(bad.to_numpy())[0]) if bad.any() else 0
            raise _fail(source, f"{_row(df, row)}, {col}", f"not a number: {values.iloc[row]!r}")
        if col in INT_COLUMNS:
            v = values.to_numpy(dtype=float)
            bad = ~np.isfinite(v) | (v != np.round(v))
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise _fail(source, f"{_row(df, row)}, {col}",
                            f"must be a whole number, got {values.iloc[row]}")


def _check_values(df: pd.DataFrame, source: str) -> None:
    """Run-times finite and positive; their compute and communication parts finite, >= 0."""
    x = df["runtime_s"].to_numpy(dtype=float)
    bad = ~np.isfinite(x) | (x <= 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise _fail(source, f"{_row(df, row)}, runtime_s",
                    f"run-time must be finite and > 0, got {float(x[row])!r}")
    for col in ("compute_s", "comm_s"):
        if col in df.columns:
            v = df[col].to_numpy(dtype=float)
            bad = ~np.isfinite(v) | (v < 0)
            if bad.any():
                row = int(np.flatnonzero(bad)[0])
                raise _fail(source, f"{_row(df, row)}, {col}",
                            f"must be finite and >= 0, got {float(v[row])!r}")


def _grid(df: pd.DataFrame, source: str, meta: dict[str, Any] | None):
    """(iterations, each row's iteration index, workers, each row's worker index): each
    (iteration, worker) once, every worker in every iteration; a gap in the iterations a
    warning unless the metadata declares them sampled."""
    it = df["iteration"].to_numpy(dtype=np.int64)
    wk = df["worker"].to_numpy(dtype=np.int64)
    dup = pd.DataFrame({"i": it, "w": wk}).duplicated().to_numpy()
    if dup.any():
        row = int(np.flatnonzero(dup)[0])
        raise _fail(source, f"{_row(df, row)}, iteration/worker",
                    f"duplicate (iteration {it[row]}, worker {wk[row]})")
    iterations, it_idx = np.unique(it, return_inverse=True)
    workers, wk_idx = np.unique(wk, return_inverse=True)
    jumps = np.flatnonzero(np.diff(iterations) > 1)
    if len(jumps) and "sampling" not in (meta or {}):
        t = int(jumps[0])
        logger.warning("%s: iteration %d: missing (the labels jump from %d to %d; the first of %d "
                       "gap(s)): the iterations either side of a gap are read as consecutive",
                       source, iterations[t] + 1, iterations[t], iterations[t + 1], len(jumps))
    counts = np.bincount(it_idx, minlength=len(iterations))
    if (counts < len(workers)).any():
        t = int(np.flatnonzero(counts < len(workers))[0])
        present = set(wk[it_idx == t].tolist())
        absent = [int(w) for w in workers if w not in present]
        raise _fail(source, f"iteration {iterations[t]}",
                    f"missing workers {absent[:5]}{'...' if len(absent) > 5 else ''} "
                    "(give them a row with censored=true if they were cut off)")
    return iterations, it_idx, workers, wk_idx


def from_arrays(runtimes: np.ndarray, meta: dict[str, Any] | None = None,
                censored: np.ndarray | None = None, **optional: np.ndarray | None) -> Trace:
    """A trace from a dense (T, n) array, validated like any other (for simulators and tests)."""
    runtimes = np.asarray(runtimes, dtype=np.float64)
    T, n = runtimes.shape
    trace = Trace(
        runtimes=runtimes,
        censored=np.zeros((T, n), bool) if censored is None else np.asarray(censored, bool),
        iterations=np.arange(T, dtype=np.int64), workers=np.arange(n, dtype=np.int64),
        meta=dict(meta or {}), **optional,
    )
    return from_frame(trace.to_frame(), (meta or {}).get("source", "<array>"), trace.meta)


GOLDEN = (5 ** 0.5 - 1) / 2  # seeds' replay offsets on a recorded trace (replay_start)


def replay_start(trace: Trace, seed: int) -> Trace:
    """The cluster a convergence run or a throughput draw of ``seed`` replays. A simulated
    trace's seeds each have a cluster drawn anew (``bdsgd.layout.cluster_draw``); a recorded
    trace has one cluster, so seed s > 0 starts
    its replay at the fraction frac(s / golden ratio) of it and wraps round (``Trace.rotated``):
    offsets spread evenly over the trace whatever the number of seeds, so that an interval over
    seeds covers the cluster's states as well as the initialisation."""
    if trace.meta.get("source") == "simulate" or seed == 0:
        return trace
    return trace.rotated(round((seed * GOLDEN) % 1 * trace.n_iterations))


def draw_block(trace: Trace, draw: int) -> Trace:
    """The iterations a throughput replay of cluster draw ``draw`` covers: of a recorded trace,
    draw d > 0 is the half of it that starts where ``replay_start`` starts it (a moving block:
    a whole rotation would replay the same iterations, and sync's throughput with them);
    a simulated trace's draws are traces of their own, replayed whole."""
    start = replay_start(trace, draw)
    if start is trace:
        return trace
    return start.slice(0, max(trace.n_iterations // 2, 1))
