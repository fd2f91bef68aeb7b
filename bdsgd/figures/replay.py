"""The throughput replay's figures (``bdsgd throughput``'s results), each beside a function that
states its measured answer in a sentence (``<figure>_answer``, for the captions):

    throughput            each policy's throughput over the hindsight optimum's, with an interval
    worker_time           the workers' time: applied gradients, dropped gradients, idle
    period_sweep          throughput against the re-decision period (policies.decide_every)
    decision_overhead     a decision's wall-clock time over an iteration's

(the throughput along the replay: ``bdsgd.figures.over_time``). ``render.render_all`` calls them
after reading and checking every input, and writes the answers beside the figures
(``bdsgd.figures.answers``). Throughput here is accepted gradients per unit of the trace's time:
sum c_t / sum d_t, d_t = tau_t + comm(c_t) (``bdsgd.throughput``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bdsgd.cluster.schedules import MODES
from bdsgd.figures.common import bar_style as _bar_style
from bdsgd.figures.common import marker, policy_colour, policy_style
from bdsgd.figures.verdicts import BDSGDS, CONFIDENCE, phrases, verdict
from bdsgd.plotting import save_figure
from bdsgd.stats import BLOCKS, block_ratio_interval

WINDOW = 20  # iterations of a rolling window (as cutoff_over_time's)
COLUMNS = 4  # panels per row of a small-multiples figure


def per_unit(unit: str) -> str:
    """Throughput's unit on an axis: per second, or per unit of a normalised trace."""
    return "accepted gradients / s" if unit == "s" else f"accepted gradients /\ntrace unit ({unit})"


def _nothing(path: Path, message: str) -> list[Path]:
    """A figure that says there is nothing to draw (results of a replay that did not record it)."""
    fig, ax = plt.subplots(figsize=(7, 2))
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes)
    return save_figure(fig, path)


def _cutoff_rows(table: pd.DataFrame, oracle: bool = False) -> pd.DataFrame:
    """The cutoff policies' rows of the throughput table (the hindsight oracle only if
    ``oracle``; never async), with a bar ``label`` (the policy broken after its first hyphen,
    and its rule) and the ``decision`` name of its replay in decisions.parquet."""
    rows = table[~table["policy"].isin(MODES if oracle else ["oracle", *MODES])]
    name = rows["policy"].str.replace("-", "-\n", n=1, regex=False)
    with_rule = rows["policy"] + "/" + rows["rule"]
    return rows.assign(label=np.where(rows["rule"] == "", name, name + "\n" + rows["rule"]),
                       decision=np.where(rows["rule"] == "", rows["policy"], with_rule))


def one_replay(decisions: pd.DataFrame, trace: str, name: str) -> pd.DataFrame | None:
    """One replay's decisions in iteration order; with --rule both a plain name is the default
    rule's replay, so <policy>/<rule> falls back to it."""
    sub = decisions[decisions["trace"] == trace]
    for candidate in (name, name.split("/")[0]):
        rows = sub[sub["policy"] == candidate]
        if len(rows):
            return rows.sort_values("iteration")
    return None


def throughput_intervals(table: pd.DataFrame, decisions: pd.DataFrame) -> pd.DataFrame:
    """The cutoff policies' rows, the hindsight oracle's included, with the batch-means interval
    (low, high) of their throughput over the hindsight optimum's: their ratio to the replayed
    oracle plan (``block_ratio_interval``) times that plan's share of the optimum, which is 1
    where late workers abandon their work and may fall short where they finish it; NaN where
    the oracle was not replayed."""
    rows, bounds = _cutoff_rows(table, oracle=True), []
    plan = table[table["policy"] == "oracle"].set_index("trace")["relative_to_oracle"]
    for row in rows.itertuples():
        own, ref = (one_replay(decisions, row.trace, name) for name in (row.decision, "oracle"))
        bounds.append((np.nan, np.nan) if own is None or ref is None else tuple(
            plan[row.trace] * np.asarray(block_ratio_interval(
                own["cutoff"], own["duration_s"], ref["cutoff"], ref["duration_s"]))))
    return rows.assign(low=[b[0] for b in bounds], high=[b[1] for b in bounds])


