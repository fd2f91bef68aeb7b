"""Synchronous SGD with a cutoff on the virtual cluster: one process, a clock driven by a
run-time trace.

n = trace.n_workers workers each compute a mini-batch gradient at every iteration t. The trace's
row t mod T says how long each worker took (the trace is cycled when the run is longer than
it). A cutoff policy picks c_t before the iteration; the server accepts the c_t first gradients
(ties by worker index), discards the others, and the virtual clock (``bdsgd.cluster.clock``) advances by

    f (tau_t + comm(c_t) / f)   (+ the policy's measured choose + observe time if charge_decision_time)

with tau_t the c_t-th arrival (x_t,(c_t) unless a late worker starts behind), comm(c) from the
network model (``bdsgd.cluster.network``) in seconds, and f the seconds per trace unit (train.clock:
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
Policies are not pickled: on resume the policy is rebuilt and the server loop replays the
finished iterations through it (``bdsgd.cluster.server.catch_up``: deterministic, and checked
against the recorded cutoffs), so any policy resumes without a state format.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from torch import nn
from torch.optim import Optimizer

from bdsgd.cluster.server import Server, catch_up
from bdsgd.cluster.virtual import VirtualCluster
from bdsgd.config import Config
from bdsgd.policies.build import Inputs, build_policy
from bdsgd.sgd import noise_step, sgd_step, step_lr
from bdsgd.training.record import Recorder
from bdsgd.training.run import RunSetup


class Cutoff:
    """The cutoff mode: a cutoff policy's synchronous SGD (``bdsgd.training.loop``'s mode)."""

    def __init__(self, cfg: Config, r: RunSetup, model: nn.Module, optimizer: Optimizer,
                 cluster: VirtualCluster, state: dict | None, policy: str, inputs: Inputs):
        self.r, self.model, self.optimizer, self.cluster = r, model, optimizer, cluster
        tc, trace = r.tc, r.trace
        self.policy = build_policy(policy, cfg, seed=r.identity["seed"], n_workers=cluster.n,
                                   trace=trace, inputs=inputs, history=r.history,
                                   iterations=r.iterations, training=tc, comm=cluster.timing)
        self.decision_ns: list[int] = [] if state is None else state["decision_ns"]
        # train.objective progress: the policy learns the gradient noise scale from each
        # iteration's gradient statistics (None when c = 1: one group has no spread)
        self.progress = (self.policy.observe_gradients
                         if tc.objective == "progress" and self.policy.measures_noise else None)
        self.noise: list = [] if state is None else state["noise"]
        self.iterations = cluster.clock()  # the late workers' state, carried through a resume
        if state is not None:
            catch_up(self.policy, trace.runtimes, state["metrics"]["cutoff"], self.iterations,
                     None if self.progress is None else self._show_noise)

    def _show_noise(self, t: int) -> None:
        if self.noise[t] is not None:
            self.progress(*self.noise[t])

    def rows(self, rec: Recorder) -> Iterator[dict]:
        """Train iteration by iteration from the last of ``rec``'s rows; yield each row."""
        r, tc, model, optimizer = self.r, self.r.tc, self.model, self.optimizer
        clock, applied = rec.clock, int(sum(rec.log["gradients"]))
        data, streams, device = r.data, r.streams, r.device
        T, n = r.trace.runtimes.shape
        f = self.cluster.compute.factor
        # samples applied so far, and the run's, for train.lr_schedule (bdsgd.sgd.lr_factor)
        seen, total = tc.batch_size * applied, r.iterations * n * tc.batch_size
        server = Server(self.policy, n)
        for t in range(rec.last, r.iterations):
            step = server.step_trace(t, r.trace.runtimes[t % T], self.iterations)
            obs, c = step.obs, step.obs.cutoff
            self.decision_ns.append(step.policy_ns)
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
            if self.progress is not None and split > 0:
                loss, stats = noise_step(model, optimizer, x, y, split, tc.chunk_samples, device)
                self.noise.append(stats)
                self._show_noise(t)
            else:
                loss = sgd_step(model, optimizer, x, y, tc.chunk_samples, device)
                self.noise.append(None)
            yield {"iteration": t + 1, "virtual_time_s": clock, "cutoff": c,
                   "iteration_time_s": duration, "lr": lr, "train_loss": loss,
                   "gradients": c, "staleness": 0.0}

    def checkpoint(self) -> dict:
        return {"decision_ns": self.decision_ns, "noise": self.noise}

    def summary(self) -> dict:
        scale = self.policy.noise_scale
        return {"objective": self.r.tc.objective, "gradient_noise_scale":
                None if self.progress is None or scale is None else float(scale)}

    def wallclock(self) -> dict:
        return {"decision_latency_p50_s": float(np.median(self.decision_ns)) * 1e-9,
                "threads": self.r.tc.threads}  # torch's, under which the decisions were timed
