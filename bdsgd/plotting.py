"""How every figure is saved: ``save_figure`` writes it as PNG and as PDF, at one DPI, atomically,
with the note of the results it was drawn from (``figure_note``: e.g. that they are smoke scale)
printed over it.

Below the traces (their figures) and the figures (the rest) in the layers, so that both save
alike. The formats are plain data (``figure_files``): reading them, as every workflow parse does,
imports no plotting library; ``save_figure`` takes a figure already drawn.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
from pathlib import Path

from bdsgd.outputs.io import write_with

# Every figure is written in each of these formats; a figure's listed file is the first (the
# workflow's report shows it).
FIGURE_FORMATS = ("png", "pdf")
DPI = 150
# No creation date in the PDF: the same figure gives the same bytes.
SAVE_OPTIONS = {"png": {"dpi": DPI}, "pdf": {"dpi": DPI, "metadata": {"CreationDate": None}}}
NOTE_STYLE = {"fontsize": 9, "color": "#b22222", "fontweight": "bold"}

# Each axes title sits at a fixed place above its axes. matplotlib's default moves a title clear
# of whatever is drawn above the axes, and finding that out lays out every axis again at each
# save; the one figure with something there (the trace heat map's colour-bar arrow) places its
# title itself.
STYLE = {"axes.titley": 1.0}

# The note every figure saved in a ``figure_note`` block carries (None: none). A context, so that
# every figure a command draws carries it without each drawing function passing it on.
_NOTE: contextvars.ContextVar[str | None] = contextvars.ContextVar("figure_note", default=None)


@contextlib.contextmanager
def figure_note(note: str | None):
    """Every figure ``save_figure`` writes inside this block has ``note`` printed over it."""
    token = _NOTE.set(note or None)
    try:
        yield
    finally:
        _NOTE.reset(token)


def use_agg() -> None:
    """Draw off screen, in STYLE: each drawing module calls this before it imports pyplot."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams.update(STYLE)


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


def _add_note(fig, note: str) -> None:
    """Print ``note`` over the figure: the figure grows by the note's lines at its top, and its
    title and its layout (its engine's, else a tight one) move below the band they take (at the
    top, since legends under the panels are anchored to the figure's foot)."""
    from matplotlib.layout_engine import ConstrainedLayoutEngine, TightLayoutEngine

    renderer = fig.canvas.get_renderer()
    text = fig.text(0.5, 1, note, ha="center", va="top", wrap=True, **NOTE_STYLE)
    width = text.get_window_extent(renderer).width / fig.dpi  # inches, unwrapped
    lines = max(1, -(-width // (0.9 * fig.get_figwidth())))
    band = lines * NOTE_STYLE["fontsize"] * 1.5 / 72 + 0.15  # inches
    title = fig._suptitle  # the artist (get_suptitle gives its text only)
    title_height = 0 if title is None else title.get_window_extent(renderer).height / fig.dpi
    height = fig.get_figheight() + band
    fig.set_figheight(height)
    below = 1 - band / height  # the figure as it was, as a fraction of the grown one
    engine = fig.get_layout_engine()
    constrained = isinstance(engine, ConstrainedLayoutEngine)
    if title is not None:  # placed by hand below the band (a constrained layout then leaves it
        # its room: below)
        fig.suptitle(title.get_text(), fontsize=title.get_fontsize(),
                     y=below if constrained else title.get_position()[1] * below)
    if constrained:  # its rectangle: left, bottom, width, height
        left, bottom, width, rect_height = engine.get()["rect"]
        top = rect_height * below - (title_height + 0.1 if title is not None else 0) / height
        engine.set(rect=(left, bottom * below, width, top))
    else:  # a tight layout's rectangle: left, bottom, right, top
        left, bottom, right, top = (engine.get()["rect"] if isinstance(engine, TightLayoutEngine)
                                    else None) or (0, 0, 1, 1)
        if isinstance(engine, TightLayoutEngine):
            engine.set(rect=(left, bottom * below, right, top * below))
        else:
            fig.tight_layout(rect=(left, bottom * below, right, top * below))
    text.set_y(1 - 0.05 / height)


def save_figure(fig, path: Path) -> list[Path]:
    """Write ``fig`` as ``path`` (its PNG) and beside it in every other FIGURE_FORMATS, then close
    it; returns the files written. A figure without a layout engine of its own is laid out tight.
    Inside a ``figure_note`` block the note is printed over the figure, which grows to hold it."""
    import matplotlib.pyplot as plt

    if _NOTE.get():
        _add_note(fig, _NOTE.get())
    elif fig.get_layout_engine() is None:
        fig.tight_layout()
    paths = [Path(out) for out in figure_files(str(path))]
    for out in paths:
        fmt = out.suffix.lstrip(".")
        write_with(out, lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, **SAVE_OPTIONS[fmt]))
    plt.close(fig)
    return paths
