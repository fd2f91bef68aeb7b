"""Asynchronous SGD on the virtual cluster (``bdsgd train --policy async``), Chen et al.'s baseline.

Each of the n = trace.n_workers workers computes gradients back to back, each on the parameters
it last pulled; the server applies every gradient the moment it arrives. Worker w's k-th gradient
(k = 0, 1, ...) takes f x_{k mod T, w} of virtual time (trace row k mod T, column w; f the
seconds per trace unit, ``bdsgd.clock``), then its push and pull on the server's link
(``bdsgd.schedules``, from the network model), and it starts when its (k-1)-th arrived (at time
0 for k = 0). The arrivals are applied in order of
time, ties by worker index. Update u (u = 0, 1, ...) applies the gradient
that arrives u-th, say worker w's k-th, computed on its k-th mini-batch (``WorkerStreams``,
iteration k, worker w) at the parameters theta_p it pulled after update p - 1:

    theta_{u+1} = theta_u - (lr / n) * m_{u+1},   m_{u+1} = momentum * m_u + grad L_{k,w}(theta_p)

(torch.optim.SGD with train.momentum, at lr / n: each update is one worker's batch, n of them
one synchronous step's worth; train.lr_scaling does not apply; train.staleness_lr inverse
divides the gradient by max(1, staleness) first, as cyclic does). Then w pulls theta_{u+1} and
starts its (k+1)-th gradient. Gradients that arrive at the same virtual instant are applied one
after the other (in worker order) and their workers pull after the instant's last update: on a
trace whose workers are all equally fast, a round of n updates then starts from one set of
parameters and, with momentum 0, equals one synchronous step at lr.

Staleness of an applied gradient = the number of updates applied between its pull and its
arrival (u - p above); 0..n-1 within each round when all workers are equally fast.

Budget: train.max_iterations counts synchronous-equivalent iterations; the run applies
max_iterations * n gradients, as many as sync computes. A round is n applied gradients; metrics
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
computed first (``bdsgd.schedules.async_schedule``, whose tie rule this is); a gradient that
would arrive after the budget is not computed.

Checkpoints (every train.checkpoint_every rounds) hold the model, optimiser, RNG states, the
in-flight gradients and the metrics so far (the clock is the last row's); the schedule is
recomputed on resume. SIGTERM/SIGINT stop at a round's end with a checkpoint (``Stopped``), as
in the cutoff mode.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bdsgd import sgd
from bdsgd.config import Config
from bdsgd.devices import torch_settings
from bdsgd.errors import stop_requests
from bdsgd.schedules import async_schedule
from bdsgd.training import record, run

logger = logging.getLogger(__name__)


def worker_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int,
                    device: torch.device) -> tuple[list, float]:
    """One worker's gradient of its mini-batch's mean loss at the model's parameters; the loss."""
    model.zero_grad(set_to_none=True)
    loss = sgd.backward(model, x, y, chunk, device)
    return sgd.take_gradient(model), loss.item()


def train_async(cfg: Config, task: str, seed: int, trace_path, out_dir, history_path=None) -> Path:
    """One asynchronous run; the cutoff mode's outputs (``synchronous.train_cutoff``), resumable alike.
    ``history_path`` is checked and recorded only: no policy learns from it."""
    wall_start = time.perf_counter()
    out_dir = Path(out_dir)
    r = run.prepare(cfg, task, "async", seed, trace_path, out_dir, history_path)
    tc, data, streams, device = r.tc, r.data, r.streams, r.device
    T, n = r.trace.runtimes.shape
    rounds, lr = tc.max_iterations, sgd.rate_at_n(tc, n) / n

    with torch_settings(tc.threads, device), stop_requests() as stop:
        model, optimizer = run.new_model(r, seed, lr)
        state = run.load_checkpoint(r, model, optimizer)
        clock, net = run.virtual_clock(cfg, r, model, state)
        sched = async_schedule(r.trace.runtimes * clock.factor, net.exchange_s, rounds * n,
                               net.link_s)
        needed = np.bincount(sched.worker, minlength=n)  # each worker's gradients applied
        factor = sgd.STALENESS_LR[tc.staleness_lr](sched.staleness)  # per applied gradient
        # each update's rate under train.lr_schedule: update u applies one worker's batch after
        # u of them (bdsgd.sgd.lr_factor)
        rates, total = np.zeros(rounds * n), rounds * n * tc.batch_size
        logger.info(f"train {task} / async / seed {seed}: n={n} workers, T={T} trace iterations, "
                    f"{rounds} rounds of n gradients, batch {tc.batch_size} per worker "
                    f"({streams.per_epoch} per epoch), lr {tc.learning_rate} / n per gradient "
                    f"(staleness_lr {tc.staleness_lr}), {clock.clock} clock, {net.topology} "
                    f"network: {net.exchange_s:.4g} s per push, target accuracy {r.target}, "
                    f"device {device}")
        flight: dict[int, tuple[list, float]] = {}  # worker -> its gradient in flight, its loss

        def compute(w: int, k: int) -> None:
            x, y = data.batch(data.train, streams.batch(k, np.array([w])),
                              streams.seeds(k, np.array([w])))
            flight[w] = worker_gradient(model, x, y, tc.chunk_samples, device)

        if state is not None:
            flight = {w: ([None if g is None else g.to(device) for g in grads], loss)
                      for w, (grads, loss) in state["flight"].items()}
        else:
            for w in np.flatnonzero(needed):
                compute(int(w), 0)
        rec = record.Recorder(cfg, r, "async", seed, out_dir,
                              None if state is None else state["metrics"], stop)
        start = rec.last
        # the workers applied since the last pull (none at a round's end unless its instant goes on)
        first = start * n
        while first > 0 and not sched.pull[first - 1]:
            first -= 1
        for i in range(start, rounds):
            if rec.done:  # train.stop_at_target: the margin after the target is done
                break
            losses = []
            for u in range(i * n, (i + 1) * n):
                rates[u] = lr * sgd.lr_factor(tc.lr_schedule, tc.warmup_samples,
                                              u * tc.batch_size, tc.batch_size, total)
                for group in optimizer.param_groups:
                    group["lr"] = float(rates[u])
                grads, loss = flight.pop(int(sched.worker[u]))
                if factor[u] != 1.0:  # scale the gradient, not the rate: momentum keeps its past
                    grads = [None if g is None else g * float(factor[u]) for g in grads]
                sgd.apply_gradient(model, optimizer, grads)
                losses.append(loss)
                if sched.pull[u]:
                    for v, k in zip(sched.worker[first:u + 1], sched.index[first:u + 1],
                                    strict=True):
                        if k + 1 < needed[v]:
                            compute(int(v), int(k) + 1)
                    first = u + 1
            now, rows = float(sched.arrival[(i + 1) * n - 1]), slice(i * n, (i + 1) * n)
            rec.record(model, {
                "iteration": i + 1, "virtual_time_s": now,
                "cutoff": len(np.unique(sched.worker[rows])),
                "iteration_time_s": now - rec.clock,
                "lr": float((rates[rows] * factor[rows]).mean()),
                "train_loss": float(np.mean(losses)),
                "gradients": n, "staleness": float(sched.staleness[rows].mean())},
                lambda: run.save_checkpoint(r, model, optimizer, metrics=rec.log,
                                            flight=flight, compute=dataclasses.asdict(clock)))
        rec.close()

    record.write_stale_outputs(cfg, r, rec.log, model, trace_path, history_path, out_dir, {
        "seconds": time.perf_counter() - wall_start, "resumed_from_iteration": start},
        sched.staleness, clock=run.clock_record(clock, net, None))
    return out_dir
