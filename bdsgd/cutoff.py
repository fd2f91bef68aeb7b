"""Cutoff arithmetic: what a server sees when it stops after c workers, the throughput of a
sequence of cutoffs, and the hindsight optima (what a policy that knew every run-time in advance
would do). Traces, policies and every trainer share these; this module imports nothing of bdsgd.

An iteration with cutoff c_t lasts x_t,(c_t) + comm (the c_t-th smallest run-time plus the
communication time). The server sees the accepted workers' run-times and, for the rest, only
that they ran longer than tau_t = x_t,(c_t) (censored): ``observation`` builds that view, and
no policy ever receives a censored value.

Throughput of a cutoff sequence (c_t) on run-times x: R(c) = sum_t c_t / sum_t (x_t,(c_t) + comm).

``hindsight_optimum`` maximises R exactly. A ratio of sums is not maximised term by term, so it
uses Dinkelbach's method: for a rate lambda pick, per iteration, c_t = argmax_c c - lambda (x_t,(c)
+ comm), set lambda to the throughput of that sequence, and repeat. Each step increases lambda
and the sequence of choices is finite, so it stops at the exact optimum (in a handful of steps).

``myopic_optimum`` is the per-iteration argmax of c / (x_t,(c) + comm) with perfect foresight:
what the paper's ratio rule would do with a perfect model. It is a reference, not an upper bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Observation:
    """What the parameter server learnt at iteration t."""

    t: int
    cutoff: int  # c_t, the number of gradients accepted
    runtimes: np.ndarray  # (n,) run-time of each accepted worker; NaN for the censored ones
    cutoff_time: float  # tau_t: censored workers ran longer than this
    comm_s: float = 0.0  # communication time charged to the iteration

    @property
    def accepted(self) -> np.ndarray:
        return ~np.isnan(self.runtimes)

    @property
    def duration(self) -> float:
        return self.cutoff_time + self.comm_s


def observation(t: int, x: np.ndarray, c: int, comm_s: float) -> Observation:
    """What the server sees when it stops after the c fastest of run-times x (ties: by worker)."""
    order = np.argsort(x, kind="stable")
    seen = np.full(x.shape, np.nan)
    seen[order[:c]] = x[order[:c]]
    return Observation(t=t, cutoff=c, runtimes=seen, cutoff_time=float(x[order[c - 1]]),
                       comm_s=comm_s)


def throughput(sorted_x: np.ndarray, cutoffs: np.ndarray, comm_s: float = 0.0) -> float:
    """Accepted gradients per second: sum c_t / sum (x_t,(c_t) + comm)."""
    cutoffs = np.asarray(cutoffs)
    durations = np.take_along_axis(sorted_x, cutoffs[:, None] - 1, axis=1)[:, 0] + comm_s
    return float(cutoffs.sum() / durations.sum())


def hindsight_optimum(sorted_x: np.ndarray, comm_s: float = 0.0,
                      max_steps: int = 100) -> tuple[np.ndarray, float]:
    """Exact max over cutoff sequences of sum c / sum x_(c) (Dinkelbach). Returns (c_t, rate)."""
    c = np.arange(1, sorted_x.shape[1] + 1)
    cost = sorted_x + comm_s
    cutoffs = np.full(sorted_x.shape[0], sorted_x.shape[1])  # start from sync
    rate = throughput(sorted_x, cutoffs, comm_s)
    for _ in range(max_steps):
        new = np.argmax(c - rate * cost, axis=1) + 1
        new_rate = throughput(sorted_x, new, comm_s)
        if new_rate <= rate * (1 + 1e-15):
            break
        cutoffs, rate = new, new_rate
    return cutoffs, rate


def myopic_optimum(sorted_x: np.ndarray, comm_s: float = 0.0) -> np.ndarray:
    """Per-iteration argmax of c / (x_(c) + comm), knowing the run-times."""
    c = np.arange(1, sorted_x.shape[1] + 1)
    return np.argmax(c / (sorted_x + comm_s), axis=1) + 1
