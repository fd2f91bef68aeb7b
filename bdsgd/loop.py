"""The parameter server's loop, once: decide, run the iteration, observe.

Every iteration of every trainer goes through ``Server.step``:

    c_t   = policy.choose()                  the cutoff, before anything of iteration t is seen
    obs_t = run(c_t)                         the iteration: wait for the c_t fastest workers
    policy.observe(obs_t)                    learn from what the server saw (censored view)

``run`` is what differs between trainers: trace replay and the virtual cluster read run-times
from a trace row (``bdsgd.cutoff.observation``); a real parameter server waits for gradients.
The policy's wall-clock work per iteration (``choose`` plus ``observe``: a model-based policy
does its filtering in ``observe``) is measured here and nowhere else, so every trainer charges
and reports the same overhead.

``replay`` runs a policy over a whole trace, and ``catch_up`` brings a freshly built policy to
the state it had after recorded iterations (resume without pickling a policy: every policy is
deterministic given its seed, which ``catch_up`` checks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter_ns

import numpy as np

from bdsgd.cutoff import Observation, observation, throughput
from bdsgd.policies.base import Policy
from bdsgd.traces.io import require_complete
from bdsgd.traces.schema import Trace


@dataclass(frozen=True)
class Step:
    """One iteration as the server saw it."""

    obs: Observation
    policy_ns: int  # wall-clock time of the policy's choose() + observe()

    @property
    def policy_s(self) -> float:
        return self.policy_ns * 1e-9


class Server:
    """A cutoff policy driving iterations of n workers."""

    def __init__(self, policy: Policy, n_workers: int):
        self.policy, self.n = policy, n_workers

    def step(self, run: Callable[[int], Observation]) -> Step:
        """Decide c, run the iteration with cutoff c (``run(c)``), let the policy observe it."""
        start = perf_counter_ns()
        c = int(self.policy.choose())
        chose = perf_counter_ns()
        if not 1 <= c <= self.n:
            raise ValueError(f"policy {self.policy.name} chose c={c} outside 1..{self.n}")
        obs = run(c)
        observing = perf_counter_ns()
        self.policy.observe(obs)
        return Step(obs, chose - start + perf_counter_ns() - observing)

    def step_trace(self, t: int, runtimes: np.ndarray, comm_s: float) -> Step:
        """An iteration whose run-times are known in advance (a trace row): the server sees the
        c fastest and, for the rest, only the cutoff time."""
        return self.step(lambda c: observation(t, runtimes, c, comm_s))


def catch_up(policy: Policy, runtimes: np.ndarray, cutoffs: Sequence[int], comm_s: float,
             after: Callable[[int], None] | None = None) -> None:
    """Replay recorded iterations through a fresh policy (trace rows cycled), checking that it
    chooses the recorded cutoffs again; ``after(t)`` shows it what else iteration t told it
    (the trainer's gradient statistics)."""
    T, n = runtimes.shape
    server = Server(policy, n)
    for t, recorded in enumerate(cutoffs):
        c = server.step_trace(t, runtimes[t % T], comm_s).obs.cutoff
        if c != recorded:
            raise RuntimeError(f"policy {policy.name} chose c={c} at iteration {t + 1} on replay, "
                               f"but {recorded} before: it is not deterministic given its seed")
        if after is not None:
            after(t)


@dataclass(frozen=True)
class Replay:
    cutoffs: np.ndarray  # (T,) c_t
    durations: np.ndarray  # (T,) x_t,(c_t) + comm
    cutoff_times: np.ndarray  # (T,) x_t,(c_t)
    decision_ns: np.ndarray  # (T,) wall-clock time of the policy's work per iteration
    sorted_x: np.ndarray  # (T, n) the replayed run-times, sorted per iteration
    comm_s: float

    @property
    def gradients_per_s(self) -> float:
        return throughput(self.sorted_x, self.cutoffs, self.comm_s)


def replay(trace: Trace, policy: Policy, comm_s: float = 0.0) -> Replay:
    """Run ``policy`` over the trace, iteration by iteration, with censored feedback."""
    require_complete(trace, trace.file)
    T, n = trace.runtimes.shape
    server = Server(policy, n)
    steps = [server.step_trace(t, trace.runtimes[t], comm_s) for t in range(T)]
    return Replay(np.array([s.obs.cutoff for s in steps], dtype=np.int64),
                  np.array([s.obs.duration for s in steps]),
                  np.array([s.obs.cutoff_time for s in steps]),
                  np.array([s.policy_ns for s in steps], dtype=np.int64),
                  np.sort(trace.runtimes, axis=1), comm_s)
