"""The convergence figures: test accuracy and time to target (``time_to_accuracy``), training loss
against iterations and virtual time (``loss_curves``); and the measured answer to "which policy
reaches the target first?" (``time_to_accuracy_answer``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bdsgd.figures.common import (  # noqa: E402
    band,
    bar_style,
    counted_from_0,
    legend_below,
    of,
    smoothed,
    task_panels,
    time_label,
    title,
)
from bdsgd.figures.stats import time_to_target_stats  # noqa: E402
from bdsgd.plotting import save_figure  # noqa: E402

# the training modes that are no cutoff policy: their metrics rows are rounds of about n
# applied gradients rather than iterations
from bdsgd.schedules import MODES  # noqa: E402


def _interval_text(stats: pd.DataFrame) -> str:
    """What the time-to-target whiskers are, measured: the interval's kind and its smallest
    coverage of the median (``stats.median_interval``)."""
    minmax = np.isclose(stats["coverage"], 1 - 0.5 ** (stats["seeds"] - 1)).all()
    low, high = stats["seeds"].min(), stats["seeds"].max()
    seeds = f"{low}" if low == high else f"{low}-{high}"
    return ("whisker: distribution-free interval for the median\n"
            f"({'min to max, ' if minmax else 'order statistics, '}covers it with probability "
            f">= {stats['coverage'].min():.0%} at {seeds} seeds)")


def _time_to_target_panel(ax, stats: pd.DataFrame, unit: str = "s") -> None:
    """Median time to target per policy with its interval (an arrow where the interval is
    unbounded: some seeds never reached the target); pale where any seed never reached it, and
    'k/m' (seeds that reached it, of all) over every policy."""
    finite = stats[["median", "low", "high"]].to_numpy()
    top = 1.15 * np.max(finite[np.isfinite(finite)], initial=1.0)
    for i, s in enumerate(stats.itertuples()):
        if np.isfinite(s.median):
            ax.bar(i, s.median, **bar_style(s.policy, 1.0 if s.reached == s.seeds else 0.4))
        if np.isfinite(s.low):
            high = min(s.high, top)
            ax.plot([i, i], [s.low, high], color="k", lw=1)
            ax.plot(i, high, marker="^" if np.isinf(s.high) else "_", color="k", ms=6)
            ax.plot(i, s.low, marker="_", color="k", ms=6)
        ax.annotate(f"{s.reached}/{s.seeds}", (i, min(s.high, top) if s.reached else 0),
                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                    fontsize=7, color="k" if s.reached == s.seeds else "firebrick")
    ax.set_xticks(range(len(stats)), stats["policy"], rotation=30, ha="right")
    ax.margins(y=0.2)
    ax.set_title(f"time to target: bar = median over seeds,\n{_interval_text(stats)}", fontsize=9)
    ax.set(xlabel="policy", ylabel=f"virtual time to target ({unit})")


def time_to_accuracy(metrics: pd.DataFrame, summary: pd.DataFrame, path: Path) -> list[Path]:
    """Per task and trace: test accuracy against virtual time (median over seeds, min-max band,
    target dotted), and the time to target per policy (``time_to_target_stats``); the time in
    the runs' virtual-time unit."""
    evaluated = metrics[metrics["test_accuracy"].notna()]
    panels, axes, fig = task_panels(evaluated, 11, 3.9, 2, layout="constrained",
                                gridspec_kw={"width_ratios": [2.2, 1]})
    stats = time_to_target_stats(summary)
    for (ax, bar_ax), panel in zip(axes, panels, strict=True):
        runs_of, unit = of(evaluated, panel), time_label(of(evaluated, panel))
        for policy, runs in runs_of.groupby("policy"):
            band(ax, runs, "virtual_time_s", "test_accuracy", policy)
        target = of(summary, panel)["target_accuracy"].iloc[0]
        ax.axhline(target, ls=":", color="k", lw=1, label="target accuracy")
        ax.set_title(f"{title(panel)}: test accuracy (target {target:.2f}) vs virtual time\n"
                     "line: median over seeds; band: min to max over seeds", fontsize=10)
        ax.set(xlabel=f"virtual wall-clock time ({unit})", ylabel="test accuracy")
        _time_to_target_panel(bar_ax, of(stats, panel), unit)
    legend_below(fig, axes[:, 0], columns=7)
    return save_figure(fig, path)


def time_to_accuracy_answer(metrics: pd.DataFrame, summary: pd.DataFrame) -> str:
    """Which policy reaches the target first, per task and trace, measured: the fastest median
    time to target over seeds (of the policies every seed of which reached it), and bdsgd's and
    sync's, in the runs' virtual-time unit."""
    sentences = []
    for (task, trace), stats in time_to_target_stats(summary).groupby(["task", "trace"]):
        done = stats[stats["reached"] == stats["seeds"]].sort_values("median")
        where = f"{task} on {trace}" if trace else task
        if done.empty:
            sentences.append(f"On {where} no policy reached the target in every seed.")
            continue
        unit = time_label(of(metrics, (task, trace)))
        best = done.iloc[0]
        text = (f"On {where}, {best.policy} reaches the target first (median {best['median']:.3g} "
                f"{unit} over {best.seeds} seed{'s' if best.seeds > 1 else ''}")
        for other in ("bdsgd", "sync"):
            row = stats[stats["policy"] == other]
            if not row.empty and other != best.policy:
                text += f"; {other} {row['median'].iloc[0]:.3g} {unit}"
        sentences.append(text + ").")
    return " ".join(sentences)


def loss_curves(metrics: pd.DataFrame, path: Path) -> list[Path]:
    """Per task and trace, side by side: smoothed training loss against iterations (from 0) and
    against virtual time (median over seeds, min-max band). A policy can win the first and lose
    the second."""
    metrics = counted_from_0(metrics)
    panels, axes, fig = task_panels(metrics, 12, 3.6, 2, sharey="row", layout="constrained")
    for (it_ax, time_ax), panel in zip(axes, panels, strict=True):
        sub = of(metrics, panel)
        for policy, runs in sub.groupby("policy"):
            runs = smoothed(runs, "train_loss")
            band(it_ax, runs, "step", "train_loss", policy)
            band(time_ax, runs, "virtual_time_s", "train_loss", policy)
        modes = ", ".join(sorted(set(sub["policy"]) & set(MODES)))  # rows are rounds
        ylabel = "training loss\n(rolling mean over 4% of a run)"
        it_ax.set(title=f"{title(panel)}: training loss vs iterations", ylabel=ylabel,
                  xlabel="training iteration, from 0"
                  + (f" ({modes}: round of n gradients)" if modes else ""))
        time_ax.set(title=f"{title(panel)}: training loss vs virtual time", ylabel=ylabel,
                    xlabel=f"virtual wall-clock time ({time_label(sub)})")
    fig.suptitle("line: median over seeds; band: min to max over seeds", fontsize=9)
    legend_below(fig, axes[:, 0], columns=8)
    return save_figure(fig, path)
