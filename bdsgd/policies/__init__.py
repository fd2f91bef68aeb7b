"""Cutoff policies: the registry. ``spec`` says what a policy needs, ``make_policy`` builds it.

Names: sync, static, elfving, ecdf, bandit, ewma, persist, bdsgd (the run-time model averaged
with simple predictors, ``policies.averaging``) and bdsgd-model (the model alone, the paper's
BDSGD), both needing a run-time model, bayes (needs the simulator's truth), oracle and
oracle-myopic (need the future run-times: references only), and explore-<name> around any
causal one. ``async`` and ``cyclic`` are training modes, not cutoff policies (``MODES``; the
throughput stage's async: ``bdsgd.throughput.asynchronous``). The CLI, the trainers and the
workflow ask ``spec`` and nothing else whether a policy needs a model, the truth or a warm-up
history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from bdsgd.config import PoliciesConfig


RULES = ("rate", "ratio")  # the decision rules of a predictive policy (policies.base.decide)
# The training modes that are no cutoff policy (bdsgd.training): run as `--policy async|cyclic`,
# they need nothing of what ``spec`` describes.
MODES = ("async", "cyclic")


@dataclass(frozen=True)
class Spec:
    """What building and running a policy takes."""

    predictive: bool = False  # a predictor plus a decision rule (ratio | rate)
    learns: bool = False  # learns from observations, so a warm-up history informs it
    needs_model: bool = False  # a trained run-time model (--model)
    needs_truth: bool = False  # the simulator's latent state (the trace's truth sidecar)
    needs_future: bool = False  # the replayed run-times themselves: a reference, not causal


SPECS = {
    "sync": Spec(),
    "static": Spec(),
    "elfving": Spec(predictive=True, learns=True),
    "ecdf": Spec(predictive=True, learns=True),
    "bandit": Spec(predictive=True, learns=True),
    "ewma": Spec(predictive=True, learns=True),
    "persist": Spec(predictive=True, learns=True),
    "bdsgd": Spec(predictive=True, learns=True, needs_model=True),
    "bdsgd-model": Spec(predictive=True, learns=True, needs_model=True),
    # bayes knows the true state already: a history has nothing to teach it
    "bayes": Spec(predictive=True, needs_truth=True),
    "oracle": Spec(needs_future=True),
    "oracle-myopic": Spec(needs_future=True),
}
NAMES = tuple(SPECS)


def spec(name: str) -> Spec:
    """The needs of policy ``name``; explore-<p> has p's. An unknown name is a ValueError."""
    base = name.removeprefix("explore-")
    if base not in SPECS or (base != name and SPECS[base].needs_future):
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(NAMES)} or "
                         "explore-<causal policy>")
    return SPECS[base]


def is_known(name: str) -> bool:
    try:
        spec(name)
    except ValueError:
        return False
    return True


def make_policy(name: str, n_workers: int, cfg: PoliciesConfig, *, rule: str | None = None,
                seed: int = 0, comm_s: float = 0.0, runtimes: np.ndarray | None = None,
                model=None, truth=None, offset: int = 0, objective: str = "throughput",
                batch: int = 1, lr_scaling: str = "linear"):
    """Build policy ``name`` for n workers. ``rule`` None means ``cfg.rule``. ``runtimes`` (T, n)
    is the future, for the oracles only (replayed cyclically); ``model`` a loaded run-time model
    (bdsgd, bdsgd-model); ``truth`` the simulator's latent state (bayes), whose iteration
    ``offset`` is the first one replayed. ``objective`` (train.objective) and ``batch`` (samples
    per worker) are for the predictive policies (bdsgd.policies.progress); the others ignore
    them."""
    # The policies themselves (scipy, torch) load here, not with the registry: the CLI's --help
    # and every workflow parse read the registry only.
    import numpy as np

    from bdsgd.cutoff import hindsight_optimum, myopic_optimum
    from bdsgd.policies.base import PredictivePolicy
    from bdsgd.policies.baselines import Scripted, Static, Sync
    from bdsgd.policies.explore import Explore
    from bdsgd.policies.progress import OBJECTIVES

    need = spec(name)
    rule = cfg.rule if rule is None else rule
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVES}")
    if need.needs_model and model is None:
        raise ValueError(f"{name} needs a run-time model")
    if need.needs_truth and truth is None:
        raise ValueError(f"{name} needs the simulator's truth")
    if need.needs_future and runtimes is None:
        raise ValueError(f"{name} needs the trace's run-times")
    if name.startswith("explore-"):
        inner = make_policy(name.removeprefix("explore-"), n_workers, cfg, rule=rule, seed=seed,
                            comm_s=comm_s, model=model, truth=truth, offset=offset,
                            objective=objective, batch=batch, lr_scaling=lr_scaling)
        return Explore(inner, n_workers, cfg.explore_prob, seed)
    if name == "sync":
        return Sync(n_workers)
    if name == "static":
        return Static(n_workers, cfg.static_backups)
    if name == "oracle":
        return Scripted(name, hindsight_optimum(np.sort(runtimes, axis=1), comm_s)[0])
    if name == "oracle-myopic":
        return Scripted(name, myopic_optimum(np.sort(runtimes, axis=1), comm_s))
    predictor = _predictor(name, n_workers, cfg, seed, model, truth, offset)
    # the margin is for a learnt forecast's errors; bayes, the ceiling, knows the true dynamics
    min_gain = cfg.min_gain if need.learns else 0.0
    return PredictivePolicy(name, predictor, rule, comm_s, n_workers, cfg.rate_halflife, min_gain,
                            objective, batch, lr_scaling)


def _predictor(name: str, n_workers: int, cfg: PoliciesConfig, seed: int, model, truth,
               offset: int):
    """The predictor of predictive policy ``name`` (make_policy's arguments)."""
    from bdsgd.policies.predictors import Bandit, Ecdf, Elfving, PerWorkerLevel, TruthPredictor

    if name == "elfving":
        return Elfving(n_workers, cfg.window)
    if name == "ecdf":
        return Ecdf(n_workers, cfg.window)
    if name == "bandit":
        return Bandit(n_workers, cfg.bandit_discount, cfg.bandit_confidence)
    if name in ("ewma", "persist"):
        alpha = 1 - 0.5 ** (1 / cfg.ewma_halflife) if name == "ewma" else 1.0
        return PerWorkerLevel(n_workers, alpha, cfg.residual_window)
    if name == "bayes":
        return TruthPredictor(truth, offset, cfg.bayes_samples, seed)
    # torch: only when a model is used
    from bdsgd.policies.averaging import Averaged
    from bdsgd.policies.bdsgd import ModelPredictor

    predictor = ModelPredictor(model, seed=seed, compile=cfg.compile)
    if name == "bdsgd-model":
        return predictor
    simple = {k: _predictor(k, n_workers, cfg, seed, None, None, 0) for k in cfg.averaging}
    return Averaged({"model": predictor, **simple}, cfg.forgetting, cfg.score_scale)
