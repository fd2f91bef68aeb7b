"""The convergence figures (time to accuracy, loss curves, the cutoffs chosen in training) and
the replay's cutoffs over time, with the measured answer beside each: ``render.render_all``
draws them. Curves over seeds are the median with a min-max band; the cutoffs are small
multiples, a panel per policy, the integer steps drawn as they were chosen.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import MaxNLocator

from bdsgd.cluster.schedules import MODES
from bdsgd.figures.common import bar_style as _bar_style
from bdsgd.figures.common import policy_colour, policy_style
from bdsgd.figures.verdicts import BDSGDS, phrases
from bdsgd.plotting import save_figure, unit_label
from bdsgd.stats import time_to_target_stats

BAND_POINTS = 200  # grid points a curve over seeds is interpolated onto


# ----------------------------------------------------------------------------- style
def _legend_below(fig, axes, columns: int = 6) -> None:
    """One legend for the whole figure, under its panels (where it covers no curve): every
    labelled line of ``axes``, each label once."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    fig.legend(entries.values(), entries.keys(), loc="outside lower center",
               ncols=min(columns, len(entries)), fontsize=8, frameon=False)


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


def _counted_from_0(metrics: pd.DataFrame) -> pd.DataFrame:
    """The metrics with ``step``: a run's row counts its iterations from 1 (the row written after
    the first), the step counts them from 0, as every figure counts the replayed iterations."""
    return metrics.assign(step=metrics["iteration"] - 1)


def _time_label(runs: pd.DataFrame) -> str:
    """The unit of the runs' virtual time (``inputs.virtual_time_unit``), as an axis names it."""
    return ", ".join(unit_label(u) for u in sorted(runs["time_unit"].unique()))


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


GRID_COLUMNS = 4  # panels a row of a small-multiples figure holds


