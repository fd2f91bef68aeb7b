"""Cutoff policies. ``make_policy`` builds any of them by name; they share only ``base.Policy``.

Names: sync, static, elfving, ecdf, bandit, bdsgd (needs a run-time model), bayes (needs the
simulator's truth), oracle and oracle-myopic (need the future run-times: references only), and
explore-<name> around any causal one. ``async`` is not a cutoff policy: see
``bdsgd.throughput.asynchronous``.
"""

from __future__ import annotations

import numpy as np

from bdsgd.config import PoliciesConfig
from bdsgd.policies.base import Observation, PredictivePolicy
from bdsgd.policies.explore import Explore
from bdsgd.policies.oracle import hindsight_optimum, myopic_optimum
from bdsgd.policies.predictors import Bandit, Ecdf, Elfving, TruthPredictor

PREDICTIVE = ("elfving", "ecdf", "bandit", "bdsgd", "bayes")
ORACLES = ("oracle", "oracle-myopic")
NAMES = ("sync", "static", *PREDICTIVE, *ORACLES)


def is_predictive(name: str) -> bool:
    """Whether policy ``name`` takes a decision rule (explore-<p> does when p does)."""
    return name.removeprefix("explore-") in PREDICTIVE


def learns_from_history(name: str) -> bool:
    """Whether policy ``name`` learns from observations, so that a run's earlier iterations (a
    warm-up history) inform it: the causal predictive ones; bayes knows the state already."""
    base = name.removeprefix("explore-")
    return base in PREDICTIVE and base != "bayes"


def is_known(name: str) -> bool:
    base = name.removeprefix("explore-")
    return base in NAMES and not (name.startswith("explore-") and base in ORACLES)


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
                model=None, truth=None, offset: int = 0):
    """Build policy ``name`` for n workers. ``rule`` None means ``cfg.rule``. ``runtimes`` (T, n)
    is the future, for the oracles only (replayed cyclically); ``model`` a loaded run-time model
    (bdsgd); ``truth`` the simulator's latent state (bayes), whose iteration ``offset`` is the
    first one replayed."""
    rule = cfg.rule if rule is None else rule
    if name.startswith("explore-") and is_known(name):
        inner = make_policy(name.removeprefix("explore-"), n_workers, cfg, rule=rule, seed=seed,
                            comm_s=comm_s, model=model, truth=truth, offset=offset)
        return Explore(inner, n_workers, cfg.explore_prob, seed)
    if name == "sync":
        return Sync(n_workers)
    if name == "static":
        return Static(n_workers, cfg.static_backups)
    if name in ORACLES:
        if runtimes is None:
            raise ValueError(f"{name} needs the trace's run-times")
        sorted_x = np.sort(runtimes, axis=1)
        best = hindsight_optimum(sorted_x, comm_s)[0] if name == "oracle" else myopic_optimum(
            sorted_x, comm_s)
        return Scripted(name, best)
    if name == "elfving":
        predictor = Elfving(n_workers, cfg.window)
    elif name == "ecdf":
        predictor = Ecdf(n_workers, cfg.window)
    elif name == "bandit":
        predictor = Bandit(n_workers, cfg.bandit_discount, cfg.bandit_confidence)
    elif name == "bdsgd":
        if model is None:
            raise ValueError("bdsgd needs a run-time model")
        predictor = model.predictor(samples=model.config.samples, seed=seed, compile=cfg.compile)
    elif name == "bayes":
        if truth is None:
            raise ValueError("bayes needs the simulator's truth")
        predictor = TruthPredictor(truth, offset, cfg.bayes_samples, seed)
    else:
        raise ValueError(f"unknown policy {name!r}")
    # the margin is for a learnt forecast's errors; bayes, the ceiling, knows the true dynamics
    min_gain = 0.0 if name == "bayes" else cfg.min_gain
    return PredictivePolicy(name, predictor, rule, comm_s, n_workers, cfg.rate_halflife, min_gain)
