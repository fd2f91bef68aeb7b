"""The replay ablations (throughput.ablations): what censoring does to a learning policy's
forecasts and decisions, and what the data that explore- and late: finish buy is worth.

Each arm is one replay of the trace's test part (``bdsgd throughput``'s table and decisions).
The forecast is the policy's own, when it chose: f_t = E[x_(c_t)], scored against the realised
x_t,(c_t) as log(f_t / x_t,(c_t)) (bias: its mean, error: the mean of its absolute value). The
data a policy buys can only pay after it is bought: the later half of the replay is scored
apart (throughput, forecast error), against the first arm of the same trace. Each arm's
throughput against the first arm's (censoring: the whole replay; data: its later half) is paired
by iteration (``verdicts.throughput_verdicts``' interval and verdict).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bdsgd.figures.verdicts import CONFIDENCE, verdict
from bdsgd.layout import explored
from bdsgd.stats import block_ratio_interval

COLUMNS = ["trace", "ablation", "arm", "policy", "relative_to_oracle", "mean_cutoff",
           "forecast_bias", "forecast_error", "later_gradients_per_s", "later_forecast_error",
           "ratio", "low", "high", "verdict"]


def _scores(decisions: pd.DataFrame) -> dict:
    """Forecast bias and error over the whole replay, and throughput and forecast error over
    its later half, of one policy's decisions."""
    d = decisions.sort_values("iteration")
    log_ratio = np.log(d["forecast_s"] / d["realised_s"]).to_numpy()
    later = slice(len(d) // 2, None)
    late_d = d.iloc[later]
    return {"forecast_bias": float(np.nanmean(log_ratio)) if np.isfinite(log_ratio).any() else np.nan,
            "forecast_error": float(np.nanmean(np.abs(log_ratio)))
            if np.isfinite(log_ratio).any() else np.nan,
            "later_gradients_per_s": float(late_d["cutoff"].sum() / late_d["duration_s"].sum()),
            "later_forecast_error": float(np.nanmean(np.abs(log_ratio[later])))
            if np.isfinite(log_ratio[later]).any() else np.nan}


def ablation_table(arms: list[tuple[str, str, str, dict, pd.DataFrame]]) -> pd.DataFrame:
    """One row per (trace, ablation, arm, policy) from ``inputs.load_replay_ablations``' arms:
    (trace, ablation, arm, the replay's policies table, its decisions)."""
    rows, first = [], {}
    for trace, ablation, arm, table, decisions in arms:
        for policy, entry in table.items():
            own = decisions[decisions["policy"] == policy].sort_values("iteration")
            if ablation == "data":  # what the data buys pays only after it is bought
                own = own.iloc[len(own) // 2:]
            ref = first.setdefault((trace, ablation), own)
            ratio = (own["cutoff"].sum() / own["duration_s"].sum()) / (
                ref["cutoff"].sum() / ref["duration_s"].sum())
            low, high = block_ratio_interval(own["cutoff"], own["duration_s"], ref["cutoff"],
                                             ref["duration_s"])
            rows.append({"trace": trace, "ablation": ablation, "arm": arm, "policy": policy,
                         "relative_to_oracle": entry["relative_to_oracle"],
                         "mean_cutoff": entry["mean_cutoff"],
                         **_scores(decisions[decisions["policy"] == policy]), "ratio": ratio,
                         "low": low, "high": high,
                         "verdict": verdict(low, high, "higher", pairs="iterations")})
    return pd.DataFrame(rows, columns=COLUMNS)


def _versus(row, first) -> str:
    """An arm's throughput against the first arm's, as ``verdicts.phrase`` states it."""
    return (f"{row.verdict} against {first} (ratio {row.ratio:.3g}, {CONFIDENCE:.0%} interval "
            f"{row.low:.3g} to {row.high:.3g})")


def _label(row) -> str:
    return f"{row.arm}\n{row.policy}" if row.ablation == "data" else row.arm


def _bars(ax, rows: pd.DataFrame, column: str, fmt: str, policy_style) -> None:
    """One bar per arm, its value written on it, in the arm's policy's colour."""
    labels = [_label(r) for r in rows.itertuples()]
    for i, r in enumerate(rows.itertuples()):
        value = getattr(r, column)
        style = policy_style(r.policy)
        ax.bar(i, value, color=style["color"], alpha=0.5 if r.arm in ("impute", "finish") else 0.9,
               hatch="//" if explored(r.policy) is not None else None, edgecolor="k", lw=0.6)
        ax.annotate(fmt.format(value), (i, value), xytext=(0, 2), textcoords="offset points",
                    ha="center", va="bottom" if value >= 0 else "top", fontsize=8)
    ax.set_xticks(range(len(rows)), labels, fontsize=8, rotation=20, ha="right")
    ax.axhline(0, color="k", lw=0.8)
    ax.margins(y=0.2)


PANELS = {
    "censoring": [("forecast_bias", "forecast bias log(E[x_(c)] / x_(c))", "{:+.2f}"),
                  ("mean_cutoff", "mean cutoff c", "{:.2f}"),
                  ("relative_to_oracle", "throughput / hindsight optimum", "{:.3f}")],
    "data": [("later_forecast_error", "later half: forecast error |log ratio|", "{:.3f}"),
             ("mean_cutoff", "mean cutoff c", "{:.2f}"),
             ("later_gradients_per_s", "later half: gradients per second", "{:.3g}")],
}


def draw(table: pd.DataFrame, ablation: str, path, unit_of, policy_style) -> list:
    """A row of panels per trace (PANELS[ablation]); a note where no trace runs the
    ablation (throughput.ablations.traces empty). ``unit_of(trace)``: the run-time unit;
    ``policy_style(policy)``: a policy's colour (``render.policy_style``)."""
    from bdsgd.plotting import save_figure

    rows = table[table["ablation"] == ablation]
    traces = sorted(rows["trace"].unique())
    panels = PANELS[ablation]
    fig, axes = plt.subplots(max(len(traces), 1), len(panels),
                             figsize=(4.2 * len(panels), 3.4 * max(len(traces), 1)), squeeze=False)
    if not traces:
        for ax in axes[0]:
            ax.set_axis_off()
        axes[0, 1].text(0.5, 0.5, "no trace runs this ablation\n(throughput.ablations.traces)",
                        ha="center", va="center", transform=axes[0, 1].transAxes)
    for row_axes, trace in zip(axes, traces, strict=False):
        sub = rows[rows["trace"] == trace]
        for ax, (column, label, fmt) in zip(row_axes, panels, strict=True):
            _bars(ax, sub, column, fmt, policy_style)
            unit = f" ({unit_of(trace)}-based)" if column == "later_gradients_per_s" else ""
            ax.set(title=f"{trace}: {label}{unit}", ylabel=label.split(": ")[-1])
    return save_figure(fig, path)


def _per_trace(table: pd.DataFrame, ablation: str, sentence) -> str:
    """``sentence(trace, rows)`` for each trace that ran ``ablation``, joined; or why none did."""
    rows = table[table["ablation"] == ablation]
    if rows.empty:
        return (f"Not measured: no trace runs the {ablation} ablation "
                "(throughput.ablations.traces).")
    return " ".join(sentence(trace, sub) for trace, sub in rows.groupby("trace"))


def _censoring_sentence(trace: str, rows: pd.DataFrame, paper: pd.Series) -> str:
    arm = rows.set_index("arm")
    lik, imp = arm.loc["likelihood"], arm.loc["impute"]
    said = (f"On {trace}, {lik.policy} with censored run-times imputed forecasts its cutoff "
            f"time {np.expm1(imp.forecast_bias):+.0%} off (likelihood: "
            f"{np.expm1(lik.forecast_bias):+.0%}), waits for {imp.mean_cutoff:.2f} workers on "
            f"average against {lik.mean_cutoff:.2f}, and reaches {imp.relative_to_oracle:.3f} "
            f"of the hindsight optimum against {lik.relative_to_oracle:.3f}: imputing is "
            f"{_versus(imp, 'the likelihood')}.")
    if trace in paper.index:
        said += (f" The paper's BDSGD, bdsgd-paper, which imputes with a Gaussian emission, "
                 f"reaches {paper[trace]:.3f} of it on the same test part.")
    return said


def _data_sentence(trace: str, rows: pd.DataFrame) -> str:
    base = rows.iloc[0]
    others = [f"{r.policy} with late workers {r.arm}ing: "
              f"{r.later_gradients_per_s / base.later_gradients_per_s:.3f}x the throughput, "
              f"{_versus(r, base.policy)}, forecast error {r.later_forecast_error:.3f}"
              for r in rows.iloc[1:].itertuples()]
    return (f"On {trace}, in the replay's later half, against {base.policy} with late workers "
            f"{base.arm}ing (forecast error {base.later_forecast_error:.3f}): "
            + "; ".join(others) + ".")


def censoring_answer(table: pd.DataFrame, paper: pd.Series) -> str:
    """The measured effect of imputing censored run-times against scoring their likelihood;
    ``paper``: bdsgd-paper's throughput over the optimum's by trace, where it was replayed."""
    return _per_trace(table, "censoring",
                      lambda trace, rows: _censoring_sentence(trace, rows, paper))


def data_value_answer(table: pd.DataFrame) -> str:
    """The measured worth of the data explore- and late: finish buy, in the later half."""
    return _per_trace(table, "data", _data_sentence)
