"""The virtual clock against real ``bdsgd distributed`` jobs: the network fitted on some jobs,
scored on the others.

Every job trains the digits network for real on this machine (gloo, CPU): a parameter server and
n workers (``--workers-list``: 3, 8 and 16), every message padded to the model size under test
(``--extra-parameters``: a bigger model's bytes, 10 k to 4 M parameters), policies sync and
static (c = n - 1), late workers abandoning or finishing their work. Each worker computes a real
gradient of its mini-batch (the digits network: under a millisecond of one core) and then waits
(``--delay-trace``): ``--delay-s`` (50 ms), which stands in for a bigger network's compute so that
compute is not negligible beside communication, and in each iteration one worker drawn at random
waits ``--straggler`` times as long (2x), so that a cut has a worker to cut, and not always the
one the server's copies reach first (a straggler whose copy comes first hides the later copies
behind its compute; the model starts every worker after the last copy). With ``--trace`` the
waits are instead a simulated emerging straggler's run-times at a ``--delay-s`` median. The
server records each worker's own compute seconds, gradient and wait together as the worker
measured them (the metrics' ``compute_s``): the virtual clock replays those, not the intended
waits.

1. **Fit.** The (workers, size) grid is split as a checkerboard into two halves, each holding
   every worker count and small and large models. On each half, scipy's least squares fits the
   single server of ``bdsgd.cluster.network`` (ps: each gradient crossing the server's link as
   it is done, summed on arrival, then the n parameter copies out) to the real per-iteration
   seconds (each job's residuals relative to its mean iteration): its latency L, bandwidth B
   and cost o per message on its link (``network.message_s``: a message of G bytes keeps the
   link busy o + G / B), each network built by the cluster's own constructor
   (``bdsgd.cluster.virtual.network``). o is the server's handling of each message (its
   listener thread, the queue, the send call), which small messages and many workers make a
   good part of an iteration and which L, charged once each way, does not grow with. The
   summing rate A is measured (the server's own ``add_`` of a 4 M-parameter gradient, timed
   here), the update rate U left infinite: the real server's step updates the digits network
   alone whatever the padding, a fixed cost the fit puts in L.
2. **Score.** Each job is replayed with the network fitted on the other half
   (``bdsgd.cluster.clock.replay_cutoffs``: its recorded compute seconds and cutoffs, its late
   mode), so every cell is out of sample: virtual time and gradients per second against the
   real ones (the server's wall time, evaluation excluded, the first ``--warmup`` iterations
   left out of both), each the mean of the cell's ``--repeats`` jobs: on two cores a job of 17
   processes moving 16 MB each varies by several percent from one run to the next. A compute
   time the server never saw (a cut worker's under abandon, one never started under finish) is
   replayed as infinite under abandon (cut again) and as the worker's median under finish.
   Goal: within 10 % in every cell.

On a machine shared with other work, ``--nice -10`` (as root) puts the jobs ahead of it; a job
during which other processes still took more than ``--max-others`` cores is run again, and the
table's ``others`` column says the most any of a cell's jobs saw.

    .venv/bin/python benchmarks/clock_fidelity.py [--workers-list 3,8,16] [--iterations 20] \\
        [--sizes 1e4,1e5,1e6,4e6] [--delay-s 0.05] [--straggler 2] [--trace] [--nice N] \\
        [--repeats 1] [--max-others 0.1] [--quick] [--out DIR] [--reuse]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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
    p.add_argument("--workers-list", default="3,8,16", help="worker counts (the server is one more)")
    p.add_argument("--iterations", type=int, default=20, help="iterations of every job")
    p.add_argument("--warmup", type=int, default=3, help="first iterations left out of fit and score")
    p.add_argument("--sizes", default="1e4,1e5,1e6,4e6",
                   help="model sizes in parameters (messages padded to each)")
    p.add_argument("--delay-s", type=float, default=0.05,
                   help="each worker's wait after its gradient, seconds (with --trace: the median)")
    p.add_argument("--straggler", type=float, default=2.0,
                   help="in each iteration one worker, drawn at random, waits this many times as "
                        "long (1: none)")
    p.add_argument("--trace", action="store_true",
                   help="waits from a simulated emerging-straggler trace instead of --delay-s")
    p.add_argument("--quick", action="store_true",
                   help="3 and 8 workers, 100 k and 4 M parameters, static, 12 iterations: a few "
                        "minutes")
    p.add_argument("--policies", default=",".join(POLICIES), help="policies (sync, static)")
    p.add_argument("--late", default=",".join(LATE), help="late modes (abandon, finish)")
    p.add_argument("--nice", type=int, default=0,
                   help="the jobs' niceness, each in a session of its own (negative, as root: "
                        "ahead of other processes on a shared machine)")
    p.add_argument("--seed", type=int, default=0, help="seed of the job order and of the trace")
    p.add_argument("--out", help="folder for the jobs' outputs (default: a new temporary one)")
    p.add_argument("--max-others", type=float, default=0.1,
                   help="cores other processes may take during a job before it is run again")
    p.add_argument("--tries", type=int, default=3, help="runs of a job at most (see --max-others)")
    p.add_argument("--repeats", type=int, default=1,
                   help="jobs per cell: a cell scores its repeats' mean seconds")
    p.add_argument("--reuse", action="store_true",
                   help="read the jobs already in --out instead of running them again")
    add_option(p)
    args = p.parse_args()
    if args.quick:
        args.workers_list, args.sizes, args.policies, args.iterations = "3,8", "1e5,4e6", "static", 12
    return args


def delay_trace(args, n: int, out: Path) -> Path:
    """The n workers' waits per iteration (``--delay-trace``), the same for every job of n."""
    from bdsgd.config import SimulateConfig
    from bdsgd.traces.io import write_trace
    from bdsgd.traces.schema import from_arrays
    from bdsgd.traces.simulate import simulate

    T, path = args.iterations, out / f"delays-{n}.parquet"
    if args.trace:
        trace, _ = simulate(SimulateConfig(scenario="emerging-straggler", workers=n, iterations=T,
                                           workers_per_node=1, stragglers=1, comm_s=0.0),
                            args.seed)
        x = trace.runtimes * (args.delay_s / np.median(trace.runtimes))
    else:
        x = np.full((T, n), args.delay_s)
        x[np.arange(T), np.random.default_rng([args.seed, n]).integers(n, size=T)] *= args.straggler
    write_trace(from_arrays(x, {"source": "clock_fidelity"}), path)
    return path


