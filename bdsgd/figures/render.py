"""Every figure and summary table, drawn from stored results only (the list: ``bdsgd.figures``).

``render_all(results_dir, out_dir)`` reads what the DAG wrote under ``results/<experiment>/``::

    traces/<trace>/{trace,test}.parquet, describe.json
    models/<trace>/evaluation.json, predictions.parquet
    throughput/<trace>/throughput.json, decisions.parquet, comm_sweep.csv, period_sweep.csv
    runs/<trace>/<task>/<policy>/seed<k>/{metrics.parquet, result.json}

(found through ``bdsgd.layout``, as the workflow lays them out; read and checked, every file,
by ``bdsgd.figures.inputs`` before any figure is drawn: a missing or damaged file is one line
naming it, and nothing is written) and writes every figure as PNG and PDF (``bdsgd.plotting``)
plus ``summary.csv`` (one row per convergence run), ``throughput_summary.csv`` (one row per
trace x policy x rule) and the sweeps' tables. The throughput replay's figures are in
``bdsgd.figures.replay``. The tables hold no wall-clock numbers, so two runs of the same commit
and config give byte-identical tables; the PDFs carry no creation date, so they too repeat byte
for byte on the same library versions.

Each policy has one fixed colour in every figure (``policy_style``, from
``bdsgd.figures.POLICY_COLOURS``). Curves over seeds are the median with a min-max band.
"""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from bdsgd.errors import UserError  # noqa: E402
from bdsgd.figures import (  # noqa: E402
    EXPLORE_PREFIX,
    FALLBACK_COLOURS,
    FIGURES,
    POLICY_COLOURS,
)
from bdsgd.figures.inputs import (  # noqa: E402, F401 - load_runs, the columns: render's API too
    SUMMARY_COLUMNS,
    THROUGHPUT_COLUMNS,
    gradient_s,
    load_comm_sweep,
    load_overhead,
    load_period_sweep,
    load_predictions,
    load_runs,
    load_throughput,
    load_traces,
)
from bdsgd.figures.inputs import time_unit as _time_unit  # noqa: E402, F401
from bdsgd.figures.stats import time_to_target_stats  # noqa: E402
from bdsgd.io import write_with  # noqa: E402
from bdsgd.plotting import save_figure  # noqa: E402

# the training modes that are no cutoff policy: no cutoff to draw, and their metrics rows are
# rounds of about n applied gradients rather than iterations
from bdsgd.schedules import MODES  # noqa: E402

logger = logging.getLogger(__name__)

FLOAT_FORMAT = "%.10g"
BAND_POINTS = 200  # grid points a curve over seeds is interpolated onto


def _write_csv(df: pd.DataFrame, path: Path) -> list[Path]:
    return [write_with(path, lambda tmp: df.to_csv(tmp, index=False, float_format=FLOAT_FORMAT,
                                                   lineterminator="\n"))]


# ----------------------------------------------------------------------------- style
def policy_colour(policy: str) -> str:
    """The policy's fixed colour: explore-<p> has p's; a name not in POLICY_COLOURS gets one of
    FALLBACK_COLOURS picked from its letters (the same name, the same colour, every run)."""
    base = policy.removeprefix(EXPLORE_PREFIX)
    if base in POLICY_COLOURS:
        return POLICY_COLOURS[base]
    return FALLBACK_COLOURS[sum(map(ord, base)) % len(FALLBACK_COLOURS)]


def policy_style(policy: str) -> dict:
    """Line keywords of a policy: its colour, and a dashed line for explore-<p>."""
    return {"color": policy_colour(policy),
            "ls": "--" if policy.startswith(EXPLORE_PREFIX) else "-"}


def _bar_style(policy: str, alpha: float = 1.0) -> dict:
    """Bar keywords of a policy: its colour, hatched for explore-<p>."""
    return {"color": policy_colour(policy), "alpha": alpha, "edgecolor": "white",
            "hatch": "//" if policy.startswith(EXPLORE_PREFIX) else None}


