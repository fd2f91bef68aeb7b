"""The run-time figures: every trace's run-time distribution (``runtime_distributions``) and the
run-time model's held-out predictions of the orders the cutoff decision turns on
(``model_predictions``); and the measured answer to "how good are its forecasts?"
(``model_predictions_answer``).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bdsgd.figures.common import ORDER_COLOURS, TRACE_COLOURS  # noqa: E402
from bdsgd.figures.inputs import load_predictions, load_traces  # noqa: E402
from bdsgd.plotting import save_figure, unit_label  # noqa: E402


def runtime_distributions(results_dir: Path, path: Path,
                          traces: dict[str, np.ndarray] | None = None) -> list[Path]:
    """Empirical CDF of every trace's run-times over its median (log scale: the tail matters).
    ``traces``: ``inputs.load_traces``' (None: read them from ``results_dir``)."""
    traces = load_traces(results_dir) if traces is None else traces
    fig, ax = plt.subplots(figsize=(7, 4))
    for (name, x), colour in zip(traces.items(), itertools.cycle(TRACE_COLOURS)):
        x = np.sort(x / np.median(x))
        ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=name, color=colour)
    ax.set(xscale="log", xlabel="run-time / the trace's median run-time (no unit)",
           ylabel="empirical CDF", title="worker run-time distributions")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def shown_orders(orders) -> list[int]:
    """The order statistics the predictions figure shows: n-2, n-1 and n (n the largest order),
    where the decision between waiting for every worker and cutting one or two is made."""
    n = max(orders)
    return [c for c in (n - 2, n - 1, n) if c in set(orders)]


def model_predictions(results_dir: Path, path: Path,
                      predictions: list[tuple[str, pd.DataFrame, str]] | None = None) -> list[Path]:
    """Predicted E[x_(c)] with 90% interval against the realised order statistic, held out, for
    the orders c = n-2, n-1, n (``shown_orders``), against the replayed iteration (from 0).
    ``predictions``: ``inputs.load_predictions``' (None: read them from ``results_dir``)."""
    predictions = load_predictions(results_dir) if predictions is None else predictions
    fig, axes = plt.subplots(len(predictions), 1, figsize=(10, 3.3 * len(predictions) + 0.5),
                             squeeze=False, layout="constrained")
    for ax, (trace, pred, unit) in zip(axes[:, 0], predictions, strict=True):
        n = int(pred["order"].max())
        for order, colour in zip(shown_orders(pred["order"].unique()), ORDER_COLOURS, strict=False):
            p = pred[pred["order"] == order].sort_values("step")
            name = "n" if order == n else f"n-{n - order}"
            ax.fill_between(p["step"], p["lo90"], p["hi90"], color=colour, alpha=0.2, lw=0)
            ax.plot(p["step"], p["predicted_mean"], color=colour, lw=1.2,
                    label=f"c = {name} = {order}: predicted E[x_(c)], band 90% interval")
            inside = ((p["realised"] >= p["lo90"]) & (p["realised"] <= p["hi90"])).mean()
            ax.scatter(p["step"], p["realised"], color=colour, s=5,
                       label=f"c = {order}: realised x_(c) ({inside:.0%} inside the band)")
        ax.set(title=f"{trace}: one-step-ahead predictions of the slowest order statistics "
                     f"(held out; n = {n} workers)",
               xlabel="replayed iteration, from 0", ylabel=f"run-time ({unit_label(unit)})")
        ax.legend(fontsize=7, ncols=3, loc="upper left", bbox_to_anchor=(0, -0.22), frameon=False)
    return save_figure(fig, path)


def model_predictions_answer(predictions: list[tuple[str, pd.DataFrame, str]]) -> str:
    """How well the model forecasts the orders the decision turns on, measured: per trace, the
    share of held-out iterations whose realised x_(c) fell in its 90% interval, c = n-2..n."""
    sentences = []
    for trace, pred, _ in predictions:
        shown = pred[pred["order"].isin(shown_orders(pred["order"].unique()))]
        inside = ((shown["realised"] >= shown["lo90"]) & (shown["realised"] <= shown["hi90"]))
        by_order = inside.groupby(shown["order"]).mean()
        sentences.append(f"On {trace}, the realised x_(c) fell inside the 90% prediction interval "
                         f"on {inside.mean():.0%} of held-out iterations for c = "
                         f"{by_order.index.min()}..{by_order.index.max()} ("
                         + ", ".join(f"c = {c}: {v:.0%}" for c, v in by_order.items()) + ").")
    return " ".join(sentences)
