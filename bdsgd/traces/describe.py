"""Summary statistics of a trace: how many workers and iterations, how slow, how uneven.

Per iteration t the coefficient of variation across workers is CoV_t = sd(x_t) / mean(x_t)
(population sd, ddof = 0), the spread a cutoff policy can exploit. ``frac_best_cutoff_below_n``
is the fraction of iterations in which the exact hindsight optimum (``bdsgd.cluster.cutoff``) waits for
fewer than all n workers: how often dropping stragglers would have paid off at all.

Censored run-times are lower bounds; they enter the statistics as recorded and
``censored_fraction`` says how many there are.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bdsgd.cluster.cutoff import hindsight_optimum, throughput
from bdsgd.traces.schema import Trace


def iteration_cov(runtimes: np.ndarray) -> np.ndarray:
    """CoV_t across workers for each iteration of a (T, n) array."""
    return runtimes.std(axis=1) / runtimes.mean(axis=1)


def describe(trace: Trace) -> dict[str, Any]:
    """Plain (JSON-able) summary statistics of a trace."""
    x = trace.runtimes
    T, n = x.shape
    cov = iteration_cov(x)
    sorted_x = np.sort(x, axis=1)
    best, best_rate = hindsight_optimum(sorted_x)
    sync_rate = throughput(sorted_x, np.full(T, n))
    p50, p99 = np.percentile(x, [50, 99])
    worker_means = x.mean(axis=0)
    return {
        "source": str(trace.meta.get("source", "unknown")),
        "time_unit": str(trace.meta.get("time_unit", "s")),
        "workers": int(n),
        "iterations": int(T),
        "mean_s": float(x.mean()),
        "std_s": float(x.std()),
        "min_s": float(x.min()),
        "max_s": float(x.max()),
        "p50_s": float(p50),
        "p99_s": float(p99),
        "p99_over_p50": float(p99 / p50),
        "cov_mean": float(cov.mean()),
        "cov_p50": float(np.percentile(cov, 50)),
        "cov_p90": float(np.percentile(cov, 90)),
        "worker_mean_cov": float(worker_means.std() / worker_means.mean()),
        "frac_best_cutoff_below_n": float((best < n).mean()),
        "hindsight_best_mean_cutoff": float(best.mean()),
        "hindsight_speedup_over_sync": float(best_rate / sync_rate),
        "censored_fraction": float(trace.censored.mean()),
    }


LABELS = {
    "source": "source",
    "time_unit": "time unit",
    "workers": "workers n",
    "iterations": "iterations T",
    "mean_s": "mean run-time",
    "std_s": "sd of run-times",
    "min_s": "min run-time",
    "max_s": "max run-time",
    "p50_s": "median run-time (p50)",
    "p99_s": "p99 run-time",
    "p99_over_p50": "p99 / p50",
    "cov_mean": "CoV per iteration: mean",
    "cov_p50": "CoV per iteration: median",
    "cov_p90": "CoV per iteration: p90",
    "worker_mean_cov": "CoV of the workers' mean run-times",
    "frac_best_cutoff_below_n": "iterations whose hindsight-best cutoff < n",
    "hindsight_best_mean_cutoff": "hindsight-best cutoff: mean",
    "hindsight_speedup_over_sync": "hindsight-best throughput / sync",
    "censored_fraction": "censored run-times (fraction)",
}


def format_description(stats: dict[str, Any]) -> str:
    """The statistics as an aligned two-column table for people."""
    width = max(len(label) for label in LABELS.values())
    lines = []
    for key, label in LABELS.items():
        value = stats[key]
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        lines.append(f"{label:<{width}}  {text}")
    return "\n".join(lines)
