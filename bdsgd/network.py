"""Communication time on the virtual cluster, from a network model. Imports nothing of bdsgd.

A gradient is G bytes (as many as the parameters); every link has bandwidth B bytes/s and a
latency of L seconds per message; n workers, of which a synchronous iteration applies the c
fastest. What an iteration spends communicating after its c-th gradient is computed:

    constant   comm(c) = comm_s                            a fixed charge, whatever is moved
    ps         comm(c) = 2 L + (c + n) G / B               one parameter server: its one link
                                                           carries c gradients in, n copies out
    sharded    comm(c) = 2 L + (c + n) G / (k B)           k servers, each moving its 1/k share
    ring       comm(c) = 2 (c - 1) (L + G / (c B))         ring all-reduce over the c accepted
                                                           workers, no server (reduce-scatter
                                                           and all-gather: 2 (c - 1) steps of G / c)

The server's link is the bottleneck of the server topologies: bytes cross it one after the
other, so the c pushes and n pulls add up rather than overlap. A ring spreads the same bytes
over c links and costs about 2 G / B whatever c is, which is what synchronous training without
a server pays (Chen et al.'s setup has a server; the ring is the reference).

Asynchronous and cyclic SGD trade one gradient for one parameter copy per push: the server's
link is busy ``link_s`` = 2 G / (k B) per push (k = 1 unless sharded) and the push takes
``exchange_s`` = link_s + 2 L (under constant: no link time, comm_s per push). Pushes queue on
the link (``bdsgd.schedules``), so a busy server limits them too. A ring has no server to push
to: asynchronous modes refuse it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOPOLOGIES = ("constant", "ps", "sharded", "ring")
SERVERLESS = ("ring",)  # topologies without a server to push to


@dataclass(frozen=True)
class Network:
    """A network model; ``comm``, ``link_s`` and ``exchange_s`` give its times in seconds."""

    topology: str = "constant"
    comm_s: float = 0.0  # constant: the charge per iteration (per push under async and cyclic)
    gradient_bytes: float = 0.0  # G
    bandwidth_bytes_s: float = 1.25e9  # B
    latency_s: float = 0.0  # L
    shards: int = 1  # k, sharded only

    def __post_init__(self):
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {self.topology!r}; choose from {TOPOLOGIES}")

    @property
    def _share_s(self) -> float:
        """Seconds one server link needs for one gradient's (or copy's) share of bytes."""
        k = self.shards if self.topology == "sharded" else 1
        return self.gradient_bytes / (k * self.bandwidth_bytes_s)

    def comm(self, n: int) -> np.ndarray:
        """comm(c) for c = 1..n, seconds: shape (n,)."""
        c = np.arange(1, n + 1, dtype=float)
        if self.topology == "constant":
            return np.full(n, float(self.comm_s))
        if self.topology == "ring":
            return 2 * (c - 1) * (self.latency_s + self.gradient_bytes / (c * self.bandwidth_bytes_s))
        return 2 * self.latency_s + (c + n) * self._share_s

    @property
    def link_s(self) -> float:
        """Seconds one asynchronous push (a gradient in, a copy out) keeps the server's link busy."""
        if self.topology in SERVERLESS:
            raise ValueError(f"topology {self.topology} has no server to push to")
        return 0.0 if self.topology == "constant" else 2 * self._share_s

    @property
    def exchange_s(self) -> float:
        """Seconds one asynchronous push takes from its start to the worker's next start."""
        return self.comm_s if self.topology == "constant" else self.link_s + 2 * self.latency_s
