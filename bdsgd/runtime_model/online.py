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

Off the decision's path. The step runs in a process of its own (one for every model the server
process serves: ``_learning_process``), on the learner, a copy of the model it holds, while the
server goes on filtering and deciding with the parameters it has. A thread would share the
interpreter: the filter's hundreds of small torch operations and the step's would take turns,
and the median decision took 2.5x as long. The step started at iteration t is taken up at
iteration t + every, whatever the wall-clock time, so a replay is the same on any machine;
taking it up waits only if the step is not done by then (on a real cluster ``every`` iterations
take far longer than a step, ``window`` filtering steps forward and backward; a replay, which has
no iteration time, may wait). The step size is small and each step's gradient is clipped as in
training: one window is a short, noisy sample of the cluster; many small steps follow a change,
and one odd window cannot undo the training.
"""

from __future__ import annotations

import itertools
import multiprocessing
import weakref
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np
import torch

from bdsgd.runtime_model.filtering import FilterState
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.runtime_model.parameters import StepParameters

_POOL: ProcessPoolExecutor | None = None  # the learning process, started on first use
_KEYS = itertools.count()
_LEARNERS: dict = {}  # in the learning process: key -> (learner, optimizer, generator)


def _learning_process() -> ProcessPoolExecutor:
    """The one process that learns for every model of this process (spawned: a fork of a process
    that runs torch may hang), its steps in the order they were asked for."""
    global _POOL
    if _POOL is None:
        _POOL = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                    initializer=torch.set_num_threads, initargs=(1,))
    return _POOL


def regime_parameters(model: RuntimeModel) -> list[torch.nn.Parameter]:
    """The parameters learnt while serving (the module docstring): the transition's and the
    emitter's scalars but g's dynamics (A, b, q_g), which the inference network reads with them."""
    return [p for module in (model.transition, model.emitter)
            for name, p in module.named_parameters(recurse=False)
            if name not in ("A", "b", "log_q_g")]


def _start(key: int, learner: RuntimeModel, learning_rate: float, seed: int) -> None:
    """In the learning process: keep a learner, its optimiser and the generator of its ELBO's
    draws of q(g)."""
    _LEARNERS[key] = (learner, torch.optim.Adam(regime_parameters(learner), lr=learning_rate),
                      torch.Generator().manual_seed(seed))


def _stop(key: int) -> None:
    _LEARNERS.pop(key, None)


def _step(key: int, x: np.ndarray, censored: np.ndarray, start: list) -> list[np.ndarray]:
    """In the learning process: one Adam step of learner ``key`` on the ELBO of the window
    (x~ and censored (1, window, n), q(z) before it); its regime parameters after the step."""
    learner, optimizer, generator = _LEARNERS[key]
    state = FilterState(*(torch.from_numpy(a) for a in start))
    loss = -learner.elbo(torch.from_numpy(x), torch.from_numpy(censored), generator,
                         start=state).sum() / x.size
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(learner.parameters(), 10.0)
    optimizer.step()
    return [p.detach().numpy().copy() for p in regime_parameters(learner)]


class OnlineFit:
    """Every ``every`` observations, one Adam step on the ELBO of the last ``window``, in the
    learning process (see the module docstring). ``record`` is called with each observation and
    the server's filter state before it; it returns the server model's new ``StepParameters``
    when it takes up a finished step, else None."""

    def __init__(self, model: RuntimeModel, every: int, window: int, learning_rate: float,
                 seed: int = 0):
        if every < 1 or window < 1:
            raise ValueError(f"online fit every {every}, window {window}: both at least 1")
        self.server, self.every, self.key = model, every, next(_KEYS)
        pool = _learning_process()
        pool.submit(_start, self.key, model, learning_rate, seed)
        # forget the learner with its server; at exit the learning process ends anyway
        weakref.finalize(self, pool.submit, _stop, self.key).atexit = False
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
            learnt = self.pending.result()
            with torch.no_grad():
                for mine, value in zip(regime_parameters(self.server), learnt, strict=True):
                    mine.copy_(torch.from_numpy(value))
            self.steps += 1
            new = self.server.step_parameters()
        self.pending = None
        if len(self.seen) == self.seen.maxlen:
            x = torch.stack([x for x, _, _ in self.seen], 1).numpy()
            censored = torch.stack([c for _, c, _ in self.seen], 1).numpy()
            start = [t.numpy() for t in vars(self.seen[0][2]).values()]
            self.pending = _learning_process().submit(_step, self.key, x, censored, start)
        return new
