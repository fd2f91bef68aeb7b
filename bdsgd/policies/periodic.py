"""Deciding less often: ``policies.decide_every``.

A predictive policy wrapped in ``Periodic`` decides at iterations 0, k, 2k, ... and holds that
cutoff for the k - 1 iterations in between, while observing every iteration as before: its
forecast stays as informed, and only the decisions (their compute and their reaction to the
cluster) become rarer. k = 1 is the plain policy.
"""

from __future__ import annotations

from bdsgd.policies.base import PredictivePolicy, Wrapper


class Periodic(Wrapper):
    def __init__(self, inner: PredictivePolicy, every: int):
        if every < 1:
            raise ValueError(f"decide_every must be >= 1, got {every}")
        super().__init__(inner)
        self.name, self.every = inner.name, every
        self.t, self.c = 0, None

    def choose(self) -> int:
        if self.t % self.every == 0:
            self.c = self.inner.choose()
        else:
            # a held cutoff is still the policy's choice: its achieved rate lambda_hat counts it
            self.inner.chosen = True
        self.t += 1
        return self.c
