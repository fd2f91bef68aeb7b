"""The one error type a user sees: a one-line message naming the file and the field."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user (a trace, a config, a data path, a flag).

    The CLI prints ``bdsgd: error: FILE: FIELD: MESSAGE`` and exits with status 2, having written
    nothing (every writer in bdsgd writes to a temporary file and renames it into place).
    """

    def __init__(self, file: str, field: str, message: str):
        self.file, self.field, self.message = str(file), str(field), message
        super().__init__(f"{self.file}: {self.field}: {message}")
