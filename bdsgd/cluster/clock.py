"""Late workers on the virtual cluster's clock: how long a synchronous iteration lasts and what
the server sees, in the trace's units (``bdsgd.cluster.compute`` turns them into seconds).

**An iteration** starts when the server sends the parameters. Worker w's gradient is done
a_t,w = d_t,w + x_t,w later, where d_t,w is how long it is still busy with earlier work. The
server applies the c earliest (ties by worker), tau_t = a_t,(c), and the iteration ends at
D_t(c), the network's time for the sorted arrivals (``bdsgd.cluster.network``). What becomes of
the workers it did not wait for (``network.late``, as ``distributed.late`` on the real server):

    finish    they complete it (the server drops it as stale) and start the next one late:
              d_t+1,w = max(0, a_t,w - D_t), as in TensorFlow's SyncReplicasOptimizer and as any
              worker in the middle of a backward pass does. The stale gradient reaches the
              server d_t+1,w into the next iteration and crosses its link with that iteration's
              (``bdsgd.cluster.network``). A worker still busy all through
              iteration t (d_t,w >= D_t) never started its gradient: it owes only the old one,
              d_t+1,w = d_t,w - D_t, and then starts on the parameters of the iteration it
              finishes in, one gradient at a time. A late gradient that arrives before the next
              decision (a_t,w <= D_t) shows the server that worker's run-time: the observation
              carries it (``Observation.late``) instead of a censored value.
    abandon   they drop their gradient when the next parameters come: d_t+1,w = 0 (Chen et
              al.'s backup workers where the work can be cancelled, and the throughput the
              hindsight optimum assumes).

The server measures each worker's run-time from its own start (its parameters' send, late for
a worker that was finishing a stale gradient), as the real server does (``bdsgd.distributed``):
the policy learns the run-times a trace records, while the cutoff waits for arrivals. Measured
from the iteration's start instead, a cut worker's late start would read as slowness and have it
cut again, iteration after iteration, on a cluster with no straggler (docs/decisions.md). A cut
worker is censored at tau_t, a bound on its arrival: for one that started late, its own run-time
is only known to exceed tau_t - d_t,w.

**Worker-time.** An iteration of duration D_t offers n D_t worker-seconds. Worker w computes for
min(a_t,w, D_t) of them: its x_t,w is useful if its gradient is applied; the rest of its
computing is wasted (a gradient that is cut, abandoned or finished late, and under ``finish`` the
d_t,w spent on a stale one); it idles for D_t - min(a_t,w, D_t), waiting for the cutoff and the
communication. ``SyncClock.worker_s`` sums (useful, wasted, idle) over the iterations it ran; they
add up to n sum_t D_t.
"""

from __future__ import annotations

import numpy as np

from bdsgd.cluster.cutoff import Observation, observation

LATE = ("abandon", "finish")  # network.late; the data ablation's arms, its reference first


class SyncClock:
    """Synchronous iterations of n workers with a cutoff, in the trace's units."""

    def __init__(self, comm, n: int, late: str = "abandon"):
        """``comm``: the network in the trace's units (``bdsgd.cluster.network.durations``)."""
        if late not in LATE:
            raise ValueError(f"unknown late mode {late!r}; choose from {LATE}")
        self.comm, self.late = comm, late
        self.busy = np.zeros(n)  # d_t,w
        self.worker_s = np.zeros(3)  # worker-seconds (useful, wasted, idle) so far

    def iteration(self, t: int, x: np.ndarray, c: int) -> Observation:
        """Iteration t on run-times x (n,) with cutoff c: what the server sees."""
        arrival = self.busy + x
        # under finish the workers still busy deliver their stale gradient meanwhile
        stale = self.busy[self.busy > 0] if self.late == "finish" else None
        obs = observation(t, arrival, c, self.comm, stale)
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
        seen = np.where(late | obs.accepted, x, np.nan)
        return Observation(obs.t, obs.cutoff, seen, obs.cutoff_time, obs.comm_s, late)


def replay_cutoffs(runtimes: np.ndarray, cutoffs: np.ndarray, comm,
                   late: str = "abandon") -> np.ndarray:
    """Each iteration's duration D_t(c_t) on the virtual clock when iteration t waits for the
    recorded cutoff c_t: run-times (T, n) rows cycled, the network ``comm``, late workers
    ``late``. How a real run's record is replayed (``bdsgd.distributed``,
    benchmarks/clock_fidelity.py)."""
    clock = SyncClock(comm, runtimes.shape[1], late)
    return np.array([clock.iteration(t, runtimes[t % len(runtimes)], int(c)).duration
                     for t, c in enumerate(cutoffs)])
