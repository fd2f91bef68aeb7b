"""The exploration wrapper ``explore-<policy>``.

A policy that cuts the stragglers off never sees how slow they are: its data on the tail are all
censored, and it can stay wrong about it. With probability ``prob`` the wrapper waits for every
worker instead (c = n), so the inner policy sees the whole iteration uncensored. The price is
those slower iterations; the benchmark reports it against the unwrapped policy.
"""

from __future__ import annotations

import numpy as np

from bdsgd.layout import EXPLORE
from bdsgd.policies.base import Policy, Wrapper


class Explore(Wrapper):
    def __init__(self, inner: Policy, n_workers: int, prob: float, seed: int):
        super().__init__(inner)
        self.name = f"{EXPLORE}{inner.name}"
        self.n, self.prob = n_workers, prob
        self.rng = np.random.default_rng(seed)
        self.explored = 0

    def choose(self) -> int:
        c = self.inner.choose()  # always asked, so its state moves on as without the wrapper
        if self.rng.random() < self.prob:
            self.explored += 1
            return self.n
        return c
