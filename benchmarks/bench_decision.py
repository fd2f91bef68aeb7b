"""bdsgd's decision latency as a user meets it, at 158 and 2,048 workers.

``bdsgd throughput`` replays a simulated trace with a model ``bdsgd model train`` wrote, the
defaults throughout (learning while serving on), one torch thread; each n's p50 and p99 are read
from the JSON the command writes.

The trace is the simulator's ``mixed`` scenario, n workers on nodes of 4 x ``--iterations``; the
model trains on it for ``--epochs`` (a decision costs the same whatever the training made of the
parameters). Beside bdsgd, ``bdsgd-model`` (the model alone) and ``persist`` (the strongest simple
baseline) in the same replay. Targets: p50 <= 1 ms at 158 workers and <= 10 ms at 2,048.

    .venv/bin/python benchmarks/bench_decision.py [--workers 158 2048] [--iterations 300]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

from bdsgd.config import SimulateConfig
from bdsgd.traces.io import write_trace
from bdsgd.traces.simulate import simulate

POLICIES = ("bdsgd", "bdsgd-model", "persist")
TARGET_MS = {158: 1.0, 2048: 10.0}


def bdsgd(*args: str) -> None:
    """Run the CLI in this interpreter's environment; its output only on failure."""
    done = subprocess.run([sys.executable, "-m", "bdsgd", *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bdsgd {' '.join(args)} failed:\n{done.stderr}")


def latency(n: int, iterations: int, epochs: int, tmp: Path) -> dict:
    """The throughput JSON's rows of ``POLICIES`` on an n-worker trace, and the seconds it took."""
    trace, _ = simulate(SimulateConfig(scenario="mixed", workers=n, iterations=iterations,
                                       workers_per_node=4), seed=0)
    path = write_trace(trace, tmp / f"mixed-{n}.parquet")
    model, table = tmp / f"model-{n}.pt", tmp / f"throughput-{n}.json"
    bdsgd("model", "train", str(path), "--out", str(model), "--epochs", str(epochs), "--quiet")
    start = time.perf_counter()
    bdsgd("throughput", str(path), "--policies", ",".join(POLICIES), "--model", str(model),
          "--json", str(table), "--threads", "1")
    rows = json.loads(table.read_text())["policies"]
    return {"rows": {p: rows[p] for p in POLICIES}, "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[158, 2048],
                        help="workers of each trace (default: 158 2048)")
    parser.add_argument("--iterations", type=int, default=300,
                        help="iterations of each trace, training and replay (default: 300)")
    parser.add_argument("--epochs", type=int, default=1, help="training epochs of each model (default: 1)")
    add_option(parser)
    args = parser.parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    print(f"bdsgd throughput, one torch thread, the defaults; mixed, {args.iterations} "
          f"iterations, nodes of 4; p50 / p99 ms a decision")
    print(f"{'n':>6} {'policy':<12} {'p50 ms':>8} {'p99 ms':>8} {'target':>7} {'met':>4}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.workers:
            result = latency(n, args.iterations, args.epochs, Path(tmp))
            for policy, row in result["rows"].items():
                target = TARGET_MS.get(n) if policy == "bdsgd" else None
                met = "-" if target is None else ("yes" if row["decision_ms_p50"] <= target
                                                  else "no")
                print(f"{n:>6} {policy:<12} {row['decision_ms_p50']:>8.3f} "
                      f"{row['decision_ms_p99']:>8.3f} {target or '-':>7} {met:>4}")


if __name__ == "__main__":
    main()
