"""``StepParameters``: the factors' parameters in the form one filtering or sampling step reads.

A step reads the same functions of the parameters every iteration (u's regime variances and
probabilities, the episode's and stalls' laws, the workers' embeddings through the layers they
enter). They do not depend on the data, so ``RuntimeModel.step_parameters`` computes them once
per training batch or per predictor, and ``filtering`` and ``sampling`` take them as an argument
beside the factors (``transition``, ``emitter``, ``inference``) they still call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bdsgd.runtime_model.emitter import StallParameters


@dataclass
class StepParameters:
    """What a step reads of the factors' parameters (see the module docstring)."""

    step: torch.Tensor  # (q_u, q_j, q_r): u's step variance per regime
    log_w_u: torch.Tensor  # log P(regime): stay, jump, reset
    log_w_j: torch.Tensor  # log P(J): (log(1 - p_j), log p_j), the node's jump indicator
    rho: torch.Tensor  # () the pull of each worker's level towards the workers' mean
    switch: torch.Tensor  # (p_on, p_off) of a node's episode C
    episode: torch.Tensor  # (delta_c, s_c^2): an episode's shift of v and its added variance
    stall: StallParameters  # the emitter's parts and B's chain, ``Emitter.stall_parameters``
    emitter_e: tuple[torch.Tensor, ...]  # ``Emitter.project``
    phi_e: torch.Tensor  # (n, H) ``InferenceNetwork.project``
