"""Trace figures: three PNGs per trace, written atomically; the PAI reference CoV quantiles drawn
in the CoV figure agree with the real data file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bdsgd.config import SimulateConfig
from bdsgd.figures.render import _time_unit
from bdsgd.traces.io import write_trace
from bdsgd.traces.plots import PAI_COV_QUANTILES, draw_trace_figures
from bdsgd.traces.schema import from_arrays
from bdsgd.traces.simulate import simulate

DATA = Path(__file__).parent / "data"
PNG = b"\x89PNG\r\n\x1a\n"


def test_figures_written(tmp_path):
    trace, _ = simulate(SimulateConfig(scenario="mixed", workers=12, iterations=80), 0)
    paths = draw_trace_figures(trace, "sim", tmp_path / "figs")
    assert [p.name for p in paths] == ["sim_runtime_cdf.png", "sim_heatmap.png", "sim_cov.png"]
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == sorted(p.name for p in paths)


def test_figures_for_censored_and_constant_traces(tmp_path):
    x = np.full((6, 3), 2.0)
    censored = np.zeros((6, 3), bool)
    censored[2, 1] = True
    paths = draw_trace_figures(from_arrays(x, {"source": "t"}, censored=censored), "flat", tmp_path)
    assert all(p.read_bytes().startswith(PNG) for p in paths)


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
