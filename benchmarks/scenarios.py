"""The simulator's scenarios for what real clusters show, side by side with the real statistics
they were calibrated against (bdsgd/traces/simulate.py says which and why).

Real references: the two raw Alibaba PAI jobs and the per-iteration CoV of 100 PAI jobs in
../shared/traces/alibaba-pai (tests/data holds the same files), and a held-out 32-worker
production job whose run-times are i.i.d. and heavy-tailed, known only by three statistics (its
lag-1 autocorrelation, hindsight-best mean cutoff and best fixed cutoff against the hindsight
optimum). Simulated statistics are medians over seeds; "real" ones are medians over the jobs a
rule selects (printed with their ids).

    .venv/bin/python benchmarks/scenarios.py [--seeds 10] [--results benchmarks/results.md]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

from bdsgd.cluster.cutoff import throughput
from bdsgd.config import SimulateConfig
from bdsgd.traces.describe import describe
from bdsgd.traces.formats import import_trace
from bdsgd.traces.simulate import simulate

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
# The held-out 32-worker production job (i.i.d., heavy-tailed run-times): all that is known of it.
PRODUCTION_IID_JOB = {"lag1": 0.03, "hindsight_best_mean_cutoff": 26.1, "best_fixed_over_optimum": 0.941}
SPIKE = 3.0  # a spike: an iteration whose CoV exceeds 3x its job's median CoV


def lag1(x: np.ndarray) -> float:
    """Lag-1 autocorrelation of each column of a (T, n) array (each about its own mean), averaged."""
    d = x - x.mean(axis=0)
    return float(((d[1:] * d[:-1]).sum(axis=0) / (d * d).sum(axis=0)).mean())


def trace_stats(trace) -> dict[str, float]:
    """describe's statistics a cutoff policy cares about, with lag-1 and the best fixed cutoff."""
    d = describe(trace)
    x = np.sort(trace.runtimes, axis=1)
    T, n = x.shape
    best_fixed = max(throughput(x, np.full(T, c)) for c in range(1, n + 1))
    optimum = d["hindsight_speedup_over_sync"] * throughput(x, np.full(T, n))
    return {"cov_p50": d["cov_p50"], "cov_p90": d["cov_p90"], "p99_over_p50": d["p99_over_p50"],
            "lag1": lag1(trace.runtimes), "worker_mean_cov": d["worker_mean_cov"],
            "hindsight_best_mean_cutoff": d["hindsight_best_mean_cutoff"],
            "best_fixed_over_optimum": best_fixed / optimum}


def cov_stats(cov: np.ndarray) -> dict[str, float]:
    """Statistics of one job's per-iteration CoV series."""
    med = np.median(cov)
    spike = cov > SPIKE * med
    inner = spike[1:-1]
    return {"cov_p50": med, "cov_p90": np.quantile(cov, 0.9), "cov_p99": np.quantile(cov, 0.99),
            "cov_p90_over_p10": np.quantile(cov, 0.9) / np.quantile(cov, 0.1),
            "cov_lag1": lag1(cov[:, None]), "spike_rate": spike.mean(),
            "spike_height": np.median(cov[spike] / med) if spike.any() else np.nan,
            "spikes_isolated": (inner & ~spike[:-2] & ~spike[2:]).sum() / max(inner.sum(), 1)}


def real_cov_jobs() -> dict[int, dict[str, float]]:
    table = pd.read_csv(DATA / "alibaba_pai_coefficient_variation.csv", index_col=0).to_numpy()
    return {job: cov_stats(row[~np.isnan(row)]) for job, row in enumerate(table)}


def sim_cov(scenario: str, seeds: int, **kw) -> list[dict[str, float]]:
    """CoV statistics of 10-worker simulated jobs; CoV with the sample sd, as the real file's
    (its values reach sqrt(10) = 3.16, above the population sd's bound sqrt(9))."""
    out = []
    for seed in range(seeds):
        x = simulate(SimulateConfig(scenario=scenario, workers=10, **kw), seed)[0].runtimes
        out.append(cov_stats(x.std(axis=1, ddof=1) / x.mean(axis=1)))
    return out


def median(rows: list[dict[str, float]]) -> dict[str, float]:
    """Each statistic's median over the rows that have it (spike_height needs a spike)."""
    out = {}
    for key in rows[0]:
        values = [r[key] for r in rows if np.isfinite(r[key])]
        out[key] = float(np.median(values)) if values else float("nan")
    return out


