"""Convergence runs on a virtual cluster: one process, a clock driven by a run-time trace.

n = trace.n_workers workers each compute a mini-batch gradient at every iteration t. The trace's
row t mod T says how long each worker took (the trace is cycled when the run is longer than
it). A cutoff policy picks c_t before the iteration; the server accepts the c_t fastest workers
(ties by worker index), discards the others' gradients, and the virtual clock advances by

    x_t,(c_t) + comm_s        (+ the policy's measured choose + observe time if charge_decision_time).

A discarded worker's mini-batch is lost: next iteration every worker starts a fresh one, as in
Chen et al. (2016). The update is SGD with momentum on the average of the accepted gradients,
with learning rate lr * c_t / n under linear scaling (the gradient is an average over c_t * B
samples, so its noise shrinks as c_t grows; Goyal et al. 2017), lr * sqrt(c_t / n) under
square-root scaling (the step's noise stays the same), or lr under none.

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
model, optimiser, torch RNG states, clock and metrics so far. SIGTERM (what SLURM sends before
preempting a job) or SIGINT ends the run at the end of the iteration with a checkpoint, and
the same command resumes it. Policies are not pickled: on resume the policy is
rebuilt and the server loop replays the finished iterations through it (``bdsgd.server.catch_up``:
deterministic, and checked against the recorded cutoffs), so any policy resumes without a state
format.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from bdsgd.config import Config
from bdsgd.errors import Stopped, UserError
from bdsgd.io import write_json, write_with
from bdsgd.policies import make_policy, spec
from bdsgd.provenance import stamp
from bdsgd.server import Server, catch_up, load_needs, read_history, require_complete, warm_up
from bdsgd.tasks import Task, load_task
from bdsgd.traces.io import read_trace
from bdsgd.traces.schema import Trace

COLUMNS = ("iteration", "virtual_time_s", "cutoff", "iteration_time_s", "lr", "train_loss",
           "test_accuracy", "test_loss")
EVAL_BATCH = 256
# train.lr_scaling: the learning rate's factor given the accepted fraction c / n
LR_SCALING = {"linear": lambda f: f, "sqrt": math.sqrt, "none": lambda f: 1.0}


class WorkerStreams:
    """The mini-batch sample indices of every worker at every iteration.

    Epoch e = t // K (K = batches per epoch) draws a permutation of the N training samples from
    the seed (seed, e); worker w's shard is every n-th of its first n * floor(N/n) entries, and
    its batch at iteration t is the (t mod K)-th block of B consecutive shard entries.
    """

    def __init__(self, n_samples: int, n_workers: int, batch_size: int, seed: int):
        self.n_samples, self.n, self.batch_size, self.seed = n_samples, n_workers, batch_size, seed
        self.shard = n_samples // n_workers
        self.per_epoch = self.shard // batch_size
        if self.per_epoch < 1:
            raise ValueError(f"{n_workers} workers x {batch_size} samples per worker exceed the "
                             f"{n_samples} training samples")
        self._epoch, self._table = -1, np.empty((0, n_workers), dtype=np.int64)

    def batch(self, t: int, workers: np.ndarray) -> np.ndarray:
        """Indices of the given workers' mini-batches at iteration t, grouped by worker."""
        epoch, k = divmod(t, self.per_epoch)
        if epoch != self._epoch:
            perm = np.random.default_rng([self.seed, epoch]).permutation(self.n_samples)
            self._epoch = epoch
            self._table = perm[: self.shard * self.n].reshape(self.shard, self.n)
        block = self._table[k * self.batch_size:(k + 1) * self.batch_size]
        return block[:, workers].T.ravel()


def time_to_target(metrics: pd.DataFrame, target: float) -> float | None:
    """The first virtual time at which the evaluated test accuracy reached ``target``."""
    hit = metrics["virtual_time_s"][metrics["test_accuracy"] >= target]
    return float(hit.iloc[0]) if len(hit) else None


def sgd_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
             y: torch.Tensor, chunk: int, device: torch.device) -> float:
    """One update on the mean loss over the union batch (x, y); returns that loss.

    Gradients of chunks of at most ``chunk`` samples accumulate to the gradient of the mean.
    """
    optimizer.zero_grad(set_to_none=True)
    total = backward(model, x, y, chunk, device)
    optimizer.step()
    return total.item()


