"""The cutoff figures: the cutoff each policy chose, replayed on a trace (``cutoff_over_time``)
and during training (``training_cutoff``), as small multiples of integer steps, one panel per
policy; and the measured answers to "how does the cutoff evolve?" (``*_answer``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from bdsgd.figures.common import (  # noqa: E402
    counted_from_0,
    of,
    policy_colour,
    title,
)
from bdsgd.plotting import save_figure  # noqa: E402
from bdsgd.schedules import MODES  # noqa: E402 - training modes: no cutoff to draw

GRID_COLUMNS = 4  # panels a row of a small-multiples figure holds


def policy_grid(blocks: dict[str, list[str]]):
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


def cutoff_axes(axes, xlabel: str, low: float, n: float) -> None:
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


def changes_text(stats: dict) -> str:
    """'c 6-8, changes 12%': a panel's measured range of cutoffs and how often they change."""
    span = f"{stats['low']}" if stats["low"] == stats["high"] else f"{stats['low']}-{stats['high']}"
    return f"c {span}, changes {stats['changes']:.0%}"


def training_cutoff(metrics: pd.DataFrame, summary: pd.DataFrame, path: Path) -> list[Path]:
    """The cutoff each cutoff policy chose during its convergence runs, iteration by iteration
    (from 0), unsmoothed: a block of panels per task and trace, a panel per policy, each seed's
    integer cutoffs as a step line (the first seed widest, so that seeds that agree all show).
    async and cyclic have no cutoff: left out."""
    cutoff_runs = counted_from_0(metrics[~metrics["policy"].isin(MODES)])
    blocks = {panel: sorted(of(cutoff_runs, panel)["policy"].unique())
              for panel in sorted(cutoff_runs.groupby(["task", "trace"]).groups)}
    if not blocks:  # only training modes were run: a figure that says so
        fig, ax = plt.subplots(figsize=(6, 2))
        ax.text(0.5, 0.5, "no cutoff policy was run", transform=ax.transAxes, ha="center")
        ax.set(xlabel="training iteration, from 0", ylabel="cutoff c")
        return save_figure(fig, path)
    fig, panel_ax, block_axes = policy_grid(blocks)
    seeds = sorted(cutoff_runs["seed"].unique())
    widths = np.linspace(3.0, 1.0, len(seeds)) if len(seeds) > 1 else [1.4]
    for block, policies in blocks.items():
        sub = of(cutoff_runs, block)
        n = of(summary, block)["n_workers"].max()
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
            ax.set_title(f"{title(block)}: {policy}\n{changes_text(over_seeds_changes(runs))}",
                         fontsize=9)
        cutoff_axes(block_axes[block], "training iteration, from 0",
                     max(1.0, float(sub["cutoff"].min())), n)
    fig.suptitle("cutoff chosen during training, unsmoothed: a step line per seed, "
                 f"{', '.join(f'seed {s}' for s in seeds)} from wide and pale to thin (where seeds "
                 "agree, the thin line lies on the wide one)\nc: the range chosen; 'changes': "
                 "iterations whose c differs from the previous one's (mean over seeds)",
                 fontsize=9)
    return save_figure(fig, path)


def over_seeds_changes(runs: pd.DataFrame) -> dict:
    """``cutoff_changes`` over a policy's seeds: the range of every seed's cutoffs, the mean of
    their change fractions and of their mean cutoffs."""
    per_seed = [cutoff_changes(g.sort_values("iteration")["cutoff"].to_numpy())
                for _, g in runs.groupby("seed")]
    return {"low": min(s["low"] for s in per_seed), "high": max(s["high"] for s in per_seed),
            "changes": float(np.mean([s["changes"] for s in per_seed])),
            "mean": float(np.mean([s["mean"] for s in per_seed])), "seeds": len(per_seed)}


def training_cutoff_answer(metrics: pd.DataFrame) -> str:
    """How the cutoff evolves during training, measured: per task and trace, bdsgd's range of
    cutoffs and how often it changes them (mean over seeds)."""
    runs = metrics[metrics["policy"] == "bdsgd"]
    sentences = []
    for (task, trace), sub in runs.groupby(["task", "trace"]):
        s = over_seeds_changes(sub)
        where = f"{task} on {trace}" if trace else task
        sentences.append(
            f"During training on {where}, bdsgd's cutoff ranges {s['low']}-{s['high']} "
            f"(mean {s['mean']:.1f}) and changes on {s['changes']:.0%} of iterations "
            f"(mean over {s['seeds']} seeds).")
    return " ".join(sentences) or "No bdsgd run was trained."


def cutoff_over_time(decisions: pd.DataFrame, path: Path) -> list[Path]:
    """c_t chosen by each policy (default rule) while replaying each trace, iteration by
    iteration (from 0), unsmoothed: a block of panels per trace, a panel per policy, on one
    y range 1..n (n: sync's cutoff, else the largest chosen)."""
    decisions = decisions[~decisions["policy"].str.contains("/")]
    blocks = {trace: sorted(sub["policy"].unique()) for trace, sub in decisions.groupby("trace")}
    fig, panel_ax, block_axes = policy_grid(blocks)
    for trace, policies in blocks.items():
        sub = decisions[decisions["trace"] == trace]
        sync = sub[sub["policy"] == "sync"]
        n = float((sync if not sync.empty else sub)["cutoff"].max())
        for policy in policies:
            ax, pol = panel_ax[trace, policy], sub[sub["policy"] == policy].sort_values("step")
            ax.step(pol["step"], pol["cutoff"], where="post", lw=1.3, label=policy,
                    color=policy_colour(policy))  # one policy a panel: solid reads best
            ax.set_title(f"{trace}: {policy}\n{changes_text(cutoff_changes(pol['cutoff']))}",
                         fontsize=9)
        cutoff_axes(block_axes[trace], "replayed iteration, from 0", 1.0, n)
    fig.suptitle("cutoff c_t chosen while replaying each trace's test part, unsmoothed; "
                 "'changes': iterations whose c differs from the previous one's", fontsize=9)
    return save_figure(fig, path)


def cutoff_over_time_answer(decisions: pd.DataFrame) -> str:
    """How the cutoff evolves on the replayed traces, measured: per trace, bdsgd's and the
    hindsight oracle's range of cutoffs and how often each changes it."""
    sentences = []
    for trace, sub in decisions[~decisions["policy"].str.contains("/")].groupby("trace"):
        parts = []
        for policy in ("bdsgd", "oracle"):
            pol = sub[sub["policy"] == policy].sort_values("step")
            if not pol.empty:
                s = cutoff_changes(pol["cutoff"].to_numpy())
                parts.append(f"{policy} changes its cutoff on {s['changes']:.0%} of iterations "
                             f"and ranges {s['low']}-{s['high']} (mean {s['mean']:.1f})")
        if parts:
            sentences.append(f"On {trace}, " + "; ".join(parts) + f" of n = {sub['cutoff'].max()}.")
    return " ".join(sentences)
