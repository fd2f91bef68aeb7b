"""Every figure and summary table, drawn from stored results only (the list: ``bdsgd.figures``).

``render_all(results_dir, out_dir)`` reads what the DAG wrote under ``results/<experiment>/``::

    traces/<trace>/{trace,test}.parquet, describe.json
    models/<trace>/evaluation.json, predictions.parquet
    throughput/<trace>/throughput.json, decisions.parquet, comm_sweep.csv, period_sweep.csv
    runs/<trace>/<task>/<policy>/seed<k>/{metrics.parquet, result.json}
    distributed/<job>/result.json, result.{metrics,trace,replay}.parquet (may be none)

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

import itertools
import logging
from pathlib import Path

from bdsgd.plotting import figure_note, save_figure, unit_label, use_agg

use_agg()
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from bdsgd.errors import UserError  # noqa: E402
from bdsgd.figures import (  # noqa: E402
    FIGURES,
    over_time,
    replay,
    replay_ablations,
)
from bdsgd.figures.ablations import ablation_table, ablations, ablations_answer  # noqa: E402
from bdsgd.figures.answers import VERSUS, answers_rst, reviewers_table  # noqa: E402
from bdsgd.figures.common import policy_colour, policy_style  # noqa: E402, F401 - render's API
from bdsgd.figures.convergence import (  # noqa: E402, F401 - the figures: render's API too
    cutoff_over_time,
    cutoff_over_time_answer,
    loss_curves,
    time_to_accuracy,
    time_to_accuracy_answer,
    training_cutoff,
    training_cutoff_answer,
)
from bdsgd.figures.distributed import (  # noqa: E402
    distributed_replay,
    distributed_replay_answer,
    replay_job,
)
from bdsgd.figures.inputs import (  # noqa: E402, F401 - load_runs, the columns: render's API too
    SUMMARY_COLUMNS,
    THROUGHPUT_COLUMNS,
    load_comm_sweep,
    load_distributed,
    load_ladders,
    load_note,
    load_overhead,
    load_period_sweep,
    load_predictions,
    load_replay_ablations,
    load_runs,
    load_throughput,
    load_traces,
)
from bdsgd.figures.inputs import time_unit as _time_unit  # noqa: E402, F401
from bdsgd.figures.ladder import (  # noqa: E402
    drift_answer,
    emission_answer,
    ladder,
    ladder_answer,
    ladder_table,
)
from bdsgd.figures.verdicts import BDSGDS, CONFIDENCE, verdict, verdict_table, versus_answer  # noqa: E402
from bdsgd.outputs.io import write_table, write_with  # noqa: E402

# the training modes that are no cutoff policy: no cutoff to draw, and their metrics rows are
# rounds of about n applied gradients rather than iterations

logger = logging.getLogger(__name__)

TRACE_COLOURS = ("#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377", "#BBBBBB")
ORDER_COLOURS = ("#4477AA", "#228833", "#EE6677")
# Series that are no policy (traces, order statistics): Tol's colour-blind-safe bright palette.
def _write_csv(df: pd.DataFrame, path: Path) -> list[Path]:
    return [write_table(df, path)]


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


def comm_sweep_answer(sweep: pd.DataFrame) -> str:
    """Per trace and topology: the largest communication ratio at which the best causal cutoff
    policy is still ahead of sync (its interval, paired by iteration with sync's replay on the
    same network, above 1), and its gain there."""
    parts = []
    causal = sweep[~sweep["policy"].isin(["oracle", "oracle-myopic", "sync"])]
    for (trace, topology), sub in causal.groupby(["trace", "topology"], sort=True):
        best = sub.loc[sub.groupby("ratio")["relative_to_sync"].idxmax()]
        words = [verdict(r.sync_low, r.sync_high, "higher", pairs="iterations")
                 for r in best.itertuples()]
        pays = best[[w == "ahead" for w in words]]
        if pays.empty:
            parts.append(f"{trace}, {topology}: no causal policy is ahead of sync at any ratio")
        else:
            top = pays.iloc[-1]
            parts.append(f"{trace}, {topology}: {top.policy} still ahead of sync at rho = "
                         f"{top.ratio:g} ({top.relative_to_sync:.2f}x, {CONFIDENCE:.0%} interval "
                         f"{top.sync_low:.2f} to {top.sync_high:.2f})")
    top = sweep[sweep["policy"].isin(BDSGDS) & (sweep["ratio"] == sweep["ratio"].max())]
    bdsgds = "; ".join(
        f"{r.trace}, {r.topology}: {r.policy} against sync: "
        f"{verdict(r.sync_low, r.sync_high, 'higher', pairs='iterations')} "
        f"({r.relative_to_sync:.2f}x, {CONFIDENCE:.0%} interval {r.sync_low:.2f} to "
        f"{r.sync_high:.2f})" for r in top.sort_values(["trace", "topology"]).itertuples())
    # why a cut gains less as communication grows (R1): what the optimum itself can gain
    oracle = sweep[sweep["policy"] == "oracle"].sort_values("ratio")
    why = "; ".join(
        f"{trace}, {topology}: {rows['relative_to_sync'].iloc[0]:.2f}x at rho = "
        f"{rows['ratio'].iloc[0]:g} to {rows['relative_to_sync'].iloc[-1]:.2f}x at rho = "
        f"{rows['ratio'].iloc[-1]:g}" for (trace, topology), rows in oracle.groupby(
            ["trace", "topology"], sort=True))
    answer = ("The best causal policy at the largest rho where one is ahead of sync (paired by "
              "iteration): " + "; ".join(parts) + ".")
    if bdsgds:
        answer += f" Each BDSGD at rho = {top['ratio'].iloc[0]:g}: {bdsgds}."
    if why:
        answer += (" Why a policy gains less as communication grows: what a cut saves is compute "
                   "time, while the transfers of the gradients it keeps are not shortened, so the "
                   f"hindsight optimum's own gain over sync falls ({why}), and a policy's with it.")
    return answer


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
                     f"(held out; n = {n} workers)\nby models/{trace}/model.pt, the run-time model "
                     "bdsgd and bdsgd-model read (not bdsgd-paper's)",
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


def render_all(results_dir: Path, out_dir: Path) -> list[Path]:
    """Draw every figure and write both summary tables; returns the files written. Every input
    is read and checked first: a bad one is a UserError, and then nothing is written. Every
    figure carries the experiment's figure_note (``inputs.load_note``), if it has one."""
    with figure_note(load_note(results_dir)):
        return _render_all(results_dir, out_dir)


