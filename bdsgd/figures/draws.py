"""The throughput study: every policy replayed on every cluster draw of every trace.

``throughput.draws`` replays each trace's test part on D cluster draws (draw 0, the trace; a
simulated trace's others drawn anew from its scenario, a recorded trace's started elsewhere in
it). Per draw d, a policy's throughput f_d = R_d / R*_d is a fraction of that draw's hindsight
optimum R*_d (``relative_to_oracle``). The study reports

- per trace and policy: the median of the f_d with its distribution-free interval
  (``stats.median_interval``; at 10 draws the min to the max, covering 99.8 %);
- per trace, each policy against its references, paired by draw (``verdicts.draw_verdicts``).

It reads the throughput replays alone, so ``bdsgd figures --draws`` draws it for a config that
runs no convergence job (configs/throughput-158.yaml).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bdsgd.figures import DRAW_FIGURES
from bdsgd.figures.common import marker, policy_colour
from bdsgd.figures.inputs import load_draws, load_note
from bdsgd.figures.verdicts import BDSGDS, CONFIDENCE, draw_verdicts, phrases
from bdsgd.outputs.io import write_table, write_with
from bdsgd.plotting import figure_note, save_figure
from bdsgd.stats import median_interval

SUMMARY_COLUMNS = ["trace", "policy", "draws", "n_workers", "comm_to_compute", "median", "low",
                   "high", "coverage"]


def draw_summary(draws: pd.DataFrame) -> pd.DataFrame:
    """Per trace and policy: the draws replayed and the median fraction of the optimum with its
    interval and coverage."""
    rows = []
    for (trace, policy), sub in draws.groupby(["trace", "policy"]):
        median, low, high, coverage = median_interval(sub["relative_to_oracle"], CONFIDENCE)
        rows.append({"trace": trace, "policy": policy, "draws": len(sub),
                     "n_workers": sub["n_workers"].iloc[0],
                     "comm_to_compute": sub["comm_to_compute"].median(), "median": median,
                     "low": low, "high": high, "coverage": coverage})
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def policy_order(summary: pd.DataFrame) -> list[str]:
    """The policies, best first by their median fraction of the optimum over every trace: one
    order in every panel, so that panels read alike."""
    return list(summary.groupby("policy")["median"].median().sort_values(ascending=False).index)


def draws_figure(draws: pd.DataFrame, summary: pd.DataFrame, path: Path) -> list[Path]:
    """A panel per trace: each policy's fraction of the optimum on every draw (small dots) and
    their median with its interval (a large marker on a bar)."""
    traces, order = sorted(summary["trace"].unique()), policy_order(summary)
    cols = min(4, len(traces))
    rows = -(-len(traces) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.3 * cols, 0.24 * len(order) * rows + 1.4),
                             squeeze=False, sharey=True, layout="constrained")
    y = {policy: i for i, policy in enumerate(order)}
    for ax, trace in zip(axes.flat, traces, strict=False):
        sub, stats = draws[draws["trace"] == trace], summary[summary["trace"] == trace]
        for row in stats.itertuples():
            colour = policy_colour(row.policy)
            ax.hlines(y[row.policy], row.low, row.high, color=colour, lw=2, alpha=0.6)
            ax.plot(row.median, y[row.policy], marker(row.policy), color=colour, ms=6,
                    mec="white", mew=0.6)
            dots = sub[sub["policy"] == row.policy]["relative_to_oracle"]
            ax.scatter(dots, np.full(len(dots), y[row.policy] + 0.3), s=4, color=colour,
                       alpha=0.7, lw=0)
        first = stats.iloc[0]
        ax.axvline(1.0, color="k", lw=0.6, ls=":")
        ax.set(title=f"{trace}: n = {first.n_workers:g}, {first.draws} draw"
                     f"{'s' if first.draws != 1 else ''}, "
                     f"rho = {first.comm_to_compute:.2g}", xlabel="throughput / hindsight optimum")
        ax.title.set_fontsize(9)
    for ax in axes.flat[len(traces):]:
        ax.set_visible(False)
    axes[0, 0].set(yticks=range(len(order)), yticklabels=order, ylim=(len(order) - 0.4, -0.6))
    fig.suptitle("Median over cluster draws with its interval (bar; at 10 draws the min to the "
                 "max), each draw a dot", fontsize=10)
    return save_figure(fig, path)


def draws_answer(summary: pd.DataFrame, verdicts: pd.DataFrame) -> str:
    """Per trace: ours and the paper's BDSGD as fractions of the optimum, and their verdicts
    against their references; then how many traces each verdict holds on."""
    parts = []
    for trace, stats in summary.groupby("trace"):
        shown = stats[stats["policy"].isin(BDSGDS)]
        level = "; ".join(f"{r.policy} {r.median:.3f} of the optimum ({r.low:.3f} to {r.high:.3f})"
                          for r in shown.itertuples())
        ours = verdicts[(verdicts["trace"] == trace) & verdicts["policy"].isin(BDSGDS)]
        draws = stats["draws"].max()
        parts.append(f"On {trace} ({draws} draw{'s' if draws != 1 else ''}): {level}. "
                     f"{phrases(ours)}")
    counts = (verdicts[verdicts["policy"] == "bdsgd"].groupby("reference")["verdict"]
              .value_counts().unstack(fill_value=0))
    tally = "; ".join(f"against {ref}: " + ", ".join(f"{v} on {n}" for v, n in row.items() if n)
                      for ref, row in counts.iterrows())
    return " ".join(parts) + (f" Over the traces, bdsgd {tally}." if tally else "")


def render_draws(results_dir: Path, out_dir: Path) -> list[Path]:
    """The study's figure, tables and answer (``DRAW_FIGURES``); returns the files written."""
    draws = load_draws(results_dir)
    summary, verdicts = draw_summary(draws), draw_verdicts(draws)
    path = {name: out_dir / file for name, (file, _, _) in DRAW_FIGURES.items()}

    with figure_note(load_note(results_dir)):
        written = draws_figure(draws, summary, path["throughput_draws"])
    answer = draws_answer(summary, verdicts)
    return [*written, write_table(summary, path["throughput_draws_summary"]),
            write_table(verdicts, path["draw_verdicts"]),
            write_with(path["throughput_study"],
                       lambda tmp: tmp.write_text(f"Throughput over cluster draws\n"
                                                  f"=============================\n\n{answer}\n"))]
