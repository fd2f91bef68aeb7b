"""Ablations: each policy beside its variants <policy>+<variant> (``bdsgd.policies.VARIANTS``),
the arms of the convergence runs that differ from it in one train: key (the cutoff's objective,
the learning rate's scaling with the accepted batch), as a table (``ablation_table``), a figure
(``ablations``) and the answer they give in words (``ablations_answer``).

Per arm: the time to target's median over seeds with its distribution-free interval
(``bdsgd.stats.time_to_target_stats``; a seed that never reached the target counts as
infinitely slow), and the mean cutoff: the mean over seeds of each run's mean over iterations,
with the seeds' min and max.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bdsgd.figures.verdicts import phrases
from bdsgd.layout import policy_parts
from bdsgd.plotting import save_figure
from bdsgd.stats import time_to_target_stats

KEYS = ["task", "trace", "policy"]
ABLATION_COLUMNS = ["task", "trace", "policy", "base", "variant", "seeds", "reached",
                    "median_time_to_target_s", "low_s", "high_s", "coverage", "mean_cutoff",
                    "cutoff_min", "cutoff_max", "n_workers", "target_accuracy"]
# One marker per variant in every panel (the plain policy's: a circle), the colour its policy's.
VARIANT_MARKERS = {"": "o", "progress": "s", "throughput": "P", "lr-linear": "v", "lr-sqrt": "^",
                   "lr-none": "D"}


def ablation_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Per task and trace, every policy run with variants, and each of its arms (the plain policy
    first, then its variants by name): ABLATION_COLUMNS. Empty when no run is a variant's."""
    parts = [policy_parts(p) for p in summary["policy"]]
    runs = summary.assign(base=[b for b, _ in parts], variant=[v for _, v in parts])
    ablated = runs.loc[runs["variant"] != "", ["task", "trace", "base"]].drop_duplicates()
    runs = runs.merge(ablated, on=["task", "trace", "base"])
    cutoffs = runs.groupby(KEYS).agg(
        base=("base", "first"), variant=("variant", "first"), mean_cutoff=("mean_cutoff", "mean"),
        cutoff_min=("mean_cutoff", "min"), cutoff_max=("mean_cutoff", "max"),
        n_workers=("n_workers", "first"), target_accuracy=("target_accuracy", "first"))
    stats = time_to_target_stats(runs).rename(columns={
        "median": "median_time_to_target_s", "low": "low_s", "high": "high_s"})
    table = stats.merge(cutoffs.reset_index(), on=KEYS)
    return table.sort_values(["task", "trace", "base", "variant"])[ABLATION_COLUMNS].reset_index(
        drop=True)


def _seconds(value: float) -> str:
    return f"{value:.3g} s" if value < 1000 else f"{value:.0f} s"


def ablations_answer(table: pd.DataFrame, verdicts: pd.DataFrame) -> str:
    """The measured answer in words: per task, trace and ablated policy, the median time to
    target and the mean cutoff of the plain policy and of each of its variants, and each
    variant's verdict against it and the policy's against the paper's BDSGD
    (``verdicts.verdict_table``'s rows)."""
    if table.empty:
        return ("This experiment runs no policy variants (<policy>+<variant> in train.policies): "
                "no ablation to report.")
    sentences = []
    for (task, trace, _), arms in table.groupby(["task", "trace", "base"], sort=True):
        first = arms.iloc[0]
        said = [f"{arm.policy} reaches {first.target_accuracy:g} " + (
                    f"in {_seconds(arm.median_time_to_target_s)}"
                    if np.isfinite(arm.median_time_to_target_s) else
                    f"in {arm.reached} of {arm.seeds} seeds only (median: never)") +
                f" (mean cutoff {arm.mean_cutoff:.2f})" for arm in arms.itertuples()]
        where = f"{task} on {trace}" if trace else task
        here = verdicts[(verdicts["measure"] == "time to target") & (verdicts["task"] == task)
                        & (verdicts["trace"] == trace)]
        # each variant against its policy, and the policy against the paper's BDSGD
        paired = here[(here["policy"].isin(arms["policy"][arms["variant"] != ""])
                       & (here["reference"] == first.base))
                      | ((here["policy"] == first.base) & (here["reference"] == "bdsgd-paper"))]
        sentences.append(f"On {where} ({int(first.n_workers)} workers, median of "
                         f"{int(arms['seeds'].max())} seeds): " + "; ".join(said) + ". "
                         + phrases(paired))
    return " ".join(sentences)


