"""A worker (ranks 1..n): gradients of its own mini-batches on the parameters the server sends.

Worker w = rank - 1 computes at iteration t the gradient of its mini-batch t (its shard, as in
the virtual trainer: ``WorkerStreams``), then waits out its injected delay: ``delay_s`` plus the
delay trace's x_{t mod T, w}, the whole work times the straggler factor if it is the straggler.
Under ``late: abandon`` it watches its inbox while it waits, and drops the work when newer
parameters (or STOP) arrive. A listener thread receives the server's messages, a heartbeat
thread bumps its counter; both stop with the process.
"""

from __future__ import annotations

import os
import queue
import signal
import threading
import time

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from bdsgd.distributed.wire import HEARTBEAT_EVERY, PARAMS, STOP, Job, flat
from bdsgd.sgd import backward
from bdsgd.tasks import WorkerStreams, load_task
from bdsgd.traces.io import read_trace

SLICE_S = 0.005  # how often a waiting worker looks at its inbox


def _listen(size: int, inbox: queue.Queue) -> None:
    buf = torch.zeros(size)
    try:
        while True:
            dist.recv(buf, src=0)
            inbox.put(buf.clone())
            if buf[0] == STOP:
                return
    except RuntimeError:  # the server is gone
        inbox.put(None)


def _heartbeat(kv, rank: int, stop: threading.Event) -> None:
    while not stop.wait(HEARTBEAT_EVERY):
        kv.add(f"hb/{rank}", 1)


def _newest(inbox: queue.Queue, msg):
    """The newest of ``msg`` and what else is waiting (STOP or a lost server wins)."""
    while msg is not None and msg[0] == PARAMS and not inbox.empty():
        msg = inbox.get()
    return msg


def _wait(seconds: float, inbox: queue.Queue | None) -> bool:
    """Sleep ``seconds``; under abandon (an inbox to watch) stop early when a message arrives.
    True if the work was abandoned."""
    end = time.perf_counter() + seconds
    while (left := end - time.perf_counter()) > 0:
        if inbox is not None and not inbox.empty():
            return True
        time.sleep(min(SLICE_S, left))
    return False


def run_worker(job: Job, rank: int, kv, batch_size: int, data_dir, device: torch.device) -> None:
    w, n = rank - 1, job.workers
    stop = threading.Event()
    threading.Thread(target=_heartbeat, args=(kv, rank, stop), daemon=True).start()
    torch.set_num_threads(1)
    data = load_task(job.task, data_dir)
    streams = WorkerStreams(len(data.train), n, batch_size, job.seed)
    torch.manual_seed(job.seed)
    model = data.make_model().to(device)
    params = parameters_to_vector(model.parameters()).numel()
    padding = torch.zeros(job.extra_parameters)
    delays = None if job.delay_trace is None else read_trace(job.delay_trace).runtimes
    factor = job.straggler[1] if job.straggler is not None and job.straggler[0] == w else 1.0

    inbox: queue.Queue = queue.Queue()
    threading.Thread(target=_listen, args=(params + job.extra_parameters + 2, inbox),
                     daemon=True).start()
    msg = inbox.get()
    try:
        while (msg := _newest(inbox, msg)) is not None and msg[0] != STOP:
            t = int(msg[1])
            if job.kill == (w, t):
                os.kill(os.getpid(), signal.SIGKILL)  # what a failed node looks like
            vector_to_parameters(msg[2:2 + params].to(device), model.parameters())
            start = time.perf_counter()
            model.zero_grad(set_to_none=True)
            x, y = data.batch(data.train, streams.batch(t, np.array([w])),
                              streams.seeds(t, np.array([w])))
            loss = backward(model, x, y, len(y), device).item()  # .item() waits for the GPU
            compute = time.perf_counter() - start
            extra = job.delay_s + (0.0 if delays is None else float(delays[t % len(delays), w]))
            abandoned = _wait((compute + extra) * factor - compute,
                              inbox if job.late == "abandon" else None)
            if not abandoned:
                grads = flat(p.grad for p in model.parameters()).cpu()
                header = torch.tensor([t, time.perf_counter() - start, loss], dtype=grads.dtype)
                try:
                    dist.send(torch.cat([header, grads, padding]), dst=0)
                except RuntimeError:  # the server is gone (done, or killed): nothing to do
                    return
            msg = inbox.get()
    finally:
        stop.set()
