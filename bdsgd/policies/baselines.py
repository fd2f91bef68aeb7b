"""The policies that need no forecast: sync, static backup workers, and scripted cutoffs."""

from __future__ import annotations

import numpy as np

from bdsgd.cluster.cutoff import Observation
from bdsgd.policies.base import Policy


class Sync(Policy):
    """Fully synchronous SGD: wait for every worker."""

    name = "sync"

    def __init__(self, n_workers: int):
        self.n = n_workers

    def choose(self) -> int:
        return self.n

    def observe(self, obs: Observation) -> None:
        pass


class Static(Policy):
    """Chen et al. (2016), backup workers: always wait for the first n - b.

    ``backups`` from 1 is a count, b = int(backups); below 1 a fraction f of n, b = round(f n),
    but at least one backup for any f > 0: a fraction asked for backups, so a small job does not
    silently run as sync (0.1 of 3 or 4 workers rounds to none). f = 0 is sync. c = n - b, and
    at least 1.
    """

    def __init__(self, n_workers: int, backups: float, name: str = "static"):
        self.name = name
        if backups >= 1:
            b = int(backups)
        else:
            b = int(round(backups * n_workers))
            b = max(b, 1) if backups > 0 else b
        self.c = min(max(n_workers - b, 1), n_workers)

    def choose(self) -> int:
        return self.c

    def observe(self, obs: Observation) -> None:
        pass


class Scripted(Policy):
    """Replays precomputed cutoffs (the hindsight oracles): not causal, a reference only."""

    def __init__(self, name: str, cutoffs: np.ndarray):
        self.name, self.cutoffs, self.t = name, np.asarray(cutoffs), 0

    def choose(self) -> int:
        return int(self.cutoffs[self.t % len(self.cutoffs)])

    def observe(self, obs: Observation) -> None:
        self.t += 1
