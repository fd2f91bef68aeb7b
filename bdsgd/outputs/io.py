"""Atomic writers: a temporary file beside the target, then a rename, so an interrupted or
failed job never leaves a half-written output for Snakemake (or a user) to trust; and the check
of an output path that a command makes before its work (``check_output``)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bdsgd.errors import UserError


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path in the target's folder; rename it onto ``path`` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; outputs are shared like any other file
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_with(path: str | Path, writer: Callable[[Path], Any]) -> Path:
    """Call ``writer(tmp_path)`` and move the result onto ``path`` atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)
    return Path(path)


def write_table(df, path: str | Path) -> Path:
    """A table as CSV, atomically; floats to 10 significant digits, so that the same results
    give the same bytes."""
    return write_with(path, lambda tmp: df.to_csv(tmp, index=False, float_format="%.10g",
                                                  lineterminator="\n"))


def write_json(path: str | Path, data: Any) -> Path:
    text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"
    return write_with(path, lambda tmp: tmp.write_text(text))



def check_output(flag: str, *paths: str | Path, folder: bool = False,
                 inputs: tuple = ()) -> None:
    """Refuse, before any work, outputs that cannot be written (a ``UserError`` naming the path
    and ``flag``): a file output must not be an existing folder, a folder output (``folder``) not
    an existing file; neither may be one of the command's ``inputs``, and each one's nearest
    existing ancestor must be a writable folder (the rest of the path is created). A path of
    None (an optional output not asked for) is skipped. Creates nothing."""
    same = {Path(p).resolve() for p in inputs if p is not None}
    if "" in paths:
        raise UserError("''", flag, "an empty path")
    for path in (Path(p) for p in paths if p is not None):  # None: an output not asked for
        if path.resolve() in same:
            raise UserError(str(path), flag, "is also an input of this command: writing it "
                            "would overwrite that input; give another path")
        if folder and path.exists() and not path.is_dir():
            raise UserError(str(path), flag, "is an existing file; this output is a folder")
        if not folder and path.is_dir():
            raise UserError(str(path), flag, "is an existing folder; this output is a file")
        ancestor = path if folder and path.is_dir() else path.parent
        while not ancestor.exists() and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise UserError(str(path), flag, f"{ancestor} is a file, not a folder, so the path "
                            "cannot be created")
        if not os.access(ancestor, os.W_OK | os.X_OK):
            raise UserError(str(path), flag, f"folder {ancestor} is not writable")
