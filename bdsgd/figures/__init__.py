"""Figures and tables, drawn from stored results only: the list here, the drawing in ``render``.

The figure list, its one home: what ``render.render_all`` (``bdsgd figures``) writes, name ->
(file in the figure folder, caption in workflow/report/, report category). The workflow's
targets and report entries come from it, and from ``bdsgd.traces.TRACE_FIGURES``. Plain data,
so that reading it (every workflow parse) imports no plotting library.
"""

FIGURES = {
    "summary": ("summary.csv", "summary.rst", "Tables"),
    "throughput_summary": ("throughput_summary.csv", "throughput_summary.rst", "Tables"),
    "time_to_accuracy": ("time_to_accuracy.png", "time_to_accuracy.rst", "Convergence"),
    "cutoff_over_time": ("cutoff_over_time.png", "cutoff_over_time.rst", "Policies"),
    "throughput": ("throughput.png", "throughput.rst", "Policies"),
    "runtime_distributions": ("runtime_distributions.png", "runtime_distributions.rst", "Traces"),
    "model_predictions": ("model_predictions.png", "model_predictions.rst", "Run-time model"),
}
