"""Every figure and summary table, drawn from stored results only (the list: ``bdsgd.figures``).

``render_all(results_dir, out_dir)`` reads what the DAG wrote under ``results/<experiment>/``::

    traces/<trace>/{trace,test}.parquet, describe.json
    models/<trace>/evaluation.json, predictions.parquet
    throughput/<trace>/throughput.json, decisions.parquet
    runs/<task>/<policy>/seed<k>/{metrics.parquet, result.json}

and writes PNGs plus ``summary.csv`` (one row per convergence run) and ``throughput_summary.csv``
(one row per trace x policy x rule). The tables hold no wall-clock numbers, so two runs of the
same commit and config give byte-identical tables.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import seaborn as sns  # noqa: E402

from bdsgd.errors import UserError  # noqa: E402
from bdsgd.figures import FIGURES  # noqa: E402
from bdsgd.io import write_with  # noqa: E402
from bdsgd.traces.io import META_KEY  # noqa: E402

SUMMARY_COLUMNS = ["task", "policy", "seed", "time_to_target_s", "final_accuracy",
                   "gradients_per_s", "mean_cutoff", "iterations", "virtual_time_s",
                   "target_accuracy"]
THROUGHPUT_COLUMNS = ["trace", "policy", "rule", "gradients_per_s", "relative_to_oracle",
                      "mean_cutoff", "cutoff_std"]
FLOAT_FORMAT = "%.10g"

def _need(paths: list[Path], results_dir: Path, what: str) -> list[Path]:
    if not paths:
        raise UserError(str(results_dir), what, f"no {what} results found under {results_dir}")
    return sorted(paths)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    write_with(path, lambda tmp: fig.savefig(tmp, dpi=130, format=path.suffix.lstrip(".")))
    plt.close(fig)
    return path


def _write_csv(df: pd.DataFrame, path: Path) -> Path:
    return write_with(path, lambda tmp: df.to_csv(tmp, index=False, float_format=FLOAT_FORMAT,
                                                  lineterminator="\n"))


# ----------------------------------------------------------------------------- loading
def load_runs(results_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary: one row per run, metrics: every evaluated iteration of every run)."""
    rows, curves = [], []
    for result in _need(list(results_dir.glob("runs/*/*/seed*/result.json")), results_dir, "runs"):
        summary = json.loads(result.read_text())["summary"]
        rows.append({k: summary.get(k) for k in SUMMARY_COLUMNS})
        metrics = pd.read_parquet(result.with_name("metrics.parquet"))
        metrics = metrics[metrics["test_accuracy"].notna()]
        curves.append(metrics.assign(task=summary["task"], policy=summary["policy"],
                                     seed=summary["seed"]))
    summary = pd.DataFrame(rows, columns=SUMMARY_COLUMNS).sort_values(["task", "policy", "seed"])
    return summary.reset_index(drop=True), pd.concat(curves, ignore_index=True)


