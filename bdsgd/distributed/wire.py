"""What the server and the workers share: the job's settings, the message layout, heartbeats.

A message is one flat float32 tensor, so that one send carries it whole:

    server -> worker   [kind, t, theta ..., padding]              kind PARAMS or STOP
    worker -> server   [t, compute_s, loss, gradient ..., padding]

The padding (``Job.extra_parameters`` zeros, none by default) makes every message as long as a
bigger model's, so a small network's job moves a big one's bytes (as ``delay_s`` stands in for
its compute), and the server sums it with each gradient as it would a bigger one's: the virtual
clock's network model is fitted on such jobs.

t is exact in float32 up to 2^24 iterations. Heartbeats go through a TCPStore on the port after
the process group's: each worker adds 1 to ``hb/<rank>`` every ``HEARTBEAT_EVERY`` seconds.
"""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import timedelta

import torch
import torch.distributed as dist

PARAMS, STOP = 0.0, 1.0
HEADER = 3  # t, compute_s, loss
HEARTBEAT_EVERY = 0.2  # seconds between a worker's heartbeats


@dataclasses.dataclass(frozen=True)
class Job:
    """Everything a process of the job needs to know (passed to each as JSON)."""

    workers: int
    policy: str
    iterations: int
    task: str = "digits"
    config: str | None = None  # experiment config: train: and policies: sections
    model: str | None = None  # run-time model checkpoint (bdsgd)
    paper_model: str | None = None  # the paper's (bdsgd-paper)
    json: str = "distributed.json"
    late: str = "abandon"  # abandon | finish
    straggler: tuple[int, float] | None = None  # (worker, factor): its work takes factor x
    kill: tuple[int, int] | None = None  # (worker, iteration): it SIGKILLs itself there
    delay_s: float = 0.0  # added to every gradient (a stand-in for a bigger model)
    extra_parameters: int = 0  # zeros sent with every message (a bigger model's bytes)
    delay_trace: str | None = None  # run-times replayed inside the workers (trace row t mod T)
    heartbeat_s: float = 5.0  # a worker silent this long is dead
    seed: int = 0

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Job:
        raw = json.loads(text)
        for key in ("straggler", "kill"):
            if raw[key] is not None:
                raw[key] = tuple(raw[key])
        return cls(**raw)


def store(host: str, port: int, world: int, is_server: bool) -> dist.TCPStore:
    """The heartbeat store, served by rank 0 on ``port`` + 1."""
    return dist.TCPStore(host, port + 1, world, is_server, timeout=timedelta(seconds=60),
                         wait_for_workers=False)


class Heartbeats:
    """The server's view of the workers' heartbeats: who has been silent for too long."""

    def __init__(self, kv: dist.TCPStore, ranks: list[int], timeout_s: float):
        self.kv, self.timeout = kv, timeout_s
        now = time.monotonic()
        self.seen = {r: (-1, now) for r in ranks}  # rank -> (last count, when it changed)

    def silent(self, ranks) -> list[int]:
        """The ranks among ``ranks`` whose counter has not moved for the timeout."""
        now, out = time.monotonic(), []
        for r in ranks:
            count = self.kv.add(f"hb/{r}", 0)
            last, since = self.seen[r]
            if count != last:
                self.seen[r] = (count, now)
            elif now - since > self.timeout:
                out.append(r)
        return out


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.reshape(-1) for t in tensors])
