"""The parameter server (rank 0): iterations through ``bdsgd.cluster.server.Server.step``, over real
workers. The protocol and its rules are in ``bdsgd.distributed``'s docstring.

One listener thread per worker receives its messages into one queue: the loop waits on whichever
worker delivers first, and learns a worker is gone when its connection breaks.

The server works as the virtual cluster's single server is modelled (``bdsgd.cluster.network``,
ps), so that the network fitted on its jobs (benchmarks/clock_fidelity.py) describes a server:
it sums each accepted gradient (padding included: ``Job.extra_parameters``) as it arrives, sends
each iteration's parameters to all its workers at once, and receives into buffers it reuses.
Beside each run-time it records the worker's own compute seconds (the metrics' ``compute_s``,
NaN where no gradient of that iteration came), which a replay feeds to the virtual clock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import queue
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector

from bdsgd.cluster.clock import replay_cutoffs
from bdsgd.cluster.cutoff import Observation
from bdsgd.cluster.server import Server, replay_runtimes
from bdsgd.config import Config
from bdsgd.distributed.wire import HEADER, PARAMS, STOP, Heartbeats, Job
from bdsgd.outputs import tracking
from bdsgd.outputs.io import write_json, write_with
from bdsgd.outputs.provenance import stamp
from bdsgd.policies.build import build_policy, load_inputs
from bdsgd.sgd import apply_gradient, evaluate, rate_at_n, step_lr
from bdsgd.tasks import load_task
from bdsgd.traces.io import write_trace
from bdsgd.traces.schema import from_arrays
from bdsgd.training.record import time_to_target

logger = logging.getLogger(__name__)

COLUMNS = ("iteration", "wall_time_s", "cutoff", "iteration_time_s", "lr", "train_loss",
           "live_workers", "stale", "decision_s", "test_accuracy")
TICK_S = 0.05  # how often a waiting server looks at the heartbeats


def _listen(rank: int, size: int, inbox: queue.Queue, free: queue.SimpleQueue) -> None:
    """Worker ``rank``'s messages into ``inbox``, each with the time it arrived (the server may
    be busy then), received into a buffer the server handed back to ``free`` (else a new one)."""
    try:
        while True:
            try:
                buf = free.get_nowait()
            except queue.Empty:
                buf = torch.empty(size)
            dist.recv(buf, src=rank)
            inbox.put((rank, buf, time.perf_counter()))
    except RuntimeError:  # its connection broke: the worker is gone
        inbox.put((rank, None, time.perf_counter()))


class Round:
    """Which gradients iteration t accepts: tagged t, from distinct workers, up to ``need``."""

    def __init__(self, t: int, need: int):
        self.t, self.need, self.accepted = t, need, {}

    def offer(self, worker: int, k: int, gradient) -> bool:
        """Take worker's gradient of iteration k if it counts; False for a stale one (k < t),
        a second from the same worker, or one past the cutoff: never applied."""
        if k != self.t or worker in self.accepted or self.done:
            return False
        self.accepted[worker] = gradient
        return True

    @property
    def done(self) -> bool:
        return len(self.accepted) >= self.need


class ParameterServer:
    def __init__(self, job: Job, cfg: Config, kv, device: torch.device):
        self.job, self.cfg, self.tc, self.device = job, cfg, cfg.training(), device
        self.n, n = job.workers, job.workers
        self.inputs = load_inputs([job.policy], "<distributed>", job.model, job.paper_model)
        self.policy = self._fresh_policy()
        self.data = load_task(job.task, self.tc.data_dir)
        torch.manual_seed(job.seed)
        self.model = self.data.make_model().to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=rate_at_n(self.tc, self.n),
                                         momentum=self.tc.momentum, weight_decay=self.tc.weight_decay)
        self.params = parameters_to_vector(self.model.parameters()).numel()
        self.size = self.params + job.extra_parameters  # a message's, less its header
        self.inbox: queue.Queue = queue.Queue()
        self.free = {rank: queue.SimpleQueue() for rank in range(1, n + 1)}  # buffers to reuse
        for rank in range(1, n + 1):
            threading.Thread(target=_listen, args=(rank, self.size + HEADER, self.inbox,
                                                   self.free[rank]), daemon=True).start()
        self.beats = Heartbeats(kv, list(range(1, n + 1)), job.heartbeat_s)
        self.checked = time.perf_counter()  # when the heartbeats were last looked at
        self.heartbeat_s = 0.0  # time spent looking at them (part of the wall time)
        self.live, self.dead = set(range(1, n + 1)), []
        self.sent = dict.fromkeys(self.live, -1)  # the iteration whose parameters it last got
        self.busy: set[int] = set()
        K = job.iterations
        self.runtimes, self.censored = np.full((K, n), np.nan), np.zeros((K, n), bool)
        self.compute = np.full((K, n), np.nan)  # each worker's own compute seconds
        self.message = torch.zeros(self.size + 2)  # [PARAMS, t, theta, padding]
        self.message[1] = -1  # t: none yet
        self.sent_at: dict[tuple[int, int], float] = {}  # (worker, t) -> its parameters' send
        self.stale, self.seen = 0, 0  # seen: samples applied (train.lr_schedule)
        self.observed: list[Observation] = []  # what the policy saw, for a resumed policy
        self.ckpt = Path(f"{Path(job.json).with_suffix('')}.checkpoint.pt")

    def _fresh_policy(self):
        """The job's policy as built at the start: its config, seed and run-time models."""
        return build_policy(self.job.policy, self.cfg, seed=self.job.seed, n_workers=self.n,
                            inputs=self.inputs, comm=0.0, real=True)

    def _replay(self, cutoffs: np.ndarray) -> pd.DataFrame:
        """The virtual clock on this job's run-times (communication included in them), per
        iteration: virtual_s with the server's cutoffs, replay_cutoff and replay_s a fresh
        policy's own run (censored values where it waits for more: lower bounds)."""
        x, late = self.runtimes, self.job.late
        own = replay_runtimes(x, self._fresh_policy(), 0.0, late)
        return pd.DataFrame({"iteration": np.arange(1, len(x) + 1),
                             "virtual_s": replay_cutoffs(x, cutoffs, np.zeros(self.n), late),
                             "replay_cutoff": own.cutoffs, "replay_s": own.durations})

    # -------------------------------------------------------------------------- messages
    def _parameters(self, t: int) -> torch.Tensor:
        """Iteration t's parameter message, written once into one buffer (padding stays zero)."""
        if self.message[1] != t:
            self.message[0], self.message[1] = PARAMS, t
            self.message[2:2 + self.params] = parameters_to_vector(
                self.model.parameters()).detach().cpu()
        return self.message

    def _send(self, ranks: list[int], t: int) -> None:
        """Iteration t's parameters to ``ranks`` all at once (the workers start about together,
        as on the virtual cluster); a run-time is measured from the copies' start."""
        message, works, posted = self._parameters(t), {}, time.perf_counter()
        for rank in ranks:
            try:
                works[rank] = dist.isend(message, dst=rank)
            except RuntimeError:  # its connection broke before its listener told us
                self._bury(rank, t)
        for rank, work in works.items():
            try:
                work.wait()
            except RuntimeError:
                self._bury(rank, t)
                continue
            self.sent[rank], self.sent_at[rank, t] = t, posted
            self.busy.add(rank)

    def _bury(self, rank: int, t: int) -> None:
        if rank in self.live:
            self.live.discard(rank)
            self.busy.discard(rank)
            self.dead.append({"worker": rank - 1, "iteration": t})
            logger.info(f"worker {rank - 1} is dead at iteration {t}: training goes on with "
                  f"{len(self.live)}")

    def _receive(self, t: int):
        """The next (rank, message, its arrival time) from a live worker, or None when a worker
        was found dead (the iteration then needs fewer gradients)."""
        while True:
            if not self.live:
                raise RuntimeError(f"every worker is dead at iteration {t}")
            if time.perf_counter() - self.checked > TICK_S:
                looking = time.perf_counter()
                silent = self.beats.silent(self.live)
                self.checked = time.perf_counter()
                self.heartbeat_s += self.checked - looking
                for rank in silent:
                    self._bury(rank, t)
                if silent:
                    return None
            try:
                rank, msg, arrived = self.inbox.get(timeout=TICK_S)
            except queue.Empty:
                continue
            if msg is None:
                self._bury(rank, t)
                return None
            if rank in self.live:
                return rank, msg, arrived

    # ------------------------------------------------------------------------- iteration
    def iteration(self, t: int, c: int) -> tuple[Observation, float]:
        """Run iteration t with cutoff c: send, collect, apply. (observation, mean loss)."""
        t0 = time.perf_counter()
        late = self.job.late == "abandon"
        # abandon: the busy ones drop their work
        self._send([rank for rank in sorted(self.live) if rank not in self.busy or late], t)
        # the workers compute: the policy's deferred work goes here, off the decision's path
        self.policy.idle()
        rnd = Round(t, min(c, len(self.live)))
        total = None  # the accepted gradients' sum, padding included, in the first one's buffer
        arrived = {}  # accepted worker -> its gradient's arrival, from the iteration's start
        while not rnd.done:
            got = self._receive(t)
            rnd.need = min(c, len(self.live))
            if got is None:
                continue
            rank, msg, now = got
            k, w = int(msg[0]), rank - 1
            if self.sent[rank] == k:
                self.busy.discard(rank)  # it delivered what it was last sent: idle
            # the trace's run-time: from when iteration k's parameters were sent to it (a busy
            # worker under finish gets them late) to its gradient's arrival; the virtual clock
            # adds the late start back when it replays the trace
            runtime = now - self.sent_at[rank, k]
            self.compute[k, w] = float(msg[1])
            if rnd.offer(w, k, msg):
                self.runtimes[t, w], arrived[w] = runtime, now - t0
                # summed on arrival, while the others still compute
                total = msg[HEADER:] if total is None else total.add_(msg[HEADER:])
            else:
                self.free[rank].put(msg)
                self.stale += 1
                if k < t and self.censored[k, w]:  # finish: the late value, observed after all
                    self.runtimes[k, w], self.censored[k, w] = runtime, False
                if not late and rank not in self.busy:
                    self._send([rank], t)
        # the policy sees each worker's run-time from its own start, as the virtual clock's server
        # does; the cutoff time is the c-th arrival from the iteration's start
        tau = max(arrived.values(), default=0.0)
        seen = np.full(self.n, np.nan)
        for w in arrived:
            seen[w] = self.runtimes[t, w]
        cut = np.isnan(seen)
        self.runtimes[t, cut], self.censored[t, cut] = tau, True
        c_real = len(rnd.accepted)
        b = self.tc.batch_size
        lr = step_lr(self.tc, c_real, self.n, self.seen, self.job.iterations * self.n * b)
        self.seen += c_real * b
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        grads = (total[:self.params] / c_real).to(self.device)
        apply_gradient(self.model, self.optimizer, _unflatten(grads, self.model))
        loss = float(np.mean([float(m[2]) for m in rnd.accepted.values()]))
        for w, m in rnd.accepted.items():
            self.free[w + 1].put(m)
        return Observation(t, c_real, seen, tau), loss

    # ----------------------------------------------------------------------------- run
    def run(self) -> dict:
        job, tc = self.job, self.tc
        server, rows, start, wall_before = Server(self.policy, self.n), [], 0, 0.0
        state = self._resume()
        if state is not None:
            rows, start, wall_before = state["rows"], len(state["rows"]), state["wall_s"]
            self.seen = self.tc.batch_size * sum(row["cutoff"] for row in rows)
        wandb = tracking.start(self.cfg, job.policy, f"distributed-{job.task}-{job.policy}-s"
                               f"{job.seed}", Path(job.json).parent, "wall_time_s",
                               task=job.task, trace=self.cfg.train_traces()[0], seed=job.seed)
        wall0 = time.perf_counter() - wall_before
        for t in range(start, job.iterations):
            loss: list[float] = []
            step = server.step(lambda c, t=t, loss=loss: _keep(self.iteration(t, c), loss))
            done = t + 1
            accuracy = math.nan
            if done % tc.eval_every == 0 or done == job.iterations:
                evaluating = time.perf_counter()
                accuracy = evaluate(self.model, self.data, self.device)[0]
                wall0 += time.perf_counter() - evaluating  # not charged, as in the virtual trainer
            rows.append({"iteration": done, "wall_time_s": time.perf_counter() - wall0,
                         "cutoff": step.obs.cutoff, "iteration_time_s": step.obs.cutoff_time,
                         "lr": self.optimizer.param_groups[0]["lr"], "train_loss": loss[0],
                         "live_workers": len(self.live), "stale": self.stale,
                         "decision_s": step.policy_s, "test_accuracy": accuracy})
            tracking.log(wandb, rows[-1], done)
            self.observed.append(step.obs)
            logger.info(f"iteration {done}/{job.iterations}: c={step.obs.cutoff}, "
                  f"{step.obs.cutoff_time:.3f} s")
            if done % tc.checkpoint_every == 0 and done < job.iterations:
                self._checkpoint(rows, time.perf_counter() - wall0)
        wall = time.perf_counter() - wall0
        for rank in sorted(self.live):
            with contextlib.suppress(RuntimeError):  # one that died at the end stops anyway
                dist.send(torch.cat([torch.tensor([STOP, job.iterations]),
                                     torch.zeros(self.size)]), dst=rank)
        metrics = pd.DataFrame(rows, columns=list(COLUMNS))
        result = self._write(metrics, wall, start)
        self.ckpt.unlink(missing_ok=True)  # the run is complete: its outputs replace it
        tracking.finish(wandb, {
            "time_to_target_s": time_to_target(metrics, tc.target_accuracy.get(job.task),
                                               "wall_time_s"),
            **{k: result[k] for k in ("final_accuracy", "gradients_per_s", "mean_cutoff",
                                      "wall_s", "iterations", "gradients", "stale_discarded")}})
        return result

    # ---------------------------------------------------------------------- checkpoints
    def _identity(self) -> dict:
        """What a checkpoint must match to be resumed: the job but for its fault injection."""
        return {**dataclasses.asdict(self.job), "kill": None, "config_hash": self.cfg.hash()}

    def _checkpoint(self, rows: list[dict], wall_s: float) -> None:
        obs = self.observed
        arrays = {k: torch.from_numpy(getattr(self, k)) for k in ("runtimes", "censored", "compute")}
        state = {"identity": json.dumps(self._identity()), "rows": rows, "wall_s": wall_s,
                 "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 **arrays, "stale": self.stale, "dead": json.dumps(self.dead),
                 "obs_cutoff": [o.cutoff for o in obs], "obs_tau": [o.cutoff_time for o in obs],
                 "obs_runtimes": torch.from_numpy(np.array([o.runtimes for o in obs]))}
        write_with(self.ckpt, lambda tmp: torch.save(state, tmp))

    def _resume(self) -> dict | None:
        """Restore an interrupted run of this job, or None: the policy rebuilt and shown the
        recorded iterations again; a damaged checkpoint is a one-line UserError naming it."""
        from bdsgd.errors import UserError
        from bdsgd.runtime_model.checkpoint import read_state

        if not self.ckpt.exists():
            return None
        afresh = "delete it to start the job afresh"
        state = read_state(self.ckpt, afresh)
        if "identity" not in state:
            raise UserError(str(self.ckpt), "identity", f"not a bdsgd server checkpoint; {afresh}")
        if state["identity"] != json.dumps(self._identity()):
            logger.info(f"discarding {self.ckpt}: checkpoint of another job")
            return None
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.runtimes, self.censored = state["runtimes"].numpy(), state["censored"].numpy()
            self.compute = state["compute"].numpy()
            self.stale, self.dead = state["stale"], json.loads(state["dead"])
            observed = [Observation(t, c, state["obs_runtimes"][t].numpy(), tau) for t, (c, tau)
                        in enumerate(zip(state["obs_cutoff"], state["obs_tau"], strict=True))]
            done = len(state["rows"])
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as exc:
            what = f"{exc.args[0]} missing" if isinstance(exc, KeyError) else type(exc).__name__
            raise UserError(str(self.ckpt), "-", f"damaged checkpoint ({what}); {afresh}") from None
        for obs in observed:
            self.policy.choose()
            self.policy.observe(obs)
            self.observed.append(obs)
        logger.info(f"resumed from {self.ckpt} at iteration {done}")
        return state

    def _write(self, metrics: pd.DataFrame, wall: float, resumed_from: int) -> dict:
        job, out = self.job, Path(self.job.json)
        stem = out.with_suffix("")
        metrics["compute_s"] = list(self.compute[:len(metrics)])  # n workers' per iteration
        metrics_path, trace_path = Path(f"{stem}.metrics.parquet"), Path(f"{stem}.trace.parquet")
        write_with(metrics_path, lambda tmp: metrics.to_parquet(tmp, index=False))
        trace = from_arrays(self.runtimes, {
            "source": "distributed", "policy": job.policy, "late": job.late,
            "time_unit": "s", "workers": job.workers}, censored=self.censored)
        write_trace(trace, trace_path)
        replay = self._replay(metrics["cutoff"].to_numpy())
        replay_path = Path(f"{stem}.replay.parquet")
        write_with(replay_path, lambda tmp: replay.to_parquet(tmp, index=False))
        gradients = int(metrics["cutoff"].sum())
        result = {
            **stamp(self.cfg, job.seed, task=job.task, policy=job.policy),
            "job": dataclasses.asdict(job),
            "policy": job.policy, "late": job.late, "workers": job.workers,
            "wall_s": wall, "iterations": int(len(metrics)), "gradients": gradients,
            "gradients_per_s": gradients / wall, "mean_cutoff": float(metrics["cutoff"].mean()),
            "dead_workers": self.dead, "stale_discarded": self.stale,
            "censored_fraction": float(self.censored.mean()),
            "decision_latency_p50_s": float(metrics["decision_s"].median()),
            "threads": torch.get_num_threads(),  # the server's, under which decisions were timed
            "heartbeat_check_s": self.heartbeat_s, "device": str(self.device),
            "final_accuracy": float(metrics["test_accuracy"].iloc[-1]),
            "metrics": str(metrics_path), "trace": str(trace_path), "replay": str(replay_path),
            "resumed_from_iteration": resumed_from,
        }
        write_json(out, result)
        logger.info(f"{job.policy}: {len(metrics)} iterations in {wall:.2f} s, "
              f"{result['gradients_per_s']:.1f} gradients/s, dead workers "
              f"{[d['worker'] for d in self.dead]} -> {out}")
        return result


def _keep(result: tuple[Observation, float], loss: list) -> Observation:
    obs, mean_loss = result
    loss.append(mean_loss)
    return obs


def _unflatten(vector: torch.Tensor, model) -> list[torch.Tensor]:
    out, i = [], 0
    for p in model.parameters():
        out.append(vector[i:i + p.numel()].view_as(p).clone())
        i += p.numel()
    return out
