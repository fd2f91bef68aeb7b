"""Communication on the virtual cluster: when an iteration ends, given when its gradients are done.

A gradient is G bytes (four per parameter); every link has bandwidth B bytes/s each way (full
duplex: pushes in and copies out do not share it) and a latency of L seconds per message; each
message also holds the sender's or receiver's side of the link o seconds (its software cost: the
send and receive calls, the copy into a buffer), so one crossing keeps a link busy o + G / B; the
server sums a gradient at A bytes/s and takes its SGD step at U bytes/s of parameters; n workers.
A synchronous iteration starts when the parameters leave the server; worker w's gradient is done
a_w later. With the arrivals sorted, a_(1) <= ... <= a_(n), an iteration that applies the c first
ends at D(c):

    constant   D(c) = a_(c) + comm_s                        a fixed charge, whatever is moved
    ps         each gradient crosses the server's inbound link as soon as it is done (s_in = o + G/B
               each, in turn) and is summed on arrival (h = G/A each, in turn): a two-stage line
               whose c-th departure is max_{j<=c} (a_(j) + s_in + L + h + (c - j) max(s_in, h));
               then the step (u = G/U) and the new parameters out to all n over the outbound link
               (L + n s_in, the last copy's arrival):
               D(c) = max_{j<=c} (a_(j) + (c - j) s) + s_in + L + h + u + L + n s_in
    sharded    the same with k servers, each moving and summing its 1/k share (G -> G/k)
    ring       backup workers on a ring all-reduce: the ring spans all n workers (it is formed
               before anyone knows who will be late), the n - c cut ones abandon their gradient
               and contribute zeros, every worker receives the sum:
               D(c) = a_(c) + 2 (n - 1) (L + o + G / (n B)) + u

Under ``late: finish`` a cut worker's stale gradient still reaches the server and crosses its
link (it is dropped after): one iteration's D(c) then merges those arrivals into the line, as
``Network.durations(..., stale)`` does, so a cut that leaves many late workers saves less of the
link than it appears to.

Early gradients cross the link while later workers still compute, so where compute is spread out
a cut saves little communication, and where the arrivals bunch up it saves c gradients' worth of
the link: the saving follows the arrivals, as on a real server. A ring cannot run backup workers
that finish their gradient (a worker in its backward pass cannot join the collective), so the
cluster refuses ring with ``late: finish``.

``Timing`` is the network in a trace's units (``bdsgd.cluster.compute``): what the clock, the
hindsight optima and the predictive policies call to turn sorted arrivals into D(c).

Asynchronous and cyclic SGD trade one gradient for one parameter copy per push: the server is
busy ``link_s`` = max(s_in, h + u) per push (its link and its update work as a pipeline) and the
push takes ``exchange_s`` = 2 s_in + 2 L + h + u from the gradient's end to its worker's next
start (under constant: comm_s per push, nothing busy). Pushes queue on the server
(``bdsgd.cluster.schedules``). A ring has no server to push to: asynchronous modes refuse it.

``FABRICS`` names the interconnects clusters have; docs/decisions.md gives each figure's source.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

TOPOLOGIES = ("constant", "ps", "sharded", "ring")
SERVERLESS = ("ring",)  # topologies without a server to push to
BYTES_PER_GBIT = 1.25e8
# fabric -> (bandwidth Gbit/s per link and direction, latency s per message)
FABRICS = {
    "10gbe": (10.0, 5.0e-5),       # 10 Gigabit Ethernet, TCP through the kernel
    "25gbe": (25.0, 2.5e-5),       # 25 Gigabit Ethernet, TCP
    "100g-roce": (100.0, 5.0e-6),  # 100 Gbit/s RoCE v2 (NCCL's IB verbs over Ethernet)
    "200g-ib": (200.0, 3.0e-6),    # InfiniBand HDR
    "400g-ib": (400.0, 3.0e-6),    # InfiniBand NDR, a DGX H100's per-GPU NIC
}


@dataclass(frozen=True)
class Network:
    """A network model; every time it gives is in seconds."""

    topology: str = "constant"
    comm_s: float = 0.0  # constant: the charge per iteration (per push under async and cyclic)
    gradient_bytes: float = 0.0  # G
    bandwidth_bytes_s: float = 1.25e9  # B, each way
    latency_s: float = 0.0  # L
    message_s: float = 0.0  # o: seconds each message holds a link beyond its bytes
    shards: int = 1  # k, sharded only
    aggregate_bytes_s: float = np.inf  # A: gradient bytes the server sums per second
    update_bytes_s: float = np.inf  # U: parameter bytes the server's SGD step updates per second

    def __post_init__(self):
        if self.topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {self.topology!r}; choose from {TOPOLOGIES}")

    @property
    def _share(self) -> float:
        """The bytes one server moves and sums for one gradient (or copy)."""
        return self.gradient_bytes / (self.shards if self.topology == "sharded" else 1)

    @property
    def push_s(self) -> float:
        """s_in: seconds one gradient's share keeps a server's link busy (one way)."""
        return self.message_s + self._share / self.bandwidth_bytes_s

    @property
    def aggregate_s(self) -> float:
        """h: seconds a server takes to add one gradient's share to the sum."""
        return self._share / self.aggregate_bytes_s

    @property
    def update_s(self) -> float:
        """u: seconds of the SGD step on the summed gradient (a server's share, or a ring
        worker's whole model)."""
        return self._share / self.update_bytes_s

    def durations(self, sorted_arrivals: np.ndarray, stale: np.ndarray | None = None) -> np.ndarray:
        """D(c) for c = 1..n, seconds from the iteration's start, for arrivals sorted along the
        last axis (any leading shape). ``stale``: when late workers' stale gradients reach a
        server during the iteration (one iteration's arrivals, ``late: finish``)."""
        a = np.asarray(sorted_arrivals, dtype=float)
        n = a.shape[-1]
        if self.topology == "constant":
            return a + self.comm_s
        if stale is not None and len(stale) and self.topology != "ring":
            return self._with_stale(a, np.asarray(stale, dtype=float))
        if self.topology == "ring":
            step = self.latency_s + self.message_s + self.gradient_bytes / (n * self.bandwidth_bytes_s)
            return a + 2 * (n - 1) * step + self.update_s
        s_in, h = self.push_s, self.aggregate_s
        s = max(s_in, h)
        j = np.arange(n) * s
        # max_{j<=c} (a_(j) + (c - j) s) = c s + running max of (a_(j) - j s)
        line = np.maximum.accumulate(a - j, axis=-1) + j
        return line + s_in + h + self.update_s + 2 * self.latency_s + n * s_in

    def _with_stale(self, a: np.ndarray, stale: np.ndarray) -> np.ndarray:
        """D(c) of one iteration whose server also receives stale gradients: each crosses the
        link in arrival order with the others (s_in), and is neither summed nor counted. The two
        stages as a tandem line: the k-th crossing ends at max_{j<=k} (m_(j) + (k - j + 1) s_in)
        over the merged arrivals m; the i-th counted sum at max_{j<=i} (l_j + (i - j + 1) h) over
        the counted crossings' ends l."""
        s_in, h, n = self.push_s, self.aggregate_s, len(a)
        merged = np.concatenate([a, stale])
        order = np.argsort(merged, kind="stable")  # ties: a counted gradient first
        k = np.arange(len(merged)) * s_in
        crossed = (np.maximum.accumulate(merged[order] - k) + k + s_in)[order < n]
        i = np.arange(n) * h
        summed = np.maximum.accumulate(crossed - i) + i + h
        return summed + self.update_s + 2 * self.latency_s + n * s_in

    def comm(self, n: int) -> np.ndarray:
        """D(c) - a_(c) for c = 1..n when all n gradients are done at once: what the network adds
        to an iteration whose arrivals bunch up, seconds, shape (n,)."""
        return self.durations(np.zeros(n))

    @property
    def link_s(self) -> float:
        """Seconds one asynchronous push keeps the server busy (its link and its update)."""
        if self.topology in SERVERLESS:
            raise ValueError(f"topology {self.topology} has no server to push to")
        return 0.0 if self.topology == "constant" else max(self.push_s,
                                                           self.aggregate_s + self.update_s)

    @property
    def exchange_s(self) -> float:
        """Seconds one asynchronous push takes from its gradient's end to the worker's next start."""
        if self.topology == "constant":
            return self.comm_s
        return 2 * self.push_s + 2 * self.latency_s + self.aggregate_s + self.update_s


@dataclass(frozen=True)
class Timing:
    """The network in a trace's units: ``factor`` seconds per unit (``bdsgd.cluster.compute``)."""

    network: Network
    factor: float = 1.0

    def durations(self, sorted_arrivals: np.ndarray, stale: np.ndarray | None = None) -> np.ndarray:
        """D(c) for c = 1..n in the trace's units, for arrivals (and stale ones) in the trace's
        units."""
        f = self.factor
        return self.network.durations(np.asarray(sorted_arrivals, dtype=float) * f,
                                      None if stale is None else np.asarray(stale) * f) / f

    def comm(self, n: int) -> np.ndarray:
        """``Network.comm`` in the trace's units."""
        return self.network.comm(n) / self.factor


def durations(comm, sorted_x: np.ndarray) -> np.ndarray:
    """D(c) for sorted run-times ``sorted_x`` (..., n): ``comm`` a ``Timing`` (or ``Network``),
    or a charge per iteration (a number, or comm(c) for c = 1..n) added to x_(c)."""
    if hasattr(comm, "durations"):
        return comm.durations(sorted_x)
    return np.asarray(sorted_x, dtype=float) + np.asarray(comm, dtype=float)
