"""What every training mode shares: the workers' data, the gradient, the evaluation, and the
run's bookkeeping (inputs checked once, checkpoints, metrics rows, W&B, stop requests, outputs).

The modes (``virtual``: a cutoff policy per iteration; ``asynchronous``; ``cyclic``) differ only
in when gradients are computed and applied. Each writes one metrics row per iteration, or per
round of n applied gradients, with the columns ``COLUMNS``:

    iteration, virtual_time_s, cutoff (workers whose gradients the row applied),
    iteration_time_s, lr, train_loss, test_accuracy, test_loss (every train.eval_every rows and
    at the end, NaN between), gradients (applied in the row), staleness (their mean: updates
    applied between a gradient's parameters and its own update; 0 in the cutoff mode).
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
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from bdsgd import tracking
from bdsgd.config import Config
from bdsgd.errors import Stopped, UserError
from bdsgd.io import write_json, write_with
from bdsgd.provenance import stamp
from bdsgd.server import read_history, require_complete
from bdsgd.tasks import Task, load_task
from bdsgd.traces.io import read_trace

COLUMNS = ("iteration", "virtual_time_s", "cutoff", "iteration_time_s", "lr", "train_loss",
           "test_accuracy", "test_loss", "gradients", "staleness")
INTEGER_COLUMNS = {"iteration": "int64", "cutoff": "int64", "gradients": "int64"}
EVAL_BATCH = 256
# train.staleness_lr (async, cyclic): a gradient's learning-rate factor given its staleness tau
STALENESS_LR = {"none": lambda tau: np.ones_like(tau, dtype=float),
                "inverse": lambda tau: 1.0 / np.maximum(1, tau)}


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


def time_to_target(metrics: pd.DataFrame, target: float | None,
                   clock: str = "virtual_time_s") -> float | None:
    """The first time on ``clock`` at which the evaluated test accuracy reached ``target``."""
    if target is None:
        return None
    hit = metrics[clock][metrics["test_accuracy"] >= target]
    return float(hit.iloc[0]) if len(hit) else None


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


def take_gradient(model: nn.Module) -> list:
    """The model's accumulated .grad tensors, detached from it (the model's are cleared)."""
    grads = [p.grad for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


def apply_gradient(model: nn.Module, optimizer: torch.optim.Optimizer, grads: list) -> None:
    """One optimiser step on the given gradient."""
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g
    optimizer.step()
    model.zero_grad(set_to_none=True)


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
def torch_settings(threads: int, device: torch.device):
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
def stop_requests(signums=(signal.SIGTERM, signal.SIGINT)):
    """Record SIGTERM (SLURM's preemption notice, Snakemake's cancel) and SIGINT instead of dying
    mid-step: the loop checkpoints at the end of the row and stops (``Stopped``). Yields the
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


def new_model(run: Run, seed: int, lr: float) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The task's network (initialised from the seed) and its SGD with momentum."""
    torch.manual_seed(seed)
    model = run.data.make_model().to(run.device)
    return model, torch.optim.SGD(model.parameters(), lr=lr, momentum=run.tc.momentum)


def save_checkpoint(run: Run, model: nn.Module, optimizer: torch.optim.Optimizer, **extra) -> None:
    """The run's state now: the model, optimiser and RNG states, plus the mode's ``extra``."""
    state = {"identity": run.identity, "model": model.state_dict(),
             "optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
             "cuda_rng": torch.cuda.get_rng_state_all() if run.device.type == "cuda" else [],
             **extra}
    write_with(run.ckpt_path, lambda tmp: torch.save(state, tmp))


