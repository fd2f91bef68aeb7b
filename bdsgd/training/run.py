"""What every training mode does before and around its loop: read and check its inputs once
(``prepare``), build the network, checkpoint and resume, and hear stop requests.

The modes (``synchronous``: a cutoff policy per iteration; ``asynchronous``; ``cyclic``) differ
only in when gradients are computed and applied; ``bdsgd.training.record`` writes their rows.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import logging
import signal
import threading
from pathlib import Path

import torch
from torch import nn

from bdsgd.config import Config
from bdsgd.devices import select_device
from bdsgd.errors import UserError
from bdsgd.io import write_with
from bdsgd.tasks import WorkerStreams, load_task
from bdsgd.traces.io import read_history, read_trace, require_complete

logger = logging.getLogger(__name__)


# What every training mode reads before its loop (``prepare``).
RunSetup = collections.namedtuple(
    "RunSetup", "tc trace history data streams device target identity ckpt_path")


def prepare(cfg: Config, task: str, policy: str, seed: int, trace_path, out_dir,
            history_path) -> RunSetup:
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
    return RunSetup(tc, trace, history, data, streams, select_device(tc.device, source=cfg.source),
                    tc.target_accuracy[task],
               identity, Path(out_dir) / "checkpoint.pt")


def new_model(run: RunSetup, seed: int, lr: float) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The task's network (initialised from the seed) and its SGD with momentum."""
    torch.manual_seed(seed)
    model = run.data.make_model().to(run.device)
    return model, torch.optim.SGD(model.parameters(), lr=lr, momentum=run.tc.momentum)


def save_checkpoint(run: RunSetup, model: nn.Module, optimizer: torch.optim.Optimizer, **extra) -> None:
    """The run's state now: the model, optimiser and RNG states, plus the mode's ``extra``."""
    state = {"identity": run.identity, "model": model.state_dict(),
             "optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
             "cuda_rng": torch.cuda.get_rng_state_all() if run.device.type == "cuda" else [],
             **extra}
    write_with(run.ckpt_path, lambda tmp: torch.save(state, tmp))


def load_checkpoint(run: RunSetup, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict | None:
    """Restore the interrupted run's model, optimiser and RNG states; its state (for the mode's
    own keys), or None when there is none or it is another run's (then start afresh)."""
    path = run.ckpt_path
    state = torch.load(path, map_location="cpu", weights_only=True) if path.exists() else None
    if state is not None and state["identity"] != run.identity:
        # An interrupted run of another config, task, policy, seed or trace (Snakemake reruns
        # a job whose config changed): its state is no use here, start afresh.
        logger.warning("discarding %s: checkpoint of another run (%s)", path, state["identity"])
        return None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        if run.device.type == "cuda":
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        done = state["metrics"]["iteration"]
        logger.info("resumed from %s at iteration %d", path, done[-1] if done else 0)
    return state


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
