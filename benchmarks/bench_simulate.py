"""Speed of the trace simulator (goal: 1,000 workers x 10,000 iterations in seconds) and of the
true predictive draws behind the ``bayes`` policy (goal: a few ms for 64 draws x 1,000 workers).

Side by side: the vectorised simulator against drawing the same cluster one iteration at a time
(``Truth.predictive_draws(t, 1)``, a per-iteration loop with the same numpy work per step).

    .venv/bin/python benchmarks/bench_simulate.py [--workers 1000] [--iterations 10000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

from bdsgd.config import SimulateConfig
from bdsgd.traces.io import write_trace
from bdsgd.traces.simulate import simulate


def timed(fn, repeat: int = 1) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=10000)
    parser.add_argument("--scenario", default="mixed")
    add_option(parser)
    args = parser.parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    n, T = args.workers, args.iterations
    cfg = SimulateConfig(scenario=args.scenario, workers=n, iterations=T)

    seconds, (trace, truth) = timed(lambda: simulate(cfg, seed=0), repeat=3)
    print(f"simulate {n} workers x {T} iterations ({args.scenario}): {seconds:.2f} s, "
          f"{n * T / seconds:,.0f} worker-iterations/s")

    with tempfile.TemporaryDirectory() as tmp:
        write_s, _ = timed(lambda: write_trace(trace, Path(tmp) / "sim.parquet"))
    print(f"write_trace (Parquet, {n * T:,} rows): {write_s:.2f} s")

    rng = np.random.default_rng(0)
    steps = range(1, 201)
    draw_s, _ = timed(lambda: [truth.predictive_draws(t, 64, rng) for t in steps], repeat=3)
    print(f"predictive_draws 64 x {n}: {1000 * draw_s / len(steps):.2f} ms per call")

    # Side by side on a tenth of the iterations: one vectorised call against a per-iteration loop.
    T_small = max(T // 10, 2)
    small = SimulateConfig(scenario=args.scenario, workers=n, iterations=T_small)
    vec_s, (_, small_truth) = timed(lambda: simulate(small, seed=0), repeat=3)
    loop_s, _ = timed(lambda: [small_truth.predictive_draws(t, 1, rng) for t in range(T_small)])
    print(f"{n} x {T_small}: vectorised {vec_s:.3f} s, per-iteration loop {loop_s:.3f} s, "
          f"speed-up {loop_s / vec_s:.1f}x")


if __name__ == "__main__":
    main()
