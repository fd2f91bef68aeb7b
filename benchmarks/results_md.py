"""The benchmark scripts' results file (``--results benchmarks/results.md``), shared by them all.

The file holds one section per script (``## <script>.py``) and in it one block per command
(``### `<command>```), the command that produced the block, as run from the repository root. A
script run with ``--results PATH`` writes what it printed as the block of its own command: it
replaces that block where it is, adds it at the end of its script's section (or of the file, in
a new section) where it is not, and leaves every other line of the file as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

FENCE = re.compile(r"^(```|~~~)")


def add_option(parser: argparse.ArgumentParser) -> None:
    """The ``--results PATH`` option, the same in every script."""
    parser.add_argument("--results", metavar="PATH",
                        help="also write what this run prints into the markdown file PATH (e.g. "
                             "benchmarks/results.md), as the block of this command in this "
                             "script's section: an earlier block of the same command is replaced, "
                             "the rest of the file is left as it is")


def command(script: str, argv: list[str]) -> str:
    """The command line that reproduces a run of ``script`` with ``argv``, without --results."""
    args, skip = [], False
    for word in argv:
        name = word.split("=", 1)[0]
        if skip:
            skip = False
        elif len(name) >= 3 and "--results".startswith(name):  # argparse takes unique prefixes
            skip = "=" not in word
        else:
            args.append(word)
    return shlex.join([".venv/bin/python", f"benchmarks/{Path(script).name}", *args])


def _headings(lines: list[str]) -> list[tuple[int, int]]:
    """(line index, level) of every ## and ### heading outside code fences."""
    found, fenced = [], False
    for i, line in enumerate(lines):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := re.match(r"^(#{2,3}) ", line)):
            found.append((i, len(m.group(1))))
    return found


def replace_block(text: str, script: str, cmd: str, body: str) -> str:
    """``text`` with the block of ``cmd`` in ``script``'s section set to ``body``."""
    section, heading = f"## {Path(script).name}", f"### `{cmd}`"
    block = [heading, "", *body.strip("\n").splitlines()]
    lines = text.splitlines()
    heads = _headings(lines)

    def trimmed(stop: int, start: int) -> int:
        """``stop`` moved back over the blank lines before it, not past ``start``."""
        while stop > start and not lines[stop - 1].strip():
            stop -= 1
        return stop

    start = next((i for i, level in heads if level == 2 and lines[i] == section), None)
    if start is None:  # a new section at the end of the file
        return "\n".join([*lines[:trimmed(len(lines), 0)], "", section, "", *block]) + "\n"
    end = next((i for i, level in heads if i > start and level == 2), len(lines))
    rest = ["", *lines[end:]] if end < len(lines) else []
    own = next((i for i, level in heads if start < i < end and lines[i] == heading), None)
    if own is None:  # a new block at the end of the section
        return "\n".join([*lines[:trimmed(end, start + 1)], "", *block, *rest]) + "\n"
    stop = next((i for i, level in heads if i > own), len(lines))
    rest = ["", *lines[stop:]] if stop < len(lines) else []
    return "\n".join([*lines[:own], *block, *rest]) + "\n"


def write(path: str | Path, script: str, cmd: str, output: str, markdown: bool = False) -> None:
    """Write ``output`` as the block of ``cmd`` in ``script``'s section of ``path`` (created
    with a title if missing); plain output goes in a ```text fence, ``markdown`` as it is."""
    path = Path(path)
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    body = output.strip("\n") if markdown else f"```text\n{output.strip(chr(10))}\n```"
    new = replace_block(text, script, cmd, body)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(new)
    os.replace(tmp, path)


class _Tee(io.TextIOBase):
    """Writes to the real stdout and keeps a copy."""

    def __init__(self, stream):
        self.stream, self.copy = stream, io.StringIO()

    def write(self, s: str) -> int:
        self.copy.write(s)
        return self.stream.write(s)

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def recorded(path: str | None, script: str, markdown: bool = False) -> Iterator[None]:
    """Print as usual; with ``path``, on success also write what was printed inside as the
    block of this command (``sys.argv``) in ``script``'s section of ``path``."""
    if path is None:
        yield
        return
    tee = _Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield
    write(path, script, command(script, sys.argv[1:]), tee.copy.getvalue(), markdown)
    print(f"results written to {path}", file=sys.stderr)
