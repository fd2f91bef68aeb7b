"""The errors a bdsgd process reports: the one error type a user sees (a one-line message naming
the file and the field), a long job stopped by a signal, and a failure a child process reported.
How an entry point shows them: ``bdsgd.entry``.
"""

from __future__ import annotations


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

    def __init__(self, signum: int, checkpoint: str, iteration: int, unit: str = "iteration"):
        self.signum, self.checkpoint, self.iteration = signum, str(checkpoint), iteration
        self.unit = unit  # what ``iteration`` counts: "iteration", or "epoch" (model training)
        super().__init__(f"stopped by signal {signum} after {unit} {iteration}; "
                         f"{self.checkpoint} holds the run: the same command resumes it")

    def __reduce__(self):
        return Stopped, (self.signum, self.checkpoint, self.iteration, self.unit)


class Reported(Exception):
    """A failure a child process has reported on stderr already (its one line): the entry point
    exits with the child's status and prints nothing more."""

    def __init__(self, status: int):
        self.status = status
        super().__init__(f"a child process exited with status {status}")
