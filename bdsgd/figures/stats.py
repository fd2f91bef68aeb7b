"""The statistics the figures and tables report over seeds: a median time to target and a
distribution-free interval for it. Plain numpy and pandas (no plotting), so benchmarks use it too.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def median_interval(values, level: float = 0.95) -> tuple[float, float, float, float]:
    """(median, low, high, coverage) of a few values, one per seed; inf for a seed that never
    reached the target (it sorts last). The interval is distribution-free: the narrowest pair of
    order statistics [x_(j), x_(m+1-j)] of the m values whose coverage of the true median,
    P(j <= Binomial(m, 1/2) <= m - j), is at least ``level``, else the min to the max (coverage
    1 - 2^(1-m): 0.5 at two seeds, 0.9375 at five). NaNs when there are no values."""
    x = np.sort(np.asarray(values, dtype=float))
    m = len(x)
    if m == 0:
        return np.nan, np.nan, np.nan, np.nan
    j, coverage = 1, 1 - 2 * 0.5 ** m
    while j + 1 <= m - j:
        wider = 1 - 2 * sum(math.comb(m, i) for i in range(j + 1)) * 0.5 ** m
        if wider < level:
            break
        j, coverage = j + 1, wider
    return float(np.median(x)), float(x[j - 1]), float(x[m - j]), coverage


def time_to_target_stats(summary: pd.DataFrame) -> pd.DataFrame:
    """Per task, trace and policy: seeds run, seeds that reached the target, and the median time
    to target over every seed (one that never reached it counts as infinitely slow) with its
    interval and the interval's coverage (``median_interval``)."""
    rows = []
    for (task, trace, policy), runs in summary.groupby(["task", "trace", "policy"]):
        times = runs["time_to_target_s"].astype(float).fillna(np.inf).to_numpy()
        median, low, high, coverage = median_interval(times)
        rows.append({"task": task, "trace": trace, "policy": policy, "seeds": len(runs),
                     "reached": int(np.isfinite(times).sum()), "median": median, "low": low,
                     "high": high, "coverage": coverage})
    return pd.DataFrame(rows, columns=["task", "trace", "policy", "seeds", "reached", "median",
                                       "low", "high", "coverage"])
