"""The statistics the results report: over seeds, a median time to target and a
distribution-free interval for it, and MLPerf's trimmed mean; over one replay's iterations, a
batch-means interval for a throughput ratio and a block bootstrap for a statistic that is not a
sum over iterations. Plain numpy, scipy and pandas (no plotting), so that the replay's sweeps,
the figures and the benchmarks share them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

BLOCKS = 20  # contiguous blocks of a replay's iterations in a batch-means interval


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


def block_ratio_interval(c, d, c_ref, d_ref, blocks: int = BLOCKS,
                         level: float = 0.95) -> tuple[float, float]:
    """Batch-means interval for the throughput ratio q = R / R_ref, R = sum_t c_t / sum_t d_t,
    of two replays of the same iterations. The T iterations are cut into ``blocks`` contiguous
    blocks (B of them, fewer if T < blocks); block b's ratio is q_b = (sum_b c / sum_b d) /
    (sum_b c_ref / sum_b d_ref), and the interval q -+ t_{B-1, (1 + level)/2} sd(q_b) / sqrt(B)
    is centred on the whole replay's q and treats the blocks as independent. (NaN, NaN) below
    two blocks."""
    parts = [np.array_split(np.asarray(v, dtype=float), min(blocks, len(c)))
             for v in (c, d, c_ref, d_ref)]
    q = np.array([(a.sum() / b.sum()) / (x.sum() / y.sum())
                  for a, b, x, y in zip(*parts, strict=True)])
    if len(q) < 2:
        return np.nan, np.nan
    whole = (np.sum(c) / np.sum(d)) / (np.sum(c_ref) / np.sum(d_ref))
    half = stats.t.ppf((1 + level) / 2, len(q) - 1) * q.std(ddof=1) / math.sqrt(len(q))
    return float(whole - half), float(whole + half)


def block_bootstrap_interval(statistic, *series, blocks: int = BLOCKS, level: float = 0.95,
                             draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of ``statistic(*series)`` over a block bootstrap of aligned series
    (two replays of the same T iterations): the iterations are cut into ``blocks`` contiguous
    blocks, and each of ``draws`` resamples draws that many blocks with replacement, the same
    blocks for every series, so the pairing and the dependence within a block are kept. For a
    statistic that is not a sum over iterations (a coefficient of variation), where batch means
    do not apply. (NaN, NaN) below two blocks; seeded, so a result is reproducible."""
    parts = [np.array_split(np.asarray(v, dtype=float), min(blocks, len(series[0])))
             for v in series]
    if len(parts[0]) < 2:
        return np.nan, np.nan
    picks = np.random.default_rng(seed).integers(len(parts[0]), size=(draws, len(parts[0])))
    values = [statistic(*(np.concatenate([p[b] for b in pick]) for p in parts))
              for pick in picks]
    tail = 100 * (1 - level) / 2
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def mlperf_mean(values) -> float:
    """MLPerf's time-to-train summary of N runs: the fastest and the slowest dropped, the rest
    averaged (inf if one of them never reached the target; NaN below 3 runs)."""
    x = np.sort(np.asarray(values, dtype=float))
    return float(x[1:-1].mean()) if len(x) >= 3 else np.nan


def time_to_target_stats(summary: pd.DataFrame) -> pd.DataFrame:
    """Per task, trace and policy: seeds run, seeds that reached the target, and the median time
    to target over every seed (one that never reached it counts as infinitely slow) with its
    interval and the interval's coverage (``median_interval``), and MLPerf's mean
    (``mlperf_mean``)."""
    rows = []
    for (task, trace, policy), runs in summary.groupby(["task", "trace", "policy"]):
        times = runs["time_to_target_s"].astype(float).fillna(np.inf).to_numpy()
        median, low, high, coverage = median_interval(times)
        rows.append({"task": task, "trace": trace, "policy": policy, "seeds": len(runs),
                     "reached": int(np.isfinite(times).sum()), "median": median, "low": low,
                     "high": high, "coverage": coverage, "mlperf": mlperf_mean(times)})
    return pd.DataFrame(rows, columns=["task", "trace", "policy", "seeds", "reached", "median",
                                       "low", "high", "coverage", "mlperf"])