def throughput_bars(table: pd.DataFrame, decisions: pd.DataFrame, path: Path) -> list[Path]:
    """Throughput over the hindsight oracle's, per policy (and rule): a panel per trace, each
    policy a dot in its colour (its family told apart by the marker) with its value and its
    batch-means interval, on an axis fitted to the values: policies a few points apart stay
    apart (a dot, not a bar: a bar on a cut axis misleads)."""
    rows = throughput_intervals(table, decisions)
    traces = sorted(rows["trace"].unique())
    width = max(8, 0.75 * rows.groupby("trace").size().max() + 3)
    fig, axes = plt.subplots(len(traces), 1, figsize=(width, 3.6 * len(traces)), squeeze=False)
    for ax, trace in zip(axes[:, 0], traces, strict=True):
        sub = rows[rows["trace"] == trace]
        for i, row in enumerate(sub.itertuples()):
            ax.plot(i, row.relative_to_oracle, ls="none", ms=7, mec="k", mew=0.5,
                    marker=marker(row.policy), color=policy_colour(row.policy))
            top = row.relative_to_oracle
            if np.isfinite(row.low):
                ax.plot([i, i], [row.low, row.high], color="k", lw=1)
                ax.plot([i, i], [row.low, row.high], ls="none", marker="_", color="k", ms=6)
                top = max(top, row.high)
            ax.annotate(f"{row.relative_to_oracle:.3f}", (i, top), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7,
                        rotation=90)
        ax.set_xticks(range(len(sub)), sub["label"], fontsize=8)
        values = sub[["relative_to_oracle", "low", "high"]].to_numpy()
        bottom = max(0.0, np.nanmin(values) - 0.02)
        ax.set(ylim=(bottom, max(1.0, np.nanmax(values)) + 0.04 + 0.1 * (1 - bottom)),
               ylabel="throughput / hindsight oracle",
               title=f"{trace}: throughput of each policy (accepted gradients per second), axis "
                     f"from {bottom:.2f}\nwhiskers: 95% batch-means interval over {BLOCKS} "
                     "blocks of iterations")
        ax.axhline(1.0, color="k", lw=0.8)
    axes[-1, 0].set_xlabel("policy (decision rule)")
    return save_figure(fig, path)


def throughput_answer(table: pd.DataFrame, decisions: pd.DataFrame,
                      verdicts: pd.DataFrame) -> str:
    """Per trace: the paper's BDSGD's and ours' throughput over the hindsight optimum's, with its
    interval, then each against its references on the same iterations
    (``bdsgd.figures.verdicts``)."""
    rows = throughput_intervals(table, decisions)
    parts = []
    for trace, sub in rows.groupby("trace"):
        shown = sub[sub["policy"].isin(BDSGDS)]
        mine = verdicts[(verdicts["measure"] == "throughput") & (verdicts["trace"] == trace)
                        & verdicts["policy"].isin(BDSGDS)]
        parts.append(f"On {trace}, " + "; ".join(
            f"{r['policy']}{'/' + r['rule'] if r['rule'] else ''} reaches "
            f"{r['relative_to_oracle']:.3f} of the hindsight optimum's "
            f"throughput (95% interval {r['low']:.3f} to {r['high']:.3f})"
            for _, r in shown.iterrows()) + ". " + phrases(mine).strip())
    return " ".join(parts)


