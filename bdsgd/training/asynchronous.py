"""Asynchronous SGD on the virtual cluster (``bdsgd train --policy async``), Chen et al.'s baseline.

Each of the n = trace.n_workers workers computes gradients back to back, each on the parameters
it last pulled; the server applies every gradient the moment it arrives. Worker w's k-th gradient
(k = 0, 1, ...) takes x_{k mod T, w} + comm_s of virtual time (trace row k mod T, column w) and
starts when its (k-1)-th arrived (at time 0 for k = 0). A priority queue of (arrival time,
worker) orders the arrivals, ties by worker index. Update u (u = 0, 1, ...) applies the gradient
that arrives u-th, say worker w's k-th, computed on its k-th mini-batch (``WorkerStreams``,
iteration k, worker w) at the parameters theta_p it pulled after update p - 1:

    theta_{u+1} = theta_u - (lr / n) * m_{u+1},   m_{u+1} = momentum * m_u + grad L_{k,w}(theta_p)

(torch.optim.SGD with train.momentum, at lr / n: each update is one worker's batch, n of them
one synchronous step's worth; train.lr_scaling does not apply). Then w pulls theta_{u+1} and
starts its (k+1)-th gradient. Gradients that arrive at the same virtual instant are applied one
after the other (in worker order) and their workers pull after the instant's last update: on a
trace whose workers are all equally fast, a round of n updates then starts from one set of
parameters and, with momentum 0, equals one synchronous step at lr.

Staleness of an applied gradient = the number of updates applied between its pull and its
arrival (u - p above); 0..n-1 within each round when all workers are equally fast.

Budget: train.max_iterations counts synchronous-equivalent iterations; the run applies
max_iterations * n gradients, as many as sync computes. A round is n applied gradients; metrics
has one row per round with the cutoff mode's columns (iteration = round, virtual_time_s = the
round's last arrival, cutoff = n, iteration_time_s = time since the previous row, lr = lr / n,
train_loss = the mean loss of the round's gradients at the parameters they were computed on),
evaluated every train.eval_every rounds and at the end; result.json's summary adds the mean,
max, median and 90th percentile of the staleness.

A gradient is computed when its worker pulls, not when it arrives: it depends only on the pulled
parameters and the worker's mini-batch, both fixed at the pull, so the update is the same. At
the pull the model holds exactly those parameters, so nothing is copied or swapped in; the cost
is n stored gradients (one in flight per worker) instead of n stored parameter snapshots. The
arrival times depend on the trace alone, never on the gradients, so the whole event schedule is
computed first (``schedule``); a gradient that would arrive after the budget is not computed.

Checkpoints (every train.checkpoint_every rounds) hold the model, optimiser, RNG states, clock,
the in-flight gradients and the metrics so far; the heap and the per-worker counters at that
update are the schedule's, recomputed on resume. SIGTERM/SIGINT stop at a round's end with a
checkpoint (``Stopped``), as in the cutoff mode.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from bdsgd.config import Config
from bdsgd.errors import Stopped
from bdsgd.io import write_with
from bdsgd.training.virtual import (
    COLUMNS,
    _stop_requests,
    _torch_settings,
    _wandb_run,
    backward,
    evaluate,
    load_checkpoint,
    prepare,
    write_outputs,
)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The asynchronous run's updates in order (arrays of length n_updates)."""
    worker: np.ndarray     # the worker whose gradient update u applies
    index: np.ndarray      # that gradient's number k for its worker (its mini-batch's iteration)
    arrival: np.ndarray    # its arrival: the virtual time of update u
    staleness: np.ndarray  # updates applied between its pull and its arrival
    pull: np.ndarray       # update u ends its instant: the workers applied since the last pull pull


def schedule(runtimes: np.ndarray, comm_s: float, n_updates: int) -> Schedule:
    """The event-driven simulation of asynchronous SGD's timing on the trace (cycled)."""
    T, n = runtimes.shape
    heap = [(float(runtimes[0, w] + comm_s), w) for w in range(n)]
    heapq.heapify(heap)
    started, pulled_at, pending = np.zeros(n, np.int64), np.zeros(n, np.int64), []
    worker, index, staleness = (np.empty(n_updates, np.int64) for _ in range(3))
    arrival, pull = np.empty(n_updates), np.empty(n_updates, bool)
    for u in range(n_updates):
        a, w = heapq.heappop(heap)
        worker[u], index[u], arrival[u], staleness[u] = w, started[w], a, u - pulled_at[w]
        pending.append(w)
        pull[u] = not heap or heap[0][0] != a
        if pull[u]:
            for v in pending:
                pulled_at[v], started[v] = u + 1, started[v] + 1
                heapq.heappush(heap, (a + float(runtimes[started[v] % T, v] + comm_s), v))
            pending = []
    return Schedule(worker, index, arrival, staleness, pull)


