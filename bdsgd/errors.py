"""How a bdsgd process reports: the one error type a user sees (a one-line message naming the
file and the field), a stop by signal, and the entry points' handling of both.

Library code says what it does through ``logging`` (a logger per module, under ``bdsgd``); an
entry point (``run_entry_point``) shows those messages on stdout, one line each, and turns a
``UserError`` into one line on stderr and exit status 2.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable


class UserError(Exception):
    """Bad input from the user (a trace, a config, a data path, a flag).

    The CLI prints ``bdsgd: error: FILE: FIELD: MESSAGE`` and exits with status 2, having written
    nothing (every writer in bdsgd writes to a temporary file and renames it into place).
    """

    def __init__(self, file: str, field: str, message: str):
        self.file, self.field, self.message = str(file), str(field), message
        super().__init__(f"{self.file}: {self.field}: {message}")

    def __reduce__(self):
        # rebuilt from its fields where it crosses a process boundary (a process pool's result)
        return UserError, (self.file, self.field, self.message)


class Stopped(Exception):
    """A long job stopped by a signal (SIGTERM: SLURM's preemption notice, Snakemake's cancel;
    SIGINT: Ctrl-C) at an iteration boundary, after writing its checkpoint.

    The CLI prints one line and exits with 128 + the signal's number, as a process killed by it
    would; the same command resumes from ``checkpoint``.
    """

    def __init__(self, signum: int, checkpoint: str, iteration: int):
        self.signum, self.checkpoint, self.iteration = signum, str(checkpoint), iteration
        super().__init__(f"stopped by signal {signum} after iteration {iteration}; "
                         f"{self.checkpoint} holds the run: the same command resumes it")

    def __reduce__(self):
        return Stopped, (self.signum, self.checkpoint, self.iteration)


class _Stdout(logging.StreamHandler):
    """A handler that writes to whatever ``sys.stdout`` is when a message comes (a test's
    capture swaps it), flushing each line (a job's log follows it live)."""

    def __init__(self):
        logging.Handler.__init__(self)
        self.setFormatter(logging.Formatter("%(message)s"))

    @property
    def stream(self):
        return sys.stdout


def show_messages() -> None:
    """Show bdsgd's messages (INFO and above) on stdout, once per process."""
    log = logging.getLogger("bdsgd")
    log.setLevel(logging.INFO)
    if not any(isinstance(h, _Stdout) for h in log.handlers):
        log.addHandler(_Stdout())


def run_entry_point(work: Callable[[], object]) -> int:
    """Run an entry point's ``work`` with bdsgd's messages shown: its exit status (0; 2 and one
    line on stderr for a ``UserError``; 128 + the signal's number for a ``Stopped`` job)."""
    show_messages()
    try:
        work()
    except UserError as exc:
        print(f"bdsgd: error: {exc}", file=sys.stderr, flush=True)
        return 2
    except Stopped as exc:
        print(f"bdsgd: {exc}", file=sys.stderr, flush=True)
        return 128 + exc.signum
    return 0
