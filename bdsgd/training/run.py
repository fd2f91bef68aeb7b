"""What every training mode does before and around its loop: read and check its inputs once
(``prepare``), build the network, checkpoint and resume (a damaged checkpoint is a one-line error
naming it: the run is never silently redone from zero). Stop requests: ``bdsgd.entry``.

The modes (``synchronous``: a cutoff policy per iteration; ``asynchronous``; ``cyclic``) differ
only in when gradients are computed and applied; ``bdsgd.training.record`` writes their rows.
"""

from __future__ import annotations

import collections
import hashlib
import logging

import numpy as np
import torch
from torch import nn

from bdsgd.cluster.compute import Compute
from bdsgd.cluster.network import Network
from bdsgd.cluster.virtual import VirtualCluster, build
from bdsgd.config import Config
from bdsgd.devices import select_device
from bdsgd.errors import UserError
from bdsgd.outputs.io import write_with
from bdsgd.runtime_model.checkpoint import read_state
from bdsgd.sgd import iterations_at_n, time_gradient
from bdsgd.tasks import WorkerStreams, load_task
from bdsgd.traces.io import read_history, read_trace, require_complete, require_cutoff
from bdsgd.traces.schema import replay_start
from bdsgd.training.spec import RunSpec

logger = logging.getLogger(__name__)


# What every training mode reads before its loop (``prepare``).
RunSetup = collections.namedtuple(
    "RunSetup", "tc trace history data streams device target identity ckpt_path iterations")


def prepare(spec: RunSpec) -> RunSetup:
    """Read and check the trace, history, task and target; the run's checkpoint identity."""
    cfg, task, policy, seed, trace_path = spec.cfg, spec.task, spec.policy, spec.seed, spec.trace
    tc = cfg.training()
    cfg.run_trace()  # one trace: the run's
    trace = replay_start(read_trace(trace_path), seed)
    require_cutoff(trace, str(trace_path))
    require_complete(trace, str(trace_path))
    if task not in tc.target_accuracy:
        raise UserError(cfg.source, f"train.target_accuracy.{task}",
                        f"no target accuracy for task {task!r}: time-to-accuracy needs one")
    device = select_device(tc.device, source=cfg.source)
    data = load_task(task, tc.data_dir, tc.loader_workers, pin=device.type == "cuda")
    history = read_history(spec.history, trace, str(trace_path))
    try:
        streams = WorkerStreams(len(data.train), trace.n_workers, tc.batch_size, seed)
    except ValueError as exc:
        raise UserError(cfg.source, "train.batch_size", f"{exc} of {task}") from None
    identity = {"config_hash": cfg.hash(), "task": task, "policy": policy, "seed": seed,
                "trace_sha256": hashlib.sha256(trace.runtimes.tobytes()).hexdigest(),
                "history_sha256": None if history is None else hashlib.sha256(
                    history.runtimes.tobytes()).hexdigest()}
    # the recipe's budget at this cluster's size (train.epochs): every mode reads it from here
    iterations = iterations_at_n(tc, trace.n_workers, len(data.train))
    return RunSetup(tc, trace, history, data, streams, device, tc.target_accuracy[task], identity,
                    spec.out / "checkpoint.pt", iterations)


def new_model(run: RunSetup, seed: int, lr: float) -> tuple[nn.Module, torch.optim.Optimizer]:
    """The task's network (initialised from the seed) and its SGD with momentum."""
    torch.manual_seed(seed)
    model = run.data.make_model().to(run.device)
    return model, torch.optim.SGD(model.parameters(), lr=lr, momentum=run.tc.momentum,
                                  weight_decay=run.tc.weight_decay)


def virtual_cluster(cfg: Config, run: RunSetup, net: Network, model: nn.Module,
                    state: dict | None) -> VirtualCluster:
    """The run's virtual cluster (``bdsgd.cluster.virtual``) on ``net``: how its trace's units
    become seconds (train.clock). Under a measured gradient time a resumed run keeps the one it
    measured (its checkpoint's ``compute``)."""
    tc = run.tc
    if tc.clock == "recorded":
        cluster = build(cfg, run.trace, net, key="train.clock")
    elif state is not None:
        try:
            cluster = build(cfg, run.trace, net, Compute(**state["compute"]))
        except (KeyError, TypeError):
            raise UserError(str(run.ckpt_path), "compute", "missing or damaged (a damaged "
                            "checkpoint or another bdsgd version's); delete it to start the run "
                            "afresh") from None
    elif tc.gradient_s is not None:
        cluster = build(cfg, run.trace, net, Compute.scaled(run.trace.runtimes, tc.gradient_s,
                                                           "config"))
    else:
        x, y = run.data.batch(run.data.train, run.streams.batch(0, np.array([0])),
                              run.streams.seeds(0, np.array([0])))
        seconds = time_gradient(model, x, y, tc.chunk_samples, run.device)
        logger.info("gradient time on %s: %.4g s per worker batch of %d (measured)", run.device,
                    seconds, tc.batch_size)
        cluster = build(cfg, run.trace, net, Compute.scaled(run.trace.runtimes, seconds, "measured"))
    return cluster


def save_checkpoint(run: RunSetup, model: nn.Module, optimizer: torch.optim.Optimizer, **extra) -> None:
    """The run's state now: the model, optimiser and RNG states, plus the mode's ``extra``."""
    state = {"identity": run.identity, "model": model.state_dict(),
             "optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state(),
             "cuda_rng": torch.cuda.get_rng_state_all() if run.device.type == "cuda" else [],
             **extra}
    write_with(run.ckpt_path, lambda tmp: torch.save(state, tmp))


def load_checkpoint(run: RunSetup, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict | None:
    """Restore the interrupted run's model, optimiser and RNG states; its state (for the mode's
    own keys), or None when there is none or it is another run's (then start afresh). A damaged
    checkpoint is a UserError naming it: deleting it starts afresh."""
    path, afresh = run.ckpt_path, "delete it to start the run afresh"
    if not path.exists():
        return None
    state = read_state(path, afresh)
    if "identity" not in state:
        raise UserError(str(path), "identity", f"not a bdsgd train checkpoint; {afresh}")
    if state["identity"] != run.identity:
        # An interrupted run of another config, task, policy, seed or trace (Snakemake reruns
        # a job whose config changed): its state is no use here, start afresh.
        logger.warning("discarding %s: checkpoint of another run (%s)", path, state["identity"])
        return None
    restores = [("model", model.load_state_dict), ("optimizer", optimizer.load_state_dict),
                ("torch_rng", torch.set_rng_state)]
    if run.device.type == "cuda":
        restores.append(("cuda_rng", torch.cuda.set_rng_state_all))
    for key, restore in [*restores, ("metrics", lambda metrics: metrics["iteration"])]:
        try:
            restore(state[key])
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
            why = "missing" if isinstance(exc, KeyError) else "does not fit this run"
            raise UserError(str(path), key, f"{why} (a damaged checkpoint or another bdsgd "
                            f"version's); {afresh}") from None
    done = state["metrics"]["iteration"]
    logger.info("resumed from %s at iteration %d", path, done[-1] if done else 0)
    return state