def backward(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int,
             device: torch.device) -> torch.Tensor:
    """Accumulate the gradient of the mean loss over (x, y) into .grad, in chunks; the loss."""
    total = torch.zeros((), device=device)
    for xs, ys in zip(x.split(chunk), y.split(chunk), strict=True):
        xs, ys = xs.to(device, non_blocking=True), ys.to(device, non_blocking=True)
        loss = F.cross_entropy(model(xs), ys, reduction="sum") / len(y)
        loss.backward()
        total += loss.detach()
    return total


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, device: torch.device) -> tuple[float, float]:
    """Test accuracy and mean cross-entropy over the whole test set."""
    model.eval()
    n = len(task.test)
    correct, loss = 0, 0.0
    for start in range(0, n, EVAL_BATCH):
        x, y = task.batch(task.test, np.arange(start, min(start + EVAL_BATCH, n)))
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        logits = model(x)
        loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
    model.train()
    return correct / n, loss / n


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(name)


@contextlib.contextmanager
def _torch_settings(threads: int, device: torch.device):
    """Threads and deterministic kernels for the run; the process's settings come back after."""
    before = torch.get_num_threads(), torch.get_deterministic_debug_mode()
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
        torch.backends.cudnn.benchmark = False
    torch.set_num_threads(threads)
    # = use_deterministic_algorithms(True, warn_only=...), without importing torch._inductor
    # (seconds) for a flag that only matters to torch.compile. Some CUDA kernels have no
    # deterministic version: warn there rather than fail the run.
    torch.set_deterministic_debug_mode("warn" if device.type == "cuda" else "error")
    try:
        yield
    finally:
        torch.set_num_threads(before[0])
        torch.set_deterministic_debug_mode(before[1])


@contextlib.contextmanager
def _stop_requests(signums=(signal.SIGTERM, signal.SIGINT)):
    """Record SIGTERM (SLURM's preemption notice, Snakemake's cancel) and SIGINT instead of dying
    mid-step: the loop checkpoints at the end of the iteration and stops (``Stopped``). Yields the
    signals received; the process's handlers come back after. Only the main thread may set
    handlers: elsewhere nothing is recorded and the signals keep their effect."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    previous = {s: signal.signal(s, lambda signum, frame: received.append(signum)) for s in signums}
    try:
        yield received
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _build_policy(cfg: Config, name: str, trace: Trace, trace_path, seed: int, model_path,
                  history: Trace | None):
    try:
        need = spec(name)
    except ValueError as exc:
        raise UserError("--policy", "policy", str(exc)) from None
    if need.needs_truth:
        raise UserError("--policy", name, "needs the simulator's truth of the replayed "
                        "iterations, which a cycled trace does not have: compare it with "
                        "'bdsgd throughput'")
    model, _ = load_needs([name], str(trace_path), model_path)
    policy = make_policy(name, trace.n_workers, cfg.policies, seed=seed,
                         comm_s=cfg.throughput.comm_s, runtimes=trace.runtimes, model=model)
    if history is not None and need.learns:
        warm_up(policy, history, cfg.throughput.comm_s)
    return policy


def _wandb_run(cfg: Config, task: str, policy: str, seed: int, out_dir: Path):
    if cfg.wandb.mode == "disabled":
        return None
    import wandb

    return wandb.init(project=cfg.wandb.project, entity=cfg.wandb.entity, mode=cfg.wandb.mode,
                      config={**cfg.to_dict(), "task": task, "policy": policy, "seed": seed},
                      group=cfg.experiment, name=f"{task}-{policy}-s{seed}", dir=str(out_dir))


# What every training mode reads before its loop (``prepare``).
Run = collections.namedtuple("Run", "tc trace history data streams device target identity ckpt_path")


def prepare(cfg: Config, task: str, policy: str, seed: int, trace_path, out_dir,
            history_path) -> Run:
    """Read and check the trace, history, task and target; the run's checkpoint identity."""
    tc = cfg.training()
    trace = read_trace(trace_path)
    require_complete(trace, str(trace_path))
    if task not in tc.target_accuracy:
        raise UserError(cfg.source, f"train.target_accuracy.{task}",
                        f"no target accuracy for task {task!r}: time-to-accuracy needs one")
    data = load_task(task, tc.data_dir)
    history = read_history(history_path, trace, str(trace_path))
    try:
        streams = WorkerStreams(len(data.train), trace.n_workers, tc.batch_size, seed)
    except ValueError as exc:
        raise UserError(cfg.source, "train.batch_size", f"{exc} of {task}") from None
    identity = {"config_hash": cfg.hash(), "task": task, "policy": policy, "seed": seed,
                "trace_sha256": hashlib.sha256(trace.runtimes.tobytes()).hexdigest(),
                "history_sha256": None if history is None else hashlib.sha256(
                    history.runtimes.tobytes()).hexdigest()}
    return Run(tc, trace, history, data, streams, _device(tc.device), tc.target_accuracy[task],
               identity, Path(out_dir) / "checkpoint.pt")


