"""Deciding less often: ``policies.decide_every``.

A predictive policy wrapped in ``Periodic`` decides at iterations 0, k, 2k, ... and holds that
cutoff for the k - 1 iterations in between, while observing every iteration as before: its
forecast stays as informed, and only the decisions (their compute and their reaction to the
cluster) become rarer. k = 1 is the plain policy.
"""

from __future__ import annotations

from bdsgd.cluster.cutoff import Observation
from bdsgd.policies.base import PredictivePolicy, use_idle_time


class Periodic:
    def __init__(self, inner: PredictivePolicy, every: int):
        if every < 1:
            raise ValueError(f"decide_every must be >= 1, got {every}")
        self.name, self.inner, self.every = inner.name, inner, every
        self.t, self.c = 0, None

    def choose(self) -> int:
        if self.t % self.every == 0:
            self.c = self.inner.choose()
        else:
            # a held cutoff is still the policy's choice: its achieved rate lambda_hat counts it
            self.inner.chosen = True
        self.t += 1
        return self.c

    def observe(self, obs: Observation) -> None:
        self.inner.observe(obs)

    def idle(self) -> None:
        use_idle_time(self.inner)

    @property
    def noise_scale(self) -> float | None:
        """The inner policy's gradient noise scale estimate."""
        return self.inner.noise_scale

    def observe_gradients(self, small_sq: float, big_sq: float, b_small: float,
                          b_big: float) -> None:
        """Forwarded to the inner policy."""
        self.inner.observe_gradients(small_sq, big_sq, b_small, b_big)
