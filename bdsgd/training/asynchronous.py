"""Asynchronous SGD on the virtual cluster (``bdsgd train --policy async``), Chen et al.'s baseline.

Each of the n = trace.n_workers workers computes gradients back to back, each on the parameters
it last pulled; the server applies every gradient the moment it arrives. Worker w's k-th gradient
(k = 0, 1, ...) takes f x_{k mod T, w} of virtual time (trace row k mod T, column w; f the
seconds per trace unit, ``bdsgd.cluster.compute``), then its push and pull on the server
(``bdsgd.cluster.schedules``, from the network model), and it starts when its (k-1)-th arrived
(at time 0 for k = 0). The arrivals are applied in order of time, ties by worker index. Update u
(u = 0, 1, ...) applies the gradient that arrives u-th, say worker w's k-th, computed on its k-th
mini-batch (``WorkerStreams``, iteration k, worker w) at the parameters theta_p it pulled after
update p - 1:

    theta_{u+1} = theta_u - lr * m_{u+1},   m_{u+1} = momentum * m_u + s_u grad L_{k,w}(theta_p)

(torch.optim.SGD with train.momentum at the synchronous rate lr; train.lr_scaling does not
apply). s_u is the gradient's share (``bdsgd.sgd.STALENESS_LR``, as in cyclic): under
train.staleness_lr inverse, Zhang et al. 2016's staleness-aware rate, s_u = 1 / (u - p + 1), so
n equally fast workers out of step (each gradient n - 1 updates stale) move the parameters as
far in a round as one synchronous step does; under none s_u = 1 / n whatever the staleness. Then
w pulls theta_{u+1} and starts its (k+1)-th gradient. Gradients that arrive at the same virtual
instant are applied one after the other (in worker order) and their workers pull after the
instant's last update: on a trace whose workers are all equally fast, a round of n updates then
starts from one set of parameters and, with momentum 0 and s_u = 1 / n, equals one synchronous
step at lr.

Staleness of an applied gradient = the number of updates applied between its pull and its
arrival (u - p above); 0..n-1 within each round when all workers are equally fast.

Budget: the run's iterations (``RunSetup.iterations``) count synchronous-equivalent ones; it
applies iterations * n gradients, as many as sync computes. A round is n applied gradients; metrics
has one row per round with the cutoff mode's columns (iteration = round, virtual_time_s = the
round's last arrival, cutoff = the distinct workers whose gradients the round applied,
iteration_time_s = time since the previous row, lr = the round's mean rate per gradient,
train_loss = the mean loss of the round's gradients at the parameters they were computed on,
gradients = n, staleness = the round's mean), evaluated every train.eval_every rounds and at
the end; result.json's summary adds the mean, max, median and 90th percentile of the staleness.

A gradient is computed when its worker pulls, not when it arrives: it depends only on the pulled
parameters and the worker's mini-batch, both fixed at the pull, so the update is the same. At
the pull the model holds exactly those parameters, so nothing is copied or swapped in; the cost
is n stored gradients (one in flight per worker) instead of n stored parameter snapshots. The
arrival times depend on the trace alone, never on the gradients, so the whole event schedule is
computed first (``bdsgd.cluster.schedules.async_schedule``, whose tie rule this is); a gradient that
would arrive after the budget is not computed.

Checkpoints hold, besides what every mode's do (``bdsgd.training.loop``), the in-flight
gradients; the schedule is recomputed on resume.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn
from torch.optim import Optimizer

from bdsgd import sgd
from bdsgd.cluster.schedules import async_schedule
from bdsgd.cluster.virtual import VirtualCluster
from bdsgd.training.record import Recorder, staleness_summary
from bdsgd.training.run import RunSetup

logger = logging.getLogger(__name__)


def worker_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int,
                    device: torch.device) -> tuple[list, float]:
    """One worker's gradient of its mini-batch's mean loss at the model's parameters; the loss."""
    model.zero_grad(set_to_none=True)
    loss = sgd.backward(model, x, y, chunk, device)
    return sgd.take_gradient(model), loss.item()


