"""What the figures share: each policy's fixed style, curves over seeds, panels per task and trace.

Each policy has one fixed colour and line style in every figure (``policy_style``, from
``bdsgd.figures.POLICY_COLOURS`` and ``POLICY_DASHES``; bars: ``bar_style``). Curves over seeds
are the median with a min-max band (``band``). Iterations are counted from 0 in every figure.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bdsgd.figures import EXPLORE_PREFIX, FALLBACK_COLOURS, POLICY_COLOURS, POLICY_DASHES
from bdsgd.plotting import unit_label

BAND_POINTS = 200  # grid points a curve over seeds is interpolated onto
TRACE_COLOURS = ("#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377", "#BBBBBB")
ORDER_COLOURS = ("#4477AA", "#228833", "#EE6677")



def policy_colour(policy: str) -> str:
    """The policy's fixed colour: explore-<p> has p's; a name not in POLICY_COLOURS gets one of
    FALLBACK_COLOURS picked from its letters (the same name, the same colour, every run)."""
    base = policy.removeprefix(EXPLORE_PREFIX)
    if base in POLICY_COLOURS:
        return POLICY_COLOURS[base]
    return FALLBACK_COLOURS[sum(map(ord, base)) % len(FALLBACK_COLOURS)]


def policy_style(policy: str) -> dict:
    """Line keywords of a policy: its colour and line style (``POLICY_DASHES``, else solid);
    explore-<p> is p's colour dash-dotted, a style no listed policy has."""
    if policy.startswith(EXPLORE_PREFIX):
        return {"color": policy_colour(policy), "ls": "-."}
    return {"color": policy_colour(policy), "ls": POLICY_DASHES.get(policy, "-")}


HATCHES = {"--": "//", ":": "..", "-.": "xx"}  # a bar's hatch, from its policy's line style


def bar_style(policy: str, alpha: float = 1.0) -> dict:
    """Bar keywords of a policy: its colour, hatched as its line is styled (dashed //, dotted
    .., explore-<p> xx), so that a family sharing a colour tells apart."""
    return {"color": policy_colour(policy), "alpha": alpha, "edgecolor": "white",
            "hatch": HATCHES.get(policy_style(policy)["ls"])}


def legend_below(fig, axes, columns: int = 6) -> None:
    """One legend for the whole figure, under its panels (where it covers no curve): every
    labelled line of ``axes``, each label once."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, handle)
    fig.legend(entries.values(), entries.keys(), loc="outside lower center",
               ncols=min(columns, len(entries)), fontsize=8, frameon=False)


def window(rows: int) -> int:
    return max(1, rows // 25)  # 4% of a curve's rows: a short smoke run is not flattened


def over_seeds(runs: pd.DataFrame, x: str, y: str) -> tuple[np.ndarray, np.ndarray]:
    """Each seed's y interpolated onto one grid of x, over the range every seed covers:
    (grid, array seeds x grid)."""
    seeds = [g.sort_values(x) for _, g in runs.groupby("seed")]
    start = max(g[x].iloc[0] for g in seeds)
    grid = np.linspace(start, max(start, min(g[x].iloc[-1] for g in seeds)), BAND_POINTS)
    return grid, np.array([np.interp(grid, g[x], g[y]) for g in seeds])


def band(ax, runs: pd.DataFrame, x: str, y: str, policy: str) -> None:
    """The median over seeds of y against x, and a min-max band, in the policy's style."""
    grid, values = over_seeds(runs, x, y)
    style = policy_style(policy)
    ax.plot(grid, np.median(values, axis=0), label=policy, lw=1.4, **style)
    ax.fill_between(grid, values.min(axis=0), values.max(axis=0), color=style["color"],
                    alpha=0.15, lw=0)


def smoothed(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    """Each seed's rows in order, with ``column`` replaced by its rolling mean (``window``)."""
    out = []
    for _, g in runs.groupby("seed"):
        g = g.sort_values("iteration")
        out.append(g.assign(**{column: g[column].rolling(window(len(g)), min_periods=1).mean()}))
    return pd.concat(out)


def counted_from_0(metrics: pd.DataFrame) -> pd.DataFrame:
    """The metrics with ``step``: a run's row counts its iterations from 1 (the row written after
    the first), the step counts them from 0, as every figure counts the replayed iterations."""
    return metrics.assign(step=metrics["iteration"] - 1)


def time_label(runs: pd.DataFrame) -> str:
    """The unit of the runs' virtual time (``inputs.virtual_time_unit``), as an axis names it."""
    return ", ".join(unit_label(u) for u in sorted(runs["time_unit"].unique()))


def task_panels(metrics: pd.DataFrame, width: float, height: float, columns: int = 1, **kw):
    """One row of panels per task and trace the runs replayed: (panels, axes array panels x
    columns, figure); a panel is (task, trace)."""
    import matplotlib.pyplot as plt

    panels = sorted(metrics.groupby(["task", "trace"]).groups)
    fig, axes = plt.subplots(len(panels), columns, figsize=(width, height * len(panels)),
                             squeeze=False, **kw)
    return panels, axes, fig


def of(frame: pd.DataFrame, panel: tuple[str, str]) -> pd.DataFrame:
    """The rows of one panel's task and trace."""
    return frame[(frame["task"] == panel[0]) & (frame["trace"] == panel[1])]


def title(panel: tuple[str, str]) -> str:
    task, trace = panel
    return f"{task} on {trace}" if trace else task
