"""The parameter server's loop, once: decide, run the iteration, observe.

Every iteration of every trainer goes through ``Server.step``:

    c_t   = policy.choose()                  the cutoff, before anything of iteration t is seen
    obs_t = run(c_t)                         the iteration: wait for the c_t fastest workers
    policy.observe(obs_t)                    learn from what the server saw (censored view)

``run`` is what differs between trainers: trace replay and the virtual cluster read run-times
from a trace row through the virtual clock (``bdsgd.cluster.clock.SyncClock``: communication and late
workers); a real parameter server waits for gradients.
The policy's wall-clock work per iteration (``choose`` plus ``observe``: a model-based policy
does its filtering in ``observe``) is measured here and nowhere else, so every trainer charges
and reports the same overhead.

``replay`` runs a policy over a whole trace (``replay_runtimes`` over a real run's record), and
``catch_up`` brings a freshly built policy to the state it had after recorded iterations (resume
without pickling a policy: every policy is deterministic given its seed, which ``catch_up``
checks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Protocol

import numpy as np

from bdsgd.cluster.clock import SyncClock
from bdsgd.cluster.cutoff import Observation


class Policy(Protocol):
    """What the server needs of a cutoff policy (``bdsgd.policies.base.Policy``)."""

    name: str

    def choose(self) -> int: ...

    def observe(self, obs: Observation) -> None: ...

    def forecast(self, c: int) -> float: ...


@dataclass(frozen=True)
class Step:
    """One iteration as the server saw it."""

    obs: Observation
    policy_ns: int  # wall-clock time of the policy's choose() + observe()
    forecast_s: float = np.nan  # the policy's E[x_(c)] for its choice c (``Server`` forecasts)

    @property
    def policy_s(self) -> float:
        return self.policy_ns * 1e-9


class Server:
    """A cutoff policy driving iterations of n workers."""

    def __init__(self, policy: Policy, n_workers: int, forecasts: bool = False):
        """``forecasts``: record, untimed, what a predictive policy expected its cutoff time
        to be (its ``forecast(c)``), to score the forecast against what happened."""
        self.policy, self.n = policy, n_workers
        self.forecast = policy.forecast if forecasts else None

    def step(self, run: Callable[[int], Observation]) -> Step:
        """Decide c, run the iteration with cutoff c (``run(c)``), let the policy observe it."""
        start = perf_counter_ns()
        c = int(self.policy.choose())
        chose = perf_counter_ns()
        if not 1 <= c <= self.n:
            raise ValueError(f"policy {self.policy.name} chose c={c} outside 1..{self.n}")
        forecast = np.nan if self.forecast is None else float(self.forecast(c))
        obs = run(c)
        observing = perf_counter_ns()
        self.policy.observe(obs)
        return Step(obs, chose - start + perf_counter_ns() - observing, forecast)

    def step_trace(self, t: int, runtimes: np.ndarray, clock: SyncClock) -> Step:
        """An iteration whose run-times are known in advance (a trace row), on the virtual
        clock: the server sees the c first arrivals and, for the rest, only the cutoff time.
        The policy's idle work is done as the iteration runs, untimed: a real server does it
        while the workers compute (``bdsgd.distributed.ps``)."""

        def run(c: int) -> Observation:
            self.policy.idle()
            return clock.iteration(t, runtimes, c)

        return self.step(run)


def catch_up(policy: Policy, runtimes: np.ndarray, cutoffs: Sequence[int], clock: SyncClock,
             after: Callable[[int], None] | None = None) -> None:
    """Replay recorded iterations through a fresh policy and clock (trace rows cycled), checking
    that it chooses the recorded cutoffs again; ``after(t)`` shows it what else iteration t told
    it (the trainer's gradient statistics)."""
    T, n = runtimes.shape
    server = Server(policy, n)
    for t, recorded in enumerate(cutoffs):
        c = server.step_trace(t, runtimes[t % T], clock).obs.cutoff
        if c != recorded:
            raise RuntimeError(f"policy {policy.name} chose c={c} at iteration {t + 1} on replay, "
                               f"but {recorded} before: it is not deterministic given its seed")
        if after is not None:
            after(t)


@dataclass(frozen=True)
class Replay:
    cutoffs: np.ndarray  # (T,) c_t; the times below in the trace's units
    durations: np.ndarray  # (T,) D_t(c_t)
    cutoff_times: np.ndarray  # (T,) tau_t: x_t,(c_t), late starts included
    decision_ns: np.ndarray  # (T,) wall-clock time of the policy's work per iteration
    forecast_s: np.ndarray  # (T,) the policy's E[x_(c_t)] when it chose (NaN: no forecast)
    realised_s: np.ndarray  # (T,) x_t,(c_t): the c_t-th smallest run-time of the row
    worker_s: np.ndarray  # (3,) worker-time useful, wasted, idle (``bdsgd.cluster.clock``)
    seconds_per_unit: float = 1.0  # the trace's unit in seconds (``bdsgd.cluster.compute``)

    @property
    def gradients_per_s(self) -> float:
        """sum c_t / sum duration_t, per second (``bdsgd.cluster.cutoff.throughput`` where late
        workers abandon)."""
        return float(self.cutoffs.sum() / (self.durations.sum() * self.seconds_per_unit))

    @property
    def wasted_fraction(self) -> float:
        """Of the workers' time n sum_t duration_t, the part spent computing dropped gradients."""
        return float(self.worker_s[1] / self.worker_s.sum())

    @property
    def idle_fraction(self) -> float:
        """Of the workers' time, the part spent waiting for the cutoff and the communication."""
        return float(self.worker_s[2] / self.worker_s.sum())


def replay(trace, policy: Policy, comm=0.0, late: str = "abandon") -> Replay:
    """Run ``policy`` over a complete trace (``bdsgd.traces``: the caller checks it), iteration by
    iteration, with censored feedback, on the virtual clock: the network ``comm``
    (``bdsgd.cluster.network.durations``), late workers ``late``."""
    return replay_runtimes(trace.runtimes, policy, comm, late)


def replay_runtimes(runtimes: np.ndarray, policy: Policy, comm=0.0, late: str = "abandon",
                    seconds_per_unit: float = 1.0) -> Replay:
    """``replay`` on run-times (T, n) as they are: a censored value of a real run's record enters
    as the lower bound it is (``bdsgd.distributed``: the virtual clock's run of a real job)."""
    T, n = runtimes.shape
    server, clock = Server(policy, n, forecasts=True), SyncClock(comm, n, late)
    steps = [server.step_trace(t, runtimes[t], clock) for t in range(T)]
    cutoffs = np.array([s.obs.cutoff for s in steps], dtype=np.int64)
    realised = np.take_along_axis(np.sort(runtimes, axis=1), cutoffs[:, None] - 1, 1)[:, 0]
    return Replay(cutoffs, np.array([s.obs.duration for s in steps]),
                  np.array([s.obs.cutoff_time for s in steps]),
                  np.array([s.policy_ns for s in steps], dtype=np.int64),
                  np.array([s.forecast_s for s in steps]), realised, clock.worker_s.copy(),
                  seconds_per_unit)