def environment(out: Path) -> dict[str, str]:
    """The jobs' environment. Where bytecode may not be written beside the sources, each of a
    job's n + 2 processes would compile torch afresh (seconds each): they cache it under ``out``."""
    env = dict(os.environ)
    if sys.flags.dont_write_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(out / "pycache")
    return env


def busy_s() -> float:
    """CPU seconds this machine's processes have run, all cores together, and the hypervisor has
    taken from them (/proc/stat: user, nice, system, steal; not interrupts, which a job's own
    loopback traffic causes and its processes may not be charged for)."""
    user, nice, system, _, _, _, _, steal = Path("/proc/stat").read_text().split()[1:9]
    return sum(map(float, (user, nice, system, steal))) / os.sysconf("SC_CLK_TCK")


def children_s() -> float:
    """CPU seconds of this process's finished children and theirs (a job's every process)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def prioritise(nice: int) -> None:
    """The job's niceness, set in its own session before it starts. Where the kernel groups
    processes by session (autogroup), it weighs one group's CPU share against another's, and a
    process's own niceness counts only within its group: the session's group gets it too."""
    group = Path("/proc/self/autogroup")
    if group.exists():
        group.write_text(str(nice))
    os.nice(nice)


def job(args, out: Path, env: dict, n: int, size: int, digits: int, policy: str,
        late: str, repeat: int) -> dict:
    """One real job: its cutoffs, real seconds and workers' compute seconds per iteration, and
    ``others``: the cores other processes on the machine used meanwhile (on average). A job
    during which they took more than ``--max-others`` cores is run again (``--tries`` in all):
    its seconds would measure them, not the server."""
    name = f"{n}-{size}-{policy}-{late}" + (f"-r{repeat}" if repeat else "")
    cmd = [sys.executable, "-m", "bdsgd", "distributed", "--workers", str(n), "--policy", policy,
           "--iterations", str(args.iterations), "--config", str(out / "config.yaml"),
           "--late", late, "--delay-trace", str(out / f"delays-{n}.parquet"),
           "--extra-parameters", str(max(0, size - digits)), "--json", str(out / f"{name}.json")]
    cores = out / f"{name}.others"
    for _ in range(args.tries):
        if args.reuse and cores.exists() and float(cores.read_text()) <= args.max_others:
            break
        start, busy, ours = time.perf_counter(), busy_s(), children_s()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              start_new_session=bool(args.nice),
                              preexec_fn=(lambda: prioritise(args.nice)) if args.nice else None)
        if proc.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
                     f"\n{proc.stderr[-2000:]}")
        wall = time.perf_counter() - start
        cores.write_text(str(max(0.0, (busy_s() - busy) - (children_s() - ours)) / wall))
        print(f"  {name}: {wall:.1f} s, others {float(cores.read_text()):.2f} cores",
              file=sys.stderr, flush=True)
        if float(cores.read_text()) <= args.max_others:
            break
    others = float(cores.read_text())
    metrics = pd.read_parquet(out / f"{name}.metrics.parquet")
    seconds = np.diff(metrics["wall_time_s"].to_numpy(), prepend=0.0)
    return {"workers": n, "parameters": size, "policy": policy, "late": late, "others": others,
            "cutoffs": metrics["cutoff"].to_numpy(), "real": seconds,
            "compute": np.stack(metrics["compute_s"].to_numpy())}


def known(compute: np.ndarray, late: str) -> np.ndarray:
    """The compute seconds to replay: where the server saw none, infinite under abandon (the
    worker was cut), the worker's median under finish (it never started that iteration)."""
    x = compute.copy()
    missing = np.isnan(x)
    if late == "abandon" or missing.all():
        x[missing] = np.inf
        return x
    medians = np.nanmedian(np.where(missing.all(0), np.inf, x), axis=0)
    return np.where(missing, medians, x)


