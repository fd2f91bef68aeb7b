"""Cutoff policies: the registry. ``spec`` says what a policy needs; ``bdsgd.policies.build``
builds one for a run, with every check.

Names: sync, static, elfving, ecdf, bandit, ewma, persist, bdsgd (the run-time model averaged
with simple predictors, ``policies.averaging``), bdsgd-model (the model alone) and bdsgd-paper
(Teng & Wood's own: the model trained their way, ``PAPER_MODEL``, their ratio rule, no margin),
each needing a run-time model, bayes (needs the simulator's truth), oracle, oracle-myopic and
oracle-fixed (the best single cutoff in hindsight; all three need the future run-times:
references only), static-<p>pct (Chen et al.'s backup workers at p % of n, for their sweep
beside ``static``'s configured count), explore-<name> around any causal one, and
<name>+<variant> (``VARIANTS``): a policy trained under other train: settings, an arm of its own
beside the plain one. ``async`` and ``cyclic`` are training modes, not cutoff policies
(``bdsgd.cluster.schedules.MODES``). The CLI, the trainers and the workflow ask ``spec`` and nothing
else whether a policy needs a model, the truth or a warm-up history.

This module imports none of its submodules (they import ``RULES`` from it): the CLI's --help and
every workflow parse read the registry without loading scipy or torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bdsgd.cluster.schedules import is_mode
from bdsgd.layout import explored, policy_parts

RULES = ("rate", "ratio")  # the decision rules of a predictive policy (policies.base.decide)


@dataclass(frozen=True)
class Spec:
    """What building and running a policy takes."""

    predictive: bool = False  # a predictor plus a decision rule (ratio | rate)
    learns: bool = False  # learns from observations, so a warm-up history informs it
    needs_model: bool = False  # a trained run-time model (--model)
    needs_truth: bool = False  # the simulator's latent state (the trace's truth sidecar)
    needs_future: bool = False  # the replayed run-times themselves: a reference, not causal
    # Teng & Wood's own BDSGD: a model trained their way (PAPER_MODEL, --paper-model), their
    # decision rule (ratio) whatever policies.rule, and no margin (policies.min_gain)
    paper: bool = False


# How Teng & Wood's model is trained (`bdsgd model train --paper`): Gaussian emissions in the
# run-time itself, censored run-times imputed from the same iteration's observed ones.
PAPER_MODEL = {"emission": "gaussian", "censoring": "impute"}


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
    "bdsgd-paper": Spec(predictive=True, learns=True, needs_model=True, paper=True),
    # bayes knows the true state already: a history has nothing to teach it
    "bayes": Spec(predictive=True, needs_truth=True),
    "oracle": Spec(needs_future=True),
    "oracle-myopic": Spec(needs_future=True),
    "oracle-fixed": Spec(needs_future=True),
}
NAMES = tuple(SPECS)


# static-<p>pct with 0 <= p < 100, written without leading zeros (the schema's pattern too)
STATIC_SWEEP = re.compile(r"static-((?:[0-9]|[1-9][0-9])(?:[.][0-9]+)?)pct")


def backups_of(name: str) -> float | None:
    """The fraction of n that static-<p>pct keeps as backups (p / 100), or None for another
    name."""
    match = STATIC_SWEEP.fullmatch(name)
    return None if match is None else float(match[1]) / 100


# Variants: <policy>+<variant> trains the policy with these train: keys set (over its task's
# recipe), as an arm of its own (its run folder, summary row and marks) beside the plain policy,
# so that an ablation is one experiment: the cutoff's objective (reviewers ask whether expected
# loss decrease per second beats gradients per second) and the learning rate's scaling with the
# accepted batch (whether linear scaling is what makes a cut batch train as well).
VARIANTS = {
    "progress": {"objective": "progress"},
    "throughput": {"objective": "throughput"},
    "lr-linear": {"lr_scaling": "linear"},
    "lr-sqrt": {"lr_scaling": "sqrt"},
    "lr-none": {"lr_scaling": "none"},
}


def variant(name: str) -> tuple[str, dict]:
    """(the policy, the train: keys its variant sets) of <policy>+<variant>; (name, {}) of a name
    without one. A ValueError for an unknown variant, and for one that changes nothing the
    policy reads: train.objective moves a predictive policy's cutoff only, and train.lr_scaling
    a step of c < n gradients only, which sync never takes."""
    base, name_of = policy_parts(name)
    if not name_of:
        return name, {}
    if name_of not in VARIANTS:
        raise ValueError(f"unknown variant {name_of!r} of {name!r}; choose from "
                         f"{', '.join(VARIANTS)}")
    settings, need = VARIANTS[name_of], _spec(base)
    if "objective" in settings and not need.predictive:
        raise ValueError(f"{name!r}: train.objective moves a predictive policy's cutoff only, "
                         f"not {base}'s")
    if "lr_scaling" in settings and base == "sync":
        raise ValueError(f"{name!r}: sync applies all n gradients every step, whose rate "
                         "train.lr_scaling leaves as it is")
    return base, settings


def spec(name: str) -> Spec:
    """The needs of policy ``name``; explore-<p> has p's, static-<p>pct static's, <p>+<variant>
    p's. An unknown name is a ValueError."""
    return _spec(variant(name)[0])


def _spec(name: str) -> Spec:
    """``spec`` of a name without a variant."""
    base = explored(name) or name
    if backups_of(base) is not None:
        base = "static"
    if base not in SPECS or (explored(name) is not None and SPECS[base].needs_future):
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(NAMES)}, "
                         "static-<p>pct, explore-<causal policy> or <policy>+<variant>")
    return SPECS[base]


def model_files(policies) -> list[str]:
    """The run-time models (files under models/<trace>/) that ``policies`` read: model.pt
    (bdsgd, bdsgd-model), paper.pt (bdsgd-paper: ``bdsgd model train --paper``). The training
    modes async and cyclic read none."""
    needs = [spec(p) for p in policies if not is_mode(p)]
    return [file for file, paper in (("model.pt", False), ("paper.pt", True))
            if any(need.needs_model and need.paper == paper for need in needs)]


def is_known(name: str) -> bool:
    try:
        spec(name)
    except ValueError:
        return False
    return True
