"""The virtual clock against real ``bdsgd distributed`` jobs, per model size, policy and late mode.

Every job trains the digits network for real on this machine (gloo, CPU): a parameter server and
``--workers`` workers, each worker's compute a delay replayed from a straggler trace
(``--delay-trace``: the simulator's emerging-straggler scenario at a ``--median-s`` median), and
every message padded to the model size under test (``--extra-parameters``: a bigger model's
bytes). Sizes from 10 k to 4 M parameters, policies sync and static (c = n - 1), late workers
abandoning or finishing their work.

1. **Fit.** On the abandon jobs, each iteration's real wall time minus its compute (the c-th
   smallest delay: the virtual clock's tau with no communication) is what the server spent
   communicating; a least-squares line through (c + n) G (G = 4 bytes per parameter) gives the
   single server's latency (intercept / 2) and bandwidth (1 / slope): ``bdsgd.cluster.network``'s ps
   topology.
2. **Replay.** Each job's cutoffs replayed through the virtual clock (``bdsgd.cluster.clock.SyncClock``,
   the fitted network, the job's late mode) on the delays: virtual time and gradients per second
   against the real ones (the server's wall time, evaluation excluded). Goal: within 10 %.

    .venv/bin/python benchmarks/clock_fidelity.py [--workers 3] [--iterations 30] \\
        [--sizes 1e4,1e5,1e6,4e6] [--median-s 0.05] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

ROOT = Path(__file__).resolve().parents[1]
BYTES = 4  # float32
POLICIES, LATE = ("sync", "static"), ("abandon", "finish")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=3, help="n workers (the server is one more)")
    p.add_argument("--iterations", type=int, default=30, help="iterations of every job")
    p.add_argument("--warmup", type=int, default=3, help="first iterations left out of the fit")
    p.add_argument("--sizes", default="1e4,1e5,1e6,4e6",
                   help="model sizes in parameters (messages padded to each)")
    p.add_argument("--median-s", type=float, default=0.05,
                   help="median of the replayed delays, seconds")
    p.add_argument("--seed", type=int, default=0, help="seed of the delay trace")
    p.add_argument("--out", help="folder for the jobs' outputs (default: a new temporary one)")
    add_option(p)
    return p.parse_args()


def delay_trace(args, out: Path) -> np.ndarray:
    """A straggler trace for the workers, scaled to ``--median-s``, written where the jobs read it."""
    from bdsgd.config import SimulateConfig
    from bdsgd.traces.io import write_trace
    from bdsgd.traces.schema import from_arrays
    from bdsgd.traces.simulate import simulate

    trace, _ = simulate(SimulateConfig(scenario="emerging-straggler", workers=args.workers,
                                       iterations=args.iterations, workers_per_node=1,
                                       stragglers=1, comm_s=0.0), args.seed)
    x = trace.runtimes * (args.median_s / np.median(trace.runtimes))
    write_trace(from_arrays(x, {"source": "clock_fidelity"}), out / "delays.parquet")
    return x


def job(args, out: Path, size: int, digits: int, policy: str, late: str) -> pd.DataFrame:
    """One real job; its per-iteration metrics (cutoff, real seconds)."""
    name = f"{policy}-{late}-{size}"
    cmd = [sys.executable, "-m", "bdsgd", "distributed", "--workers", str(args.workers),
           "--policy", policy, "--iterations", str(args.iterations), "--config",
           str(out / "config.yaml"), "--late", late, "--delay-trace", str(out / "delays.parquet"),
           "--extra-parameters", str(max(0, size - digits)), "--json", str(out / f"{name}.json")]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
                 f"\n{proc.stderr[-2000:]}")
    metrics = pd.read_parquet(out / f"{name}.metrics.parquet")
    seconds = np.diff(metrics["wall_time_s"].to_numpy(), prepend=0.0)
    print(f"  {name}: {seconds.sum():.2f} s in the server, {time.perf_counter() - start:.1f} s "
          f"the command", file=sys.stderr, flush=True)
    return pd.DataFrame({"size": size, "policy": policy, "late": late,
                         "t": np.arange(len(seconds)), "cutoff": metrics["cutoff"].to_numpy(),
                         "real_s": seconds})


def main() -> None:
    args = parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    from bdsgd.cluster.clock import replay_cutoffs
    from bdsgd.cluster.network import Network
    from bdsgd.tasks import task_gradient_bytes

    n = args.workers
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="clock_fidelity_"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(json.dumps({
        "experiment": "fidelity", "traces": {"t": {"source": "simulate"}},
        "policies": {"static_backups": 1},  # static: c = n - 1
        "train": {"trace": "t", "tasks": ["digits"], "batch_size": 16,
                  "eval_every": 10 * args.iterations, "checkpoint_every": 10 * args.iterations}}))
    x = delay_trace(args, out)
    digits = task_gradient_bytes("digits") // BYTES
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    print(f"outputs in {out}; {n} workers, {args.iterations} iterations, delays median "
          f"{args.median_s} s (emerging straggler), digits network {digits} parameters",
          file=sys.stderr)
    runs = pd.concat([job(args, out, size, digits, policy, late) for size in sizes
                      for policy in POLICIES for late in LATE], ignore_index=True)

    # 1. the fit, on the abandon jobs after the warm-up: real - tau = 2 L + (c + n) G / B
    tau = np.concatenate([replay_cutoffs(x, g["cutoff"].to_numpy(), np.zeros(n), "abandon")
                          for _, g in runs.groupby(["size", "policy", "late"], sort=False)])
    runs["comm_s"] = runs["real_s"] - tau
    fit = runs[(runs["late"] == "abandon") & (runs["t"] >= args.warmup)]
    slope, intercept = np.polyfit((fit["cutoff"] + n) * fit["size"] * BYTES, fit["comm_s"], 1)
    latency, bandwidth = max(intercept / 2, 0.0), 1.0 / slope
    print(f"fitted single server: latency {latency * 1e3:.3f} ms, bandwidth "
          f"{bandwidth * 8 / 1e9:.3f} Gbit/s ({len(fit)} iterations of "
          f"{fit.groupby(['size', 'policy']).ngroups} abandon jobs)")

    # 2. every job replayed through the virtual clock with the fitted network
    rows = []
    for (size, policy, late), g in runs.groupby(["size", "policy", "late"], sort=True):
        net = Network("ps", gradient_bytes=size * BYTES, bandwidth_bytes_s=bandwidth,
                      latency_s=latency)
        virtual = replay_cutoffs(x, g["cutoff"].to_numpy(), net.comm(n), late)
        real, gradients = g["real_s"].sum(), g["cutoff"].sum()
        rows.append({"parameters": size, "policy": policy, "late": late,
                     "real_s": real, "virtual_s": virtual.sum(),
                     "time_error": virtual.sum() / real - 1,
                     "real_grad_per_s": gradients / real,
                     "virtual_grad_per_s": gradients / virtual.sum(),
                     "comm_share": net.comm(n)[-1] / (net.comm(n)[-1] + args.median_s)})
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    worst = table["time_error"].abs().max()
    print(f"worst |virtual / real - 1| = {worst:.3f} ({'within' if worst <= 0.1 else 'outside'} "
          f"the 10 % goal); mean {table['time_error'].abs().mean():.3f}")


if __name__ == "__main__":
    main()