def _policy_grid(blocks: dict[str, list[str]]):
    """Small multiples: a block of panels per key of ``blocks`` (a trace, a task on a trace),
    one panel per policy of its list, GRID_COLUMNS to a row; a block's panels share their x and
    y axes. (figure, {(block, policy): axes}, {block: its axes})."""
    rows = {block: -(-len(policies) // GRID_COLUMNS) for block, policies in blocks.items()}
    fig = plt.figure(figsize=(3.3 * GRID_COLUMNS, 1.9 * sum(rows.values()) + 0.6),
                     layout="constrained")
    figures = fig.subfigures(len(blocks), 1, squeeze=False, height_ratios=list(rows.values()))
    panel, block_axes = {}, {}
    for sub, (block, policies) in zip(figures[:, 0], blocks.items(), strict=True):
        axes = sub.subplots(rows[block], GRID_COLUMNS, sharex=True, sharey=True, squeeze=False)
        for ax in axes.flat[len(policies):]:
            ax.set_visible(False)
        panel |= {(block, p): ax for p, ax in zip(policies, axes.flat, strict=False)}
        block_axes[block] = axes
    return fig, panel, block_axes


def _cutoff_axes(axes, xlabel: str, low: float, n: float) -> None:
    """A block of cutoff panels: integer cutoffs ``low``..n on y, the axis labels on the outer
    panels (the lowest shown panel of each column carries the x axis)."""
    for ax in axes.flat:
        ax.set_ylim(low - 0.5, n + 0.5)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=2))
        ax.tick_params(labelsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("cutoff c", fontsize=9)
    for column in axes.T:
        shown = [ax for ax in column if ax.get_visible()]
        if shown:
            shown[-1].set_xlabel(xlabel, fontsize=9)
            shown[-1].xaxis.set_tick_params(labelbottom=True)


def cutoff_changes(cutoff: np.ndarray) -> dict:
    """What a run of cutoffs c_0..c_T-1 did: the fraction of iterations t >= 1 with
    c_t != c_t-1, the smallest and largest c and their mean."""
    cutoff = np.asarray(cutoff)
    changes = float(np.mean(cutoff[1:] != cutoff[:-1])) if len(cutoff) > 1 else 0.0
    return {"changes": changes, "low": int(cutoff.min()), "high": int(cutoff.max()),
            "mean": float(cutoff.mean())}


def _changes_text(stats: dict) -> str:
    """'c 6-8, changes 12%': a panel's measured range of cutoffs and how often they change."""
    span = f"{stats['low']}" if stats["low"] == stats["high"] else f"{stats['low']}-{stats['high']}"
    return f"c {span}, changes {stats['changes']:.0%}"


# ----------------------------------------------------------------------------- figures
def _interval_text(stats: pd.DataFrame) -> str:
    """What the time-to-target whiskers are, measured: the interval's kind and its smallest
    coverage of the median (``stats.median_interval``)."""
    minmax = np.isclose(stats["coverage"], 1 - 0.5 ** (stats["seeds"] - 1)).all()
    low, high = stats["seeds"].min(), stats["seeds"].max()
    seeds = f"{low}" if low == high else f"{low}-{high}"
    return (f"whisker: distribution-free interval\nfor the median "
            f"({'min to max' if minmax else 'order statistics'}),\ncovering it with probability "
            f">= {stats['coverage'].min():.0%} at {seeds} seeds")


def _time_to_target_panel(ax, stats: pd.DataFrame, unit: str = "s") -> None:
    """Median time to target per policy with its interval (an arrow where the interval is
    unbounded: some seeds never reached the target); pale where any seed never reached it, and
    'k/m' (seeds that reached it, of all) over every policy."""
    finite = stats[["median", "low", "high"]].to_numpy()
    top = 1.15 * np.max(finite[np.isfinite(finite)], initial=1.0)
    for i, s in enumerate(stats.itertuples()):
        if np.isfinite(s.median):
            ax.bar(i, s.median, **_bar_style(s.policy, 1.0 if s.reached == s.seeds else 0.4))
        if np.isfinite(s.mlperf):
            ax.plot(i, s.mlperf, marker="D", color="w", mec="k", ms=4, ls="none")
        if np.isfinite(s.low):
            high = min(s.high, top)
            ax.plot([i, i], [s.low, high], color="k", lw=1)
            ax.plot(i, high, marker="^" if np.isinf(s.high) else "_", color="k", ms=6)
            ax.plot(i, s.low, marker="_", color="k", ms=6)
        ax.annotate(f"{s.reached}/{s.seeds}", (i, min(s.high, top) if s.reached else 0),
                    xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                    fontsize=7, color="k" if s.reached == s.seeds else "firebrick")
    ax.set_xticks(range(len(stats)), stats["policy"], rotation=90, fontsize=7)  # many: upright
    ax.margins(y=0.2)
    mlperf = ("; diamond: MLPerf's mean (fastest, slowest dropped)"
              if stats["mlperf"].notna().any() else "")
    ax.set_title(f"time to target: bar = median over seeds{mlperf};\n{_interval_text(stats)}",
                 fontsize=9)
    ax.set(xlabel="policy", ylabel=f"virtual time to target ({unit})")


def time_to_accuracy(metrics: pd.DataFrame, summary: pd.DataFrame, path: Path) -> list[Path]:
    """Per task and trace: test accuracy against virtual time (median over seeds, min-max band,
    target dotted), and the time to target per policy (``time_to_target_stats``); the time in
    the runs' virtual-time unit."""
    evaluated = metrics[metrics["test_accuracy"].notna()]
    panels, axes, fig = _panels(evaluated, 11, 3.9, 2, layout="constrained",
                                gridspec_kw={"width_ratios": [2.2, 1]})
    stats = time_to_target_stats(summary)
    for (ax, bar_ax), panel in zip(axes, panels, strict=True):
        runs_of, unit = _of(evaluated, panel), _time_label(_of(evaluated, panel))
        for policy, runs in runs_of.groupby("policy"):
            _band(ax, runs, "virtual_time_s", "test_accuracy", policy)
        target = _of(summary, panel)["target_accuracy"].iloc[0]
        ax.axhline(target, ls=":", color="k", lw=1, label="target accuracy")
        ax.set_title(f"{_title(panel)}: test accuracy (target {target:.2f}) vs virtual time\n"
                     "line: median over seeds; band: min to max over seeds", fontsize=10)
        # log time: a slow policy's long tail would squeeze the others into a sliver
        ax.set(xlabel=f"virtual wall-clock time ({unit}), log scale", ylabel="test accuracy",
               xscale="log")
        _time_to_target_panel(bar_ax, _of(stats, panel), unit)
    _legend_below(fig, axes[:, 0], columns=7)
    return save_figure(fig, path)


def time_to_accuracy_answer(metrics: pd.DataFrame, summary: pd.DataFrame,
                            verdicts: pd.DataFrame) -> str:
    """Per task and trace: the median time to target of the paper's BDSGD, ours and the fixed
    references, then each of the two BDSGDs against its references, paired over seeds
    (``bdsgd.figures.verdicts``), in the runs' virtual-time unit."""
    sentences = []
    for (task, trace), stats in time_to_target_stats(summary).groupby(["task", "trace"]):
        where = f"{task} on {trace}" if trace else task
        unit = _time_label(_of(metrics, (task, trace)))
        medians = stats.set_index("policy")
        shown = [p for p in (*BDSGDS, "sync", "static") if p in medians.index]
        seeds = int(stats["seeds"].max())
        text = (f"On {where}, the median time to target over {seeds} seed{'s' if seeds > 1 else ''}"
                ": " + ", ".join(f"{p} {medians.loc[p, 'median']:.3g} {unit}" for p in shown) + ". ")
        mine = verdicts[(verdicts["measure"] == "time to target") & (verdicts["task"] == task)
                        & (verdicts["trace"] == trace) & verdicts["policy"].isin(BDSGDS)]
        sentences.append((text + phrases(mine)).strip())
    return " ".join(sentences)


def loss_curves(metrics: pd.DataFrame, path: Path) -> list[Path]:
    """Per task and trace, side by side: smoothed training loss against iterations (from 0) and
    against virtual time (median over seeds, min-max band). A policy can win the first and lose
    the second."""
    metrics = _counted_from_0(metrics)
    panels, axes, fig = _panels(metrics, 12, 3.6, 2, sharey="row", layout="constrained")
    for (it_ax, time_ax), panel in zip(axes, panels, strict=True):
        sub = _of(metrics, panel)
        for policy, runs in sub.groupby("policy"):
            runs = _smoothed(runs, "train_loss")
            _band(it_ax, runs, "step", "train_loss", policy)
            _band(time_ax, runs, "virtual_time_s", "train_loss", policy)
        modes = ", ".join(sorted(set(sub["policy"]) & set(MODES)))  # rows are rounds
        ylabel = "training loss\n(rolling mean over 4% of a run)"
        it_ax.set(title=f"{_title(panel)}: training loss vs iterations", ylabel=ylabel,
                  xlabel="training iteration, from 0"
                  + (f" ({modes}: round of n gradients)" if modes else ""))
        time_ax.set(title=f"{_title(panel)}: training loss vs virtual time", ylabel=ylabel,
                    xlabel=f"virtual wall-clock time ({_time_label(sub)}), log scale", xscale="log")
    fig.suptitle("line: median over seeds; band: min to max over seeds", fontsize=9)
    _legend_below(fig, axes[:, 0], columns=8)
    return save_figure(fig, path)


def training_cutoff(metrics: pd.DataFrame, summary: pd.DataFrame, path: Path) -> list[Path]:
    """The cutoff each cutoff policy chose during its convergence runs, iteration by iteration
    (from 0), unsmoothed: a block of panels per task and trace, a panel per policy, each seed's
    integer cutoffs as a step line (the first seed widest, so that seeds that agree all show).
    async and cyclic have no cutoff: left out."""
    cutoff_runs = _counted_from_0(metrics[~metrics["policy"].isin(MODES)])
    blocks = {panel: sorted(_of(cutoff_runs, panel)["policy"].unique())
              for panel in sorted(cutoff_runs.groupby(["task", "trace"]).groups)}
    if not blocks:  # only training modes were run: a figure that says so
        fig, ax = plt.subplots(figsize=(6, 2))
        ax.text(0.5, 0.5, "no cutoff policy was run", transform=ax.transAxes, ha="center")
        ax.set(xlabel="training iteration, from 0", ylabel="cutoff c")
        return save_figure(fig, path)
    fig, panel_ax, block_axes = _policy_grid(blocks)
    seeds = sorted(cutoff_runs["seed"].unique())
    widths = np.linspace(3.0, 1.0, len(seeds)) if len(seeds) > 1 else [1.4]
    for block, policies in blocks.items():
        sub = _of(cutoff_runs, block)
        n = _of(summary, block)["n_workers"].max()
        n = float(n) if pd.notna(n) else float(sub["cutoff"].max())
        for policy in policies:
            ax, runs = panel_ax[block, policy], sub[sub["policy"] == policy]
            for seed, width in zip(seeds, widths, strict=True):  # a seed's width in every panel
                run = runs[runs["seed"] == seed].sort_values("step")
                if run.empty:
                    continue
                ax.step(run["step"], run["cutoff"], where="post", lw=width,
                        alpha=0.45 if width > 1.5 else 1.0, label=f"seed {seed}",
                        color=policy_colour(policy))  # one policy a panel: solid reads best
            ax.set_title(f"{_title(block)}: {policy}\n{_changes_text(_over_seeds_changes(runs))}",
                         fontsize=9)
        _cutoff_axes(block_axes[block], "training iteration, from 0",
                     max(1.0, float(sub["cutoff"].min())), n)
    fig.suptitle("cutoff chosen during training, unsmoothed: a step line per seed, "
                 f"{', '.join(f'seed {s}' for s in seeds)} from wide and pale to thin (where seeds "
                 "agree, the thin line lies on the wide one)\nc: the range chosen; 'changes': "
                 "iterations whose c differs from the previous one's (mean over seeds)",
                 fontsize=9)
    return save_figure(fig, path)


def _over_seeds_changes(runs: pd.DataFrame) -> dict:
    """``cutoff_changes`` over a policy's seeds: the range of every seed's cutoffs, the mean of
    their change fractions and of their mean cutoffs."""
    per_seed = [cutoff_changes(g.sort_values("iteration")["cutoff"].to_numpy())
                for _, g in runs.groupby("seed")]
    return {"low": min(s["low"] for s in per_seed), "high": max(s["high"] for s in per_seed),
            "changes": float(np.mean([s["changes"] for s in per_seed])),
            "mean": float(np.mean([s["mean"] for s in per_seed])), "seeds": len(per_seed)}


def training_cutoff_answer(metrics: pd.DataFrame) -> str:
    """How the cutoff evolves during training, measured: per task and trace, each BDSGD's
    (ours and the paper's) range of cutoffs and how often it changes them (mean over seeds)."""
    runs = metrics[metrics["policy"].isin(BDSGDS)]
    sentences = []
    for (task, trace), sub in runs.groupby(["task", "trace"]):
        said = []
        for policy, own in sub.groupby("policy"):
            s = _over_seeds_changes(own)
            said.append(f"{policy}'s cutoff ranges {s['low']}-{s['high']} (mean {s['mean']:.1f}) "
                        f"and changes on {s['changes']:.0%} of iterations "
                        f"(mean over {s['seeds']} seeds)")
        where = f"{task} on {trace}" if trace else task
        sentences.append(f"During training on {where}, " + "; ".join(said) + ".")
    return " ".join(sentences) or "No BDSGD run was trained."


def cutoff_over_time(decisions: pd.DataFrame, path: Path) -> list[Path]:
    """c_t chosen by each policy (default rule) while replaying each trace, iteration by
    iteration (from 0), unsmoothed: a block of panels per trace, a panel per policy, on one
    y range 1..n (n: sync's cutoff, else the largest chosen)."""
    decisions = decisions[~decisions["policy"].str.contains("/")]
    blocks = {trace: sorted(sub["policy"].unique()) for trace, sub in decisions.groupby("trace")}
    fig, panel_ax, block_axes = _policy_grid(blocks)
    for trace, policies in blocks.items():
        sub = decisions[decisions["trace"] == trace]
        sync = sub[sub["policy"] == "sync"]
        n = float((sync if not sync.empty else sub)["cutoff"].max())
        for policy in policies:
            ax, pol = panel_ax[trace, policy], sub[sub["policy"] == policy].sort_values("step")
            ax.step(pol["step"], pol["cutoff"], where="post", lw=1.3, label=policy,
                    color=policy_colour(policy))  # one policy a panel: solid reads best
            ax.set_title(f"{trace}: {policy}\n{_changes_text(cutoff_changes(pol['cutoff']))}",
                         fontsize=9)
        _cutoff_axes(block_axes[trace], "replayed iteration, from 0", 1.0, n)
    fig.suptitle("cutoff c_t chosen while replaying each trace's test part, unsmoothed; "
                 "'changes': iterations whose c differs from the previous one's", fontsize=9)
    return save_figure(fig, path)


def cutoff_over_time_answer(decisions: pd.DataFrame) -> str:
    """How the cutoff evolves on the replayed traces, measured: per trace, each BDSGD's and the
    hindsight oracle's range of cutoffs and how often each changes it."""
    sentences = []
    for trace, sub in decisions[~decisions["policy"].str.contains("/")].groupby("trace"):
        parts = []
        for policy in (*BDSGDS, "oracle"):
            pol = sub[sub["policy"] == policy].sort_values("step")
            if not pol.empty:
                s = cutoff_changes(pol["cutoff"].to_numpy())
                parts.append(f"{policy} changes its cutoff on {s['changes']:.0%} of iterations "
                             f"and ranges {s['low']}-{s['high']} (mean {s['mean']:.1f})")
        if parts:
            sentences.append(f"On {trace}, " + "; ".join(parts) + f" of n = {sub['cutoff'].max()}.")
    return " ".join(sentences)


