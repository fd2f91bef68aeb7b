"""The throughput along a replay, and why it varies (R1): a window of iterations' throughput per
policy, its coefficient of variation, each BDSGD's steadiness against static's and sync's paired
by iteration, and how often each BDSGD changes its cutoff.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bdsgd.figures.common import policy_style
from bdsgd.figures.replay import COLUMNS, WINDOW, one_replay, per_unit
from bdsgd.figures.verdicts import BDSGDS, CONFIDENCE, verdict
from bdsgd.plotting import save_figure
from bdsgd.stats import block_bootstrap_interval


def _rates(replay: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per-iteration throughput c_t / d_t, and the throughput of the last WINDOW iterations
    sum c / sum d (of fewer at the start)."""
    c, d = replay["cutoff"].astype(float), replay["duration_s"]
    window = c.rolling(WINDOW, min_periods=1).sum() / d.rolling(WINDOW, min_periods=1).sum()
    return (c / d).to_numpy(), window.to_numpy()


def variability(decisions: pd.DataFrame) -> pd.DataFrame:
    """Per trace and policy (default rule): the coefficient of variation (std / mean) of the
    per-iteration throughput c_t / d_t and of c_t."""
    rows = []
    plain = decisions[~decisions["policy"].str.contains("/")]
    for (trace, policy), replay in plain.groupby(["trace", "policy"]):
        rate = replay["cutoff"] / replay["duration_s"]
        rows.append({"trace": trace, "policy": policy, "rate_cv": rate.std(ddof=0) / rate.mean(),
                     "cutoff_cv": replay["cutoff"].std(ddof=0) / replay["cutoff"].mean()})
    return pd.DataFrame(rows, columns=["trace", "policy", "rate_cv", "cutoff_cv"])


