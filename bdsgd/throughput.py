"""Trace replay: policies pick cutoffs, the trace says how long each iteration took.

At iteration t the policy picks c_t before seeing anything of it; the iteration lasts
x_t,(c_t) + comm (the c_t-th smallest run-time plus the communication time); the policy then
observes the accepted workers' run-times and, for the rest, only the cutoff time (censored).
Censored values never leave this module: ``observation`` replaces them by NaN.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from bdsgd.errors import UserError
from bdsgd.policies.base import Observation, Policy
from bdsgd.traces.schema import Trace


def observation(t: int, x: np.ndarray, c: int, comm_s: float) -> Observation:
    """What the server sees when it stops after the c fastest of run-times x (ties: by worker)."""
    order = np.argsort(x, kind="stable")
    seen = np.full(x.shape, np.nan)
    seen[order[:c]] = x[order[:c]]
    return Observation(t=t, cutoff=c, runtimes=seen, cutoff_time=float(x[order[c - 1]]),
                       comm_s=comm_s)


@dataclass(frozen=True)
class Replay:
    cutoffs: np.ndarray  # (T,) c_t
    durations: np.ndarray  # (T,) x_t,(c_t) + comm
    decision_ns: np.ndarray  # (T,) wall-clock time of each choose() call

    @property
    def gradients_per_s(self) -> float:
        return float(self.cutoffs.sum() / self.durations.sum())


def require_complete(trace: Trace, source: str) -> None:
    if not trace.complete:
        t, w = np.argwhere(trace.censored)[0]
        raise UserError(source, f"iteration {trace.iterations[t]}, worker {trace.workers[w]}, censored",
                        "replay needs every run-time; this trace has censored values")


def replay(trace: Trace, policy: Policy, comm_s: float = 0.0) -> Replay:
    """Run ``policy`` over the trace, iteration by iteration, with censored feedback."""
    require_complete(trace, trace.meta.get("source", "<trace>"))
    T, n = trace.runtimes.shape
    cutoffs = np.empty(T, dtype=np.int64)
    durations = np.empty(T)
    decision_ns = np.empty(T, dtype=np.int64)
    for t in range(T):
        start = time.perf_counter_ns()
        c = int(policy.choose())
        decision_ns[t] = time.perf_counter_ns() - start
        if not 1 <= c <= n:
            raise ValueError(f"policy {policy.name} chose c={c} outside 1..{n}")
        obs = observation(t, trace.runtimes[t], c, comm_s)
        cutoffs[t], durations[t] = c, obs.duration
        policy.observe(obs)
    return Replay(cutoffs, durations, decision_ns)
