"""Cutoff arithmetic: what a server sees when it stops after c workers, the throughput of a
sequence of cutoffs, and the hindsight optima (what a policy that knew every run-time in advance
would do). Traces, policies and the clock share these.

An iteration with cutoff c_t ends at D_t(c_t), the network's time for its sorted run-times
(``bdsgd.cluster.network``): ``comm`` is a ``Timing`` (or ``Network``), or a plain charge per
iteration (a number, or comm(c) for c = 1..n) added to x_t,(c). The server sees the accepted
workers' run-times and, for the rest, only that they ran longer than tau_t = x_t,(c_t)
(censored): ``observation`` builds that view, and no policy ever receives a censored value.

Throughput of a cutoff sequence (c_t) on run-times x: R(c) = sum_t c_t / sum_t D_t(c_t).

``hindsight_optimum`` maximises R exactly. A ratio of sums is not maximised term by term, so it
uses Dinkelbach's method: for a rate lambda pick, per iteration, c_t = argmax_c c - lambda D_t(c),
set lambda to the throughput of that sequence, and repeat. Each step increases lambda and the
sequence of choices is finite, so it stops at the exact optimum (in a handful of steps). It is
exact where iterations do not depend on each other, as when late workers abandon their work;
where they finish it (``bdsgd.cluster.clock``) a cut worker starts late, its arrivals can only
come later and D(c) only grow, so the optimum of independent iterations is an upper bound that
the replayed plan itself may fall short of.

``fixed_optimum`` is the best single cutoff in hindsight, argmax_c sum_t c / sum_t D_t(c): what a
fixed cutoff (Chen et al.'s backup workers) achieves at best on these run-times.

``myopic_optimum`` is the per-iteration argmax of c / D_t(c) with perfect foresight: what the
paper's ratio rule would do with a perfect model. It is a reference, not an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from bdsgd.cluster.network import durations


@dataclass(frozen=True)
class Observation:
    """What the parameter server learnt at iteration t."""

    t: int
    cutoff: int  # c_t, the number of gradients accepted
    runtimes: np.ndarray  # (n,) run-time of each accepted worker; NaN for the censored ones
    cutoff_time: float  # tau_t: censored workers ran longer than this
    comm_s: float = 0.0  # communication time charged to the iteration: comm(c_t)
    # (n,) the workers cut whose gradient still arrived before the next decision (late workers
    # that finish, ``bdsgd.cluster.clock``): their run-times are in ``runtimes``, their gradients unused
    late: np.ndarray | None = None

    # Each view below is computed once and shared, read-only, by every reader of the observation
    # (a policy's predictors each read it in the decision).
    @cached_property
    def observed(self) -> np.ndarray:
        """The workers whose run-time the server knows (the rest are censored at tau_t)."""
        return _frozen(~np.isnan(self.runtimes))

    @cached_property
    def seen(self) -> np.ndarray:
        """The known run-times, ascending."""
        return _frozen(np.sort(self.runtimes[self.observed]))

    @property
    def accepted(self) -> np.ndarray:
        """The c_t workers whose gradients the iteration applies."""
        return self.observed if self.late is None else self.observed & ~self.late

    @property
    def duration(self) -> float:
        return self.cutoff_time + self.comm_s


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def observation(t: int, x: np.ndarray, c: int, comm=0.0, stale: np.ndarray | None = None) -> Observation:
    """What the server sees when it stops after the c fastest of run-times x (ties: by worker);
    ``comm`` as in ``durations``: the iteration ends at D(c) (``stale``: the late workers' stale
    gradients' arrivals, which a network's server also receives)."""
    order = np.argsort(x, kind="stable")
    seen = np.full(x.shape, np.nan)
    seen[order[:c]] = x[order[:c]]
    tau = float(x[order[c - 1]])
    if hasattr(comm, "durations"):
        comm_s = float(comm.durations(x[order], stale)[c - 1]) - tau
    else:
        comm = np.asarray(comm, dtype=float)
        comm_s = float(comm if comm.ndim == 0 else comm[c - 1])
    return Observation(t=t, cutoff=c, runtimes=seen, cutoff_time=tau, comm_s=comm_s)


def throughput(sorted_x: np.ndarray, cutoffs: np.ndarray, comm=0.0) -> float:
    """Accepted gradients per unit of time: sum c_t / sum D_t(c_t)."""
    cutoffs = np.asarray(cutoffs)
    ends = np.take_along_axis(durations(comm, sorted_x), cutoffs[:, None] - 1, axis=1)[:, 0]
    return float(cutoffs.sum() / ends.sum())


def hindsight_optimum(sorted_x: np.ndarray, comm=0.0, max_steps: int = 100) -> tuple[np.ndarray, float]:
    """Exact max over cutoff sequences of sum c / sum D(c) (Dinkelbach). Returns (c_t, rate)."""
    c = np.arange(1, sorted_x.shape[1] + 1)
    cost = durations(comm, sorted_x)
    cutoffs = np.full(sorted_x.shape[0], sorted_x.shape[1])  # start from sync
    rate = throughput(cost, cutoffs)
    for _ in range(max_steps):
        new = np.argmax(c - rate * cost, axis=1) + 1
        new_rate = throughput(cost, new)
        if new_rate <= rate * (1 + 1e-15):
            break
        cutoffs, rate = new, new_rate
    return cutoffs, rate


def fixed_optimum(sorted_x: np.ndarray, comm=0.0) -> tuple[int, float]:
    """The one cutoff c maximising sum_t c / sum_t D_t(c) over every iteration, and its rate:
    (c, rate)."""
    n = sorted_x.shape[1]
    rates = np.arange(1, n + 1) / durations(comm, sorted_x).mean(axis=0)
    best = int(np.argmax(rates))
    return best + 1, float(rates[best])


def myopic_optimum(sorted_x: np.ndarray, comm=0.0) -> np.ndarray:
    """Per-iteration argmax of c / D(c), knowing the run-times."""
    c = np.arange(1, sorted_x.shape[1] + 1)
    return np.argmax(c / durations(comm, sorted_x), axis=1) + 1
