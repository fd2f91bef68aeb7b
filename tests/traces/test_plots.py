"""Trace figures: three per trace, each as PNG and PDF at the one DPI of every figure, written
atomically; the PAI reference CoV quantiles drawn in the CoV figure agree with the real data file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bdsgd.config import SimulateConfig
from bdsgd.figures.render import _time_unit
from bdsgd.plotting import DPI, figure_files, unit_label
from bdsgd.traces import TRACE_FIGURES
from bdsgd.traces.io import write_trace
from bdsgd.traces.plots import PAI_COV_QUANTILES, draw_trace_figures, heatmap_range
from bdsgd.traces.schema import from_arrays
from bdsgd.traces.simulate import simulate

DATA = Path(__file__).parents[1] / "data"
PNG = b"\x89PNG\r\n\x1a\n"
PDF = b"%PDF"


def test_figures_written(tmp_path):
    trace, _ = simulate(SimulateConfig(scenario="mixed", workers=12, iterations=80), 0)
    paths = draw_trace_figures(trace, "sim", tmp_path / "figs")
    assert [p.name for p in paths] == [
        "sim_runtime_cdf.png", "sim_runtime_cdf.pdf", "sim_heatmap.png", "sim_heatmap.pdf",
        "sim_cov.png", "sim_cov.pdf"]
    # what the workflow declares: TRACE_FIGURES, each in every format
    assert [p.name for p in paths] == [out for file, _, _ in TRACE_FIGURES.values()
                                       for out in figure_files(file.format(trace="sim"))]
    for path in paths:
        data = path.read_bytes()
        if path.suffix == ".png":
            assert data.startswith(PNG) and len(data) > 10_000
        else:
            assert data.startswith(PDF)
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == sorted(p.name for p in paths)


def test_trace_figures_are_saved_as_every_figure(tmp_path):
    """The trace figures' PNGs have the DPI of the results figures' (bdsgd.plotting)."""
    from PIL import Image

    from bdsgd.figures import render

    trace, _ = simulate(SimulateConfig(scenario="calm", workers=4, iterations=30), 0)
    cdf = draw_trace_figures(trace, "t", tmp_path)[0]
    other = render.runtime_distributions(_results_with(tmp_path / "results", trace),
                                         tmp_path / "runtime_distributions.png")[0]
    for png in (cdf, other):
        with Image.open(png) as image:
            assert [round(d) for d in image.info["dpi"]] == [DPI, DPI], png


def _results_with(results: Path, trace) -> Path:
    write_trace(trace, results / "traces" / "t" / "trace.parquet")
    return results


def test_figures_for_censored_and_constant_traces(tmp_path):
    x = np.full((6, 3), 2.0)
    censored = np.zeros((6, 3), bool)
    censored[2, 1] = True
    paths = draw_trace_figures(from_arrays(x, {"source": "t"}, censored=censored), "flat", tmp_path)
    assert all(p.read_bytes().startswith(PNG if p.suffix == ".png" else PDF) for p in paths)
    assert len(paths) == 6


def test_pai_reference_quantiles_match_data():
    cov = pd.read_csv(DATA / "alibaba_pai_coefficient_variation.csv", index_col=0).to_numpy()
    cov = cov[~np.isnan(cov)]
    for q, value in PAI_COV_QUANTILES.items():
        assert abs(np.quantile(cov, q) - value) < 5e-4


def test_model_predictions_axis_takes_the_trace_unit(tmp_path):
    """The predictions figure labels run-times in the trace's unit (the Alibaba jobs' is not s)."""
    (tmp_path / "traces" / "pai").mkdir(parents=True)
    write_trace(from_arrays(np.ones((3, 2)), meta={"time_unit": "normalised 0-1000"}),
                tmp_path / "traces" / "pai" / "test.parquet")
    assert _time_unit(tmp_path, "pai") == "normalised 0-1000"
    assert _time_unit(tmp_path, "absent") == "s"
    # the axis names the unit, not the range its values may exceed
    assert unit_label(_time_unit(tmp_path, "pai")) == "normalised units"


def test_heatmap_range_clips_visibly():
    """The colour range is the 0.5-99.9th percentiles; the ends it clips are the colour bar's
    arrows."""
    x = np.ones((100, 10))
    assert heatmap_range(x)[2] == "neither"
    x[3, 4] = 40.0  # one straggler, far beyond the 99.9th percentile
    lo, hi, extend = heatmap_range(x)
    assert (lo, extend) == (1.0, "max") and hi < 40.0
    x[5, 5] = 0.01
    assert heatmap_range(x)[2] == "both"


def test_heatmap_shows_the_clip_and_the_true_maximum(tmp_path, monkeypatch):
    from bdsgd.traces import plots

    x = np.ones((200, 6)) + np.arange(6) / 10
    x[50, 2] = 42.7
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig) or [path])
    draw_trace_figures(from_arrays(x, {"source": "t"}), "t", tmp_path)
    heatmap = figures[1]
    image = heatmap.axes[0].images[0]
    assert image.colorbar.extend == "max"
    assert image.norm.vmax < 42.7  # clipped ...
    assert tuple(image.cmap.get_over()) != tuple(image.cmap(1.0))  # ... in a colour of its own
    assert image.colorbar.ax.get_title() == "max\n42.7"  # the true maximum on the bar
    assert "blue above" in heatmap.axes[0].get_title() and "(max 42.7)" in heatmap.axes[0].get_title()
    assert image.colorbar.ax.get_ylabel() == "run-time (s)"
    for fig in figures:
        plots.plt.close(fig)


def test_trace_figures_carry_the_note(tmp_path, monkeypatch):
    """bdsgd traces plot --note prints it under each of the three figures."""
    from bdsgd import cli
    from bdsgd.traces import plots

    trace, _ = simulate(SimulateConfig(scenario="calm", workers=4, iterations=30), 0)
    write_trace(trace, tmp_path / "t.parquet")
    figures = []
    real = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, path: figures.append(fig) or real(fig, path))
    assert cli.main(["traces", "plot", str(tmp_path / "t.parquet"), "--out", str(tmp_path / "f"),
                     "--note", "smoke scale"]) == 0
    assert [fig.texts[-1].get_text() for fig in figures] == ["smoke scale"] * 3
    assert len(list((tmp_path / "f").iterdir())) == 6
