"""The exploration wrapper ``explore-<policy>``.

A policy that cuts the stragglers off never sees how slow they are: its data on the tail are all
censored, and it can stay wrong about it. With probability ``prob`` the wrapper waits for every
worker instead (c = n), so the inner policy sees the whole iteration uncensored. The price is
those slower iterations; the benchmark reports it against the unwrapped policy.
"""

from __future__ import annotations

import numpy as np

from bdsgd.cluster.cutoff import Observation
from bdsgd.policies.base import Policy, use_idle_time


class Explore:
    def __init__(self, inner: Policy, n_workers: int, prob: float, seed: int):
        self.name = f"explore-{inner.name}"
        self.inner, self.n, self.prob = inner, n_workers, prob
        self.rng = np.random.default_rng(seed)
        self.explored = 0

    def choose(self) -> int:
        c = self.inner.choose()  # always asked, so its state moves on as without the wrapper
        if self.rng.random() < self.prob:
            self.explored += 1
            return self.n
        return c

    def observe(self, obs: Observation) -> None:
        self.inner.observe(obs)

    def idle(self) -> None:
        use_idle_time(self.inner)

    def forecast(self, c: int) -> float:
        """The inner policy's E[x_(c)] at the last choice (NaN if it forecasts nothing)."""
        inner = getattr(self.inner, "forecast", None)
        return np.nan if inner is None else inner(c)

    @property
    def noise_scale(self) -> float | None:
        """The inner policy's gradient noise scale estimate, if it keeps one."""
        return getattr(self.inner, "noise_scale", None)

    def observe_gradients(self, small_sq: float, big_sq: float, b_small: float,
                          b_big: float) -> None:
        """Forwarded to the inner policy, if it estimates the gradient noise scale."""
        forward = getattr(self.inner, "observe_gradients", None)
        if forward is not None:
            forward(small_sq, big_sq, b_small, b_big)
