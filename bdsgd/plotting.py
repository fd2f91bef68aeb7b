"""How every figure is saved: ``save_figure`` writes it as PNG and as PDF, at one DPI, atomically,
with the note of the results it was drawn from (``figure_note``: e.g. that they are smoke scale)
printed under it.

Below the traces (their figures) and the figures (the rest) in the layers, so that both save
alike. The formats are plain data (``figure_files``): reading them, as every workflow parse does,
imports no plotting library; ``save_figure`` takes a figure already drawn.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from pathlib import Path

from bdsgd.io import write_with

# Every figure is written in each of these formats; a figure's listed file is the first (the
# workflow's report shows it).
FIGURE_FORMATS = ("png", "pdf")
DPI = 150
# No creation date in the PDF: the same figure gives the same bytes.
SAVE_OPTIONS = {"png": {"dpi": DPI}, "pdf": {"dpi": DPI, "metadata": {"CreationDate": None}}}
NOTE_STYLE = {"fontsize": 9, "color": "#b22222", "fontweight": "bold"}

# The note every figure saved in a ``figure_note`` block carries (None: none). A context, so that
# every figure a command draws carries it without each drawing function passing it on.
_NOTE: contextvars.ContextVar[str | None] = contextvars.ContextVar("figure_note", default=None)


@contextlib.contextmanager
def figure_note(note: str | None):
    """Every figure ``save_figure`` writes inside this block has ``note`` printed under it."""
    token = _NOTE.set(note or None)
    try:
        yield
    finally:
        _NOTE.reset(token)


def unit_label(unit: str) -> str:
    """A time unit as an axis names it: a unit with a stated range ("normalised 0-1000", whose
    values may exceed it) loses the range, so that no axis claims one its values leave."""
    plain = re.sub(r"\s*\d+(\.\d+)?\s*[-–]\s*\d+(\.\d+)?\s*$", "", unit).strip()
    return f"{plain} units" if plain and plain != unit else unit


def figure_files(file: str) -> list[str]:
    """Every file written for a figure listed as ``file`` (its PNG): one per format. A file of
    another kind (a table) is itself."""
    stem, _, ext = file.rpartition(".")
    if ext != FIGURE_FORMATS[0]:
        return [file]
    return [f"{stem}.{fmt}" for fmt in FIGURE_FORMATS]


def save_figure(fig, path: Path) -> list[Path]:
    """Write ``fig`` as ``path`` (its PNG) and beside it in every other FIGURE_FORMATS, then close
    it; returns the files written. A figure without a layout engine of its own is laid out tight.
    Inside a ``figure_note`` block the note is printed under the figure, which grows to hold it."""
    import matplotlib.pyplot as plt

    if fig.get_layout_engine() is None:
        fig.tight_layout()
    note, extra = _NOTE.get(), {}
    if note:
        fig.text(0.5, 0, note, ha="center", va="top", wrap=True, **NOTE_STYLE)
        extra = {"bbox_inches": "tight", "pad_inches": 0.15}  # the canvas takes the note in
    paths = [Path(out) for out in figure_files(str(path))]
    for out in paths:
        fmt = out.suffix.lstrip(".")
        write_with(out, lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, **SAVE_OPTIONS[fmt],
                                                         **extra))
    plt.close(fig)
    return paths
