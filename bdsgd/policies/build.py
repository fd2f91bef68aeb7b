"""Building a run's policy: one place, with every check, for every kind of run.

``build_policy`` turns (policy name, trace, config, run-time model, simulator truth, history)
(``Inputs``) into a ready policy: it checks that each input fits the run (a model of the trace's worker
count, a truth for as many iterations as the run, a history of the same workers, static backups
that leave a worker to wait for, no reference policy on a real cluster), builds the policy
(``make_policy``) and shows it the history (``warm_up``). Trace replay, the virtual trainers,
their resume and the parameter server all call it; ``load_inputs`` reads the model and the
truth from their files once for all the policies of a run.

A mismatch is a ``UserError`` naming the file (or flag) and the field, never a traceback from
deep inside a policy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from bdsgd.cluster.cutoff import observation
from bdsgd.config import Config, PoliciesConfig, TrainConfig
from bdsgd.devices import cpp_compiler
from bdsgd.errors import UserError
from bdsgd.layout import explored, policy_parts
from bdsgd.policies import Spec, backups_of, spec, variant

if TYPE_CHECKING:
    from bdsgd.policies.base import Policy
    from bdsgd.traces.schema import Trace

logger = logging.getLogger(__name__)


def policy_spec(name: str, flag: str = "--policy"):
    """``spec(name)``, an unknown name being a one-line error naming ``flag``."""
    try:
        return spec(name)
    except ValueError as exc:
        raise UserError(flag, name, str(exc)) from None


def policy_variant(name: str, flag: str = "--policy") -> tuple[str, dict]:
    """``variant(name)``: the policy and the train: keys its variant sets; an unknown or idle
    variant is a one-line error naming ``flag``."""
    try:
        return variant(name)
    except ValueError as exc:
        raise UserError(flag, name, str(exc)) from None


@dataclass(frozen=True)
class Inputs:
    """What a run's policies read besides the config: the run-time model (bdsgd, bdsgd-model),
    the paper's (bdsgd-paper), the files they came from (errors name them) and the simulator's
    truth (bayes)."""

    model: object = None
    model_path: str = "--model"
    truth: object = None
    paper_model: object = None
    paper_model_path: str = "--paper-model"


def _model(needs: list[Spec], paper: bool, path, flag: str, train: str):
    """The run-time model the policies ``needs`` read, of the paper's kind or not: loaded from
    ``path`` (``flag``'s value), None where none reads it."""
    if not any(need.needs_model and need.paper == paper for need in needs):
        return None
    if path is None:
        raise UserError(flag, "bdsgd-paper" if paper else "bdsgd", "the policy needs a run-time "
                        f"model: pass {flag} MODEL.pt (from '{train}')")
    from bdsgd.runtime_model.checkpoint import load_model

    return load_model(path)


def load_inputs(names: list[str], trace_path, model_path, paper_model_path=None) -> Inputs:
    """The run-time models and the simulator's truth that the policies ``names`` need, read once
    (a policy that needs one and has none is a one-line error naming the flag or the file)."""
    needs = [policy_spec(name, "--policies" if len(names) > 1 else "--policy") for name in names]
    truth = None
    model = _model(needs, False, model_path, "--model", "bdsgd model train")
    paper = _model(needs, True, paper_model_path, "--paper-model", "bdsgd model train --paper")
    if any(need.needs_truth for need in needs):
        from bdsgd.traces.truth import read_truth, truth_path

        sidecar = truth_path(trace_path)
        if not sidecar.is_file():
            raise UserError(str(trace_path), "bayes", f"policy bayes needs the simulator's truth "
                            f"{sidecar} beside the trace (only simulated traces have one)")
        truth = read_truth(sidecar)
    return Inputs(model, str(model_path), truth, paper, str(paper_model_path))


def build_policy(name: str, cfg: Config, *, seed: int, n_workers: int, trace: Trace | None = None,
                 inputs: Inputs = Inputs(), history: Trace | None = None,
                 iterations: int | None = None, comm: float | np.ndarray | None = None,
                 rule: str | None = None, training: TrainConfig | None = None,
                 real: bool = False) -> Policy:
    """Policy ``name`` ready for a run of ``n_workers`` workers over ``iterations`` iterations
    (default: one pass of ``trace``): checked, built and warmed up on ``history``.

    ``trace``: the replayed run-times (the oracles read them; None on a real cluster);
    ``training``: the run's train: section, whose objective the predictive policies optimise
    (None: throughput); ``real``: a real cluster, which has no truth and no future; ``rule``
    None: the config's; ``comm`` (a number, or comm(c) for c = 1..n, in the trace's units) None:
    the config's throughput.comm_s."""
    need, truth = policy_spec(name), inputs.truth
    # a run resolves its variant into its config (bdsgd.training.spec) and builds the policy
    # itself: a replay or a real cluster has no train: keys to set
    if policy_parts(name)[1]:
        raise UserError("--policy", name, "a variant <policy>+<variant> is an arm of the "
                        "convergence runs (bdsgd train), which train with its train: keys")
    model, model_path, flag = ((inputs.paper_model, inputs.paper_model_path, "--paper-model")
                               if need.paper else (inputs.model, inputs.model_path, "--model"))
    source = "<distributed>" if trace is None else trace.file
    if real and (need.needs_truth or need.needs_future):
        raise UserError("--policy", name, "needs the simulator's truth or the future run-times, "
                        "which a real cluster does not have")
    if need.needs_model:
        if model is None:
            raise UserError(flag, name, f"policy {name} needs a run-time model: pass {flag}")
        if model.n_workers != n_workers:
            raise UserError(model_path, "n_workers",
                            f"the run-time model was trained on {model.n_workers} workers; this run "
                            f"has {n_workers}: train one on a trace of {n_workers} workers")
    if need.needs_truth:
        if truth is None:
            raise UserError(source, name, f"policy {name} needs the simulator's truth")
        runs = trace.n_iterations if iterations is None else iterations
        if runs > trace.n_iterations:
            raise UserError(cfg.source, "train.max_iterations", f"policy {name} knows the "
                            f"simulator's state of the trace's {trace.n_iterations} iterations "
                            f"only; a run of {runs} would cycle it: shorten the run")
    if history is not None and history.n_workers != n_workers:
        raise UserError(history.file, "workers",
                        f"{history.n_workers} workers; the run has {n_workers}")
    backups = cfg.policies.static_backups
    if (explored(name) or name) == "static" and backups >= 1 and backups >= n_workers:
        raise UserError(cfg.source, "policies.static_backups", f"{backups:g} backup workers "
                        f"leave none of the {n_workers} workers to wait for")
    comm = cfg.throughput.comm_s if comm is None else comm
    policy = make_policy(
        name, n_workers, cfg.policies, rule=rule, seed=seed, comm=comm,
        runtimes=None if trace is None else trace.runtimes, model=model, truth=truth,
        offset=0 if trace is None else int((trace.meta.get("slice") or [0])[0]),
        objective="throughput" if training is None else training.objective,
        batch=1 if training is None else training.batch_size,
        lr_scaling="linear" if training is None else training.lr_scaling)
    if history is not None and need.learns:
        warm_up(policy, history, comm)
    return policy


def warm_up(policy: Policy, history: Trace, comm: float | np.ndarray = 0.0) -> None:
    """Show ``policy`` the iterations that came before the run, fully observed (c = n), as a
    server that has been running (and gathering the training trace) would have seen them."""
    n = history.n_workers
    for t, row in enumerate(history.runtimes):
        policy.observe(observation(t - history.n_iterations, row, n, comm))


def make_policy(name: str, n_workers: int, cfg: PoliciesConfig, *, rule: str | None = None,
                seed: int = 0, comm: float | np.ndarray = 0.0, runtimes: np.ndarray | None = None,
                model=None, truth=None, offset: int = 0, objective: str = "throughput",
                batch: int = 1, lr_scaling: str = "linear"):
    """Build policy ``name`` for n workers. ``rule`` None means ``cfg.rule``. ``runtimes`` (T, n)
    is the future, for the oracles only (replayed cyclically); ``model`` a loaded run-time model
    (bdsgd, bdsgd-model); ``truth`` the simulator's latent state (bayes), whose iteration
    ``offset`` is the first one replayed. ``objective`` (train.objective) and ``batch`` (samples
    per worker) are for the predictive policies (bdsgd.policies.progress); the others ignore
    them. A predictive policy decides every ``cfg.decide_every`` iterations (``Periodic``;
    inside explore-<p>'s wrapper, which may still wait for every worker on any iteration)."""
    # The policies themselves (scipy, torch) load here, not with the registry: the CLI's --help
    # and every workflow parse read the registry only.
    from bdsgd.cluster.cutoff import fixed_optimum, hindsight_optimum, myopic_optimum
    from bdsgd.policies.base import PredictivePolicy
    from bdsgd.policies.baselines import Scripted, Static, Sync
    from bdsgd.policies.explore import Explore
    from bdsgd.policies.periodic import Periodic
    from bdsgd.policies.progress import OBJECTIVES

    need = spec(name)
    rule = "ratio" if need.paper else cfg.rule if rule is None else rule
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVES}")
    if need.needs_model and model is None:
        raise ValueError(f"{name} needs a run-time model")
    if need.needs_truth and truth is None:
        raise ValueError(f"{name} needs the simulator's truth")
    if need.needs_future and runtimes is None:
        raise ValueError(f"{name} needs the trace's run-times")
    if explored(name) is not None:
        inner = make_policy(explored(name), n_workers, cfg, rule=rule, seed=seed,
                            comm=comm, model=model, truth=truth, offset=offset,
                            objective=objective, batch=batch, lr_scaling=lr_scaling)
        return Explore(inner, n_workers, cfg.explore_prob, seed)
    if name == "sync":
        return Sync(n_workers)
    if name == "static" or backups_of(name) is not None:
        fraction = backups_of(name)
        return Static(n_workers, cfg.static_backups if fraction is None else fraction, name)
    if name == "oracle":
        return Scripted(name, hindsight_optimum(np.sort(runtimes, axis=1), comm)[0])
    if name == "oracle-myopic":
        return Scripted(name, myopic_optimum(np.sort(runtimes, axis=1), comm))
    if name == "oracle-fixed":
        return Scripted(name, [fixed_optimum(np.sort(runtimes, axis=1), comm)[0]])
    predictor = _predictor(name, n_workers, cfg, seed, model, truth, offset,
                           listed(cfg.pull, name))
    if listed(cfg.calibrate, name) and need.learns and not need.paper:
        from bdsgd.policies.calibration import Calibrated

        predictor = Calibrated(predictor, cfg.rate_halflife, cfg.calibration_weight)
    # the margin is for a learnt forecast's errors; bayes, the ceiling, knows the true dynamics;
    # the paper's BDSGD has none
    min_gain = cfg.min_gain if need.learns and not need.paper else 0.0
    policy = PredictivePolicy(name, predictor, rule, comm, n_workers, cfg.rate_halflife,
                              min_gain, objective, batch, lr_scaling,
                              charge_lag=listed(cfg.charge_lag, name) and not need.paper,
                              probe=cfg.probe and not need.paper)
    return policy if cfg.decide_every == 1 else Periodic(policy, cfg.decide_every)