def load_throughput(results_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per trace x policy x rule, per-iteration decisions of every trace)."""
    rows, decisions = [], []
    paths = _need(list(results_dir.glob("throughput/*/throughput.json")), results_dir, "throughput")
    for path in paths:
        trace = path.parent.name
        for name, entry in json.loads(path.read_text())["policies"].items():
            rows.append({"trace": trace, "policy": name.split("/")[0],
                         "rule": entry.get("rule") or "", **{
                             k: entry.get(k) for k in THROUGHPUT_COLUMNS[3:]}})
        dec = path.with_name("decisions.parquet")
        if dec.exists():
            decisions.append(pd.read_parquet(dec).assign(trace=trace))
    # With --rule both, a predictive policy appears under its default rule (plain name) and as
    # <policy>/<rule> for each rule: keep one row per (trace, policy, rule).
    table = pd.DataFrame(rows, columns=THROUGHPUT_COLUMNS).drop_duplicates(["trace", "policy", "rule"])
    table = table.sort_values(["trace", "policy", "rule"]).reset_index(drop=True)
    return table, pd.concat(decisions, ignore_index=True) if decisions else pd.DataFrame()


# ----------------------------------------------------------------------------- figures
def time_to_accuracy(curves: pd.DataFrame, summary: pd.DataFrame, path: Path) -> Path:
    """Accuracy against virtual time (mean over seeds, min-max band), and time to target."""
    tasks = sorted(curves["task"].unique())
    fig, axes = plt.subplots(len(tasks), 2, figsize=(11, 3.8 * len(tasks)), squeeze=False,
                             gridspec_kw={"width_ratios": [2.2, 1]})
    palette = dict(zip(sorted(curves["policy"].unique()), sns.color_palette("tab10"), strict=False))
    for row, task in zip(axes, tasks, strict=True):
        ax, bar_ax = row
        sub = curves[curves["task"] == task]
        for policy, pol in sub.groupby("policy"):
            seeds = [g.sort_values("virtual_time_s") for _, g in pol.groupby("seed")]
            end = min(g["virtual_time_s"].max() for g in seeds)
            grid = np.linspace(0, end, 200)
            acc = np.array([np.interp(grid, g["virtual_time_s"], g["test_accuracy"]) for g in seeds])
            ax.plot(grid, acc.mean(axis=0), label=policy, color=palette[policy])
            ax.fill_between(grid, acc.min(axis=0), acc.max(axis=0), alpha=0.2, color=palette[policy])
        target = summary.loc[summary["task"] == task, "target_accuracy"].iloc[0]
        ax.axhline(target, ls=":", color="k", lw=1, label=f"target {target:.2f}")
        ax.set(title=f"{task}: test accuracy vs virtual time", xlabel="virtual wall-clock time (s)",
               ylabel="test accuracy")
        ax.legend(fontsize=8)
        tts = summary[summary["task"] == task]
        stats = tts.groupby("policy")["time_to_target_s"].agg(["mean", "std"])
        reached = tts.groupby("policy")["time_to_target_s"].apply(lambda s: s.notna().sum())
        bar_ax.bar(stats.index, stats["mean"], yerr=stats["std"].fillna(0),
                   color=[palette[p] for p in stats.index], capsize=3)
        for i, policy in enumerate(stats.index):  # how many seeds reached the target
            bar_ax.text(i, 0, f"{int(reached[policy])} of {int((tts['policy'] == policy).sum())}",
                        ha="center", va="bottom", fontsize=7)
        bar_ax.set(title="time to target (mean ± sd)",
                   ylabel="virtual time (s)")
        bar_ax.tick_params(axis="x", rotation=30)
    return _save(fig, path)


def cutoff_over_time(decisions: pd.DataFrame, path: Path) -> Path:
    """c_t chosen by each policy (default rule) while replaying each trace: thin lines raw,
    thick lines a 20-iteration moving average."""
    decisions = decisions[~decisions["policy"].str.contains("/")]
    traces = sorted(decisions["trace"].unique())
    policies = sorted(decisions["policy"].unique())
    palette = dict(zip(policies, sns.color_palette("tab10" if len(policies) <= 10 else "husl",
                                                   len(policies)), strict=True))
    fig, axes = plt.subplots(len(traces), 1, figsize=(10, 3.4 * len(traces)), squeeze=False)
    for ax, trace in zip(axes[:, 0], traces, strict=True):
        sub = decisions[decisions["trace"] == trace]
        for policy, pol in sub.groupby("policy"):
            cutoff = pol.sort_values("iteration")["cutoff"].to_numpy()
            step = np.arange(len(cutoff))
            ax.plot(step, cutoff, color=palette[policy], alpha=0.2, lw=0.6)
            ax.plot(step, pd.Series(cutoff).rolling(20, min_periods=1).mean(),
                    color=palette[policy], lw=1.6, label=policy)
        ax.set(title=f"{trace}: cutoff over time (n = {int(sub['cutoff'].max())} at most)",
               xlabel="iteration of the replayed (test) part", ylabel="cutoff c (gradients accepted)")
        ax.legend(fontsize=7, ncol=4)
    return _save(fig, path)


def throughput_bars(table: pd.DataFrame, path: Path) -> Path:
    """Throughput relative to the exact hindsight oracle, per policy (and rule) and trace."""
    rows = table[~table["policy"].isin(["oracle", "async"])].copy()
    rows["label"] = np.where(rows["rule"] == "", rows["policy"], rows["policy"] + "\n" + rows["rule"])
    fig, ax = plt.subplots(figsize=(max(8, 0.75 * rows["label"].nunique() + 3), 4.2))
    sns.barplot(data=rows, x="label", y="relative_to_oracle", hue="trace", ax=ax)
    low = float(np.nanmin(rows["relative_to_oracle"]))
    ax.set(ylim=(max(0.0, low - 0.05), 1.01), xlabel="policy (decision rule)",
           ylabel="throughput / hindsight oracle",
           title="throughput of each policy (accepted gradients per second)")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.legend(title="trace", fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def runtime_distributions(results_dir: Path, path: Path) -> Path:
    """Empirical CDF of every trace's run-times over its median (log scale: the tail matters)."""
    paths = _need(list(results_dir.glob("traces/*/trace.parquet")), results_dir, "traces")
    fig, ax = plt.subplots(figsize=(7, 4))
    for trace_path in paths:
        x = pd.read_parquet(trace_path, columns=["runtime_s"])["runtime_s"].to_numpy()
        x = np.sort(x / np.median(x))
        ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=trace_path.parent.name)
    ax.set(xscale="log", xlabel="run-time / median run-time", ylabel="empirical CDF",
           title="worker run-time distributions")
    ax.legend(fontsize=8)
    return _save(fig, path)


