"""How a bdsgd process runs: its entry point, its messages and its stop requests.

Library code says what it does through ``logging`` (a logger per module, under ``bdsgd``); an
entry point (``run_entry_point``) shows those messages on stdout, one line each (a WARNING, an
input that is legal but probably not meant, as one line ``bdsgd: warning: ...`` on stderr), and
turns a ``UserError`` into one line on stderr and exit status 2. A long job hears SIGTERM and
SIGINT through ``stop_requests`` and ends with ``Stopped`` after its checkpoint. Its freed memory
stays with the process for the next tensor (``keep_freed_memory``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

from bdsgd.errors import Reported, Stopped, UserError


@contextlib.contextmanager
def stop_requests(signums=(signal.SIGTERM, signal.SIGINT)):
    """Record SIGTERM (SLURM's preemption notice, Snakemake's cancel) and SIGINT instead of dying
    mid-step: the loop checkpoints at the end of the row (or epoch) and stops (``Stopped``).
    Yields the signals received; the process's handlers come back after. Only the main thread
    may set handlers: elsewhere nothing is recorded and the signals keep their effect."""
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


class _Stdout(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stdout`` is when a message comes (a test's
    capture swaps it), flushing each line (a job's log follows it live): INFO only."""

    def __init__(self):
        logging.Handler.__init__(self)
        self.setFormatter(logging.Formatter("%(message)s"))
        self.addFilter(lambda record: record.levelno < logging.WARNING)

    @property
    def stream(self):
        return sys.stdout

    def handleError(self, record):
        if isinstance(sys.exc_info()[1], BrokenPipeError):  # the reader left: the run goes on
            reader_left()
        else:
            super().handleError(record)


def reader_left() -> None:
    """The reader of stdout went away (``... | head -1``): send the rest of stdout to
    /dev/null, so neither later messages nor the flush at exit fail (as Python's docs say)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


class _Stderr(_Stdout):
    """WARNING and above, each as one line ``bdsgd: warning: MESSAGE`` on ``sys.stderr``."""

    def __init__(self):
        logging.Handler.__init__(self, logging.WARNING)
        self.setFormatter(logging.Formatter("bdsgd: warning: %(message)s"))

    @property
    def stream(self):
        return sys.stderr


def show_messages() -> None:
    """Show bdsgd's messages, once per process: INFO on stdout, warnings on stderr."""
    log = logging.getLogger("bdsgd")
    log.setLevel(logging.INFO)
    for handler in (_Stdout, _Stderr):
        if not any(type(h) is handler for h in log.handlers):
            log.addHandler(handler())


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters
HEAP_BLOCK_BYTES = 32 << 20  # the largest mmap threshold glibc accepts on 64-bit


def keep_freed_memory() -> bool:
    """Have glibc's malloc serve blocks up to 32 MiB from its heap and keep what they free,
    instead of mapping fresh pages for each block above its dynamic threshold (128 KiB until a
    larger block is freed) and returning them: a decision at thousands of workers makes dozens of
    tensors of a few hundred KiB, and the page faults of a fresh mapping cost more than the
    arithmetic on it. True where it took effect (glibc); elsewhere nothing changes."""
    libc = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(libc), "mallopt", None) if libc else None
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, HEAP_BLOCK_BYTES)
                and mallopt(M_TRIM_THRESHOLD, 2 * HEAP_BLOCK_BYTES))


def run_entry_point(work: Callable[[], object]) -> int:
    """Run an entry point's ``work`` with bdsgd's messages shown and freed memory kept
    (``keep_freed_memory``): its exit status (0; 2 and one line on stderr for a ``UserError``;
    128 + the signal's number for a ``Stopped`` job)."""
    keep_freed_memory()
    show_messages()
    try:
        work()
    except UserError as exc:
        print(f"bdsgd: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except Stopped as exc:
        print(f"bdsgd: {exc}", file=sys.stderr, flush=True)
        return 128 + exc.signum
    except Reported as exc:
        return exc.status
    return 0