def _window(rows: int) -> int:
    return max(1, rows // 25)  # 4% of a curve's rows: a short smoke run is not flattened


def _over_seeds(runs: pd.DataFrame, x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    """Each seed's y interpolated onto one grid of x, over the range every seed covers:
    (grid, array seeds x grid)."""
    seeds = [g.sort_values(x) for _, g in runs.groupby("seed")]
    start = max(g[x].iloc[0] for g in seeds)
    grid = np.linspace(start, max(start, min(g[x].iloc[-1] for g in seeds)), BAND_POINTS)
    return grid, np.array([np.interp(grid, g[x], g[y]) for g in seeds])


def _band(ax, runs: pd.DataFrame, x: str, y: str, policy: str) -> None:
    """The median over seeds of y against x, and a min-max band, in the policy's style."""
    grid, values = _over_seeds(runs, x, y)
    style = policy_style(policy)
    ax.plot(grid, np.median(values, axis=0), label=policy, lw=1.4, **style)
    ax.fill_between(grid, values.min(axis=0), values.max(axis=0), color=style["color"],
                    alpha=0.15, lw=0)


def _smoothed(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    """Each seed's rows in order, with ``column`` replaced by its rolling mean (``_window``)."""
    out = []
    for _, g in runs.groupby("seed"):
        g = g.sort_values("iteration")
        out.append(g.assign(**{column: g[column].rolling(_window(len(g)), min_periods=1).mean()}))
    return pd.concat(out)


def _panels(metrics: pd.DataFrame, width: float, height: float, columns: int = 1, **kw):
    """One row of panels per task and trace the runs replayed: (panels, axes array panels x
    columns, figure); a panel is (task, trace)."""
    panels = sorted(metrics.groupby(["task", "trace"]).groups)
    fig, axes = plt.subplots(len(panels), columns, figsize=(width, height * len(panels)),
                             squeeze=False, **kw)
    return panels, axes, fig


def _of(frame: pd.DataFrame, panel: tuple[str, str]) -> pd.DataFrame:
    """The rows of one panel's task and trace."""
    return frame[(frame["task"] == panel[0]) & (frame["trace"] == panel[1])]


def _title(panel: tuple[str, str]) -> str:
    task, trace = panel
    return f"{task} on {trace}" if trace else task


# ----------------------------------------------------------------------------- figures
def _time_to_target_panel(ax, stats: pd.DataFrame) -> None:
    """Median time to target per policy with its interval (an arrow where the interval is
    unbounded: some seeds never reached the target); pale where any seed never reached it, and
    'k/m' (seeds that reached it, of all) over every policy."""
    finite = stats[["median", "low", "high"]].to_numpy()
    top = 1.15 * np.max(finite[np.isfinite(finite)], initial=1.0)
    for i, s in enumerate(stats.itertuples()):
        if np.isfinite(s.median):
            ax.bar(i, s.median, **_bar_style(s.policy, 1.0 if s.reached == s.seeds else 0.4))
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
    coverage = stats["coverage"].min()
    ax.set(title=f"time to target\n(median over seeds, {coverage:.0%}+ interval)",
           ylabel="virtual time (s)")


def time_to_accuracy(metrics: pd.DataFrame, summary: pd.DataFrame, path: Path) -> list[Path]:
    """Per task and trace: test accuracy against virtual time (median over seeds, min-max band,
    target dotted), and the time to target per policy (``time_to_target_stats``)."""
    evaluated = metrics[metrics["test_accuracy"].notna()]
    panels, axes, fig = _panels(evaluated, 11, 3.8, 2, gridspec_kw={"width_ratios": [2.2, 1]})
    stats = time_to_target_stats(summary)
    for (ax, bar_ax), panel in zip(axes, panels, strict=True):
        for policy, runs in _of(evaluated, panel).groupby("policy"):
            _band(ax, runs, "virtual_time_s", "test_accuracy", policy)
        target = _of(summary, panel)["target_accuracy"].iloc[0]
        ax.axhline(target, ls=":", color="k", lw=1, label=f"target {target:.2f}")
        ax.set(title=f"{_title(panel)}: test accuracy vs virtual time",
               xlabel="virtual wall-clock time (s)", ylabel="test accuracy")
        ax.legend(fontsize=8)
        _time_to_target_panel(bar_ax, _of(stats, panel))
    return save_figure(fig, path)


def loss_curves(metrics: pd.DataFrame, path: Path) -> list[Path]:
    """Per task and trace, side by side: smoothed training loss against iterations and against
    virtual time (median over seeds, min-max band). A policy can win the first and lose the
    second."""
    panels, axes, fig = _panels(metrics, 12, 3.6, 2, sharey="row")
    for (it_ax, time_ax), panel in zip(axes, panels, strict=True):
        sub = _of(metrics, panel)
        for policy, runs in sub.groupby("policy"):
            runs = _smoothed(runs, "train_loss")
            _band(it_ax, runs, "iteration", "train_loss", policy)
            _band(time_ax, runs, "virtual_time_s", "train_loss", policy)
        modes = ", ".join(sorted(set(sub["policy"]) & set(MODES)))  # rows are rounds
        it_ax.set(title=f"{_title(panel)}: training loss vs iterations",
                  ylabel="training loss (smoothed)",
                  xlabel="iteration" + (f" ({modes}: round of n gradients)" if modes else ""))
        time_ax.set(title=f"{_title(panel)}: training loss vs virtual time",
                    xlabel="virtual wall-clock time (s)")
        it_ax.legend(fontsize=8)
    return save_figure(fig, path)


def training_cutoff(metrics: pd.DataFrame, summary: pd.DataFrame, path: Path) -> list[Path]:
    """Per task and trace: the cutoff each cutoff policy chose during training, iteration by
    iteration (mean over seeds: thin raw, thick rolling mean). async and cyclic have no cutoff:
    left out."""
    cutoff_runs = metrics[~metrics["policy"].isin(MODES)]
    panels, axes, fig = _panels(metrics, 10, 3.4)
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        sub = _of(cutoff_runs, panel)
        for policy, runs in sub.groupby("policy"):
            cutoff = runs.groupby("iteration")["cutoff"].mean()
            style = policy_style(policy)
            ax.plot(cutoff.index, cutoff, color=style["color"], alpha=0.25, lw=0.6)
            ax.plot(cutoff.index, cutoff.rolling(_window(len(cutoff)), min_periods=1).mean(),
                    lw=1.6, label=policy, **style)
        n = _of(summary, panel)["n_workers"].max()
        if pd.notna(n):  # the cutoff's range is 1..n
            ax.set_ylim(0, float(n) + 0.5)
        if sub.empty:
            ax.text(0.5, 0.5, "no cutoff policy was run", transform=ax.transAxes, ha="center")
        else:
            ax.legend(fontsize=7, ncol=4)
        ax.set(title=f"{_title(panel)}: cutoff during training (mean over seeds)", xlabel="iteration",
               ylabel="cutoff c (gradients accepted)")
    return save_figure(fig, path)


def cutoff_over_time(decisions: pd.DataFrame, path: Path) -> list[Path]:
    """c_t chosen by each policy (default rule) while replaying each trace: thin lines raw,
    thick lines a 20-iteration moving average."""
    decisions = decisions[~decisions["policy"].str.contains("/")]
    traces = sorted(decisions["trace"].unique())
    fig, axes = plt.subplots(len(traces), 1, figsize=(10, 3.4 * len(traces)), squeeze=False)
    for ax, trace in zip(axes[:, 0], traces, strict=True):
        sub = decisions[decisions["trace"] == trace]
        for policy, pol in sub.groupby("policy"):
            cutoff = pol.sort_values("iteration")["cutoff"].to_numpy()
            step, style = np.arange(len(cutoff)), policy_style(policy)
            ax.plot(step, cutoff, color=style["color"], alpha=0.2, lw=0.6)
            ax.plot(step, pd.Series(cutoff).rolling(20, min_periods=1).mean(), lw=1.6,
                    label=policy, **style)
        ax.set(title=f"{trace}: cutoff over time (n = {int(sub['cutoff'].max())} at most)",
               xlabel="iteration of the replayed (test) part", ylabel="cutoff c (gradients accepted)")
        ax.legend(fontsize=7, ncol=4)
    return save_figure(fig, path)


def comm_sweep(sweep: pd.DataFrame, path: Path) -> list[Path]:
    """Throughput over sync's against the communication-to-compute ratio: a row of panels per
    trace, a panel per topology (every policy and the hindsight optimum; above 1, cutting
    workers pays)."""
    traces, topologies = sorted(sweep["trace"].unique()), list(pd.unique(sweep["topology"]))
    fig, axes = plt.subplots(len(traces), len(topologies), figsize=(4.2 * len(topologies),
                             3.2 * len(traces) + 0.8), squeeze=False, sharey="row")
    for row, trace in zip(axes, traces, strict=True):
        for ax, topology in zip(row, topologies, strict=True):
            sub = sweep[(sweep["trace"] == trace) & (sweep["topology"] == topology)]
            for policy, lines in sub.groupby("policy", sort=True):
                lines = lines.sort_values("ratio")
                ax.plot(lines["ratio"], lines["relative_to_sync"], marker="o", ms=3, lw=1.4,
                        label=policy, **policy_style(policy))
            ax.axhline(1.0, color="k", lw=0.8)
            ax.set(xscale="log", title=f"{trace}: {topology}")
        row[0].set_ylabel("throughput / sync's")
    for ax in axes[-1]:
        ax.set_xlabel("communication / compute (rho)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 7), fontsize=8,
               frameon=False)
    fig.suptitle("rho: a single server's transfer time for a whole iteration over the median "
                 "run-time; every topology on the same links", fontsize=9)
    fig.set_layout_engine("tight", rect=(0, 0.06, 1, 0.97))
    return save_figure(fig, path)


def runtime_distributions(results_dir: Path, path: Path,
                          traces: dict[str, np.ndarray] | None = None) -> list[Path]:
    """Empirical CDF of every trace's run-times over its median (log scale: the tail matters).
    ``traces``: ``inputs.load_traces``' (None: read them from ``results_dir``)."""
    traces = load_traces(results_dir) if traces is None else traces
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, x in traces.items():
        x = np.sort(x / np.median(x))
        ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=name)
    ax.set(xscale="log", xlabel="run-time / median run-time", ylabel="empirical CDF",
           title="worker run-time distributions")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def model_predictions(results_dir: Path, path: Path,
                      predictions: list[tuple[str, pd.DataFrame, str]] | None = None) -> list[Path]:
    """Predicted E[x_(c)] with 90% interval against the realised order statistic, held out.
    ``predictions``: ``inputs.load_predictions``' (None: read them from ``results_dir``)."""
    predictions = load_predictions(results_dir) if predictions is None else predictions
    fig, axes = plt.subplots(len(predictions), 1, figsize=(10, 3.2 * len(predictions)),
                             squeeze=False)
    for ax, (trace, pred, unit) in zip(axes[:, 0], predictions, strict=True):
        orders = sorted(pred["order"].unique())
        shown = sorted({orders[len(orders) // 2], orders[-1]})
        for order, color in zip(shown, sns.color_palette("tab10"), strict=False):
            p = pred[pred["order"] == order].sort_values("iteration")
            ax.fill_between(p["iteration"], p["lo90"], p["hi90"], color=color, alpha=0.2)
            ax.plot(p["iteration"], p["predicted_mean"], color=color, lw=1.2,
                    label=f"predicted E[x_({order})]")
            ax.scatter(p["iteration"], p["realised"], color=color, s=4, label=f"realised x_({order})")
        ax.set(title=f"{trace}: one-step-ahead predictions (held out)",
               xlabel="iteration (test part)", ylabel=f"run-time ({unit})")
        ax.legend(fontsize=7, ncol=2)
    return save_figure(fig, path)


def render_all(results_dir: Path, out_dir: Path) -> list[Path]:
    """Draw every figure and write both summary tables; returns the files written. Every input
    is read and checked first: a bad one is a UserError, and then nothing is written."""
    if not results_dir.is_dir():
        raise UserError(str(results_dir), "RESULTS_DIR", "not a directory")
    summary, metrics = load_runs(results_dir)
    table, decisions = load_throughput(results_dir)
    sweep, periods = load_comm_sweep(results_dir), load_period_sweep(results_dir)
    overhead, seconds = load_overhead(results_dir), gradient_s(results_dir)
    units = {trace: _time_unit(results_dir, trace) for trace in table["trace"].unique()}
    traces, predictions = load_traces(results_dir), load_predictions(results_dir)
    from bdsgd.figures import replay  # the replay's figures, drawn in render's styles
    sns.set_theme(style="whitegrid", context="notebook")
    path = {name: out_dir / file for name, (file, _, _) in FIGURES.items()}
    written = [
        *_write_csv(summary, path["summary"]),
        *_write_csv(table, path["throughput_summary"]),
        *time_to_accuracy(metrics, summary, path["time_to_accuracy"]),
        *loss_curves(metrics, path["loss_curves"]),
        *training_cutoff(metrics, summary, path["training_cutoff"]),
        *cutoff_over_time(decisions, path["cutoff_over_time"]),
        *replay.throughput_bars(table, decisions, path["throughput"]),
        *replay.throughput_over_time(decisions, units, path["throughput_over_time"]),
        *replay.worker_time(table, path["worker_time"]),
        *_write_csv(periods, path["period_sweep_summary"]),
        *replay.period_sweep(periods, path["period_sweep"]),
        *replay.decision_overhead(overhead, seconds, path["decision_overhead"]),
        *_write_csv(sweep, path["comm_sweep_summary"]),
        *comm_sweep(sweep, path["comm_sweep"]),
        *runtime_distributions(results_dir, path["runtime_distributions"], traces),
        *model_predictions(results_dir, path["model_predictions"], predictions),
    ]
    for path in written:
        logger.info(f"wrote {path}")
    return written
