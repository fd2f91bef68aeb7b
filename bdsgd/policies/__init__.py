"""Cutoff policies. ``make_policy`` builds any of them by name; they share only ``base.Policy``."""

from __future__ import annotations

import numpy as np

from bdsgd.config import PoliciesConfig
from bdsgd.policies.base import Observation
from bdsgd.policies.oracle import hindsight_optimum


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


def make_policy(name: str, n_workers: int, cfg: PoliciesConfig, *, rule: str | None = None,
                seed: int = 0, comm_s: float = 0.0, runtimes: np.ndarray | None = None,
                model=None, truth=None):
    """Build policy ``name`` for n workers. ``runtimes`` (T, n) is the future, for oracles only;
    ``model`` is a loaded run-time model (bdsgd); ``truth`` the simulator's latent state (bayes)."""
    if name == "sync":
        return Sync(n_workers)
    if name == "static":
        return Static(n_workers, cfg.static_backups)
    if name == "oracle":
        if runtimes is None:
            raise ValueError("the oracle needs the trace's run-times")
        return Scripted("oracle", hindsight_optimum(np.sort(runtimes, axis=1), comm_s)[0])
    raise ValueError(f"unknown policy {name!r}")
