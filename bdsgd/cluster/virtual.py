"""The virtual cluster, built once from the config: its compute (``compute``), its network
(``network``) and what its late workers do (``clock``). The throughput replay, the model's
evaluation, the convergence runs of every mode, the plan and the parameter server's replay all
get theirs here, so one trace on one network is one regime wherever it is replayed.

Its regime is the communication-to-compute ratio, comm(n) / (f m): the network's charge for a
synchronous iteration whose gradients arrive together over the trace's median gradient time, in
seconds. Every result records it (``record``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from bdsgd.cluster.clock import SyncClock
from bdsgd.cluster.compute import SECONDS, Compute, recorded
from bdsgd.cluster.cutoff import fixed_optimum, hindsight_optimum, throughput
from bdsgd.cluster.network import BYTES_PER_GBIT, FABRICS, SERVERLESS, Network, Timing
from bdsgd.cluster.schedules import async_reference
from bdsgd.cluster.server import Policy, Replay, replay_runtimes
from bdsgd.config import Config
from bdsgd.errors import UserError

GBYTE = 1e9


@dataclass(frozen=True)
class VirtualCluster:
    """n workers with a compute model, a network and late workers."""

    network: Network
    compute: Compute
    late: str
    n: int
    time_unit: str = SECONDS  # the trace's

    @property
    def in_seconds(self) -> bool:
        return self.compute.clock == "scaled" or self.time_unit == SECONDS

    @property
    def timing(self) -> Timing:
        """The network in the trace's units: what the clock and the policies are given."""
        return Timing(self.network, self.compute.factor)

    def clock(self) -> SyncClock:
        return SyncClock(self.timing, self.n, self.late)

    def replay(self, runtimes: np.ndarray, policy: Policy) -> Replay:
        """``policy`` over run-times (T, n) on this cluster's clock."""
        return replay_runtimes(runtimes, policy, self.timing, self.late, self.compute.factor)

    def optimum(self, runtimes: np.ndarray) -> tuple[np.ndarray, float]:
        """The hindsight optimum's cutoffs and its rate in gradients per second."""
        cutoffs, rate = hindsight_optimum(np.sort(runtimes, axis=1), self.timing)
        return cutoffs, rate / self.compute.factor

    def sync_rate(self, runtimes: np.ndarray) -> float:
        """Sync's rate (every worker, every iteration) in gradients per second."""
        rate = throughput(np.sort(runtimes, axis=1), np.full(len(runtimes), self.n), self.timing)
        return rate / self.compute.factor

    def fixed_optimum(self, runtimes: np.ndarray) -> tuple[int, float]:
        """The best single cutoff in hindsight and its rate in gradients per second."""
        c, rate = fixed_optimum(np.sort(runtimes, axis=1), self.timing)
        return c, rate / self.compute.factor

    def async_reference(self, runtimes: np.ndarray) -> dict[str, float]:
        """Asynchronous SGD's throughput on this cluster (``schedules.async_reference``), per
        second."""
        f, net = self.compute.factor, self.network
        out = async_reference(runtimes, net.exchange_s / f, net.link_s / f)
        return {**out, "gradients_per_s": out["gradients_per_s"] / f}

    def comm_to_compute(self, runtimes: np.ndarray) -> float:
        """comm(n) over the median gradient time, both in seconds: the cluster's regime."""
        return float(self.network.comm(self.n)[-1] / (self.compute.factor * np.median(runtimes)))

    def record(self, runtimes: np.ndarray, late: bool = True) -> dict:
        """What a result says about its cluster (``late`` False: a mode without a cutoff);
        ``in_seconds``: whether its times are seconds (a trace in seconds, or scaled)."""
        net = self.network
        return {**self.compute.record(), "in_seconds": self.in_seconds,
                "network": dataclasses.asdict(net),
                "late": self.late if late else None,
                "aggregate_s": net.aggregate_s, "update_s": net.update_s,
                "comm_s_at_n": float(net.comm(self.n)[-1]),
                "comm_to_compute": self.comm_to_compute(runtimes)}


def require_server(net: Network, what: str, source: str) -> None:
    """Asynchronous pushes (``what``: the mode or the reference that makes them) need a server:
    a serverless topology is the config's error."""
    if net.topology in SERVERLESS:
        raise UserError(source, "network.topology", f"{net.topology} has no server for {what} to "
                        "push to: choose ps, sharded or constant")


def network(cfg: Config, gradient_bytes: float, comm_s: float | None = None) -> Network:
    """The config's network (network:, and throughput.comm_s for the constant topology, or
    ``comm_s`` in its place) moving gradients of ``gradient_bytes``."""
    net = cfg.network
    gbit, latency = FABRICS[net.fabric] if net.fabric else (net.bandwidth_gbit_s, net.latency_s)
    return Network(net.topology, cfg.throughput.comm_s if comm_s is None else comm_s,
                   float(gradient_bytes), gbit * BYTES_PER_GBIT, latency, net.message_s,
                   net.shards, net.aggregate_gbyte_s * GBYTE, net.update_gbyte_s * GBYTE)


def swept(cfg: Config, topology: str, ratio: float, typical: float, n: int) -> Network:
    """The communication sweep's network: of the config's but ``topology`` and a gradient that a
    single server's link needs ``ratio`` x ``typical`` seconds for n pushes and n copies, G / B =
    ratio typical / (2 n) with no cost per message; the server's own work scaled alike (the sweep
    is about the link)."""
    net = cfg.network
    return Network(topology, 0.0, ratio * typical / (2 * n), 1.0, net.latency_s, 0.0, net.shards,
                   net.aggregate_gbyte_s / net.bandwidth_gbit_s * 8,
                   net.update_gbyte_s / net.bandwidth_gbit_s * 8)


def build(cfg: Config, trace, net: Network, compute: Compute | None = None,
          late: str | None = None, key: str = "network.gradient_s") -> VirtualCluster:
    """The virtual cluster of ``trace`` (a loaded ``bdsgd.traces`` Trace) on ``net``: ``compute``
    None reads the trace as recorded (a trace in another unit than seconds is then the config's
    error at ``key`` where communication is charged); ``late`` None: network.late."""
    late = cfg.network.late if late is None else late
    if net.topology == "ring" and late == "finish":
        raise UserError(cfg.source, "network.late", "finish: a ring all-reduce cannot start before "
                        "a worker in its backward pass joins it, so backup workers on a ring must "
                        "abandon (late: abandon) or the topology have a server")
    unit = str(trace.meta.get("time_unit", SECONDS))
    if compute is None:
        compute = recorded(unit, bool(np.any(net.comm(trace.n_workers) > 0)), (cfg.source, key),
                           trace.file)
    return VirtualCluster(net, compute, late, trace.n_workers, unit)


def for_replay(cfg: Config, trace, comm_s: float | None = None,
               late: str | None = None) -> VirtualCluster:
    """The cluster a replay stage (throughput, model evaluate) runs ``trace`` on: network.task's
    gradient over the config's network, at network.gradient_s per worker batch (scaled) or the
    trace's own seconds."""
    from bdsgd.tasks import task_gradient_bytes  # torch: only where a gradient's size matters

    net = network(cfg, 0 if cfg.network.topology == "constant"
                  else task_gradient_bytes(cfg.network.task), comm_s)
    g = cfg.network.gradient_s
    compute = None if g is None else Compute.scaled(trace.runtimes, g, "config")
    return build(cfg, trace, net, compute, late)