def _time_unit(results_dir: Path, trace: str) -> str:
    """The run-time unit of a trace, from its test part's metadata ("s" when it has none)."""
    test = results_dir / "traces" / trace / "test.parquet"
    raw = (pq.read_schema(test).metadata or {}).get(META_KEY) if test.is_file() else None
    return json.loads(raw).get("time_unit", "s") if raw else "s"


def model_predictions(results_dir: Path, path: Path) -> Path:
    """Predicted E[x_(c)] with 90% interval against the realised order statistic, held out."""
    paths = _need(list(results_dir.glob("models/*/predictions.parquet")), results_dir,
                  "model predictions")
    fig, axes = plt.subplots(len(paths), 1, figsize=(10, 3.2 * len(paths)), squeeze=False)
    for ax, pred_path in zip(axes[:, 0], paths, strict=True):
        pred = pd.read_parquet(pred_path)
        orders = sorted(pred["order"].unique())
        shown = sorted({orders[len(orders) // 2], orders[-1]})
        for order, color in zip(shown, sns.color_palette("tab10"), strict=False):
            p = pred[pred["order"] == order].sort_values("iteration")
            ax.fill_between(p["iteration"], p["lo90"], p["hi90"], color=color, alpha=0.2)
            ax.plot(p["iteration"], p["predicted_mean"], color=color, lw=1.2,
                    label=f"predicted E[x_({order})]")
            ax.scatter(p["iteration"], p["realised"], color=color, s=4, label=f"realised x_({order})")
        ax.set(title=f"{pred_path.parent.name}: one-step-ahead predictions (held out)",
               xlabel="iteration (test part)",
               ylabel=f"run-time ({_time_unit(results_dir, pred_path.parent.name)})")
        ax.legend(fontsize=7, ncol=2)
    return _save(fig, path)


def render_all(results_dir: Path, out_dir: Path) -> list[Path]:
    """Draw every figure and write both summary tables; returns the files written."""
    if not results_dir.is_dir():
        raise UserError(str(results_dir), "RESULTS_DIR", "not a directory")
    sns.set_theme(style="whitegrid", context="notebook")
    summary, curves = load_runs(results_dir)
    table, decisions = load_throughput(results_dir)
    path = {name: out_dir / file for name, (file, _, _) in FIGURES.items()}
    written = [
        _write_csv(summary, path["summary"]),
        _write_csv(table, path["throughput_summary"]),
        time_to_accuracy(curves, summary, path["time_to_accuracy"]),
        cutoff_over_time(decisions, path["cutoff_over_time"]),
        throughput_bars(table, path["throughput"]),
        runtime_distributions(results_dir, path["runtime_distributions"]),
        model_predictions(results_dir, path["model_predictions"]),
    ]
    for path in written:
        print(f"wrote {path}")
    return written
