"""The trainer loop, once for every mode: read the run, build the model and its virtual cluster,
resume, then record the rows the mode trains until the run is done, and write the outputs.

    cutoff   (``synchronous.Cutoff``)   a cutoff policy's synchronous SGD, an iteration a row
    async    (``asynchronous.Async``)   each gradient applied on arrival, a round of n a row
    cyclic   (``cyclic.Cyclic``)        workers push their accumulated gradients in turn

A mode is what differs: ``rows(rec)`` trains from the last recorded row and yields each new one;
``checkpoint()`` its own state to resume from; ``summary()`` and ``wallclock()`` its keys of
result.json. Everything else (the checkpoint's model, optimiser, RNG states, metrics and compute;
the evaluations, W&B, the progress bar and stop requests in ``record.Recorder``) is this loop's.
SIGTERM (what SLURM sends before preempting a job) or SIGINT ends the run at the end of a row
with a checkpoint, and the same command resumes it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

from bdsgd.cluster.schedules import ASYNC, CYCLIC
from bdsgd.cluster.virtual import network, require_server
from bdsgd.devices import torch_settings
from bdsgd.entry import stop_requests
from bdsgd.policies.build import load_inputs
from bdsgd.sgd import rate_at_n
from bdsgd.tasks import gradient_bytes
from bdsgd.training.asynchronous import Async
from bdsgd.training.cyclic import Cyclic
from bdsgd.training.record import Recorder, write_outputs
from bdsgd.training.run import load_checkpoint, new_model, prepare, save_checkpoint, virtual_cluster
from bdsgd.training.spec import RunSpec
from bdsgd.training.synchronous import Cutoff

logger = logging.getLogger(__name__)

TRAINERS = {ASYNC: Async, CYCLIC: Cyclic}  # the training modes; any other name is a cutoff policy


def train_run(spec: RunSpec) -> Path:
    """One convergence run (``bdsgd.training.spec.run_spec``); writes its folder's
    metrics.parquet, result.json and model.pt (and checkpoint.pt while it runs, from which an
    interrupted run resumes). The run's history (the trace's iterations before the replayed
    ones) is what a policy that learns from observations sees first; async and cyclic check and
    record it."""
    wall_start = time.perf_counter()
    cfg, policy = spec.cfg, spec.base
    r = prepare(spec)
    tc, n = r.tc, r.trace.n_workers

    with torch_settings(tc.threads, r.device), stop_requests() as stop:
        model, optimizer = new_model(r, spec.seed, rate_at_n(tc, n))
        state = load_checkpoint(r, model, optimizer)
        net, trainer = network(cfg, gradient_bytes(model)), TRAINERS.get(policy)
        if trainer is not None:
            require_server(net, policy, cfg.source)
        cluster = virtual_cluster(cfg, r, net, model, state)
        logger.info("train %s / %s / seed %d: n=%d workers, T=%d trace iterations (%.2f cycles "
                    "over %d rows), batch %d per worker (%d per epoch), lr %s at c=n (%s "
                    "scaling), %s clock (%.4g s per trace unit), %s network: comm %.4g s at c=n "
                    "(%.3g of compute), late %s, target accuracy %s, device %s", spec.task,
                    spec.policy, spec.seed, n, r.trace.n_iterations,
                    r.iterations / r.trace.n_iterations, r.iterations, tc.batch_size,
                    r.streams.per_epoch, rate_at_n(tc, n), tc.lr_scaling, cluster.compute.clock,
                    cluster.compute.factor, net.topology,
                    net.comm(n)[-1], cluster.comm_to_compute(r.trace.runtimes), cluster.late,
                    r.target, r.device)
        if trainer is not None:
            mode = trainer(r, model, optimizer, cluster, state)
        else:
            mode = Cutoff(cfg, r, model, optimizer, cluster, state, policy,
                          load_inputs([policy], spec.trace, spec.model, spec.paper_model))
        rec = Recorder(spec, r, None if state is None else state["metrics"], stop)
        start = rec.last
        rows = mode.rows(rec)
        # train.stop_at_target: the run is done at the margin after the target
        while not rec.done and (row := next(rows, None)) is not None:
            rec.record(model, row, lambda: save_checkpoint(
                r, model, optimizer, metrics=rec.log, compute=dataclasses.asdict(cluster.compute),
                **mode.checkpoint()))
        rec.stop_if_asked()  # a request after the last row: the outputs wait for the next job
        rec.close()

    write_outputs(spec, r, rec.log, model, {
        "seconds": time.perf_counter() - wall_start, "resumed_from_iteration": start,
        **mode.wallclock()}, mode.summary(),
        clock=cluster.record(r.trace.runtimes, late=trainer is None))
    return spec.out