def load_checkpoint(run: Run) -> dict | None:
    """The interrupted run's state, or None (none, or one of another run: start afresh)."""
    path = run.ckpt_path
    state = torch.load(path, map_location="cpu", weights_only=True) if path.exists() else None
    if state is not None and state["identity"] != run.identity:
        # An interrupted run of another config, task, policy, seed or trace (Snakemake reruns
        # a job whose config changed): its state is no use here, start afresh.
        print(f"discarding {path}: checkpoint of another run ({state['identity']})")
        state = None
    return state


def write_outputs(cfg: Config, run: Run, log: dict, model: nn.Module, trace_path, history_path,
                  out_dir: Path, wallclock: dict, extra: dict | None = None) -> dict:
    """metrics.parquet, model.pt and result.json (``extra``: more summary keys); removes the
    checkpoint. ``wallclock``: this process's timings, after the common note."""
    task, policy, seed = (run.identity[k] for k in ("task", "policy", "seed"))
    T, n = run.trace.runtimes.shape
    metrics = pd.DataFrame(log, columns=list(COLUMNS)).astype(
        {"iteration": "int64", "cutoff": "int64"})
    write_with(out_dir / "metrics.parquet", lambda tmp: metrics.to_parquet(tmp, index=False))
    write_with(out_dir / "model.pt", lambda tmp: torch.save(model.state_dict(), tmp))
    cutoffs, times = metrics["cutoff"].to_numpy(), metrics["iteration_time_s"].to_numpy()
    summary = {
        "task": task, "policy": policy, "seed": seed, "target_accuracy": run.target,
        "time_to_target_s": time_to_target(metrics, run.target),
        "final_accuracy": float(metrics["test_accuracy"].iloc[-1]),
        "final_test_loss": _finite(metrics["test_loss"].iloc[-1]),  # None once training diverged
        "gradients_per_s": float(cutoffs.sum() / times.sum()),
        "mean_cutoff": float(cutoffs.mean()), "iterations": int(len(metrics)),
        "virtual_time_s": float(metrics["virtual_time_s"].iloc[-1]),
        "n_workers": n, "trace_iterations": T, "trace_cycles": run.tc.max_iterations / T,
        **(extra or {}),
    }
    write_json(out_dir / "result.json", {
        **stamp(cfg, seed, task=task, policy=policy, trace=str(trace_path),
                trace_meta=run.trace.meta),
        "history": None if run.history is None else {"path": str(history_path),
                                                     "n_iterations": run.history.n_iterations},
        "summary": summary, "wallclock": {
            "note": "wall-clock of this process; varies run to run, not part of compared tables",
            **wallclock}})
    run.ckpt_path.unlink()  # the run is complete: its outputs replace the checkpoint
    tta = summary["time_to_target_s"]
    print(f"{task}/{policy}/s{seed}: final accuracy {summary['final_accuracy']:.4f}, "
          f"time to {run.target} {'never' if tta is None else f'{tta:.1f} s'}, "
          f"{summary['gradients_per_s']:.2f} gradients/s, mean cutoff {summary['mean_cutoff']:.2f} "
          f"-> {out_dir}")
    return summary