def _panel_times(ax, arms: pd.DataFrame, colour) -> None:
    """Median time to target per arm with its interval; 'never' at the right edge, an arrow
    where the interval has no upper end."""
    finite = arms[["median_time_to_target_s", "low_s", "high_s"]].to_numpy()
    top = 1.15 * np.max(finite[np.isfinite(finite)], initial=1.0)
    for y, arm in enumerate(arms.itertuples()):
        style = {"color": colour(arm.base), "marker": VARIANT_MARKERS.get(arm.variant, "X")}
        high = min(arm.high_s, top)
        if np.isfinite(arm.low_s):
            ax.plot([arm.low_s, high], [y, y], color=style["color"], lw=1.5)
            if np.isinf(arm.high_s):
                ax.plot(high, y, marker=">", color=style["color"], ms=6)
        if np.isfinite(arm.median_time_to_target_s):
            ax.plot(arm.median_time_to_target_s, y, ms=8, ls="none", **style)
        else:
            ax.annotate("never", (top, y), ha="right", va="center", fontsize=8, color="firebrick")
        ax.annotate(f"{arm.reached}/{arm.seeds}", (high, y), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=7)
    ax.set_xlim(0, top * 1.1)
    ax.set(xlabel="virtual time to target (s)",
           title=f"time to {arms['target_accuracy'].iloc[0]:g} (median over seeds, "
                 f"{arms['coverage'].min():.0%}+ interval)")


def _panel_cutoffs(ax, arms: pd.DataFrame, colour) -> None:
    """Mean cutoff per arm (over seeds) with the seeds' min and max; the dotted line is n."""
    for y, arm in enumerate(arms.itertuples()):
        style = {"color": colour(arm.base), "marker": VARIANT_MARKERS.get(arm.variant, "X")}
        ax.plot([arm.cutoff_min, arm.cutoff_max], [y, y], color=style["color"], lw=1.5)
        ax.plot(arm.mean_cutoff, y, ms=8, ls="none", **style)
    n = int(arms["n_workers"].max())
    ax.axvline(n, ls=":", color="k", lw=1)
    ax.set_xlim(0, n + 0.5)
    ax.set(xlabel=f"mean cutoff c (gradients accepted of n = {n})",
           title="mean cutoff (mean over seeds, min-max)")


def ablations(table: pd.DataFrame, path: Path, colour) -> list[Path]:
    """Per task and trace, a row: time to target and mean cutoff of every ablated policy and its
    variants (``ablation_table``), in the policy's colour (``colour``: policy -> colour), one
    marker per variant. No variants: a panel that says so."""
    panels = sorted(table.groupby(["task", "trace"]).groups)
    if not panels:
        fig, ax = plt.subplots(figsize=(6, 1.5))
        ax.text(0.5, 0.5, "no policy variants (<policy>+<variant>) in train.policies",
                ha="center", va="center")
        ax.set_axis_off()
        return save_figure(fig, path)
    heights = [0.9 + 0.35 * len(table[(table["task"] == t) & (table["trace"] == r)])
               for t, r in panels]
    fig, axes = plt.subplots(len(panels), 2, figsize=(11, sum(heights) + 0.4 * len(panels)),
                             squeeze=False, gridspec_kw={"height_ratios": heights})
    for (time_ax, cut_ax), (task, trace) in zip(axes, panels, strict=True):
        arms = table[(table["task"] == task) & (table["trace"] == trace)].reset_index(drop=True)
        _panel_times(time_ax, arms, colour)
        _panel_cutoffs(cut_ax, arms, colour)
        for ax in (time_ax, cut_ax):
            ax.set_yticks(range(len(arms)), arms["policy"])
            ax.set_ylim(len(arms) - 0.5, -0.5)  # the plain policy on top of its variants
        time_ax.set_ylabel(f"{task} on {trace}" if trace else task)
    return save_figure(fig, path)
