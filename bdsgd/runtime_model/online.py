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

Off the decision's path. The step runs in a thread of its own (torch releases the interpreter
while it computes), on a copy of the model (the learner), while the server goes on filtering
and deciding with the parameters it has; the step started at iteration t is taken up at
iteration t + every, whatever the wall-clock time, so a replay is the same on any machine.
Taking it up waits only if the step is not done by then: on a real cluster ``every`` iterations
take far longer than a step (``window`` filtering steps forward and backward); a replay, which
has no iteration time, waits. The step size is small and each step's gradient is clipped as in
training: one window is a short, noisy sample of the cluster; many small steps follow a change,
and one odd window cannot undo the training.
"""

from __future__ import annotations

import copy
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from bdsgd.runtime_model.filtering import FilterState
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.runtime_model.parameters import StepParameters

# one thread learns for every model of the process: each has at most one step under way
_LEARNER = ThreadPoolExecutor(1, thread_name_prefix="bdsgd-online")


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
    """Every ``every`` observations, one Adam step on the ELBO of the last ``window``, in the
    learning thread (see the module docstring). ``record`` is called with each observation and
    the server's filter state before it; it returns the server model's new ``StepParameters``
    when it takes up a finished step, else None."""

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
        self.steps = 0  # steps taken up
        self.pending: Future | None = None

    def record(self, x: torch.Tensor, censored: torch.Tensor,
               before: FilterState) -> StepParameters | None:
        """Keep observation (x~ (1, n), censored (1, n)), seen from state ``before``."""
        self.seen.append((x, censored, before))
        self.count += 1
        if self.count % self.every:
            return None
        new = None
        if self.pending is not None:
            self.pending.result()  # the learner is idle from here until the next submit
            with torch.no_grad():
                for mine, learnt in zip(regime_parameters(self.server),
                                        regime_parameters(self.learner), strict=True):
                    mine.copy_(learnt)
            self.steps += 1
            new = self.server.step_parameters()
        self.pending = (_LEARNER.submit(self.step, list(self.seen))
                        if len(self.seen) == self.seen.maxlen else None)
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
