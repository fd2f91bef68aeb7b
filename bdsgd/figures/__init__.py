"""Figures and tables, drawn from stored results only: the list here, the drawing in ``render``.

The figure list, its one home: what ``render.render_all`` (``bdsgd figures``) writes, name ->
(file in the figure folder, caption in workflow/report/, report category). The workflow's
targets and report entries come from it, and from ``bdsgd.traces.TRACE_FIGURES``. Every figure
is listed by its PNG and written as a PDF beside it (``figure_files``, ``bdsgd.plotting``, which
saves every figure). Plain data, so that reading it (every workflow parse) imports no plotting
library.
"""

from bdsgd.plotting import FIGURE_FORMATS, figure_files

__all__ = ["FIGURES", "DRAW_FIGURES", "FIGURE_FORMATS", "figure_files", "POLICY_COLOURS", "POLICY_DASHES",
           "FALLBACK_COLOURS", "VARIANT_DASHES"]

FIGURES = {
    "reviewers": ("reviewers.csv", "reviewers.rst", "Reviewer questions"),
    "answers": ("answers.rst", "answers.rst", "Reviewer questions"),
    "verdicts": ("verdicts.csv", "verdicts.rst", "Reviewer questions"),
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
    "censoring": ("censoring.png", "censoring.rst", "Policies"),
    "data_value": ("data_value.png", "data_value.rst", "Policies"),
    "replay_ablations": ("replay_ablations.csv", "replay_ablations.rst", "Tables"),
    "runtime_distributions": ("runtime_distributions.png", "runtime_distributions.rst", "Traces"),
    "model_predictions": ("model_predictions.png", "model_predictions.rst", "Run-time model"),
    "ladder": ("ladder.png", "ladder.rst", "Policies"),
    "ladder_summary": ("ladder.csv", "ladder_summary.rst", "Tables"),
    "ablations": ("ablations.png", "ablations.rst", "Convergence"),
    "ablations_summary": ("ablations.csv", "ablations_summary.rst", "Tables"),
    "distributed_replay": ("distributed_replay.png", "distributed_replay.rst", "Convergence"),
}
# The throughput study over cluster draws (``bdsgd.figures.draws``, ``bdsgd figures --draws``):
# from the throughput replays alone.
DRAW_FIGURES = {
    "throughput_study": ("throughput_study.rst", "throughput_study.rst", "Reviewer questions"),
    "draw_verdicts": ("draw_verdicts.csv", "draw_verdicts.rst", "Reviewer questions"),
    "throughput_draws": ("throughput_draws.png", "throughput_draws.rst", "Policies"),
    "throughput_draws_summary": ("throughput_draws.csv", "throughput_draws_summary.rst", "Tables"),
}


# One fixed colour and line style per policy (and per training mode that is no cutoff policy),
# the same in every figure; no two alike in both, so that policies with identical decisions
# still tell apart. Colours: Okabe & Ito's colour-blind-safe palette (its yellow left out: too
# pale on white) and a grey; a family of policies shares a colour and differs in line style
# (POLICY_DASHES; bars: a hatch); the two training modes take two of Tol's muted colours.
# explore-<p> is drawn in p's colour dash-dotted (bars: "xx"); a name not listed here gets one of
# FALLBACK_COLOURS (the rest of Tol's muted palette), picked from its letters
# (common.policy_style).
POLICY_COLOURS = {
    "sync": "#999999",  # grey: the fixed baselines everything is compared with
    "static": "#999999",
    "elfving": "#0072B2",  # blue
    "ecdf": "#56B4E9",  # sky blue
    "bandit": "#E69F00",  # orange
    "ewma": "#009E73",  # bluish green: the per-worker simple baselines
    "persist": "#009E73",
    "bdsgd": "#D55E00",  # vermilion: the method of the paper and its variants
    "bdsgd-model": "#D55E00",  # the run-time model alone, without the averaging
    "bdsgd-paper": "#D55E00",  # Teng & Wood's own (their model, ratio rule, no margin)
    "bayes": "#CC79A7",  # reddish purple
    "oracle": "#000000",  # black: the hindsight references
    "oracle-myopic": "#000000",
    "oracle-fixed": "#000000",  # the best single cutoff in hindsight
    "async": "#332288",  # the training modes: Tol's indigo and teal, no cutoff policy's
    "cyclic": "#44AA99",
}
# The line style of a policy that is not solid: the second (dashed) and third (dotted) of a
# colour.
POLICY_DASHES = {"static": "--", "persist": "--", "bdsgd-model": "--", "bdsgd-paper": ":",
                 "oracle-myopic": "--", "oracle-fixed": ":", "async": "--", "cyclic": "--"}
FALLBACK_COLOURS = ("#117733", "#882255", "#999933", "#AA4499")
# <policy>+<variant> is drawn in its policy's colour, in its variant's dash pattern (no listed
# policy's): an arm of the ablations beside its policy (bdsgd.policies.VARIANTS).
VARIANT_DASHES = {"progress": (0, (6, 2, 1, 2)), "throughput": (0, (1, 1)),
                  "lr-linear": (0, (8, 2)), "lr-sqrt": (0, (4, 1, 1, 1, 1, 1)),
                  "lr-none": (0, (2, 3))}