def aggregate_rate() -> float:
    """A: bytes per second the server's running sum takes in (``add_`` of a 4 M-parameter
    float32 gradient into another, one thread, the median of 20)."""
    import torch

    torch.set_num_threads(1)
    total, gradient = torch.randn(4_000_000), torch.randn(4_000_000)
    times = []
    for _ in range(20):
        start = time.perf_counter()
        total.add_(gradient)
        times.append(time.perf_counter() - start)
    return gradient.numel() * BYTES / float(np.median(times))


def network(cfg, server: tuple[float, float, float], aggregate: float, size: int):
    """The single server (``network.topology: ps``) of ``cfg`` with ``server`` = (L, B, o) as
    its latency, bandwidth and cost per message, summing at ``aggregate`` bytes/s, its step free,
    moving a model of ``size`` parameters: the cluster's own constructor builds it."""
    from dataclasses import replace

    from bdsgd.cluster.network import BYTES_PER_GBIT
    from bdsgd.cluster.virtual import GBYTE
    from bdsgd.cluster.virtual import network as build

    latency, bandwidth, per_message = server
    net = replace(cfg.network, topology="ps", fabric=None, latency_s=latency,
                  bandwidth_gbit_s=bandwidth / BYTES_PER_GBIT, message_s=per_message,
                  aggregate_gbyte_s=aggregate / GBYTE, update_gbyte_s=np.inf)
    return build(replace(cfg, network=net), size * BYTES)


def replay(run: dict, net) -> np.ndarray:
    """The job's per-iteration virtual seconds on ``net``."""
    from bdsgd.cluster.clock import replay_cutoffs

    return replay_cutoffs(run["x"], run["cutoffs"], net, run["late"])


def fit(cfg, runs: list[dict], aggregate: float, warmup: int) -> tuple[float, float, float]:
    """(L, B, o) of the single server that best matches ``runs``' real per-iteration seconds."""
    from scipy.optimize import least_squares

    def residuals(theta):
        out = []
        for run in runs:
            real = run["real"][warmup:]
            virtual = replay(run, network(cfg, tuple(np.exp(theta)), aggregate,
                                          run["parameters"]))
            out.append((virtual[warmup:] - real) / real.mean())
        return np.concatenate(out)

    found = least_squares(residuals, np.log([1e-3, 4e9, 1e-4]), diff_step=1e-3,
                          bounds=(np.log([1e-6, 1e7, 1e-7]), np.log([1.0, 1e12, 1e-1])))
    return tuple(float(v) for v in np.exp(found.x))


