"""Cyclic gradient updates with dynamic delays on the virtual cluster (``--policy cyclic``).

The method ("Dynamic Delay Based Cyclic Gradient Update Method for Distributed Training", whose
abstract gives the idea only): workers push gradients to the server in a round-robin order,
accumulate stale gradients locally meanwhile, and push the accumulated sum when they obtain the
token; the delay adapts to each worker. The rule implemented:

* Workers never wait. Worker w computes gradients back to back, its k-th (k = 0, 1, ...) taking
  f x_{k mod T, w} of virtual time (trace row k mod T, column w; f the seconds per trace unit,
  ``bdsgd.cluster.clock``), each on the newest parameters
  when it starts: those after every update applied by then (theta_0 before the first update).
  Reading the parameters is not what the token orders, and is not charged.
* A token visits the workers in the order 0, 1, ..., n-1, 0, ... If worker j holds at least one
  finished gradient it has not pushed, it pushes their sum: the server applies it after one
  exchange, a push and a pull on its link (``bdsgd.cluster.network``: comm_s under the constant topology;
  one push on the wire at a time: the token serialises the traffic that a synchronous step
  sends at once) and the token moves on. If j holds none it is skipped at no cost; when a whole
  round of visits finds nothing the token waits for the next gradient to finish. A gradient
  that finishes while its worker waits for its turn is pushed then, with what else it finished.
* The update of a push of m gradients g_1..g_m of worker j is one step of SGD with momentum,

      v <- momentum * v + sum_i s_i g_i,   theta <- theta - lr * v,

  every gradient applied once at its share s_i of the synchronous rate lr, as in asynchronous
  SGD (``asynchronous``, ``bdsgd.sgd.STALENESS_LR``): 1 / (its staleness + 1) under
  train.staleness_lr inverse, 1 / n under none.

The delays are dynamic in two ways. A slow worker does not hold up the others: its turn is
skipped until it has something, so its gradients wait longer (more updates between their pull
and their push: their staleness grows with the worker's run-time), where the fixed cyclic
schedule (every worker every n-th update, delay n - 1) waits for the slowest in each round. And
a fast worker's gradients within one turn share one push: it communicates once per turn however
many gradients it finished, which is what accumulating locally buys; the wait for the turn adds
to their staleness. With exchanges that cost nothing a push is free, every worker pushes at the instant it
finishes a gradient, and the schedule is asynchronous SGD's (``asynchronous``) update for
update, staleness included (gradients that finish at one instant are applied in the token's
order, from where it stands, rather than the workers'). The two differ in what communication
costs: one serialised push per turn here, one unserialised exchange per gradient there.

Budget and rows as in ``asynchronous``: the run applies iterations * n gradients (the
last push takes only what is left of the budget); a metrics row ends when the applied count
passes a multiple of n (iteration = applied // n, which skips a number when one push carries
more than n gradients: a row per push then), with cutoff = the distinct workers whose
gradients the row applied, gradients, the mean staleness (updates between a gradient's pull and
its push), lr = the mean rate per gradient (lr times its share) and the
mean loss of the row's gradients.

The schedule depends on the trace alone (finish times are running sums of each worker's
column), so it is computed first (``bdsgd.cluster.schedules.cyclic_schedule``): a loop over the
token's visits, not over gradients. The gradients that share a worker, a pull and a push are
one backward pass over the union of their mini-batches (the sum of their means, as in the
cutoff mode), computed right after the update whose parameters they use; gradients that the
budget never pushes are never computed.
Checkpoints hold, besides what every mode's do (``bdsgd.training.loop``), the pending sums and
the next push.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
from torch import nn
from torch.optim import Optimizer

from bdsgd import sgd
from bdsgd.cluster.schedules import cyclic_schedule
from bdsgd.cluster.virtual import VirtualCluster
from bdsgd.training.record import Recorder, staleness_summary
from bdsgd.training.run import RunSetup

logger = logging.getLogger(__name__)


class Cyclic:
    """The cyclic mode (``bdsgd.training.loop``'s mode)."""

    def __init__(self, r: RunSetup, model: nn.Module, optimizer: Optimizer,
                 cluster: VirtualCluster, state: dict | None):
        self.r, self.model, self.optimizer = r, model, optimizer
        tc, n, net = r.tc, cluster.n, cluster.network
        self.sched = cyclic_schedule(r.trace.runtimes * cluster.compute.factor, net.exchange_s,
                                     r.iterations * n)
        self.groups = self.sched.groups()
        logger.info(f"{r.iterations * n} gradients in {len(self.sched.worker)} pushes, each "
                    f"gradient at lr times its share (staleness_lr {tc.staleness_lr}), "
                    f"{net.exchange_s:.4g} s per push")
        self.pending: dict[int, list] = {}  # update -> [sum of its gradients so far, losses]
        if state is None:
            self._compute(0)
            self.update = 0  # the next push
        else:
            self.pending = {u: [[g.to(r.device) for g in grads], loss]
                            for u, (grads, loss) in state["pending"].items()}
            self.update = state["update"]

    def _compute(self, p: int) -> None:
        """The gradients that start from theta_p, which the model holds now."""
        r, tc, n = self.r, self.r.tc, self.r.trace.n_workers
        for u, w, k0, m in self.groups.get(p, []):
            draws = range(k0, k0 + m)
            idx = np.concatenate([r.streams.batch(k, np.array([w])) for k in draws])
            seeds = np.concatenate([r.streams.seeds(k, np.array([w])) for k in draws])
            x, y = r.data.batch(r.data.train, idx, seeds)
            self.model.zero_grad(set_to_none=True)
            loss = sgd.backward(self.model, x, y, tc.chunk_samples, r.device).item() * m
            # m means summed: the union's mean x m; a group shares its pull and push, so its
            # staleness u - p, and its learning-rate share
            weight = m * float(sgd.STALENESS_LR[tc.staleness_lr](u - p, n))
            grads = [g * weight for g in sgd.take_gradient(self.model)]
            if u in self.pending:
                self.pending[u][0] = [a + b for a, b in zip(self.pending[u][0], grads, strict=True)]
                self.pending[u][1] += loss
            else:
                self.pending[u] = [grads, loss]

    def rows(self, rec: Recorder) -> Iterator[dict]:
        """Apply the pushes from the next one on; yield a row whenever the applied count passes a
        multiple of n."""
        tc, sched, n = self.r.tc, self.sched, self.r.trace.n_workers
        lr, total = sgd.rate_at_n(tc, n), self.r.iterations * n * tc.batch_size
        ends = np.cumsum(sched.count)
        share = sgd.STALENESS_LR[tc.staleness_lr](sched.staleness, n)  # per applied gradient
        rates = np.zeros(len(share))
        row_first, row_loss = self.update, 0.0  # the row's first push, its gradients' losses
        for u in range(self.update, len(sched.worker)):
            # the push's rate under train.lr_schedule: its m gradients after the ones before
            m = int(sched.count[u])
            rate = lr * sgd.lr_factor(tc.lr_schedule, tc.warmup_samples,
                                      int(ends[u] - m) * tc.batch_size, m * tc.batch_size, total)
            for group in self.optimizer.param_groups:
                group["lr"] = rate
            rates[int(ends[u] - m):int(ends[u])] = rate
            grads, loss = self.pending.pop(u)
            sgd.apply_gradient(self.model, self.optimizer, grads)
            row_loss += loss
            self._compute(u + 1)
            self.update = u + 1
            iteration = int(ends[u]) // n
            if iteration == rec.last:
                continue
            rows = slice(row_first, u + 1)
            gradients = slice(int(ends[row_first] - sched.count[row_first]), int(ends[u]))
            now = float(sched.time[u])
            yield {"iteration": iteration, "virtual_time_s": now,
                   "cutoff": len(np.unique(sched.worker[rows])),
                   "iteration_time_s": now - rec.clock,
                   "lr": float((rates[gradients] * share[gradients]).mean()),
                   "train_loss": row_loss / int(sched.count[rows].sum()),
                   "gradients": int(sched.count[rows].sum()),
                   "staleness": float(sched.staleness[gradients].mean())}
            row_first, row_loss = u + 1, 0.0

    def checkpoint(self) -> dict:
        return {"update": self.update, "pending": self.pending}

    def summary(self) -> dict:
        return {**staleness_summary(self.sched.staleness), "pushes": len(self.sched.worker)}

    def wallclock(self) -> dict:
        return {}
