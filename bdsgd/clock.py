"""The virtual cluster's clock: how long a synchronous iteration lasts and what the server sees.

**Compute.** Row t of a run-time trace gives each worker's gradient time x_t,w, in the trace's
units. Under ``train.clock: recorded`` they are seconds (a trace gathered on the run's task and
hardware). Under ``scaled`` each run-time counts relative to the trace's typical one (its median
m) and is multiplied by the task's gradient time g on the run's device: one unit of the trace is
f = g / m seconds (``Compute``). Policies and observations keep the trace's units; the clock
converts communication into them (comm / f) and a duration into seconds (times f).

**An iteration** starts when the server sends the parameters. Worker w's gradient arrives
a_t,w = d_t,w + x_t,w later, where d_t,w is how long it is still busy with earlier work. The
server applies the c earliest (ties by worker), tau_t = a_t,(c), and the iteration lasts
tau_t + comm(c) (``bdsgd.network``). What becomes of the workers it did not wait for
(``network.late``, as ``distributed.late`` on the real server):

    abandon   they drop their gradient when the next parameters come: d_t+1,w = 0 (Chen et
              al.'s backup workers, and the throughput the hindsight optimum assumes);
    finish    they complete it (the server drops it as stale) and start the next one late:
              d_t+1,w = max(0, a_t,w - tau_t - comm(c)), as in TensorFlow's
              SyncReplicasOptimizer. A worker still busy all through iteration t
              (d_t,w >= tau_t + comm(c)) never started its gradient: it owes only the old one,
              d_t+1,w = d_t,w - tau_t - comm(c), and then starts on the parameters of the
              iteration it finishes in, one gradient at a time. A late gradient that arrives
              before the next decision (a_t,w <= tau_t + comm(c)) shows the server that
              worker's run-time: the observation carries it (``Observation.late``) instead of a
              censored value.

Under ``finish`` the server measures a worker's run-time from the iteration's start, so a late
start counts in it: the policy forecasts arrivals, which are what the cutoff waits for.

**Worker-time.** An iteration of duration D = tau_t + comm(c_t) offers n D worker-seconds.
Worker w computes for min(a_t,w, D) of them: its x_t,w is useful if its gradient is applied;
the rest of its computing is wasted (a gradient that is cut, abandoned or finished late, and
under ``finish`` the d_t,w spent on a stale one); it idles for D - min(a_t,w, D), waiting for
the cutoff and the communication. ``SyncClock.worker_s`` sums (useful, wasted, idle) over the
iterations it ran; they add up to n sum_t D_t.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from bdsgd.config import Config
from bdsgd.cutoff import Observation, observation
from bdsgd.errors import UserError
from bdsgd.network import SERVERLESS, Network

LATE = ("abandon", "finish")
CLOCKS = ("recorded", "scaled")
BYTES_PER_GBIT = 1.25e8


def network(cfg: Config, gradient_bytes: float) -> Network:
    """The config's network model (network: and, for the constant topology, throughput.comm_s)
    moving gradients of ``gradient_bytes``."""
    net = cfg.network
    return Network(net.topology, cfg.throughput.comm_s, float(gradient_bytes),
                   net.bandwidth_gbit_s * BYTES_PER_GBIT, net.latency_s, net.shards)


def require_server(cfg: Config, what: str) -> None:
    """Asynchronous pushes (``what``: the mode or the reference that makes them) need a server:
    a serverless topology is the config's error."""
    if cfg.network.topology in SERVERLESS:
        raise UserError(cfg.source, "network.topology", f"{cfg.network.topology} has no server "
                        f"for {what} to push to: choose ps, sharded or constant")


def replay_network(cfg: Config, comm_s: float | None = None) -> Network:
    """The network of the replay stages (throughput, model evaluate), which have no task of
    their own: network.task's gradient; ``comm_s`` (the --comm-s flag) in place of
    throughput.comm_s."""
    from bdsgd.tasks import task_gradient_bytes  # torch: only where a gradient's size matters

    constant = cfg.network.topology == "constant"
    net = network(cfg, 0 if constant else task_gradient_bytes(cfg.network.task))
    return net if comm_s is None else dataclasses.replace(net, comm_s=comm_s)


@dataclass(frozen=True)
class Compute:
    """How the trace's run-times become seconds: one unit is ``factor`` seconds."""

    clock: str = "recorded"
    factor: float = 1.0
    gradient_s: float | None = None  # g, under "scaled"
    source: str | None = None  # how g was obtained: "config" or "measured"
    typical: float | None = None  # m, the trace's median run-time

    @classmethod
    def scaled(cls, runtimes: np.ndarray, gradient_s: float, source: str) -> Compute:
        typical = float(np.median(runtimes))
        return cls("scaled", gradient_s / typical, gradient_s, source, typical)

    def record(self) -> dict:
        """What a result says about its clock."""
        return {"clock": self.clock, "seconds_per_trace_unit": self.factor,
                "gradient_s": self.gradient_s, "gradient_s_from": self.source,
                "trace_typical_runtime": self.typical}


class SyncClock:
    """Synchronous iterations of n workers with a cutoff, in the trace's units."""

    def __init__(self, comm: np.ndarray, late: str = "abandon"):
        if late not in LATE:
            raise ValueError(f"unknown late mode {late!r}; choose from {LATE}")
        self.comm, self.late = np.asarray(comm, dtype=float), late
        self.busy = np.zeros(len(self.comm))  # d_t,w
        self.worker_s = np.zeros(3)  # worker-seconds (useful, wasted, idle) so far

    def iteration(self, t: int, x: np.ndarray, c: int) -> Observation:
        """Iteration t on run-times x (n,) with cutoff c: what the server sees."""
        arrival = self.busy + x
        obs = observation(t, arrival, c, float(self.comm[c - 1]))
        computing = np.minimum(arrival, obs.duration)
        useful = float(x[obs.observed].sum())  # the accepted workers' own run-times
        self.worker_s += (useful, computing.sum() - useful, (obs.duration - computing).sum())
        if self.late == "abandon":
            return obs
        # a worker busy with a stale gradient all through the iteration never started this one's
        started = self.busy < obs.duration
        self.busy = np.where(started, np.maximum(arrival - obs.duration, 0.0),
                             self.busy - obs.duration)
        late = ~obs.accepted & (arrival <= obs.duration)
        seen = np.where(late, arrival, obs.runtimes)
        return Observation(obs.t, obs.cutoff, seen, obs.cutoff_time, obs.comm_s, late)


def replay_cutoffs(runtimes: np.ndarray, cutoffs: np.ndarray, comm: np.ndarray,
                   late: str = "abandon") -> np.ndarray:
    """Each iteration's duration tau_t + comm(c_t) on the virtual clock when iteration t waits
    for the recorded cutoff c_t: run-times (T, n) rows cycled, comm(c) for c = 1..n, late workers
    ``late``. How a real run's record is replayed (``bdsgd.figures.distributed``,
    benchmarks/clock_fidelity.py)."""
    clock = SyncClock(comm, late)
    return np.array([clock.iteration(t, runtimes[t % len(runtimes)], int(c)).duration
                     for t, c in enumerate(cutoffs)])