def train_run(cfg: Config, task: str, policy: str, seed: int, trace_path, out_dir,
              model_path=None, history_path=None) -> Path:
    """One convergence run; writes out_dir/{metrics.parquet, result.json, model.pt} (and
    out_dir/checkpoint.pt while it runs, from which an interrupted run resumes).
    ``history_path``: the trace's iterations before the replayed ones (its training part), which
    a policy that learns from observations sees first (``bdsgd.server.warm_up``)."""
    if policy == "async":  # not a cutoff policy: its own event-driven trainer
        from bdsgd.training.asynchronous import train_async

        return train_async(cfg, task, seed, trace_path, out_dir, history_path)
    wall_start = time.perf_counter()
    comm_s, out_dir = cfg.throughput.comm_s, Path(out_dir)
    r = prepare(cfg, task, policy, seed, trace_path, out_dir, history_path)
    tc, trace, data, streams, device = r.tc, r.trace, r.data, r.streams, r.device
    pol = _build_policy(cfg, policy, trace, trace_path, seed, model_path, r.history)
    T, n = trace.runtimes.shape
    cycles = tc.max_iterations / T
    print(f"train {task} / {policy} / seed {seed}: n={n} workers, T={T} trace iterations "
          f"({cycles:.2f} cycles over {tc.max_iterations} iterations), batch {tc.batch_size} "
          f"per worker ({streams.per_epoch} per epoch), lr {tc.learning_rate} at c=n "
          f"({tc.lr_scaling} scaling), comm {comm_s} s, target accuracy {r.target}, "
          f"device {device}")

    ckpt_path = r.ckpt_path
    with _torch_settings(tc.threads, device), _stop_requests() as stop:
        torch.manual_seed(seed)
        model = data.make_model().to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=tc.learning_rate, momentum=tc.momentum)
        log: dict[str, list] = {col: [] for col in COLUMNS}
        decision_ns: list[int] = []
        clock, start = 0.0, 0
        state = load_checkpoint(r)
        if state is not None:
            catch_up(pol, trace.runtimes, state["metrics"]["cutoff"], comm_s)
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            torch.set_rng_state(state["torch_rng"])
            if device.type == "cuda":
                torch.cuda.set_rng_state_all(state["cuda_rng"])
            log, decision_ns = state["metrics"], state["decision_ns"]
            clock, start = state["clock"], state["iteration"]
            print(f"resumed from {ckpt_path} at iteration {start}")

        def save_checkpoint(done: int) -> None:
            state = {"identity": r.identity, "iteration": done, "clock": clock, "metrics": log,
                     "decision_ns": decision_ns, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
                     "cuda_rng": torch.cuda.get_rng_state_all() if device.type == "cuda" else []}
            write_with(ckpt_path, lambda tmp: torch.save(state, tmp))

        run = _wandb_run(cfg, task, policy, seed, out_dir) if start < tc.max_iterations else None
        shown = next((a for a in reversed(log["test_accuracy"]) if not math.isnan(a)), math.nan)
        bar = tqdm(range(start, tc.max_iterations), initial=start, total=tc.max_iterations,
                   file=sys.stderr, desc=f"{task}/{policy}/s{seed}")
        server = Server(pol, n)
        for t in bar:
            step = server.step_trace(t, trace.runtimes[t % T], comm_s)
            obs, c = step.obs, step.obs.cutoff
            decision_ns.append(step.policy_ns)
            # the policy's work (choose + observe: a model's filtering step) delays the next
            # iteration's start on a real server; charged only on request, as it is wall-clock
            duration = obs.duration + (step.policy_s if tc.charge_decision_time else 0.0)
            clock += duration

            lr = tc.learning_rate * LR_SCALING[tc.lr_scaling](c / n)
            for group in optimizer.param_groups:
                group["lr"] = lr
            x, y = data.batch(data.train, streams.batch(t, np.flatnonzero(obs.accepted)))
            loss = sgd_step(model, optimizer, x, y, tc.chunk_samples, device)

            done = t + 1
            accuracy = test_loss = math.nan
            if done % tc.eval_every == 0 or done == tc.max_iterations:
                accuracy, test_loss = evaluate(model, data, device)
                shown = accuracy
            row = {"iteration": done, "virtual_time_s": clock, "cutoff": c,
                   "iteration_time_s": duration, "lr": lr, "train_loss": loss,
                   "test_accuracy": accuracy, "test_loss": test_loss}
            for col in COLUMNS:
                log[col].append(row[col])
            if run is not None:
                run.log({k: v for k, v in row.items() if not math.isnan(v)}, step=done)
            if done % tc.checkpoint_every == 0 or done == tc.max_iterations or stop:
                save_checkpoint(done)
            bar.set_postfix(acc=f"{shown:.3f}", vtime=f"{clock:.1f}s", c=c, refresh=False)
            if stop and done < tc.max_iterations:
                bar.close()
                if run is not None:
                    run.finish(exit_code=128 + stop[0])
                raise Stopped(stop[0], ckpt_path, done)
        bar.close()
        if run is not None:
            run.finish()

    write_outputs(cfg, r, log, model, trace_path, history_path, out_dir, {
        "seconds": time.perf_counter() - wall_start, "resumed_from_iteration": start,
        "decision_latency_p50_s": float(np.median(decision_ns)) * 1e-9})
    return out_dir
