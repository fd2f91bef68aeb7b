"""The policies that need no forecast: sync, static backup workers, and scripted cutoffs."""

from __future__ import annotations

import numpy as np

from bdsgd.cutoff import Observation


class Sync:
    """Fully synchronous SGD: wait for every worker."""

    name = "sync"

    def __init__(self, n_workers: int):
        self.n = n_workers

    def choose(self) -> int:
        return self.n

    def observe(self, obs: Observation) -> None:
        pass


class Static:
    """Chen et al. (2016), backup workers: always wait for the first n - b."""

    name = "static"

    def __init__(self, n_workers: int, backups: float):
        b = int(round(backups * n_workers)) if backups < 1 else int(backups)
        self.c = min(max(n_workers - b, 1), n_workers)

    def choose(self) -> int:
        return self.c

    def observe(self, obs: Observation) -> None:
        pass


class Scripted:
    """Replays precomputed cutoffs (the hindsight oracles): not causal, a reference only."""

    def __init__(self, name: str, cutoffs: np.ndarray):
        self.name, self.cutoffs, self.t = name, np.asarray(cutoffs), 0

    def choose(self) -> int:
        return int(self.cutoffs[self.t % len(self.cutoffs)])

    def observe(self, obs: Observation) -> None:
        self.t += 1
