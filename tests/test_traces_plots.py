"""Trace figures: three per trace, each as PNG and PDF at the one DPI of every figure, written
atomically; the PAI reference CoV quantiles drawn in the CoV figure agree with the real data file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bdsgd.config import SimulateConfig
from bdsgd.figures.render import _time_unit
from bdsgd.plotting import DPI, figure_files
from bdsgd.traces import TRACE_FIGURES
from bdsgd.traces.io import write_trace
from bdsgd.traces.plots import PAI_COV_QUANTILES, draw_trace_figures
from bdsgd.traces.schema import from_arrays
from bdsgd.traces.simulate import simulate

DATA = Path(__file__).parent / "data"
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
