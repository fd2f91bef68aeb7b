"""Cutoff policies: the registry. ``spec`` says what a policy needs; ``bdsgd.policies.build``
builds one for a run, with every check.

Names: sync, static, elfving, ecdf, bandit, ewma, persist, bdsgd (the run-time model averaged
with simple predictors, ``policies.averaging``) and bdsgd-model (the model alone, the paper's
BDSGD), both needing a run-time model, bayes (needs the simulator's truth), oracle and
oracle-myopic (need the future run-times: references only), and explore-<name> around any
causal one. ``async`` and ``cyclic`` are training modes, not cutoff policies
(``bdsgd.schedules.MODES``). The CLI, the trainers and the workflow ask ``spec`` and nothing
else whether a policy needs a model, the truth or a warm-up history.

This module imports none of its submodules (they import ``RULES`` from it): the CLI's --help and
every workflow parse read the registry without loading scipy or torch.
"""

from __future__ import annotations

from dataclasses import dataclass

RULES = ("rate", "ratio")  # the decision rules of a predictive policy (policies.base.decide)


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
