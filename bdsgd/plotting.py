"""How every figure is saved: ``save_figure`` writes it as PNG and as PDF, at one DPI, atomically.

Below the traces (their figures) and the figures (the rest) in the layers, so that both save
alike. The formats are plain data (``figure_files``): reading them, as every workflow parse does,
imports no plotting library; ``save_figure`` takes a figure already drawn.
"""

from __future__ import annotations

from pathlib import Path

from bdsgd.io import write_with

# Every figure is written in each of these formats; a figure's listed file is the first (the
# workflow's report shows it).
FIGURE_FORMATS = ("png", "pdf")
DPI = 150
# No creation date in the PDF: the same figure gives the same bytes.
SAVE_OPTIONS = {"png": {"dpi": DPI}, "pdf": {"dpi": DPI, "metadata": {"CreationDate": None}}}


def figure_files(file: str) -> list[str]:
    """Every file written for a figure listed as ``file`` (its PNG): one per format. A file of
    another kind (a table) is itself."""
    stem, _, ext = file.rpartition(".")
    if ext != FIGURE_FORMATS[0]:
        return [file]
    return [f"{stem}.{fmt}" for fmt in FIGURE_FORMATS]


def save_figure(fig, path: Path) -> list[Path]:
    """Write ``fig`` as ``path`` (its PNG) and beside it in every other FIGURE_FORMATS, then close
    it; returns the files written. A figure without a layout engine of its own is laid out tight."""
    import matplotlib.pyplot as plt

    if fig.get_layout_engine() is None:
        fig.tight_layout()
    paths = [Path(out) for out in figure_files(str(path))]
    for out in paths:
        fmt = out.suffix.lstrip(".")
        write_with(out, lambda tmp, fmt=fmt: fig.savefig(tmp, format=fmt, **SAVE_OPTIONS[fmt]))
    plt.close(fig)
    return paths
