"""Gathering a run-time trace from real workers under torch.distributed.

``gather`` runs in one of two roles:

- **Launcher** (no rank in the environment): starts N workers on this machine with torchrun
  (``python -m torch.distributed.run --standalone --nproc-per-node N -m bdsgd.traces.gather``)
  and waits for them.
- **Worker** (the environment holds a rank): torchrun sets RANK / WORLD_SIZE / LOCAL_RANK /
  MASTER_ADDR / MASTER_PORT; under SLURM's ``srun`` SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID
  give the rank, and the rendezvous address is the job's first node (``scontrol show hostnames``)
  on port 20000 + job id mod 20000, unless MASTER_ADDR / MASTER_PORT are already set. So
  ``srun bdsgd traces gather --config ... --out ...`` in an sbatch script gathers across nodes.
  The world size is the launcher's; the config's ``workers`` only tells our own launcher how many
  to start.

Each worker loads the configured task, builds its model (same seed on every worker, so the
replicas start identical) and takes real mini-batches from its own shard of the training set
(``bdsgd.tasks.WorkerStreams``, as the trainers deal it). One iteration is

    barrier                                   all workers start together
    forward + backward on the mini-batch      timed: compute_s
    barrier                                   wait for the slowest (not charged to anyone)
    all_reduce of the flattened gradients     timed: comm_s

and runtime_s = compute_s + comm_s is the time that worker needed for its gradient. (Timing the
all_reduce without the barrier before it would charge the waiting for stragglers to the fast
workers' communication, and every worker would look as slow as the slowest.) The model is not
updated: the time of a gradient does not depend on the weights' values, and a trace is about time.
One untimed warm-up iteration absorbs one-off costs (allocator, lazy initialisation).

Rank 0 collects every worker's timings (all_gather) and host name, and writes the trace
atomically with its metadata (source "gather", backend, world size, hosts, the gather config,
seed). Workers use one torch thread each. ``background_load`` busy-loop processes per node
(started by each node's local rank 0, stopped when gathering ends) provoke stragglers; on a
small machine a few workers per core already contend.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from bdsgd.config import GatherConfig
from bdsgd.devices import rank_env, select_device, slurm_rendezvous
from bdsgd.entry import run_entry_point
from bdsgd.errors import UserError

logger = logging.getLogger(__name__)

WARMUP = 1  # untimed iterations before the trace starts


def _backend(name: str) -> str:
    if name == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if name == "nccl" and not torch.cuda.is_available():
        raise UserError("config", "gather.backend", "nccl needs CUDA, and none is available here")
    return name


def _start_background_load(processes: int) -> list[subprocess.Popen]:
    busy = [sys.executable, "-c", "while True: pass"]
    return [subprocess.Popen(busy) for _ in range(processes)]


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait()


def _worker(cfg: GatherConfig, data_dir, seed: int, out: Path, iterations: int,
            ranks: dict[str, int]) -> None:
    from bdsgd.tasks import WorkerStreams, load_task

    torch.set_num_threads(1)
    rank, world, local = ranks["rank"], ranks["world"], ranks["local"]
    if ranks["slurm"]:
        slurm_rendezvous()
    backend = _backend(cfg.backend)
    device = select_device("cuda" if backend == "nccl" else "cpu", local)
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world)
    load = _start_background_load(cfg.background_load) if local == 0 else []
    try:
        task = load_task(cfg.task, data_dir)
        torch.manual_seed(seed)
        model = task.make_model().to(device)
        loss_fn = torch.nn.CrossEntropyLoss()
        try:
            streams = WorkerStreams(len(task.train), world, cfg.batch_size, seed)
        except ValueError as exc:
            raise UserError("config", "gather.batch_size", f"{exc} of {cfg.task}") from None

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        def barrier() -> None:
            dist.barrier(device_ids=[local]) if backend == "nccl" else dist.barrier()

        timings = torch.zeros(iterations, 2, dtype=torch.float64)
        for it in range(WARMUP + iterations):
            take = streams.batch(it, np.array([rank]))
            inputs, labels = (t.to(device) for t in task.batch(task.train, take))
            model.zero_grad(set_to_none=True)
            barrier()
            start = time.perf_counter()
            loss_fn(model(inputs), labels).backward()
            sync()
            computed = time.perf_counter()
            barrier()
            flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            sent = time.perf_counter()
            dist.all_reduce(flat)
            sync()
            done = time.perf_counter()
            if it >= WARMUP:
                timings[it - WARMUP] = torch.tensor([computed - start, done - sent])

        gathered = [torch.zeros_like(timings, device=device) for _ in range(world)]
        dist.all_gather(gathered, timings.to(device))
        hosts: list[str | None] = [None] * world
        dist.all_gather_object(hosts, socket.gethostname())
    finally:
        _stop(load)
    if rank == 0:
        # Only rank 0 writes, so only it pays for importing pandas and pyarrow.
        from bdsgd.traces.io import write_trace
        from bdsgd.traces.schema import from_arrays

        both = torch.stack(gathered, dim=1).cpu().numpy()  # (T, world, 2)
        compute, comm = both[..., 0], both[..., 1]
        names = sorted(set(hosts))
        meta = {
            "source": "gather",
            "time_unit": "s",
            "backend": backend,
            "world_size": world,
            "hosts": hosts,
            "launcher": "srun" if ranks["slurm"] else "torchrun",
            "cluster": f"{world} workers on {len(names)} host(s) {names}, torch.distributed "
                       f"{backend}, {'cuda' if device.type == 'cuda' else 'cpu'}",
            "gather": {**dataclasses.asdict(cfg), "workers": world, "iterations": iterations},
            "seed": int(seed),
            "torch": torch.__version__,
        }
        trace = from_arrays(compute + comm, meta, node=np.array([names.index(h) for h in hosts]),
                            compute_s=compute, comm_s=comm)
        write_trace(trace, out)
        logger.info("gathered %d iterations x %d workers (%s) -> %s", iterations, world, backend, out)
    dist.destroy_process_group()


def _launch(cfg: GatherConfig, data_dir, seed: int, out: Path, workers: int,
            iterations: int) -> None:
    """Start ``workers`` local processes with torchrun, each running this module as a worker."""
    from bdsgd.tasks import load_task

    load_task(cfg.task, data_dir)  # a missing data set is a one-line error here, not N tracebacks
    _backend(cfg.backend)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(workers), "-m", "bdsgd.traces.gather",
           "--gather-config", json.dumps(dataclasses.asdict(cfg)), "--data-dir", str(data_dir),
           "--seed", str(seed), "--out", str(out), "--iterations", str(iterations)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(cmd, env=env)
    if result.returncode != 0:
        raise RuntimeError(f"gather: the {workers} workers failed (torchrun exit status "
                           f"{result.returncode}); their output is above")


def gather(cfg: GatherConfig, data_dir, seed: int, out, workers: int | None = None,
           iterations: int | None = None) -> None:
    """Gather a trace of ``iterations`` x ``workers`` real run-times into ``out`` (Parquet)."""
    out = Path(out).resolve()
    iterations = cfg.iterations if iterations is None else iterations
    workers = cfg.workers if workers is None else workers
    if iterations < 1 or workers < 1:
        raise UserError("--workers/--iterations", "gather",
                        "need at least 1 worker and 1 iteration")
    ranks = rank_env()
    if ranks is None:
        _launch(cfg, data_dir, seed, out, workers, iterations)
    else:
        _worker(cfg, data_dir, seed, out, iterations, ranks)


def _main() -> None:
    """Entry point of each torchrun worker started by ``_launch``."""
    parser = argparse.ArgumentParser(description="one bdsgd gather worker (started by torchrun)")
    parser.add_argument("--gather-config", required=True, help="GatherConfig as JSON")
    parser.add_argument("--data-dir", required=True, help="data sets root")
    parser.add_argument("--seed", type=int, required=True, help="seed of the model and the shards")
    parser.add_argument("--out", required=True, help="trace to write (rank 0)")
    parser.add_argument("--iterations", type=int, required=True, help="timed iterations")
    args = parser.parse_args()
    sys.exit(run_entry_point(lambda: gather(
        GatherConfig(**json.loads(args.gather_config)), args.data_dir, args.seed, args.out,
        iterations=args.iterations)))


if __name__ == "__main__":
    _main()