def load_checkpoint(run: Run, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict | None:
    """Restore the interrupted run's model, optimiser and RNG states; its state (for the mode's
    own keys), or None when there is none or it is another run's (then start afresh)."""
    path = run.ckpt_path
    state = torch.load(path, map_location="cpu", weights_only=True) if path.exists() else None
    if state is not None and state["identity"] != run.identity:
        # An interrupted run of another config, task, policy, seed or trace (Snakemake reruns
        # a job whose config changed): its state is no use here, start afresh.
        print(f"discarding {path}: checkpoint of another run ({state['identity']})")
        return None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        if run.device.type == "cuda":
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        done = state["metrics"]["iteration"]
        print(f"resumed from {path} at iteration {done[-1] if done else 0}")
    return state


class Recorder:
    """A run's metrics rows and what happens at the end of each: the test set evaluated when the
    iteration passes a multiple of train.eval_every and at the last, W&B, a checkpoint when it
    passes a multiple of train.checkpoint_every, the progress bar, and a stop request (SIGTERM /
    SIGINT: checkpoint, then ``Stopped``)."""

    def __init__(self, cfg: Config, run: Run, policy: str, seed: int, out_dir: Path,
                 log: dict | None, stop: list[int]):
        tc = run.tc
        self.run, self.tc, self.stop = run, tc, stop
        self.log = log if log is not None else {col: [] for col in COLUMNS}
        self.last = self.log["iteration"][-1] if self.log["iteration"] else 0
        task = run.identity["task"]
        self.wandb = (tracking.start(cfg, policy, f"{task}-{policy}-s{seed}", out_dir,
                                     "virtual_time_s", task=task, trace=tc.trace, seed=seed)
                      if self.last < tc.max_iterations else None)
        self.shown = next((a for a in reversed(self.log["test_accuracy"]) if not math.isnan(a)),
                          math.nan)
        self.bar = tqdm(initial=self.last, total=tc.max_iterations, file=sys.stderr,
                        desc=f"{task}/{policy}/s{seed}")

    @property
    def clock(self) -> float:
        """The virtual time of the last row (0 before the first)."""
        return self.log["virtual_time_s"][-1] if self.log["virtual_time_s"] else 0.0

    def record(self, model: nn.Module, row: dict, save) -> None:
        """Append ``row`` (every column but the test ones); ``save()`` writes the checkpoint."""
        it, every = row["iteration"], lambda k: it // k > self.last // k
        final = it >= self.tc.max_iterations
        row["test_accuracy"] = row["test_loss"] = math.nan
        if every(self.tc.eval_every) or final:
            row["test_accuracy"], row["test_loss"] = evaluate(model, self.run.data, self.run.device)
            self.shown = row["test_accuracy"]
        for col in COLUMNS:
            self.log[col].append(row[col])
        tracking.log(self.wandb, row, it)
        if every(self.tc.checkpoint_every) or final or self.stop:
            save()
        self.bar.update(it - self.last)
        self.bar.set_postfix(acc=f"{self.shown:.3f}", vtime=f"{row['virtual_time_s']:.1f}s",
                             c=row["cutoff"], refresh=False)
        self.last = it
        if self.stop and not final:
            self.close(exit_code=128 + self.stop[0])
            raise Stopped(self.stop[0], self.run.ckpt_path, it)

    def close(self, exit_code: int = 0) -> None:
        """Close the bar and the W&B run (a finished run's, exit code 0, with its summary)."""
        self.bar.close()
        if self.wandb is not None:
            tracking.finish(self.wandb, metrics_summary(metrics_frame(self.log), self.run.target)
                            if exit_code == 0 else None, exit_code)


def staleness_summary(staleness: np.ndarray) -> dict:
    """result.json's summary of the applied gradients' staleness (async, cyclic)."""
    return {"mean_staleness": float(staleness.mean()), "max_staleness": int(staleness.max()),
            "staleness_p50": float(np.percentile(staleness, 50)),
            "staleness_p90": float(np.percentile(staleness, 90))}


def metrics_frame(log: dict) -> pd.DataFrame:
    """The metrics rows as metrics.parquet holds them."""
    return pd.DataFrame(log, columns=list(COLUMNS)).astype(INTEGER_COLUMNS)


def metrics_summary(metrics: pd.DataFrame, target: float) -> dict:
    """The summary keys read off the metrics rows (result.json's and the W&B run's)."""
    gradients, times = metrics["gradients"].to_numpy(), metrics["iteration_time_s"].to_numpy()
    return {
        "time_to_target_s": time_to_target(metrics, target),
        "final_accuracy": float(metrics["test_accuracy"].iloc[-1]),
        "final_test_loss": _finite(metrics["test_loss"].iloc[-1]),  # None once training diverged
        "gradients_per_s": float(gradients.sum() / times.sum()),
        "mean_cutoff": float(metrics["cutoff"].mean()), "iterations": int(len(metrics)),
        "gradients": int(gradients.sum()),
        "virtual_time_s": float(metrics["virtual_time_s"].iloc[-1]),
    }


def write_outputs(cfg: Config, run: Run, log: dict, model: nn.Module, trace_path, history_path,
                  out_dir: Path, wallclock: dict, extra: dict | None = None) -> dict:
    """metrics.parquet, model.pt and result.json (``extra``: more summary keys); removes the
    checkpoint. ``wallclock``: this process's timings, after the common note."""
    task, policy, seed = (run.identity[k] for k in ("task", "policy", "seed"))
    T, n = run.trace.runtimes.shape
    metrics = metrics_frame(log)
    write_with(out_dir / "metrics.parquet", lambda tmp: metrics.to_parquet(tmp, index=False))
    write_with(out_dir / "model.pt", lambda tmp: torch.save(model.state_dict(), tmp))
    summary = {
        "task": task, "policy": policy, "seed": seed, "target_accuracy": run.target,
        **metrics_summary(metrics, run.target),
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


def write_stale_outputs(cfg: Config, run: Run, log: dict, model: nn.Module, trace_path,
                        history_path, out_dir: Path, wallclock: dict, staleness: np.ndarray,
                        extra: dict | None = None) -> dict:
    """``write_outputs`` for a mode whose gradients are stale (async, cyclic): the staleness
    summary joins result.json's summary and is printed."""
    summary = write_outputs(cfg, run, log, model, trace_path, history_path, out_dir, wallclock,
                            {**staleness_summary(staleness), **(extra or {})})
    print(f"{run.identity['policy']} staleness: mean {summary['mean_staleness']:.2f}, "
          f"p90 {summary['staleness_p90']:.1f}, max {summary['max_staleness']}")
    return summary
