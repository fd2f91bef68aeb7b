"""Synchronous SGD with a cutoff on the virtual cluster: one process, a clock driven by a
run-time trace.

n = trace.n_workers workers each compute a mini-batch gradient at every iteration t. The trace's
row t mod T says how long each worker took (the trace is cycled when the run is longer than
it). A cutoff policy picks c_t before the iteration; the server accepts the c_t first gradients
(ties by worker index), discards the others, and the virtual clock (``bdsgd.clock``) advances by

    f (tau_t + comm(c_t) / f)   (+ the policy's measured choose + observe time if charge_decision_time)

with tau_t the c_t-th arrival (x_t,(c_t) unless a late worker starts behind), comm(c) from the
network model (``bdsgd.network``) in seconds, and f the seconds per trace unit (train.clock:
1 as recorded, or the task's measured gradient time over the trace's median run-time). The
policy sees the trace's units throughout. Under network.late abandon a discarded worker's
mini-batch is lost and every worker starts afresh, as in Chen et al. (2016); under finish it
completes its gradient first. The update is SGD with momentum on the average of the accepted gradients,
with learning rate lr * c_t / n under linear scaling (the gradient is an average over c_t * B
samples, so its noise shrinks as c_t grows; Goyal et al. 2017), lr * sqrt(c_t / n) under
square-root scaling (the step's noise stays the same), or lr under none; times the schedule's
factor at the samples applied so far (train.lr_schedule, ``bdsgd.sgd.lr_factor``).

Under train.objective progress a predictive policy maximises the expected loss decrease per
second instead of gradients per second (``bdsgd.policies.progress``), from the gradient noise
scale that it estimates from the accepted gradients: the gradient is then taken in two groups
(the first ceil(c/2) accepted workers and the rest; at c = 1 the two halves of its batch),
whose squared norms and their mean's feed the estimator (``noise_step``; the update is the
same).

One backward pass per iteration: with equal per-worker batches of B samples,

    (1/c) sum_w grad (1/B) sum_{i in b_w} l_i  =  grad (1/(cB)) sum_{i in union of b_w} l_i,

so one forward/backward over the union of the accepted workers' mini-batches gives exactly the
averaged gradient (the networks use GroupNorm, so no sample's loss depends on another's). The
union is processed in chunks of at most train.chunk_samples samples, each contributing
grad sum_{i in chunk} l_i / (cB): the same sum, with bounded memory.

Each worker draws from its own shard: per epoch one seeded permutation of the training set,
dealt out round-robin to the n workers (as torch's DistributedSampler), so workers see disjoint
data and the sample stream is a pure function of (seed, iteration, worker).

Checkpoints (every train.checkpoint_every iterations, removed when the run completes) hold the
model, optimiser, torch RNG states, the metrics so far (the clock is the last row's), the
decision times and, under the progress objective, each iteration's gradient statistics.
SIGTERM (what SLURM sends before preempting a job) or SIGINT ends the run at the end of the
iteration with a checkpoint, and the same command resumes it. Policies are not pickled: on
resume the policy is rebuilt and the server loop replays the finished iterations through it
(``bdsgd.loop.catch_up``: deterministic, and checked against the recorded cutoffs), so any
policy resumes without a state format.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import numpy as np

from bdsgd.clock import SyncClock
from bdsgd.config import Config
from bdsgd.devices import torch_settings
from bdsgd.errors import stop_requests
from bdsgd.loop import Server, catch_up
from bdsgd.policies.build import build_policy, load_inputs
from bdsgd.sgd import noise_step, rate_at_n, sgd_step, step_lr
from bdsgd.training.record import Recorder, write_outputs
from bdsgd.training.run import (
    clock_record,
    load_checkpoint,
    new_model,
    prepare,
    save_checkpoint,
    virtual_clock,
)

logger = logging.getLogger(__name__)


def train_cutoff(cfg: Config, task: str, policy: str, seed: int, trace_path, out_dir,
                 model_path=None, history_path=None, paper_model_path=None) -> Path:
    """One convergence run under cutoff policy ``policy``; writes out_dir/{metrics.parquet,
    result.json, model.pt} (and out_dir/checkpoint.pt while it runs, from which an interrupted
    run resumes). ``history_path``: the trace's iterations before the replayed ones (its
    training part), which a policy that learns from observations sees first."""
    wall_start = time.perf_counter()
    out_dir, late = Path(out_dir), cfg.network.late
    r = prepare(cfg, task, policy, seed, trace_path, out_dir, history_path)
    tc, trace, data, streams, device = r.tc, r.trace, r.data, r.streams, r.device
    T, n = trace.runtimes.shape

    with torch_settings(tc.threads, device), stop_requests() as stop:
        model, optimizer = new_model(r, seed, rate_at_n(tc, n))
        state = load_checkpoint(r, model, optimizer)
        compute, net = virtual_clock(cfg, r, model, state)
        f, comm = compute.factor, net.comm(n) / compute.factor  # comm in the trace's units
        pol = build_policy(policy, cfg, seed=seed, n_workers=n, trace=trace,
                           inputs=load_inputs([policy], trace_path, model_path, paper_model_path),
                           history=r.history,
                           iterations=tc.max_iterations, training=tc, comm=comm)
        logger.info("train %s / %s / seed %d: n=%d workers, T=%d trace iterations (%.2f cycles over "
                    "%d iterations), batch %d per worker (%d per epoch), lr %s at c=n (%s scaling), "
                    "%s clock (%.4g s per trace unit), %s network: comm %.4g s at c=n, late %s, "
                    "target accuracy %s, device %s", task, policy, seed, n, T,
                    tc.max_iterations / T, tc.max_iterations, tc.batch_size, streams.per_epoch,
                    rate_at_n(tc, n), tc.lr_scaling, compute.clock, f, net.topology,
                    net.comm(n)[-1], late, r.target, device)
        decision_ns: list[int] = [] if state is None else state["decision_ns"]
        rec = Recorder(cfg, r, policy, seed, out_dir, None if state is None else state["metrics"],
                       stop)
        start, clock = rec.last, rec.clock
        # samples applied so far, and the run's, for train.lr_schedule (bdsgd.sgd.lr_factor)
        seen, total = tc.batch_size * int(sum(rec.log["gradients"])), tc.max_iterations * n * tc.batch_size
        # train.objective progress: the policy learns the gradient noise scale from each
        # iteration's gradient statistics (None when c = 1: one group has no spread)
        progress = getattr(pol, "observe_gradients", None) if tc.objective == "progress" else None
        noise: list = [] if state is None else state["noise"]

        def show_noise(t: int) -> None:
            if noise[t] is not None:
                progress(*noise[t])

        cluster = SyncClock(comm, late)
        if state is not None:
            catch_up(pol, trace.runtimes, rec.log["cutoff"], cluster,
                     None if progress is None else show_noise)
        server = Server(pol, n)
        for t in range(start, tc.max_iterations):
            if rec.done:  # train.stop_at_target: the margin after the target is done
                break
            step = server.step_trace(t, trace.runtimes[t % T], cluster)
            obs, c = step.obs, step.obs.cutoff
            decision_ns.append(step.policy_ns)
            # the policy's work (choose + observe: a model's filtering step) delays the next
            # iteration's start on a real server; charged only on request, as it is wall-clock
            duration = obs.duration * f + (step.policy_s if tc.charge_decision_time else 0.0)
            clock += duration

            lr = step_lr(tc, c, n, seen, total)
            seen += c * tc.batch_size
            for group in optimizer.param_groups:
                group["lr"] = lr
            accepted = np.flatnonzero(obs.accepted)
            x, y = data.batch(data.train, streams.batch(t, accepted), streams.seeds(t, accepted))
            # the two groups: the first ceil(c/2) accepted workers' samples and the rest, or
            # the two halves of one worker's batch (a batch of one sample has no halves)
            split = (c + 1) // 2 * tc.batch_size if c >= 2 else tc.batch_size // 2
            if progress is not None and split > 0:
                loss, stats = noise_step(model, optimizer, x, y, split, tc.chunk_samples, device)
                noise.append(stats)
                show_noise(t)
            else:
                loss = sgd_step(model, optimizer, x, y, tc.chunk_samples, device)
                noise.append(None)
            rec.record(model, {"iteration": t + 1, "virtual_time_s": clock, "cutoff": c,
                               "iteration_time_s": duration, "lr": lr, "train_loss": loss,
                               "gradients": c, "staleness": 0.0},
                       lambda: save_checkpoint(r, model, optimizer, metrics=rec.log,
                                               decision_ns=decision_ns, noise=noise,
                                               compute=dataclasses.asdict(compute)))
        rec.close()

    scale = getattr(pol, "noise_scale", None)
    write_outputs(cfg, r, rec.log, model, trace_path, history_path, out_dir, {
        "seconds": time.perf_counter() - wall_start, "resumed_from_iteration": start,
        "decision_latency_p50_s": float(np.median(decision_ns)) * 1e-9,
        "threads": tc.threads},  # torch's, under which the decisions were timed
        {"objective": tc.objective,
         "gradient_noise_scale": None if progress is None or scale is None else float(scale)},
        clock=clock_record(compute, net, late))
    return out_dir