def worker_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int,
                    device: torch.device) -> tuple[list, float]:
    """One worker's gradient of its mini-batch's mean loss at the model's parameters; the loss."""
    model.zero_grad(set_to_none=True)
    loss = backward(model, x, y, chunk, device)
    grads = [p.grad for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads, loss.item()


def _apply(model: nn.Module, optimizer: torch.optim.Optimizer, grads: list) -> None:
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g
    optimizer.step()
    model.zero_grad(set_to_none=True)


def train_async(cfg: Config, task: str, seed: int, trace_path, out_dir, history_path=None) -> Path:
    """One asynchronous run; the cutoff mode's outputs (``virtual.train_run``), resumable alike.
    ``history_path`` is checked and recorded only: no policy learns from it."""
    wall_start = time.perf_counter()
    comm_s, out_dir = cfg.throughput.comm_s, Path(out_dir)
    r = prepare(cfg, task, "async", seed, trace_path, out_dir, history_path)
    tc, data, streams, device = r.tc, r.data, r.streams, r.device
    T, n = r.trace.runtimes.shape
    rounds, lr = tc.max_iterations, tc.learning_rate / n
    sched = schedule(r.trace.runtimes, comm_s, rounds * n)
    needed = np.bincount(sched.worker, minlength=n)  # gradients of each worker that get applied
    print(f"train {task} / async / seed {seed}: n={n} workers, T={T} trace iterations, "
          f"{rounds} rounds of n gradients, batch {tc.batch_size} per worker "
          f"({streams.per_epoch} per epoch), lr {tc.learning_rate} / n per gradient, "
          f"comm {comm_s} s, target accuracy {r.target}, device {device}")

    with _torch_settings(tc.threads, device), _stop_requests() as stop:
        torch.manual_seed(seed)
        model = data.make_model().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=tc.momentum)
        log: dict[str, list] = {col: [] for col in COLUMNS}
        clock, start = 0.0, 0
        flight: dict[int, tuple[list, float]] = {}  # worker -> its gradient in flight, its loss

        def compute(w: int, k: int) -> None:
            x, y = data.batch(data.train, streams.batch(k, np.array([w])))
            flight[w] = worker_gradient(model, x, y, tc.chunk_samples, device)

        state = load_checkpoint(r)
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["torch_rng"])
            if device.type == "cuda":
                torch.cuda.set_rng_state_all(state["cuda_rng"])
            log, clock, start = state["metrics"], state["clock"], state["round"]
            flight = {w: ([None if g is None else g.to(device) for g in grads], loss)
                      for w, (grads, loss) in state["flight"].items()}
            print(f"resumed from {r.ckpt_path} at round {start}")
        else:
            for w in np.flatnonzero(needed):
                compute(int(w), 0)

        def save_checkpoint(done: int) -> None:
            state = {"identity": r.identity, "round": done, "clock": clock, "metrics": log,
                     "flight": flight, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
                     "cuda_rng": torch.cuda.get_rng_state_all() if device.type == "cuda" else []}
            write_with(r.ckpt_path, lambda tmp: torch.save(state, tmp))

        run = _wandb_run(cfg, task, "async", seed, out_dir) if start < rounds else None
        shown = next((a for a in reversed(log["test_accuracy"]) if not math.isnan(a)), math.nan)
        # the workers applied since the last pull (none at a round's end unless its instant goes on)
        first = start * n
        while first > 0 and not sched.pull[first - 1]:
            first -= 1
        bar = tqdm(range(start, rounds), initial=start, total=rounds, file=sys.stderr,
                   desc=f"{task}/async/s{seed}")
        for i in bar:
            losses = []
            for u in range(i * n, (i + 1) * n):
                grads, loss = flight.pop(int(sched.worker[u]))
                _apply(model, optimizer, grads)
                losses.append(loss)
                if sched.pull[u]:
                    for v, k in zip(sched.worker[first:u + 1], sched.index[first:u + 1],
                                    strict=True):
                        if k + 1 < needed[v]:
                            compute(int(v), int(k) + 1)
                    first = u + 1
            done, now = i + 1, float(sched.arrival[(i + 1) * n - 1])
            accuracy = test_loss = math.nan
            if done % tc.eval_every == 0 or done == rounds:
                accuracy, test_loss = evaluate(model, data, device)
                shown = accuracy
            row = {"iteration": done, "virtual_time_s": now, "cutoff": n,
                   "iteration_time_s": now - clock, "lr": lr, "train_loss": float(np.mean(losses)),
                   "test_accuracy": accuracy, "test_loss": test_loss}
            clock = now
            for col in COLUMNS:
                log[col].append(row[col])
            if run is not None:
                run.log({k: v for k, v in row.items() if not math.isnan(v)}, step=done)
            if done % tc.checkpoint_every == 0 or done == rounds or stop:
                save_checkpoint(done)
            bar.set_postfix(acc=f"{shown:.3f}", vtime=f"{clock:.1f}s", refresh=False)
            if stop and done < rounds:
                bar.close()
                if run is not None:
                    run.finish(exit_code=128 + stop[0])
                raise Stopped(stop[0], r.ckpt_path, done)
        bar.close()
        if run is not None:
            run.finish()

    s = sched.staleness
    summary = write_outputs(cfg, r, log, model, trace_path, history_path, out_dir, {
        "seconds": time.perf_counter() - wall_start, "resumed_from_iteration": start}, {
        "mean_staleness": float(s.mean()), "max_staleness": int(s.max()),
        "staleness_p50": float(np.percentile(s, 50)), "staleness_p90": float(np.percentile(s, 90))})
    print(f"async staleness: mean {summary['mean_staleness']:.2f}, "
          f"p90 {summary['staleness_p90']:.1f}, max {summary['max_staleness']}")
    return out_dir
