"""Cutoff policies: decision latency against n, and throughput against the oracle.

    .venv/bin/python benchmarks/bench_policies.py [--quick]

1. Decision latency (``choose`` + ``observe``, what the server spends per iteration) of every
   policy on one core, for n = 16 ... 4096 workers, as p50/p99 and as a fraction of a typical
   gradient time (1 s and 100 ms). Goals: p50 <= 1 ms at 158 workers, <= 10 ms at 2,048.
2. Throughput relative to the hindsight oracle of every policy under each decision rule, on the
   two Alibaba PAI samples (if ``bdsgd.traces.formats`` is there) and on the simulator's
   scenarios, replayed on their test half (if ``bdsgd.traces.simulate`` is there; with the
   Bayes-optimal ``bayes`` reference).
"""

from __future__ import annotations

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"  # one core, before numpy loads its BLAS

import argparse  # noqa: E402
import contextlib  # noqa: E402
import importlib.util  # noqa: E402
import io  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from bdsgd.config import SimulateConfig  # noqa: E402
from bdsgd.policies import make_policy  # noqa: E402
from bdsgd.throughput import default_config, replay, run_benchmark  # noqa: E402
from bdsgd.traces.io import write_trace  # noqa: E402
from bdsgd.traces.schema import from_arrays  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LATENCY_POLICIES = ["sync", "static", "elfving", "ecdf", "bandit", "explore-ecdf", "bayes",
                    "oracle", "oracle-myopic"]
TABLE_POLICIES = ["sync", "static", "elfving", "ecdf", "bandit", "explore-elfving",
                  "explore-ecdf", "oracle-myopic"]
SCENARIOS = ["calm", "emerging-straggler", "node-contention", "load-shift", "mixed"]


class IidTruth:
    """A stand-in for the simulator's truth: i.i.d. log-normal run-times (for timing only)."""

    def __init__(self, n: int):
        self.n = n

    def predictive_draws(self, t, n_samples, rng):
        return rng.lognormal(0.0, 0.2, (n_samples, self.n))


def straggler_trace(T: int, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.lognormal(0.0, 0.1, (T, n))
    return x * np.where(rng.random((T, n)) < 0.05, rng.uniform(2, 5, (T, n)), 1.0)


def latency(sizes: list[int], T: int) -> None:
    cfg = default_config().policies
    print(f"decision latency, one core, {T} iterations each (ms; 'per 100 ms' is the p50 as a "
          "share of a 100 ms gradient, 'per 1 s' of a 1 s one)")
    print(f"{'n':>6} {'policy':<15}{'p50 ms':>9}{'p99 ms':>9}{'per 1 s':>10}{'per 100 ms':>12}")
    worst = {}
    for n in sizes:
        x = straggler_trace(T, n)
        trace = from_arrays(x)
        for name in LATENCY_POLICIES:
            policy = make_policy(name, n, cfg, runtimes=x, truth=IidTruth(n))
            ms = replay(trace, policy).decision_ns / 1e6
            p50, p99 = np.percentile(ms, 50), np.percentile(ms, 99)
            worst[n] = max(worst.get(n, 0.0), p50)
            print(f"{n:>6} {name:<15}{p50:>9.3f}{p99:>9.3f}{p50 / 1e3:>10.2e}{p50 / 1e2:>12.2e}")
    for n, goal in ((158, 1.0), (2048, 10.0)):
        if n in worst:
            print(f"goal at n={n}: slowest policy p50 {worst[n]:.3f} ms <= {goal} ms: "
                  f"{'met' if worst[n] <= goal else 'MISSED'} (ratio {worst[n] / goal:.2f})")


def table(label: str, path: Path, extra: list[str]) -> None:
    """Relative-to-oracle of every policy under each rule on one trace."""
    with contextlib.redirect_stdout(io.StringIO()):
        result = run_benchmark(path, TABLE_POLICIES + extra + ["async"], rule="both")
    rows = result["policies"]
    t = result["trace"]
    print(f"\n{label}: {t['n_iterations']} iterations x {t['n_workers']} workers "
          f"(relative to the oracle; async ignores staleness)")
    print(f"{'policy':<18}{'ratio':>8}{'rate':>8}{'mean c':>8}")
    for name in [*TABLE_POLICIES, *extra, "async"]:
        if f"{name}/rate" in rows:
            r, q = rows[f"{name}/rate"], rows[f"{name}/ratio"]
            print(f"{name:<18}{q['relative_to_oracle']:>8.3f}{r['relative_to_oracle']:>8.3f}"
                  f"{r['mean_cutoff']:>8.2f}")
        else:
            print(f"{name:<18}{rows[name]['relative_to_oracle']:>16.3f}"
                  f"{rows[name]['mean_cutoff']:>8.2f}")


def alibaba(tmp: Path) -> None:
    if importlib.util.find_spec("bdsgd.traces.formats") is None:
        print("\n(Alibaba rows skipped: bdsgd.traces.formats is not in this checkout)")
        return
    from bdsgd.traces.formats import import_trace

    for job in (1, 2):
        csv = REPO / "tests" / "data" / f"alibaba_pai_job_{job}_norm.csv"
        if not csv.exists():
            print(f"\n(Alibaba job {job} skipped: {csv} not found)")
            continue
        path = tmp / f"pai{job}.parquet"
        write_trace(import_trace(csv, "alibaba-pai"), path)
        table(f"Alibaba PAI job {job}", path, [])


def simulated(tmp: Path, quick: bool) -> None:
    if importlib.util.find_spec("bdsgd.traces.simulate") is None:
        print("\n(simulator rows skipped: bdsgd.traces.simulate is not in this checkout)")
        return
    from bdsgd.traces.simulate import simulate, truth_path, write_truth

    for scenario in SCENARIOS:
        cfg = SimulateConfig(scenario=scenario, iterations=400 if quick else 1000)
        trace, truth = simulate(cfg, seed=0)
        _, test = trace.split(0.5)
        path = tmp / f"{scenario}.parquet"
        write_trace(test, path)
        write_truth(truth, truth_path(path))  # bayes reads it, starting at the slice offset
        table(f"simulated {scenario} (test half)", path, ["bayes", "explore-bayes"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    sizes = [16, 158, 512] if args.quick else [16, 64, 158, 512, 2048, 4096]
    latency(sizes, T=40 if args.quick else 100)
    with tempfile.TemporaryDirectory() as tmp:
        alibaba(Path(tmp))
        simulated(Path(tmp), args.quick)


if __name__ == "__main__":
    main()
