"""A worker (ranks 1..n): gradients of its own mini-batches on the parameters the server sends.

Worker w = rank - 1 computes at iteration t the gradient of its mini-batch t (its shard, as in
the virtual trainer: ``WorkerStreams``), then waits out its injected delay: ``delay_s`` plus the
delay trace's x_{t mod T, w}, the whole work times the straggler factor if it is the straggler.
Under ``late: abandon`` it waits on its inbox and drops the work the moment newer parameters
(or STOP) arrive. A listener thread receives the server's messages, a heartbeat thread bumps its
counter; both stop with the process. Each message is received into the same buffer and its
gradient sent from one: as the server's, a worker's messages cost no fresh memory.
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

from bdsgd.distributed.wire import HEADER, HEARTBEAT_EVERY, PARAMS, STOP, Job, flat
from bdsgd.sgd import backward
from bdsgd.tasks import WorkerStreams, load_task
from bdsgd.traces.io import read_trace


def _listen(size: int, head: int, inbox: queue.Queue) -> None:
    """The server's messages into ``inbox``: each received into the same buffer, its first
    ``head`` values (kind, t and the parameters; the padding is never read) handed on."""
    buf = torch.empty(size)
    try:
        while True:
            dist.recv(buf, src=0)
            inbox.put(buf[:head].clone())
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


def _wait(seconds: float, inbox: queue.Queue | None) -> tuple[bool, object]:
    """Sleep ``seconds``; under abandon (an inbox to watch) stop as soon as a message arrives, as
    the virtual clock's abandoning worker does: (True, that message) if the work was abandoned,
    else (False, None)."""
    seconds = max(0.0, seconds)
    if inbox is None:
        time.sleep(seconds)
        return False, None
    try:
        return True, inbox.get(timeout=seconds)
    except queue.Empty:
        return False, None


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
    # the outgoing message, built once: its padding stays zero, header and gradient change
    out = torch.zeros(HEADER + params + job.extra_parameters)
    delays = None if job.delay_trace is None else read_trace(job.delay_trace).runtimes
    factor = job.straggler[1] if job.straggler is not None and job.straggler[0] == w else 1.0

    inbox: queue.Queue = queue.Queue()
    threading.Thread(target=_listen, args=(params + job.extra_parameters + 2, params + 2, inbox),
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
            abandoned, newer = _wait((compute + extra) * factor - compute,
                                     inbox if job.late == "abandon" else None)
            if not abandoned:
                out[HEADER:HEADER + params] = flat(p.grad for p in model.parameters()).cpu()
                out[:HEADER] = torch.tensor([t, time.perf_counter() - start, loss])
                try:
                    dist.send(out, dst=0)  # returns once sent: out is free again
                except RuntimeError:  # the server is gone (done, or killed): nothing to do
                    return
            msg = newer if abandoned else inbox.get()
    finally:
        stop.set()
