"""Cyclic gradient updates with dynamic delays on the virtual cluster (``--policy cyclic``).

The method ("Dynamic Delay Based Cyclic Gradient Update Method for Distributed Training", whose
abstract gives the idea only): workers push gradients to the server in a round-robin order,
accumulate stale gradients locally meanwhile, and push the accumulated sum when they obtain the
token; the delay adapts to each worker. The rule implemented:

* Workers never wait. Worker w computes gradients back to back, its k-th (k = 0, 1, ...) taking
  f x_{k mod T, w} of virtual time (trace row k mod T, column w; f the seconds per trace unit,
  ``bdsgd.clock``), each on the newest parameters
  when it starts: those after every update applied by then (theta_0 before the first update).
  Reading the parameters is not what the token orders, and is not charged.
* A token visits the workers in the order 0, 1, ..., n-1, 0, ... If worker j holds at least one
  finished gradient it has not pushed, it pushes their sum: the server applies it after one
  exchange, a push and a pull on its link (``bdsgd.network``: comm_s under the constant topology;
  one push on the wire at a time: the token serialises the traffic that a synchronous step
  sends at once) and the token moves on. If j holds none it is skipped at no cost; when a whole
  round of visits finds nothing the token waits for the next gradient to finish. A gradient
  that finishes while its worker waits for its turn is pushed then, with what else it finished.
* The update of a push of m gradients g_1..g_m of worker j is one step of SGD with momentum,

      v <- momentum * v + sum_i g_i,   theta <- theta - (lr / n) * v,

  every gradient applied once at lr / n, as in asynchronous SGD (``asynchronous``); under
  train.staleness_lr inverse each g_i is first divided by max(1, its staleness).

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

Budget and rows as in ``asynchronous``: the run applies train.max_iterations * n gradients (the
last push takes only what is left of the budget); a metrics row ends when the applied count
passes a multiple of n (iteration = applied // n, which skips a number when one push carries
more than n gradients: a row per push then), with cutoff = the distinct workers whose
gradients the row applied, gradients, the mean staleness (updates between a gradient's pull and
its push), lr = the mean rate per gradient (lr / n, or less under train.staleness_lr) and the
mean loss of the row's gradients.

The schedule depends on the trace alone (finish times are running sums of each worker's
column), so it is computed first (``bdsgd.schedules.cyclic_schedule``): a loop over the
token's visits, not over gradients. The gradients that share a worker, a pull and a push are
one backward pass over the union of their mini-batches (the sum of their means, as in the
cutoff mode), computed right after the update whose parameters they use; gradients that the
budget never pushes are never computed.
Checkpoints hold the pending sums, model, optimiser, RNG states and metrics; SIGTERM/SIGINT stop
at a row's end (``Stopped``) and the same command resumes.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import numpy as np

from bdsgd import sgd
from bdsgd.config import Config
from bdsgd.devices import torch_settings
from bdsgd.errors import stop_requests
from bdsgd.schedules import cyclic_schedule
from bdsgd.training import record, run

logger = logging.getLogger(__name__)


def train_cyclic(cfg: Config, task: str, seed: int, trace_path, out_dir, history_path=None) -> Path:
    """One cyclic run; the cutoff mode's outputs (``synchronous.train_cutoff``), resumable alike.
    ``history_path`` is checked and recorded only: no policy learns from it."""
    wall_start = time.perf_counter()
    out_dir = Path(out_dir)
    r = run.prepare(cfg, task, "cyclic", seed, trace_path, out_dir, history_path)
    tc, data, streams, device = r.tc, r.data, r.streams, r.device
    T, n = r.trace.runtimes.shape
    lr = sgd.rate_at_n(tc, n) / n

    with torch_settings(tc.threads, device), stop_requests() as stop:
        model, optimizer = run.new_model(r, seed, lr)
        state = run.load_checkpoint(r, model, optimizer)
        clock, net = run.virtual_clock(cfg, r, model, state)
        sched = cyclic_schedule(r.trace.runtimes * clock.factor, net.exchange_s,
                                tc.max_iterations * n)
        groups, ends = sched.groups(), np.cumsum(sched.count)
        scale = sgd.STALENESS_LR[tc.staleness_lr](sched.staleness)  # per applied gradient
        rates, total = np.zeros(len(scale)), tc.max_iterations * n * tc.batch_size
        logger.info(f"train {task} / cyclic / seed {seed}: n={n} workers, T={T} trace "
                    f"iterations, {tc.max_iterations * n} gradients in {len(sched.worker)} "
                    f"pushes, batch {tc.batch_size} per worker ({streams.per_epoch} per epoch), "
                    f"lr {tc.learning_rate} / n per gradient, {clock.clock} clock, "
                    f"{net.topology} network: {net.exchange_s:.4g} s per push, target accuracy "
                    f"{r.target}, device {device}")
        pending: dict[int, list] = {}  # update -> [sum of its gradients so far, sum of losses]
        row_loss = 0.0  # the losses of the gradients applied since the last row

        def compute(p: int) -> None:
            """The gradients that start from theta_p, which the model holds now."""
            for u, w, k0, m in groups.get(p, []):
                draws = range(k0, k0 + m)
                idx = np.concatenate([streams.batch(k, np.array([w])) for k in draws])
                seeds = np.concatenate([streams.seeds(k, np.array([w])) for k in draws])
                x, y = data.batch(data.train, idx, seeds)
                model.zero_grad(set_to_none=True)
                loss = sgd.backward(model, x, y, tc.chunk_samples, device).item() * m
                # m means summed: the union's mean x m; a group shares its pull and push, so
                # its staleness u - p, and its learning-rate factor
                weight = m * float(sgd.STALENESS_LR[tc.staleness_lr](u - p))
                grads = [g * weight for g in sgd.take_gradient(model)]
                if u in pending:
                    pending[u][0] = [a + b for a, b in zip(pending[u][0], grads, strict=True)]
                    pending[u][1] += loss
                else:
                    pending[u] = [grads, loss]

        if state is None:
            compute(0)
            u0 = 0
        else:
            pending = {u: [[g.to(device) for g in grads], loss]
                       for u, (grads, loss) in state["pending"].items()}
            u0 = state["update"]
        rec = record.Recorder(cfg, r, "cyclic", seed, out_dir,
                              None if state is None else state["metrics"], stop)
        start, row_first = rec.last, u0  # the row's first update
        for u in range(u0, len(sched.worker)):
            if rec.done:  # train.stop_at_target: the margin after the target is done
                break
            # the push's rate under train.lr_schedule: its m gradients after the ones before
            m = int(sched.count[u])
            rate = lr * sgd.lr_factor(tc.lr_schedule, tc.warmup_samples,
                                      int(ends[u] - m) * tc.batch_size, m * tc.batch_size, total)
            for group in optimizer.param_groups:
                group["lr"] = rate
            rates[int(ends[u] - m):int(ends[u])] = rate
            grads, loss = pending.pop(u)
            sgd.apply_gradient(model, optimizer, grads)
            row_loss += loss
            compute(u + 1)
            iteration = int(ends[u]) // n
            if iteration == rec.last:
                continue
            rows = slice(row_first, u + 1)
            gradients = slice(int(ends[row_first] - sched.count[row_first]), int(ends[u]))
            now = float(sched.time[u])
            rec.record(model, {
                "iteration": iteration, "virtual_time_s": now,
                "cutoff": len(np.unique(sched.worker[rows])),
                "iteration_time_s": now - rec.clock,
                "lr": float((rates[gradients] * scale[gradients]).mean()),
                "train_loss": row_loss / int(sched.count[rows].sum()),
                "gradients": int(sched.count[rows].sum()),
                "staleness": float(sched.staleness[gradients].mean())},
                lambda u=u: run.save_checkpoint(r, model, optimizer, metrics=rec.log,
                                                update=u + 1, pending=pending,
                                                compute=dataclasses.asdict(clock)))
            row_first, row_loss = u + 1, 0.0
        rec.close()

    record.write_stale_outputs(cfg, r, rec.log, model, trace_path, history_path, out_dir, {
        "seconds": time.perf_counter() - wall_start, "resumed_from_iteration": start},
        sched.staleness, {"pushes": len(sched.worker)}, run.clock_record(clock, net, None))
    return out_dir
