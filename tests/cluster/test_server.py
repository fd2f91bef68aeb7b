"""The server loop: decide, run the iteration, observe; the policy's work timed in one place."""

import numpy as np
import pytest

import bdsgd.cluster.server as loop
from bdsgd.cluster.clock import SyncClock
from bdsgd.cluster.cutoff import observation
from bdsgd.cluster.server import Server, catch_up
from bdsgd.policies.base import Policy


class FakeClock:
    """perf_counter_ns that moves only when told to: timing checked without timing."""

    def __init__(self):
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.ns += int(seconds * 1e9)


class Slow(Policy):
    """A policy whose choose takes 0.5 s, idle 2 s and observe 0.25 s on the fake clock."""

    name = "slow"

    def __init__(self, clock, c=2):
        self.clock, self.c, self.seen, self.idled = clock, c, [], 0

    def choose(self):
        self.clock.advance(0.5)
        return self.c

    def idle(self):
        self.clock.advance(2.0)
        self.idled += 1

    def observe(self, obs):
        self.clock.advance(0.25)
        self.seen.append(obs)


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(loop, "perf_counter_ns", fake)
    return fake


def test_a_step_charges_choose_and_observe_but_not_the_iteration(clock):
    policy = Slow(clock)
    x = np.array([3.0, 1.0, 2.0])

    def run(c):
        clock.advance(10.0)  # the workers' time is the iteration's, not the policy's
        return observation(0, x, c, 0.1)

    step = Server(policy, 3).step(run)
    assert step.policy_ns == 750_000_000 and step.policy_s == pytest.approx(0.75)
    assert step.obs.cutoff == 2 and step.obs.cutoff_time == 2.0
    assert policy.seen == [step.obs]  # the policy observed what the server saw


def test_an_iteration_on_the_virtual_clock_does_the_idle_work_untimed(clock):
    """Once an iteration, while the workers compute, as the parameter server does it."""
    policy = Slow(clock)
    step = Server(policy, 3).step_trace(0, np.array([3.0, 1.0, 2.0]), SyncClock(np.zeros(3), 3))
    assert step.policy_ns == 750_000_000 and policy.idled == 1


def test_a_cutoff_outside_one_to_n_is_refused(clock):
    with pytest.raises(ValueError, match="outside 1..3"):
        Server(Slow(clock, c=4), 3).step_trace(0, np.ones(3), SyncClock(np.zeros(3), 3))


def test_catch_up_replays_and_checks_the_recorded_cutoffs(clock):
    x = np.arange(12.0).reshape(4, 3)
    policy = Slow(clock)
    catch_up(policy, x, [2, 2, 2, 2, 2], SyncClock(np.zeros(3), 3))  # rows cycle: iteration 4 is row 0 again
    assert [o.t for o in policy.seen] == [0, 1, 2, 3, 4]
    np.testing.assert_array_equal(policy.seen[4].runtimes, [0.0, 1.0, np.nan])
    with pytest.raises(RuntimeError, match="not deterministic"):
        catch_up(Slow(clock), x, [2, 3], SyncClock(np.zeros(3), 3))