# policies.compile auto compiles the model's step for clusters of at least this many workers
# (docs/decisions.md: where a compilation is small beside the run)
COMPILE_MIN_WORKERS = 64


def compiles(setting: bool | str, n_workers: int) -> bool:
    """Whether the run-time model's step is compiled under ``policies.compile`` ``setting``:
    true or false as set; auto where the cluster has at least ``COMPILE_MIN_WORKERS`` workers
    and torch.compile's C++ compiler is installed."""
    if setting != "auto":
        return bool(setting)
    if n_workers < COMPILE_MIN_WORKERS:
        return False
    if cpp_compiler() is None:
        logger.info("policies.compile auto: no C++ compiler ($CXX, else g++) on PATH, so the "
                    "run-time model's step runs eager")
        return False
    return True


def listed(setting: bool | tuple[str, ...], name: str) -> bool:
    """Whether a setting that is true (every policy), false (none) or a list of policies names
    policy ``name``."""
    return setting if isinstance(setting, bool) else name in setting


def _predictor(name: str, n_workers: int, cfg: PoliciesConfig, seed: int, model, truth,
               offset: int, pull: bool):
    """The predictor of predictive policy ``name`` (make_policy's arguments; ``pull``: its
    per-worker predictors pull deviations back, ``policies.pull``)."""
    from bdsgd.policies.predictors import Bandit, Ecdf, Elfving, PerWorkerLevel, TruthPredictor

    if name == "elfving":
        return Elfving(n_workers, cfg.window)
    if name == "ecdf":
        return Ecdf(n_workers, cfg.window)
    if name == "bandit":
        return Bandit(n_workers, cfg.bandit_discount, cfg.bandit_confidence)
    if name in ("ewma", "persist"):
        alpha = 1 - 0.5 ** (1 / cfg.ewma_halflife) if name == "ewma" else 1.0
        return PerWorkerLevel(n_workers, alpha, cfg.residual_window, pull)
    if name == "bayes":
        return TruthPredictor(truth, offset, cfg.bayes_samples, seed)
    # torch: only when a model is used
    from bdsgd.policies.averaging import Averaged

    # Teng & Wood's model was trained once, offline: it does not learn while it serves
    every = 0 if spec(name).paper else cfg.online_every
    predictor = _model_predictor(model, n_workers, cfg, seed,
                                 (every, cfg.online_window, cfg.online_learning_rate))
    if name in ("bdsgd-model", "bdsgd-paper"):
        return predictor
    simple = {k: _predictor(k, n_workers, cfg, seed, None, None, 0, pull) for k in cfg.averaging}
    return Averaged({"model": predictor, **simple}, cfg.forgetting, cfg.score_scale,
                    cfg.share_forgetting)


# why torch.compile failed in this process, once it has: auto does not try it again
_compile_failure: list[str] = []


def _model_predictor(model, n_workers: int, cfg: PoliciesConfig, seed: int, online: tuple):
    """The run-time model's predictor, compiled as ``policies.compile`` says (``compiles``).
    A compilation that fails (a compiler without the headers it needs, say) is an error naming
    the setting where it is true; under auto the step stays eager, with a warning, for the rest
    of the process."""
    from bdsgd.policies.model_predictor import ModelPredictor

    predictor = ModelPredictor(model, seed=seed, online=online)
    if not compiles(cfg.compile, n_workers) or cfg.compile == "auto" and _compile_failure:
        return predictor
    try:
        predictor.compile()
    except Exception as exc:  # torch.compile's failures share no class; eager is the retry
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if cfg.compile is True:
            raise UserError("the config", "policies.compile", f"torch.compile failed ({why}); "
                            "set it to auto or false to run eager") from None
        _compile_failure.append(why)
        logger.warning(f"policies.compile auto: torch.compile failed ({why}), so the run-time "
                       "model's step runs eager")
    return predictor
