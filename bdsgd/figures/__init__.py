"""Figures and tables, drawn from stored results only: the list here, the drawing in ``render``.

The figure list, its one home: what ``render.render_all`` (``bdsgd figures``) writes, name ->
(file in the figure folder, caption in workflow/report/, report category). The workflow's
targets and report entries come from it, and from ``bdsgd.traces.TRACE_FIGURES``. Every figure
is listed by its PNG and written as a PDF beside it (``figure_files``, ``bdsgd.plotting``, which
saves every figure). Plain data, so that reading it (every workflow parse) imports no plotting
library.
"""

from bdsgd.plotting import FIGURE_FORMATS, figure_files

__all__ = ["FIGURES", "FIGURE_FORMATS", "figure_files", "POLICY_COLOURS", "FALLBACK_COLOURS",
           "EXPLORE_PREFIX"]

FIGURES = {
    "summary": ("summary.csv", "summary.rst", "Tables"),
    "throughput_summary": ("throughput_summary.csv", "throughput_summary.rst", "Tables"),
    "time_to_accuracy": ("time_to_accuracy.png", "time_to_accuracy.rst", "Convergence"),
    "loss_curves": ("loss_curves.png", "loss_curves.rst", "Convergence"),
    "training_cutoff": ("training_cutoff.png", "training_cutoff.rst", "Convergence"),
    "cutoff_over_time": ("cutoff_over_time.png", "cutoff_over_time.rst", "Policies"),
    "throughput": ("throughput.png", "throughput.rst", "Policies"),
    "throughput_over_time": ("throughput_over_time.png", "throughput_over_time.rst", "Policies"),
    "worker_time": ("worker_time.png", "worker_time.rst", "Policies"),
    "period_sweep_summary": ("period_sweep.csv", "period_sweep_summary.rst", "Tables"),
    "period_sweep": ("period_sweep.png", "period_sweep.rst", "Policies"),
    "decision_overhead": ("decision_overhead.png", "decision_overhead.rst", "Policies"),
    "comm_sweep_summary": ("comm_sweep.csv", "comm_sweep_summary.rst", "Tables"),
    "comm_sweep": ("comm_sweep.png", "comm_sweep.rst", "Policies"),
    "runtime_distributions": ("runtime_distributions.png", "runtime_distributions.rst", "Traces"),
    "model_predictions": ("model_predictions.png", "model_predictions.rst", "Run-time model"),
}


# One fixed colour per policy (and per training mode that is no cutoff policy), the same in
# every figure. explore-<p> is drawn in p's colour with a dashed line (hatched bar); a name not
# listed here gets one of FALLBACK_COLOURS, picked from its letters (render.policy_style).
POLICY_COLOURS = {
    "sync": "#7f7f7f",  # grey: the baseline everything is compared with
    "static": "#8c564b",
    "elfving": "#bcbd22",
    "ecdf": "#17becf",
    "bandit": "#9467bd",
    "ewma": "#b8860b",  # the per-worker simple baselines: dark goldenrod, teal green
    "persist": "#1b9e77",
    "bdsgd": "#d62728",  # red: the method of the paper
    "bdsgd-model": "#ff9896",  # light red: the run-time model alone, without the averaging
    "bdsgd-paper": "#8b0000",  # dark red: Teng & Wood's own (their model, ratio rule, no margin)
    "bayes": "#e377c2",
    "oracle": "#000000",  # black: the hindsight references
    "oracle-myopic": "#2ca02c",
    "oracle-fixed": "#525252",  # dark grey: the best single cutoff in hindsight
    "async": "#1f77b4",
    "cyclic": "#ff7f0e",
}
FALLBACK_COLOURS = ("#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd")
EXPLORE_PREFIX = "explore-"
