"""A prior over clusters: the run-time model's parameters fitted to draws of every simulator
scenario before it sees the user's trace, so that what a short trace does not show is still
expected.

A user's training trace is short and shows one cluster in one mood: a straggler episode, a rack
slowing down or a load shift that it happens not to hold is, to a model fitted on it alone, an
event of probability near zero, read as noise when it comes. The simulator's scenarios
(``bdsgd.traces.simulate.SCENARIOS``: node contention, episodes that come and go, stragglers,
load shifts, heavy-tailed i.i.d. and data-dependent run-times, heterogeneous speeds, rack
events) are the kinds of clusters the model should expect. ``train_prior`` (in ``train``) fits
one model to ``prior_draws`` draws of each, and ``bdsgd model train --prior`` starts the user's
model from that fit and goes on from there on the user's trace: the trace sets the cluster's own
parameters where it holds evidence about them, and where it holds little the fit stays near the
prior's (the fine-tuning's few Adam steps act as a prior centred on the pretrained parameters:
early stopping is approximately L2 regularisation towards the starting point; with
``model.prior_precision`` the prior is an explicit Gaussian one, ``train.prior_penalty``).

Size and identity. Everything in the model but the workers' identity embeddings e_w is shared by
all workers and all n (the transition's scalars, the emitter's and the inference network's
layers take e_w as an input, and the inference network pools over workers). The prior is fitted
with every e_w = 0, the generic worker (``generic_workers``): so it serves a cluster of any size,
and a user's model starts from it with e_w = 0 and learns its own workers' identities.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch

from bdsgd.config import ModelConfig, SimulateConfig
from bdsgd.errors import UserError
from bdsgd.runtime_model.checkpoint import load_model
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.traces.schema import Trace
from bdsgd.traces.simulate import SCENARIOS, simulate

# what must match between a prior and the model it starts: the parameters' shapes and meaning
ARCHITECTURE = ("emission", "latent_dim", "worker_dim", "hidden_dim")


def prior_traces(cfg: ModelConfig, seed: int) -> list[Trace]:
    """``cfg.prior_draws`` draws of every simulator scenario, ``cfg.prior_workers`` workers x
    ``cfg.prior_iterations`` iterations each, with their own seeds (one draw, one cluster)."""
    return [simulate(SimulateConfig(scenario=name, workers=cfg.prior_workers,
                                    iterations=cfg.prior_iterations),
                     seed=seed * 1000 + i * cfg.prior_draws + k)[0]
            for i, name in enumerate(sorted(SCENARIOS)) for k in range(cfg.prior_draws)]


def generic_workers(model: RuntimeModel) -> None:
    """Every worker the generic one: e_w = 0, not learnt (the prior's workers are draws of
    many clusters; no identity carries from one to another)."""
    with torch.no_grad():
        model.embedding.zero_()
    model.embedding.requires_grad_(False)


def start_from_prior(model: RuntimeModel, path: str | Path) -> dict:
    """Set every parameter of ``model`` but its workers' identities to the prior's at ``path``
    (e_w = 0, learnt from there). Returns what names the prior in the model's checkpoint."""
    prior = load_model(path)
    field = next((k for k in ARCHITECTURE
                  if getattr(prior.config, k) != getattr(model.config, k)), None)
    if field is not None:
        raise UserError(str(path), f"config.{field}",
                        f"the prior has {field} {getattr(prior.config, field)!r}, the model "
                        f"{getattr(model.config, field)!r}: train the prior with the model's "
                        "architecture (bdsgd model prior --config)")
    state = {k: v for k, v in prior.state_dict().items() if k != "embedding"}
    model.load_state_dict(state, strict=False)
    with torch.no_grad():
        model.embedding.zero_()
    return {"path": str(path), "sha256": parameters_hash(prior)}


def parameters_hash(model: RuntimeModel) -> str:
    """SHA-256 of a model's parameters (not of its file, which holds a provenance stamp too):
    the same prior fitted twice, by the workflow or by hand, is the same prior."""
    digest = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(value.numpy().tobytes())
    return digest.hexdigest()
