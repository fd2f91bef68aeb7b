"""Read an offline W&B run back: the records of its ``run-<id>.wandb`` file.

wandb (pinned: 0.31.0 in uv.lock) ships no Python reader for this file: its Go service
(wandb-core) writes it and ``wandb sync`` replays it. The format, checked against files that
version writes:

    file    := header block*
    header  := ident ":W&B" (4 bytes), magic 0xBEE1 (uint16 LE), version 0 (uint8)
    block   := chunk* trailer?        32 KiB each, counted from the start of the file (the
                                      header sits in the first one)
    chunk   := crc (uint32 LE), length (uint16 LE), type (uint8), data[length]
    trailer := the zeros left at a block's end when fewer than 7 bytes (a chunk's head) remain

This is leveldb's log format (github.com/google/leveldb, doc/log_format.md) with one change:
the checksum is plain CRC-32 (IEEE, ``zlib.crc32``) of the type byte followed by the data,
not leveldb's masked CRC32C. A record too long for the rest of its block is split into chunks:
FULL (1) holds a whole record, else FIRST (2), MIDDLE (3)..., LAST (4). Each record's bytes
are one ``wandb.proto.wandb_internal_pb2.Record``: a run, config, history row, summary, metric
definition (define_metric), exit, and so on (its ``record_type`` says which).
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

from wandb.proto import wandb_internal_pb2

HEADER = struct.Struct("<4sHB")
CHUNK = struct.Struct("<IHB")
BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def chunks(data: bytes):
    """(type, payload) of every chunk after the header, checksums checked."""
    ident, magic, version = HEADER.unpack_from(data)
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, magic, version)
    pos = HEADER.size
    while pos + CHUNK.size <= len(data):
        left = BLOCK - pos % BLOCK
        if left < CHUNK.size:  # the block's trailer
            pos += left
            continue
        crc, length, kind = CHUNK.unpack_from(data, pos)
        payload = data[pos + CHUNK.size:pos + CHUNK.size + length]
        assert zlib.crc32(bytes([kind]) + payload) == crc, f"bad checksum at byte {pos}"
        yield kind, payload
        pos += CHUNK.size + length


def records(path: Path) -> list:
    """Every Record of a ``run-<id>.wandb`` file, in the order written."""
    out, parts = [], []
    for kind, payload in chunks(Path(path).read_bytes()):
        parts.append(payload)
        assert (kind in (FULL, FIRST)) == (len(parts) == 1), f"chunk of type {kind} out of order"
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(parts))
            out.append(record)
            parts = []
    return out


def items(entries) -> dict:
    """{key: value} of a config, history or summary record's items (a key is in ``key``, or in
    ``nested_key`` as its path)."""
    return {item.key or "/".join(item.nested_key): json.loads(item.value_json)
            for item in entries}