def load_all(results_dir: Path) -> tuple:
    """Every input of the figures, read and checked (a bad one is a UserError): (summary,
    metrics, throughput table, decisions, comm sweep, period sweep, decision times,
    time unit by trace, traces, predictions, replay ablations, convergence ablations, jobs,
    ladders)."""
    if not results_dir.is_dir():
        raise UserError(str(results_dir), "RESULTS_DIR", "not a directory")
    summary, metrics = load_runs(results_dir)
    table, decisions = load_throughput(results_dir)
    units = {trace: _time_unit(results_dir, trace) for trace in table["trace"].unique()}
    return (summary, metrics, table, decisions, load_comm_sweep(results_dir),
            load_period_sweep(results_dir), load_overhead(results_dir),
            units, load_traces(results_dir), load_predictions(results_dir),
            replay_ablations.ablation_table(load_replay_ablations(results_dir)),
            ablation_table(summary), load_distributed(results_dir), load_ladders(results_dir))


def _render_all(results_dir: Path, out_dir: Path) -> list[Path]:
    (summary, metrics, table, decisions, sweep, periods, overhead, units, traces,
     predictions, replayed, ablated, jobs, ladders) = load_all(results_dir)
    steps = ladder_table(ladders)
    sns.set_theme(style="whitegrid", context="notebook")
    path = {name: out_dir / file for name, (file, _, _) in FIGURES.items()}
    verdicts = verdict_table(summary, decisions)
    written = [
        *_write_csv(verdicts, path["verdicts"]),
        *_write_csv(summary, path["summary"]),
        *_write_csv(table, path["throughput_summary"]),
        *time_to_accuracy(metrics, summary, path["time_to_accuracy"]),
        *loss_curves(metrics, path["loss_curves"]),
        *training_cutoff(metrics, summary, path["training_cutoff"]),
        *cutoff_over_time(decisions, path["cutoff_over_time"]),
        *replay.throughput_bars(table, decisions, path["throughput"]),
        *over_time.throughput_over_time(decisions, units, path["throughput_over_time"]),
        *replay.worker_time(table, path["worker_time"]),
        *_write_csv(periods, path["period_sweep_summary"]),
        *replay.period_sweep(periods, path["period_sweep"]),
        *replay.decision_overhead(overhead, path["decision_overhead"]),
        *_write_csv(sweep, path["comm_sweep_summary"]),
        *comm_sweep(sweep, path["comm_sweep"]),
        *runtime_distributions(results_dir, path["runtime_distributions"], traces),
        *model_predictions(results_dir, path["model_predictions"], predictions),
        *_write_csv(replayed, path["replay_ablations"]),
        *replay_ablations.draw(replayed, "censoring", path["censoring"], units.get, policy_style),
        *replay_ablations.draw(replayed, "data", path["data_value"], units.get, policy_style),
        *_write_csv(ablated, path["ablations_summary"]),
        *ablations(ablated, path["ablations"], policy_colour),
        *_write_csv(steps, path["ladder_summary"]),
        *ladder(steps, path["ladder"]),
        *distributed_replay(jobs, path["distributed_replay"], policy_style),
    ]
    # the measured answer to each reviewer question, beside the figure that answers it
    paper = table[table["policy"] == "bdsgd-paper"].drop_duplicates("trace").set_index("trace")
    answers = {
        "time_to_accuracy": time_to_accuracy_answer(metrics, summary, verdicts),
        "training_cutoff": training_cutoff_answer(metrics),
        "cutoff_over_time": cutoff_over_time_answer(decisions),
        "model_predictions": model_predictions_answer(predictions),
        "comm_sweep": comm_sweep_answer(sweep),
        "throughput": replay.throughput_answer(table, decisions, verdicts),
        "throughput_over_time": over_time.throughput_over_time_answer(decisions),
        "worker_time": replay.worker_time_answer(table),
        "period_sweep": replay.period_sweep_answer(periods),
        "decision_overhead": replay.decision_overhead_answer(overhead),
        "censoring": replay_ablations.censoring_answer(replayed, paper["relative_to_oracle"]),
        "data_value": replay_ablations.data_value_answer(replayed),
        "ablations": ablations_answer(ablated, verdicts),
        "distributed_replay": distributed_replay_answer({job.name: replay_job(job) for job in jobs}),
        **{key: versus_answer(decisions, pairs) for key, pairs in VERSUS.items()},
        "ladder": ladder_answer(steps),
        "emission": emission_answer(ladders),
        "drift": drift_answer(ladders),
    }
    written += [write_with(path["answers"], lambda tmp: tmp.write_text(answers_rst(answers))),
                *_write_csv(reviewers_table(answers), path["reviewers"])]
    for path in written:
        logger.info(f"wrote {path}")
    return written
