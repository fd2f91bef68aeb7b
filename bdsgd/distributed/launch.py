"""Starting the job: n + 1 local processes (``launch``), or this process's part of it under
torchrun-style or srun environments (``node``).

``launch`` picks a free port, starts rank 0 (the server) and ranks 1..n (the workers) as
``python -m bdsgd.distributed.launch --job JSON`` with RANK / WORLD_SIZE / MASTER_ADDR /
MASTER_PORT set, and waits for the server. Workers that die do not stop it; whatever is still
running when the server ends, fails or the user presses Ctrl-C is killed and reaped, so no
process outlives the command.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist

from bdsgd.config import default_config
from bdsgd.config.stages import load_stage_config
from bdsgd.devices import rank_env, select_device, slurm_rendezvous
from bdsgd.distributed.wire import Job, store
from bdsgd.entry import run_entry_point
from bdsgd.errors import Reported, UserError
from bdsgd.outputs.io import check_output
from bdsgd.traces.io import read_trace, require_complete

GRACE_S = 10  # how long workers get to stop after the server is done

logger = logging.getLogger(__name__)


def _free_port() -> int:
    """A port with a free neighbour (the heartbeat store takes port + 1)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue


def _config(job: Job):
    return (default_config() if job.config is None
            else load_stage_config(job.config, "distributed", job.task))


def launch(job: Job) -> dict:
    """Run the job on this machine; the server's result (the JSON it wrote)."""
    cfg = _config(job)
    from bdsgd.policies.build import build_policy, load_inputs
    from bdsgd.tasks import load_task

    # a missing data set, device or policy input (a model of another worker count): one line
    # here, not one from each of the n + 1 processes
    load_task(job.task, cfg.training().data_dir)
    select_device(cfg.training().device, 0, cfg.source)
    # (eager: the server's own policy compiles where the config says; this one is a check)
    checked = dataclasses.replace(cfg, policies=dataclasses.replace(cfg.policies, compile=False))
    build_policy(job.policy, checked, seed=job.seed, n_workers=job.workers, comm=0.0, real=True,
                 inputs=load_inputs([job.policy], "<distributed>", job.model, job.paper_model))
    port, world = _free_port(), job.workers + 1
    cmd = [sys.executable, "-m", "bdsgd.distributed.launch", "--job", job.to_json()]
    base = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
            "WORLD_SIZE": str(world), "OMP_NUM_THREADS": "1"}
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(world):
            procs.append(subprocess.Popen(cmd, env={**base, "RANK": str(rank),
                                                   "LOCAL_RANK": str(rank)}))
        code = procs[0].wait()
        deadline = time.monotonic() + GRACE_S
        for proc in procs[1:]:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    if code == 2:  # the server's one-line error (a damaged checkpoint, say) is on stderr already
        raise Reported(code)
    if code != 0:
        raise RuntimeError(f"distributed: the server exited with status {code}; its output is "
                           "above")
    return json.loads(Path(job.json).read_text())


def node(job: Job) -> None:
    """This process's part: rank 0 serves, the others work (ranks from torchrun or srun)."""
    ranks = rank_env()
    if ranks["slurm"]:
        slurm_rendezvous()
    rank, world = ranks["rank"], ranks["world"]
    if world != job.workers + 1:
        raise UserError("--workers", "workers", f"{job.workers} workers need {job.workers + 1} "
                        f"processes (a server and the workers), got {world}")
    # the heartbeat store first: once the process group's connections are up, one of their
    # ephemeral ports may be the store's
    kv = store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, rank == 0)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(minutes=5))
    cfg = _config(job)
    tc = cfg.training()
    device = select_device(tc.device, ranks["local"], cfg.source)
    if rank == 0:
        from bdsgd.distributed.ps import ParameterServer

        ParameterServer(job, cfg, kv, device).run()
    else:
        from bdsgd.distributed.worker import run_worker

        run_worker(job, rank, kv, tc.batch_size, tc.data_dir, device)


def job_from_args(args) -> Job:
    """The job of a ``bdsgd distributed`` command line (its flags' values already checked by the
    parser: ``bdsgd.cli.flags``), checked across flags, its outputs too, before anything starts."""
    job = Job(workers=args.workers, policy=args.policy, iterations=args.iterations,
              task=args.task, config=args.config, model=args.model, paper_model=args.paper_model,
              json=str(Path(args.json).resolve()), late=args.late,
              straggler=args.inject_straggler, kill=args.kill_worker, delay_s=args.delay_s,
              extra_parameters=args.extra_parameters, delay_trace=args.delay_trace,
              heartbeat_s=args.heartbeat_s, seed=args.seed)
    if job.workers < 1 or job.iterations < 1:
        raise UserError("--workers/--iterations", "distributed", "need at least 1 of each")
    for flag, pair in (("--inject-straggler", job.straggler), ("--kill-worker", job.kill)):
        if pair is not None and not 0 <= pair[0] < job.workers:
            raise UserError(flag, str(pair[0]), f"no such worker: workers are 0..{job.workers - 1}")
    if job.kill is not None and job.kill[1] >= job.iterations:
        logger.warning(f"--kill-worker: {job.kill[0]}:{job.kill[1]}: iterations are "
                       f"0..{job.iterations - 1}, so no worker is killed")
    if job.delay_trace is not None:  # each worker replays its column: all of them, complete
        delays = read_trace(job.delay_trace)
        require_complete(delays, job.delay_trace)
        if delays.n_workers < job.workers:
            raise UserError(job.delay_trace, "workers", f"{delays.n_workers} workers; --workers is "
                            f"{job.workers}, and worker w waits the trace's column w")
    # what the server writes (ParameterServer: the result, metrics, trace and the virtual clock's
    # replay beside it, and its checkpoint while it runs)
    stem = Path(args.json).with_suffix("")
    check_output("--json", args.json, f"{stem}.metrics.parquet", f"{stem}.trace.parquet",
                 f"{stem}.replay.parquet", f"{stem}.checkpoint.pt",
                 inputs=(args.config, args.model, args.paper_model, args.delay_trace))
    return job


def run(job: Job) -> dict | None:
    """Launch the job here, or, started by srun / torchrun, be this process's part of it."""
    if rank_env() is None:
        return launch(job)
    node(job)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description="one process of a bdsgd distributed job")
    parser.add_argument("--job", required=True, help="the job's settings (JSON)")
    job = Job.from_json(parser.parse_args().job)
    try:
        code = run_entry_point(lambda: node(job))
    except Exception:  # noqa: BLE001 - any failure: report it and leave (threads hold gloo)
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    # Listener threads still block in gloo receives: leave without tearing the group down.
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
