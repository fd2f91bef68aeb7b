"""Learning while serving: the model goes on fitting its parameters to the censored observations
the server makes, so that a cluster that changes in a way the training trace never showed
changes the model too, not only its filtered state.

The server sees every iteration censored at its cutoff: the kind of data the model was trained
on, one iteration at a time. ``OnlineFit`` keeps the last ``window`` observations with the
filter's state q(z) before the first of them, and every ``every`` iterations takes one Adam step
on their ELBO (``RuntimeModel.elbo`` started from that state): the censored likelihood, as in
training, where a run-time cut off at tau contributes log P(x > tau), not an imputed value.

What it learns: the laws of the cluster's events (``regime_parameters``: how often a worker's
level jumps and how far, how often a node's episode starts and ends and how much it slows, how
often a worker stalls, for how long and how heavily). These are what a cluster unlike the
training trace gets wrong, e.g. stalls in 15 % of worker-iterations where training saw almost
none, each of them then read as a lasting change of the worker. The networks and the workers'
identities stay as trained: a window is too short a sample to refit them, and a change of level
is the filter's to follow, not the parameters'.

Amortised over iterations, and off the decision's path where the server waits. Every ``every``
iterations the server reads the parameters of the learner, a copy of the model, after one step on
the window that ended ``every`` iterations earlier. A step costs ``window`` filtering steps
forward and backward, most of it per-operation overhead, so about the same at any n
(benchmarks/bench_model.py). The step may be taken at any moment of the period, with the same
result: a server that waits, for the workers' gradients once it has sent the parameters, takes it
then (``idle``, which ``bdsgd.distributed.ps`` calls), so that no decision pays it while the
workers compute longer than it takes; where nothing called ``idle`` in the period (a replay, the
virtual-cluster trainer), the decision at the period's end takes it, one decision in ``every``. A
replay is thus the same wherever the step runs (docs/decisions.md: why not in a thread or a
process). The step size is small and each step's gradient is clipped as in training: one window is
a short, noisy sample of the cluster; many small steps follow a change, and one odd window cannot
undo the training.
"""

from __future__ import annotations

import copy
from collections import deque

import torch

from bdsgd.runtime_model.filtering import FilterState
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.runtime_model.parameters import StepParameters


def regime_parameters(model: RuntimeModel) -> list[torch.nn.Parameter]:
    """The parameters learnt while serving (the module docstring): the transition's and the
    emitter's scalars but g's dynamics (A, b, q_g), which the inference network reads with them."""
    return [p for module in (model.transition, model.emitter)
            for name, p in module.named_parameters(recurse=False)
            if name not in ("A", "b", "log_q_g")]


def _plain(state: FilterState) -> FilterState:
    """A copy of ``state`` that autograd may save (tensors made in inference mode may not be)."""
    return FilterState(*(t.clone() for t in vars(state).values()))


class OnlineFit:
    """Every ``every`` observations, one Adam step of the learner on the ELBO of the window of
    ``window`` that ended ``every`` observations earlier (see the module docstring). ``record``
    is called with each observation and the server's filter state before it; it returns the
    server model's new ``StepParameters`` after a step, else None. ``idle`` takes the period's
    step early, when the server has time for it."""

    def __init__(self, model: RuntimeModel, every: int, window: int, learning_rate: float,
                 seed: int = 0):
        if every < 1 or window < 1:
            raise ValueError(f"online fit every {every}, window {window}: both at least 1")
        self.server, self.every = model, every
        self.learner = copy.deepcopy(model)
        self.optimizer = torch.optim.Adam(regime_parameters(self.learner), lr=learning_rate)
        self.generator = torch.Generator().manual_seed(seed)  # the ELBO's draws of q(g)
        self.seen: deque = deque(maxlen=window)  # (x~, censored, state before it)
        self.count = 0
        self.steps = 0
        self.pending: list | None = None  # the window the period's step fits, until it is taken
        self.stepped = False  # the learner took the period's step: the server has yet to read it

    def idle(self) -> None:
        """Take the period's step now, if it is still to take: the server has time to spare."""
        if self.pending is not None:
            with torch.inference_mode(False), torch.enable_grad():
                self.step(self.pending)
            self.pending, self.stepped = None, True

    def record(self, x: torch.Tensor, censored: torch.Tensor,
               before: FilterState) -> StepParameters | None:
        """Keep observation (x~ (1, n), censored (1, n)), seen from state ``before``."""
        self.seen.append((x, censored, before))
        self.count += 1
        if self.count % self.every:
            return None
        self.idle()  # the period's step, where no idle time took it
        new = None
        if self.stepped:
            with torch.no_grad():
                for mine, learnt in zip(regime_parameters(self.server),
                                        regime_parameters(self.learner), strict=True):
                    mine.copy_(learnt)
            self.steps += 1
            self.stepped = False
            new = self.server.step_parameters()
        self.pending = list(self.seen) if len(self.seen) == self.seen.maxlen else None
        return new

    def step(self, seen: list) -> None:
        """One Adam step of the learner on the ELBO of the window ``seen``."""
        x = torch.stack([x.clone() for x, _, _ in seen], 1)  # (1, window, n)
        censored = torch.stack([c.clone() for _, c, _ in seen], 1)
        loss = -self.learner.elbo(x, censored, self.generator,
                                  start=_plain(seen[0][2])).sum() / x.numel()
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.learner.parameters(), 10.0)
        self.optimizer.step()
