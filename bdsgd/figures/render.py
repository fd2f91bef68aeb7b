"""Every figure and summary table, drawn from stored results only (the list: ``bdsgd.figures``).

``render_all(results_dir, out_dir)`` reads what the DAG wrote under ``results/<experiment>/``::

    traces/<trace>/{trace,test}.parquet, describe.json
    models/<trace>/evaluation.json, predictions.parquet
    throughput/<trace>/throughput.json, decisions.parquet
    runs/<trace>/<task>/<policy>/seed<k>/{metrics.parquet, result.json}

(found through ``bdsgd.layout``, as the workflow lays them out; read and checked, every file,
by ``bdsgd.figures.inputs`` before any figure is drawn: a missing or damaged file is one line
naming it, and nothing is written) and writes every figure as PNG and PDF (``bdsgd.plotting``)
plus ``summary.csv`` (one row per convergence run) and ``throughput_summary.csv`` (one row per
trace x policy x rule). The tables hold no wall-clock numbers, so two runs of the same commit
and config give byte-identical tables; the PDFs carry no creation date, so they too repeat byte
for byte on the same library versions.

The figures are drawn by role: ``convergence`` (accuracy, time to target, loss), ``cutoffs``
(the cutoffs chosen, small multiples per policy), ``runtimes`` (trace distributions, the run-time
model's predictions) and here (throughput); what they share, each policy's fixed colour and line
style included, is in ``common``. Every figure is saved with the experiment's figure_note under
it, if it has one.
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
from bdsgd.figures import FIGURES  # noqa: E402
from bdsgd.figures.common import bar_style as _bar_style  # noqa: E402
from bdsgd.figures.common import policy_colour, policy_style  # noqa: E402, F401 - render's API
from bdsgd.figures.convergence import loss_curves, time_to_accuracy  # noqa: E402
from bdsgd.figures.cutoffs import cutoff_over_time, training_cutoff  # noqa: E402
from bdsgd.figures.inputs import (  # noqa: E402, F401 - load_runs, the columns: render's API too
    SUMMARY_COLUMNS,
    THROUGHPUT_COLUMNS,
    load_comm_sweep,
    load_note,
    load_predictions,
    load_runs,
    load_throughput,
    load_traces,
)
from bdsgd.figures.inputs import time_unit as _time_unit  # noqa: E402, F401
from bdsgd.figures.runtimes import model_predictions, runtime_distributions  # noqa: E402
from bdsgd.io import write_with  # noqa: E402
from bdsgd.plotting import figure_note, save_figure  # noqa: E402

# the training modes that are no cutoff policy: no throughput bar of their own
from bdsgd.schedules import MODES  # noqa: E402

logger = logging.getLogger(__name__)

FLOAT_FORMAT = "%.10g"


def _write_csv(df: pd.DataFrame, path: Path) -> list[Path]:
    return [write_with(path, lambda tmp: df.to_csv(tmp, index=False, float_format=FLOAT_FORMAT,
                                                   lineterminator="\n"))]


def throughput_bars(table: pd.DataFrame, path: Path) -> list[Path]:
    """Throughput relative to the exact hindsight oracle, per policy (and rule): a panel per
    trace, each bar in its policy's colour."""
    rows = table[~table["policy"].isin(["oracle", *MODES])]
    # a long name breaks after its first hyphen, so neighbouring labels do not run together
    name = rows["policy"].str.replace("-", "-\n", n=1, regex=False)
    rows = rows.assign(label=np.where(rows["rule"] == "", name, name + "\n" + rows["rule"]))
    labels, traces = list(pd.unique(rows["label"])), sorted(rows["trace"].unique())
    fig, axes = plt.subplots(len(traces), 1, figsize=(max(8, 0.75 * len(labels) + 3),
                                                      3.2 * len(traces)), squeeze=False)
    low = float(np.nanmin(rows["relative_to_oracle"]))
    for ax, trace in zip(axes[:, 0], traces, strict=True):
        for row in rows[rows["trace"] == trace].itertuples():
            ax.bar(labels.index(row.label), row.relative_to_oracle, **_bar_style(row.policy))
        ax.set_xticks(range(len(labels)), labels, fontsize=8)
        ax.set(ylim=(max(0.0, low - 0.05), 1.01), ylabel="throughput / hindsight oracle",
               title=f"{trace}: throughput of each policy (accepted gradients per second)")
        ax.axhline(1.0, color="k", lw=0.8)
    axes[-1, 0].set_xlabel("policy (decision rule)")
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


def render_all(results_dir: Path, out_dir: Path) -> list[Path]:
    """Draw every figure and write both summary tables; returns the files written. Every input
    is read and checked first: a bad one is a UserError, and then nothing is written. Every
    figure carries the experiment's figure_note (``inputs.load_note``), if it has one."""
    with figure_note(load_note(results_dir)):
        return _render_all(results_dir, out_dir)


def _render_all(results_dir: Path, out_dir: Path) -> list[Path]:
    if not results_dir.is_dir():
        raise UserError(str(results_dir), "RESULTS_DIR", "not a directory")
    summary, metrics = load_runs(results_dir)
    table, decisions = load_throughput(results_dir)
    sweep = load_comm_sweep(results_dir)
    traces, predictions = load_traces(results_dir), load_predictions(results_dir)
    sns.set_theme(style="whitegrid", context="notebook")
    path = {name: out_dir / file for name, (file, _, _) in FIGURES.items()}
    written = [
        *_write_csv(summary, path["summary"]),
        *_write_csv(table, path["throughput_summary"]),
        *time_to_accuracy(metrics, summary, path["time_to_accuracy"]),
        *loss_curves(metrics, path["loss_curves"]),
        *training_cutoff(metrics, summary, path["training_cutoff"]),
        *cutoff_over_time(decisions, path["cutoff_over_time"]),
        *throughput_bars(table, path["throughput"]),
        *_write_csv(sweep, path["comm_sweep_summary"]),
        *comm_sweep(sweep, path["comm_sweep"]),
        *runtime_distributions(results_dir, path["runtime_distributions"], traces),
        *model_predictions(results_dir, path["model_predictions"], predictions),
    ]
    for path in written:
        logger.info(f"wrote {path}")
    return written
