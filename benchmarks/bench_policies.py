"""Cutoff policies: decision latency against n.

    .venv/bin/python benchmarks/bench_policies.py [--quick]

Decision latency (``choose`` + ``observe``, what the server spends per iteration) of every
policy on one core, for n = 16 ... 4096 workers, as p50/p99 and as a fraction of a typical
gradient time (1 s and 100 ms). Goals: p50 <= 1 ms at 158 workers, <= 10 ms at 2,048.
The throughput table (every policy x rule x trace) is ``policy_table.py``.
"""

from __future__ import annotations

import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"  # one core, before numpy loads its BLAS

import argparse  # noqa: E402

import numpy as np  # noqa: E402
from results_md import add_option, recorded  # noqa: E402  (benchmarks/ is sys.path[0])

from bdsgd.cluster.server import replay  # noqa: E402
from bdsgd.config import default_config  # noqa: E402
from bdsgd.policies.build import make_policy  # noqa: E402
from bdsgd.traces.schema import from_arrays  # noqa: E402

LATENCY_POLICIES = ["sync", "static", "elfving", "ecdf", "bandit", "ewma", "persist",
                    "explore-ecdf", "bayes", "oracle", "oracle-myopic"]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    add_option(parser)
    args = parser.parse_args()
    sizes = [16, 158, 512] if args.quick else [16, 64, 158, 512, 2048, 4096]
    with recorded(args.results, __file__):
        latency(sizes, T=40 if args.quick else 100)


if __name__ == "__main__":
    main()
