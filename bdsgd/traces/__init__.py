"""Worker run-time traces: schema, io, import, simulate, gather, describe, plots.

TRACE_FIGURES: the figures ``bdsgd traces plot`` (``plots.draw_trace_figures``) writes per trace,
name -> (file, with {trace} for the trace's name; caption in workflow/report/; report category).
Each is listed by its PNG and written as a PDF beside it too, as every figure
(``bdsgd.plotting.figure_files``). Plain data here, so the workflow reads it without importing a
plotting library.
"""

TRACE_FIGURES = {
    "cdf": ("{trace}_runtime_cdf.png", "trace_cdf.rst", "Traces"),
    "heatmap": ("{trace}_heatmap.png", "trace_heatmap.rst", "Traces"),
    "cov": ("{trace}_cov.png", "trace_cov.rst", "Traces"),
}