def main() -> None:
    args = parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    from bdsgd.cluster.clock import replay_cutoffs
    from bdsgd.config import load_config
    from bdsgd.tasks import task_gradient_bytes

    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="clock_fidelity_"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(json.dumps({
        "experiment": "fidelity", "traces": {"t": {"source": "simulate"}},
        "policies": {"static_backups": 1},  # static: c = n - 1
        "train": {"trace": "t", "tasks": ["digits"], "batch_size": 16,
                  "eval_every": 10 * args.iterations, "checkpoint_every": 10 * args.iterations}}))
    digits = task_gradient_bytes("digits") // BYTES
    ns = [int(w) for w in args.workers_list.split(",") if w]
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    waits = (f"an emerging straggler's run-time at a {args.delay_s} s median" if args.trace
             else f"{args.delay_s} s, one worker in each iteration x{args.straggler}")
    print(f"outputs in {out}; workers {ns}, {args.iterations} iterations ({args.warmup} warm-up), "
          f"each a real digits gradient ({digits} parameters, batch 16) and a wait of {waits}",
          file=sys.stderr)
    cells = [(i, j, policy, late, r) for i in range(len(ns)) for j in range(len(sizes))
             for policy in args.policies.split(",") for late in args.late.split(",")
             for r in range(args.repeats)]
    order = np.random.default_rng(args.seed).permutation(len(cells))  # drift spread, not grouped
    for n in ns:
        delay_trace(args, n, out)
    env, started = environment(out), time.perf_counter()
    runs = []
    for k in order:
        i, j, policy, late, r = cells[k]
        run = job(args, out, env, ns[i], sizes[j], digits, policy, late, r)
        runs.append({**run, "fold": "AB"[(i + j) % 2], "x": known(run["compute"], late)})
    jobs_s = time.perf_counter() - started

    aggregate = aggregate_rate()
    cfg = load_config(out / "config.yaml")
    fitted = {fold: fit(cfg, [r for r in runs if r["fold"] == fold], aggregate, args.warmup)
              for fold in "AB"}
    print(f"server's sum measured: A = {aggregate / 1e9:.2f} GB/s")
    for fold, (latency, bandwidth, per_message) in fitted.items():
        print(f"fitted on half {fold} ({sum(r['fold'] == fold for r in runs)} jobs): latency "
              f"{latency * 1e3:.3f} ms, bandwidth {bandwidth * 8 / 1e9:.2f} Gbit/s, "
              f"{per_message * 1e3:.3f} ms per message")

    rows = []
    for run in runs:
        w = args.warmup
        other = fitted["B" if run["fold"] == "A" else "A"]
        virtual = replay(run, network(cfg, other, aggregate, run["parameters"]))[w:].sum()
        compute = replay_cutoffs(run["x"], run["cutoffs"], np.zeros(run["workers"]),
                                 run["late"])[w:].sum()
        real, gradients = run["real"][w:].sum(), run["cutoffs"][w:].sum()
        rows.append({"workers": run["workers"], "parameters": run["parameters"],
                     "policy": run["policy"], "late": run["late"], "scored": run["fold"],
                     "real_s": real, "virtual_s": virtual, "compute_s": compute,
                     "gradients": gradients, "others": run["others"]})
    # a cell: its repeats' mean seconds and gradients (a job's own noise is a few percent at
    # the largest cells), the most cores other processes took in any of them
    cell = ["workers", "parameters", "policy", "late", "scored"]
    table = pd.DataFrame(rows).groupby(cell, as_index=False).agg(
        repeats=("real_s", "size"), real_s=("real_s", "mean"), virtual_s=("virtual_s", "mean"),
        compute_s=("compute_s", "mean"), gradients=("gradients", "mean"),
        others=("others", "max"))
    table = table.assign(
        time_error=table.virtual_s / table.real_s - 1,
        real_grad_per_s=table.gradients / table.real_s,
        virtual_grad_per_s=table.gradients / table.virtual_s,
        throughput_error=table.real_s / table.virtual_s - 1,
        comm_share=1 - table.compute_s / table.virtual_s).drop(columns=["compute_s", "gradients"])
    table = table[["workers", "parameters", "policy", "late", "scored", "repeats", "real_s",
                   "virtual_s", "time_error", "real_grad_per_s", "virtual_grad_per_s",
                   "throughput_error", "comm_share", "others"]]
    print("each cell scored with the network fitted on the other half (scored: its own half)")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    error = table[["time_error", "throughput_error"]].abs().max(axis=1)
    worst = table.loc[error.idxmax()]
    print(f"worst cell: {worst['workers']} workers, {worst['parameters']} parameters, "
          f"{worst['policy']} {worst['late']}: time {worst['time_error']:+.3f}, throughput "
          f"{worst['throughput_error']:+.3f} ({'within' if error.max() <= 0.1 else 'outside'} the "
          f"10 % goal); mean |time error| {table['time_error'].abs().mean():.3f}; "
          f"{(error > 0.1).sum()} of {len(table)} cells outside")
    print(f"jobs {jobs_s / 60:.1f} min")


if __name__ == "__main__":
    main()