def worker_time(table: pd.DataFrame, path: Path) -> list[Path]:
    """Per trace, a horizontal bar per policy (and rule) splitting the workers' time n sum_t d_t
    into applied gradients' computing, dropped gradients' and idle waiting, values written."""
    rows = _cutoff_rows(table, oracle=True).dropna(subset=["idle_fraction", "wasted_fraction"])
    if rows.empty:
        return _nothing(path, "no replay recorded its workers' time (idle_fraction)")
    traces = sorted(rows["trace"].unique())
    height = max(3.0, 0.32 * rows.groupby("trace").size().max() + 1.2)
    fig, axes = plt.subplots(len(traces), 1, figsize=(9, height * len(traces)), squeeze=False)
    for ax, trace in zip(axes[:, 0], traces, strict=True):
        sub = rows[rows["trace"] == trace]
        labels = np.where(sub["rule"] == "", sub["policy"], sub["policy"] + " " + sub["rule"])
        for i, row in enumerate(sub.itertuples()):
            useful = 1 - row.idle_fraction - row.wasted_fraction
            style = _bar_style(row.policy)
            ax.barh(i, useful, **style, label="applied" if i == 0 else None)
            ax.barh(i, row.wasted_fraction, left=useful, color=style["color"], alpha=0.45,
                    hatch="xx", edgecolor="white", label="dropped" if i == 0 else None)
            ax.barh(i, row.idle_fraction, left=useful + row.wasted_fraction, color="#d9d9d9",
                    label="idle" if i == 0 else None)
            ax.text(1.01, i, f"idle {row.idle_fraction:.1%}, dropped {row.wasted_fraction:.1%}",
                    va="center", fontsize=7)
        ax.set_yticks(range(len(sub)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set(xlim=(0, 1.35), xticks=np.linspace(0, 1, 6),
               xlabel="fraction of the workers' time (n x replay duration)")
        ax.set_title(f"{trace}: where the workers' time goes", pad=18)
        ax.grid(axis="y", visible=False)  # no line through the written values
        ax.legend(fontsize=7, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3, frameon=False)
    return save_figure(fig, path)


def worker_time_answer(table: pd.DataFrame) -> str:
    """Per trace: the idle and dropped fractions of sync, static, each BDSGD and the oracle
    (those replayed)."""
    parts = []
    rows = table.dropna(subset=["idle_fraction", "wasted_fraction"])
    for trace, sub in rows.groupby("trace"):
        sub = sub.drop_duplicates("policy").set_index("policy")
        named = [p for p in ("sync", "static", *BDSGDS, "oracle") if p in sub.index]
        parts.append(f"On {trace}, the workers idle "
                     + ", ".join(f"{sub.loc[p, 'idle_fraction']:.1%} of their time under {p} "
                                 f"(computing dropped gradients {sub.loc[p, 'wasted_fraction']:.1%})"
                                 for p in named) + ".")
    return " ".join(parts)


def period_sweep(sweep: pd.DataFrame, path: Path) -> list[Path]:
    """Per trace: throughput over the hindsight oracle's against the re-decision period, a line
    per policy (values written), the best fixed cutoff in hindsight as a dashed reference."""
    traces = sorted(sweep["trace"].unique())
    fig, axes = plt.subplots(1, len(traces), figsize=(5.5 * len(traces), 4), squeeze=False)
    for ax, trace in zip(axes[0], traces, strict=True):
        sub = sweep[sweep["trace"] == trace]
        for j, (policy, lines) in enumerate(sub.groupby("policy")):
            lines = lines.sort_values("period")
            if policy == "oracle-fixed":
                ax.axhline(lines["relative_to_oracle"].iloc[0], ls="--", lw=1.2,
                           color=policy_style(policy)["color"],
                           label=f"oracle-fixed (c = {lines['mean_cutoff'].iloc[0]:.0f})")
                continue
            ax.plot(lines["period"], lines["relative_to_oracle"], marker="o", ms=4, lw=1.4,
                    label=policy, **policy_style(policy))
            for k, v in zip(lines["period"], lines["relative_to_oracle"], strict=True):
                # each policy's values in its colour, every other policy's below its points
                ax.annotate(f"{v:.3f}", (k, v), xytext=(0, 4 if j % 2 == 0 else -11),
                            textcoords="offset points", ha="center", fontsize=7,
                            color=policy_style(policy)["color"])
        periods = sorted(sub["period"].unique())
        ax.set(xscale="log", ylim=(0, 1.15), xlabel="re-decision period k (iterations)",
               ylabel="throughput / hindsight oracle", title=f"{trace}: deciding every k iterations")
        ax.set_xticks(periods, [str(k) for k in periods])
        ax.minorticks_off()
        ax.legend(fontsize=8, loc="lower left")
    return save_figure(fig, path)


def period_sweep_answer(sweep: pd.DataFrame) -> str:
    """Per trace and policy: throughput over the oracle's at the shortest and the longest
    period, and at each its verdict against the best fixed cutoff in hindsight (paired by
    iteration)."""
    parts = []
    for trace, sub in sweep.groupby("trace"):
        fixed = sub.loc[sub["policy"] == "oracle-fixed", "relative_to_oracle"]
        policies = sub[sub["policy"] != "oracle-fixed"].sort_values("period")
        said = [f"{p} goes from {_against_fixed(g.iloc[0])} to {_against_fixed(g.iloc[-1])}"
                for p, g in policies.groupby("policy")]
        if len(fixed):
            said.append(f"the best fixed cutoff in hindsight reaches {fixed.iloc[0]:.3f}")
        parts.append(f"On {trace}, " + "; ".join(said) + ".")
    return " ".join(parts)


def _against_fixed(row) -> str:
    """A period's throughput, and its verdict against the best fixed cutoff's."""
    word = verdict(row["fixed_low"], row["fixed_high"], "higher", pairs="iterations")
    return (f"{row['relative_to_oracle']:.3f} deciding every {row['period']} iteration(s) "
            f"({word} against the fixed cutoff: ratio {row['fixed_ratio']:.3g}, "
            f"{CONFIDENCE:.0%} interval {row['fixed_low']:.3g} to {row['fixed_high']:.3g})")


def iteration_seconds(overhead: pd.DataFrame) -> pd.Series:
    """Each row's mean iteration in seconds, as the replay's virtual cluster timed it; NaN where
    it had no seconds (a normalised trace without network.gradient_s)."""
    return overhead["mean_iteration_s"].where(overhead["in_seconds"].astype(bool))


def decision_overhead(overhead: pd.DataFrame, path: Path) -> list[Path]:
    """Per trace: each policy's median decision time over its mean iteration time (dot, value
    written) and its 99th percentile's (tick), on a log scale."""
    overhead = overhead.assign(iteration=iteration_seconds(overhead))
    if overhead.empty:
        return _nothing(path, "no cutoff policy was replayed")
    traces = sorted(overhead["trace"].unique())
    width = max(8, 0.6 * overhead.groupby("trace").size().max() + 3)
    fig, axes = plt.subplots(len(traces), 1, figsize=(width, 3.4 * len(traces)), squeeze=False)
    for ax, trace in zip(axes[:, 0], traces, strict=True):
        sub = overhead[overhead["trace"] == trace].reset_index(drop=True)
        p50 = sub["decision_ms_p50"] / 1e3 / sub["iteration"]
        p99 = sub["decision_ms_p99"] / 1e3 / sub["iteration"]
        for i, row in sub.iterrows():
            if not np.isfinite(p50[i]) or p50[i] <= 0:
                continue
            # a dot, not a bar: a bar on a log axis starts at an arbitrary bottom
            ax.plot(i, p50[i], marker="o", ms=7, color=policy_style(row["policy"])["color"],
                    label=row["policy"])
            ax.plot([i, i], [p50[i], p99[i]], color="k", lw=0.8)
            ax.plot(i, p99[i], marker="_", color="k", ms=8)
            # each value beside its own mark: the median's by its dot, the 99th's by its tick
            ax.annotate(f"{p50[i]:.1e}", (i, p50[i]), xytext=(6, 0), textcoords="offset points",
                        ha="left", va="center", fontsize=7)
            ax.annotate(f"{p99[i]:.1e}", (i, p99[i]), xytext=(6, 0), textcoords="offset points",
                        ha="left", va="center", fontsize=6, color="0.4")
        ax.set_xticks(range(len(sub)), sub["policy"].str.replace("-", "-\n", n=1, regex=False),
                      fontsize=8)
        n = int(sub["n_workers"].iloc[0])
        basis = ("iterations as the replay's virtual cluster timed them, in s"
                 if sub["in_seconds"].iloc[0] else "no seconds (network.gradient_s): not drawn")
        ax.set(yscale="log", ylabel="decision time / iteration time",
               title=f"{trace} (n = {n}): decision time per iteration, median (dot) and 99th "
                     f"percentile (tick)\n{basis}")
        ax.margins(y=0.3)
    return save_figure(fig, path)


def decision_overhead_answer(overhead: pd.DataFrame) -> str:
    """Per trace: the median and 99th-percentile decision time of the slowest policy and of each
    BDSGD, against that policy's mean iteration."""
    overhead = overhead.assign(iteration=iteration_seconds(overhead))
    parts = []
    for trace, sub in overhead.dropna(subset=["iteration"]).groupby("trace"):
        slowest = sub.loc[sub["decision_ms_p50"].idxmax(), "policy"]
        said = [f"{p}'s{' (the slowest)' if p == slowest else ''} takes "
                f"{r['decision_ms_p50']:.3g} ms at the median and {r['decision_ms_p99']:.3g} ms "
                f"at the 99th percentile: {r['decision_ms_p50'] / 1e3 / r['iteration']:.2%} and "
                f"{r['decision_ms_p99'] / 1e3 / r['iteration']:.2%} of its "
                f"{r['iteration']:.3g} s iteration"
                for p, r in sub.set_index("policy").iterrows() if p == slowest or p in BDSGDS]
        parts.append(f"On {trace} (n = {int(sub['n_workers'].iloc[0])}), a decision: "
                     + "; ".join(said) + ".")
    return " ".join(parts)