def table(title: str, sim: dict[str, float], real: dict[str, float], note: str) -> None:
    print(f"\n{title}\n{note}\n| statistic | simulated | real |\n| --- | ---: | ---: |")
    for key in sim:
        real_value = f"{real[key]:.3g}" if key in real else "-"
        print(f"| {key} | {sim[key]:.3g} | {real_value} |")


def select(jobs: dict[int, dict[str, float]], rule) -> tuple[list[int], dict[str, float]]:
    ids = [job for job, s in jobs.items() if rule(s)]
    return ids, median([jobs[j] for j in ids])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="simulated clusters per scenario")
    add_option(parser)
    args = parser.parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    jobs = real_cov_jobs()

    # iid-heavy: n = 32 and T = 340 like the production job (170 training iterations, then a test half).
    rows = [trace_stats(simulate(SimulateConfig(scenario="iid-heavy", workers=32, iterations=340),
                                 seed)[0]) for seed in range(args.seeds)]
    table("iid-heavy (n = 32, T = 340)", median(rows), PRODUCTION_IID_JOB,
          "real: the held-out 32-worker production job (i.i.d., heavy-tailed; these statistics only)")

    # data-dependent: no variable-length trace is at hand; its spread is set against the real
    # jobs' per-job median CoV, its lack of memory against the real jobs whose CoV has none.
    medians = np.array([s["cov_p50"] for s in jobs.values()])
    ids, real = select(jobs, lambda s: s["cov_lag1"] < 0.25 and s["cov_p50"] < 0.3)
    real = {"cov_p50": float(np.quantile(medians, 0.75)), "cov_lag1": real["cov_lag1"]}
    table("data-dependent (n = 10, T = 1000)", median(sim_cov("data-dependent", args.seeds)),
          real, f"real: cov_p50 the 75th percentile of the 100 PAI jobs' median CoV; cov_lag1 the "
          f"median over the PAI CoV jobs with lag-1 of CoV < 0.25 and median CoV < 0.3: {ids}")

    # heterogeneous: a steady, high spread, at the spread of a few slow-worker configurations.
    ids = [j for j, s in jobs.items() if s["cov_p50"] > 0.3 and s["cov_p90_over_p10"] < 1.3]
    print("\nheterogeneous (n = 10, T = 1000): median CoV of each real PAI job with median CoV "
          "> 0.3 and p90/p10 < 1.3:")
    print(", ".join(f"job {j} {jobs[j]['cov_p50']:.3g}" for j in ids))
    real = median([jobs[j] for j in ids])
    print(f"their median p90/p10 {real['cov_p90_over_p10']:.3g}, lag-1 of CoV {real['cov_lag1']:.3g}")
    print("| slow_workers | slow factors | median CoV | p90/p10 |\n| ---: | --- | ---: | ---: |")
    for slow, lo, hi in ((0.5, 2.0, 7.0), (0.5, 3.5, 7.0), (1, 2.0, 2.0), (1, 7.0, 7.0)):
        sim = median(sim_cov("heterogeneous", args.seeds, slow_workers=slow,
                             slow_factor_min=lo, slow_factor_max=hi))
        print(f"| {slow} | {lo:g}-{hi:g} | {sim['cov_p50']:.3g} | {sim['cov_p90_over_p10']:.3g} |")

    # calm-spikes: calm, with rare isolated spikes.
    ids, real = select(jobs, lambda s: s["cov_p50"] < 0.1 and 0 < s["spike_rate"] <= 0.02
                       and s["spikes_isolated"] >= 0.75)
    table("calm-spikes (n = 10, T = 1000)", median(sim_cov("calm-spikes", args.seeds)), real,
          f"real: PAI CoV jobs with median CoV < 0.1, spikes in <= 2 % of iterations, "
          f">= 75 % of them single-iteration: {ids}")
    rows = [trace_stats(simulate(SimulateConfig(scenario="calm-spikes", workers=10,
                                                iterations=300), seed)[0])
            for seed in range(args.seeds)]
    for job in (1, 2):
        real = trace_stats(import_trace(DATA / f"alibaba_pai_job_{job}_norm.csv", "alibaba-pai"))
        table(f"calm-spikes (n = 10, T = 300) against raw PAI job {job}", median(rows), real,
              "real: the raw 10-worker job")


if __name__ == "__main__":
    main()
