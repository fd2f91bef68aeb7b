"""Reading and writing traces as Parquet (metadata under the key ``bdsgd``), and the checks of a
trace that a run reads: workers enough for a cutoff (``require_cutoff``: every stage that
chooses cutoffs or learns them calls it where it reads its trace, i.e. throughput, train, model
train, distributed's delay trace; describe, plot, split and import take a trace of one worker,
and so does an in-memory replay), complete (``require_complete``), or a history of the same
workers; and a trace cut in time into a training and a test part (``write_split``), its
simulator truth following both parts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bdsgd.errors import UserError
from bdsgd.outputs.io import write_with
from bdsgd.traces.schema import Trace, from_frame
from bdsgd.traces.simulate import Truth
from bdsgd.traces.truth import truth_path, write_truth

META_KEY = b"bdsgd"


def write_trace(trace: Trace, path: str | Path) -> Path:
    table = pa.Table.from_pandas(trace.to_frame(), preserve_index=False)
    meta = json.dumps(trace.meta, sort_keys=True, default=str).encode()
    table = table.replace_schema_metadata({META_KEY: meta})
    return write_with(path, lambda tmp: pq.write_table(table, tmp))


def read_trace(path: str | Path, strict: bool = True) -> Trace:
    """Load and validate a trace; any problem is a one-line UserError naming file and field."""
    path = Path(path)
    if not path.exists():
        raise UserError(str(path), "-", "trace file not found")
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        reason = str(exc).splitlines()[0]
        raise UserError(str(path), "-", f"not a Parquet trace ({reason})") from None
    raw = (table.schema.metadata or {}).get(META_KEY)
    try:
        meta = json.loads(raw) if raw else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(str(path), "metadata", "the 'bdsgd' metadata is not valid JSON") from None
    if not isinstance(meta, dict):
        raise UserError(str(path), "metadata", "the 'bdsgd' metadata is not a JSON object")
    return from_frame(table.to_pandas(), str(path), meta, strict=strict)


def require_cutoff(trace: Trace, source: str | None = None) -> None:
    """A cutoff (wait for the first c of n workers) needs n >= 2 to choose among: a trace of one
    worker is a user error naming ``source`` (default: the file the trace was read from)."""
    if trace.n_workers < 2:
        raise UserError(source or trace.file, "workers", f"{trace.n_workers} worker: a cutoff "
                        "needs at least 2 workers to choose among; give a trace of 2 or more")


def require_complete(trace: Trace, source: str) -> None:
    """Replay needs every run-time: a censored trace is a user error naming its first gap."""
    if not trace.complete:
        t, w = np.argwhere(trace.censored)[0]
        raise UserError(source, f"iteration {trace.iterations[t]}, worker {trace.workers[w]}, "
                        "censored", "replay needs every run-time; this trace has censored values")


def read_history(history_path, trace: Trace, trace_path: str) -> Trace | None:
    """The warm-up history for a run over ``trace``: complete, and of the same workers."""
    if history_path is None:
        return None
    history = read_trace(history_path)
    require_cutoff(history, str(history_path))
    require_complete(history, str(history_path))
    if history.n_workers != trace.n_workers:
        raise UserError(str(history_path), "workers", f"{history.n_workers} workers; the "
                        f"replayed trace {trace_path} has {trace.n_workers}")
    return history


def write_split(trace: Trace, fraction: float, train_out, test_out, truth: Truth | None = None,
                source: str = "<trace>") -> tuple[Trace, Trace]:
    """Cut ``trace`` in time at ``fraction`` of its iterations and write the two parts. A
    simulated trace's latent state (``truth``) goes whole beside both parts: the bayes reference
    reads it, and each part's metadata records its offset into it."""
    if not 0 < fraction < 1:
        raise UserError(source, "train_fraction", f"{fraction} is not strictly between 0 and 1")
    if Path(train_out).resolve() == Path(test_out).resolve():
        raise UserError(str(train_out), "--train/--test", "the same file for both parts")
    if trace.n_iterations < 2:
        raise UserError(source, "iteration",
                        "a trace needs at least 2 iterations to split")
    train, test = trace.split(fraction)
    for part, out in ((train, train_out), (test, test_out)):
        if truth is not None:
            write_truth(truth, truth_path(out))
        write_trace(part, out)
    return train, test
