"""Reading and writing traces as Parquet (metadata under the key ``bdsgd``)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bdsgd.errors import UserError
from bdsgd.io import write_with
from bdsgd.traces.schema import Trace, from_frame

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
    except json.JSONDecodeError:
        raise UserError(str(path), "metadata", "the 'bdsgd' metadata is not valid JSON") from None
    return from_frame(table.to_pandas(), str(path), meta, strict=strict)