def throughput_over_time(decisions: pd.DataFrame, units: dict[str, str], path: Path) -> list[Path]:
    """Small multiples, a block of rows per trace and a panel per policy (default rule): the
    per-iteration throughput c_t / d_t (thin) and that of the last WINDOW iterations (thick),
    with the hindsight oracle's window throughput thin and black; one y scale within a trace."""
    plain = decisions[~decisions["policy"].str.contains("/")]
    cv = variability(decisions).set_index(["trace", "policy"])
    blocks = {trace: sorted(sub["policy"].unique()) for trace, sub in plain.groupby("trace")}
    rows = sum(-(-len(p) // COLUMNS) for p in blocks.values())
    fig, axes = plt.subplots(rows, COLUMNS, figsize=(4.2 * COLUMNS, 2.6 * rows), squeeze=False)
    first = 0
    for trace, policies in blocks.items():
        block = axes[first:first + -(-len(policies) // COLUMNS)].ravel()
        oracle = one_replay(plain, trace, "oracle")
        top = 0.0
        for ax, policy in zip(block, policies, strict=False):
            replay = one_replay(plain, trace, policy)
            raw, window = _rates(replay)
            step, style = np.arange(len(raw)), policy_style(policy)
            ax.plot(step, raw, color=style["color"], alpha=0.25, lw=0.6)
            ax.plot(step, window, lw=1.6, **style, label=f"{policy}, last {WINDOW}")
            if oracle is not None and policy != "oracle":
                ax.plot(step, _rates(oracle)[1], color="k", lw=0.7, alpha=0.6,
                        label=f"oracle, last {WINDOW}")
            top = max(top, float(np.percentile(raw, 99)), float(window.max()))
            s = cv.loc[(trace, policy)]
            ax.set_title(f"{trace}: {policy}\nCV of c/d {s['rate_cv']:.2f}, of c "
                         f"{s['cutoff_cv']:.2f}", fontsize=9)
            ax.set_xlabel("iteration of the replayed (test) part", fontsize=8)
        for ax in block[len(policies):]:
            ax.set_axis_off()
        for ax in block[:len(policies)]:
            ax.set_ylim(0, 1.05 * top)  # one scale per trace, from 0; the 1% highest clipped
        for ax in axes[first:first + len(block) // COLUMNS, 0]:
            ax.set_ylabel(f"{per_unit(units.get(trace, 's'))}\n(thick: last {WINDOW} iterations)",
                          fontsize=8)
        block[0].legend(fontsize=7)
        first += len(block) // COLUMNS
    return save_figure(fig, path)


def throughput_over_time_answer(decisions: pd.DataFrame) -> str:
    """Per trace: the coefficients of variation of each BDSGD, static and sync (those replayed),
    and each BDSGD's against static's and sync's, paired by iteration (``_steadier``)."""
    parts = []
    plain = decisions[~decisions["policy"].str.contains("/")]
    for trace, sub in variability(decisions).groupby("trace"):
        sub = sub.set_index("policy")
        named = [p for p in (*BDSGDS, "static", "sync") if p in sub.index]
        compared = [_steadier(plain, trace, p, ref) for p in BDSGDS for ref in ("static", "sync")
                    if p in sub.index and ref in sub.index]
        parts.append(f"On {trace}, the per-iteration throughput's coefficient of variation is "
                     + ", ".join(f"{sub.loc[p, 'rate_cv']:.2f} under {p} (of its cutoff "
                                 f"{sub.loc[p, 'cutoff_cv']:.2f})" for p in named)
                     + (f"; paired by iteration (lower is steadier), {'; '.join(compared)}"
                        if compared else "") + ". "
                     + _why_variable(decisions, trace))
    return " ".join(parts).strip()


def _cv_ratio(rate: np.ndarray, reference: np.ndarray) -> float:
    """The coefficient of variation of ``rate`` over ``reference``'s (NaN if that one's is 0)."""
    cv, cv_ref = (float(r.std() / r.mean()) for r in (rate, reference))
    return cv / cv_ref if cv_ref > 0 else np.nan


def _steadier(plain: pd.DataFrame, trace: str, policy: str, reference: str) -> str:
    """``policy``'s coefficient of variation of c_t / d_t over ``reference``'s on the same
    iterations, with its block-bootstrap interval and verdict ("lower" is better)."""
    a, b = (r["cutoff"].to_numpy() / r["duration_s"].to_numpy()
            for r in (one_replay(plain, trace, p) for p in (policy, reference)))
    low, high = block_bootstrap_interval(_cv_ratio, a, b)
    return (f"{policy}'s against {reference}'s: "
            f"{verdict(low, high, 'lower', pairs='iterations')} (ratio {_cv_ratio(a, b):.3g}, "
            f"{CONFIDENCE:.0%} interval {low:.3g} to {high:.3g}, {len(a)} iterations)")


def _why_variable(decisions: pd.DataFrame, trace: str) -> str:
    """Why a BDSGD's throughput varies (R1): how often its cutoff changes, and how much longer
    its iterations at its largest cutoff last than the rest (a wait for the slowest worker)."""
    said = []
    for policy in BDSGDS:
        replay = one_replay(decisions[~decisions["policy"].str.contains("/")], trace, policy)
        if replay is None:
            continue
        c, d = replay["cutoff"].to_numpy(), replay["duration_s"].to_numpy()
        flips = float(np.mean(np.diff(c) != 0)) if len(c) > 1 else 0.0
        top = c == c.max()
        longer = (f", and its iterations at c = {c.max()} last {d[top].mean() / d[~top].mean():.1f}x "
                  "as long as the rest" if top.any() and (~top).any() else "")
        said.append(f"{policy} changes its cutoff on {flips:.0%} of iterations{longer}")
    if not said:
        return ""
    return ("Why: " + "; ".join(said) + ": each change between waiting for the slowest worker "
            "and cutting it is a jump in the iteration's length, so the throughput varies as "
            "often as the cutoff does.")