class Async:
    """The asynchronous mode (``bdsgd.training.loop``'s mode)."""

    def __init__(self, r: RunSetup, model: nn.Module, optimizer: Optimizer,
                 cluster: VirtualCluster, state: dict | None):
        self.r, self.model, self.optimizer = r, model, optimizer
        tc, n = r.tc, cluster.n
        net, f = cluster.network, cluster.compute.factor
        self.sched = async_schedule(r.trace.runtimes * f, net.exchange_s,
                                    r.iterations * n, net.link_s)
        self.needed = np.bincount(self.sched.worker, minlength=n)  # each worker's gradients applied
        self.share = sgd.STALENESS_LR[tc.staleness_lr](self.sched.staleness, n)  # per gradient
        logger.info(f"{r.iterations} rounds of n gradients, each at lr times its share "
                    f"(staleness_lr {tc.staleness_lr}), {net.exchange_s:.4g} s per push")
        self.flight: dict[int, tuple[list, float]] = {}  # worker -> its gradient in flight, loss
        if state is not None:
            self.flight = {w: ([None if g is None else g.to(r.device) for g in grads], loss)
                           for w, (grads, loss) in state["flight"].items()}
        else:
            for w in np.flatnonzero(self.needed):
                self._compute(int(w), 0)

    def _compute(self, w: int, k: int) -> None:
        r = self.r
        x, y = r.data.batch(r.data.train, r.streams.batch(k, np.array([w])),
                            r.streams.seeds(k, np.array([w])))
        self.flight[w] = worker_gradient(self.model, x, y, r.tc.chunk_samples, r.device)

    def rows(self, rec: Recorder) -> Iterator[dict]:
        """Apply the updates round by round from the last of ``rec``'s rows; yield each round."""
        tc, sched, n = self.r.tc, self.sched, len(self.needed)
        lr, total = sgd.rate_at_n(tc, n), self.r.iterations * n * tc.batch_size
        # each update's rate under train.lr_schedule: update u applies one worker's batch after
        # u of them (bdsgd.sgd.lr_factor)
        rates = np.zeros(self.r.iterations * n)
        # the workers applied since the last pull (none at a round's end unless its instant goes on)
        first = rec.last * n
        while first > 0 and not sched.pull[first - 1]:
            first -= 1
        for i in range(rec.last, self.r.iterations):
            losses = []
            for u in range(i * n, (i + 1) * n):
                rates[u] = lr * sgd.lr_factor(tc.lr_schedule, tc.warmup_samples,
                                              u * tc.batch_size, tc.batch_size, total)
                for group in self.optimizer.param_groups:
                    group["lr"] = float(rates[u])
                grads, loss = self.flight.pop(int(sched.worker[u]))
                # scale the gradient, not the rate: momentum keeps its past
                grads = [None if g is None else g * float(self.share[u]) for g in grads]
                sgd.apply_gradient(self.model, self.optimizer, grads)
                losses.append(loss)
                if sched.pull[u]:
                    for v, k in zip(sched.worker[first:u + 1], sched.index[first:u + 1],
                                    strict=True):
                        if k + 1 < self.needed[v]:
                            self._compute(int(v), int(k) + 1)
                    first = u + 1
            now, rows = float(sched.arrival[(i + 1) * n - 1]), slice(i * n, (i + 1) * n)
            yield {"iteration": i + 1, "virtual_time_s": now,
                   "cutoff": len(np.unique(sched.worker[rows])),
                   "iteration_time_s": now - rec.clock,
                   "lr": float((rates[rows] * self.share[rows]).mean()),
                   "train_loss": float(np.mean(losses)),
                   "gradients": n, "staleness": float(sched.staleness[rows].mean())}

    def checkpoint(self) -> dict:
        return {"flight": self.flight}

    def summary(self) -> dict:
        return staleness_summary(self.sched.staleness)

    def wallclock(self) -> dict:
        return {}
