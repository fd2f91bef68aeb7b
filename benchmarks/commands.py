"""The benchmark scripts' way to run a ``bdsgd`` command: in a process of its own, from the
repository root, its output shown only when it fails (a module the scripts share)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bdsgd(*args) -> None:
    """``python -m bdsgd ARGS``; a failure ends the script with the command and its output."""
    proc = subprocess.run([sys.executable, "-m", "bdsgd", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bdsgd {' '.join(map(str, args))} failed:\n{proc.stdout[-2000:]}\n"
                 f"{proc.stderr[-2000:]}")


def output_folder(out: str | None, prefix: str) -> Path:
    """The folder a script writes its traces, models and tables to: ``out`` (``--out``), made if
    missing, or a new one; said on stderr."""
    folder = Path(out) if out else Path(tempfile.mkdtemp(prefix=prefix))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"outputs in {folder}", file=sys.stderr, flush=True)
    return folder
