"""Real distributed training (``bdsgd distributed``) against the virtual clock and against DDP.

Two questions, answered side by side in one run on this machine (gloo, CPU):

1. Fidelity of the virtual clock. Each policy (sync, static, and optionally ecdf and bandit)
   trains for real with a 5x straggler under ``--late finish``, so that the server records the
   straggler's late run-times. The same policy is then replayed (``bdsgd.cluster.server.replay``) on three
   traces: the run's own recorded trace, whose still-censored entries (the iterations whose
   parameters the busy straggler never received, and the last iterations) are set to their lower
   bound, the cutoff time (exact wherever the replay makes the run's decisions: a censored worker
   was never among the c fastest); the sync run's trace, which is complete (sync censors
   nothing), as a prediction made from one run of another policy; and the injected work alone,
   (delay + compute) x factor, which a virtual cluster that knows only the work would charge
   (no messages). Virtual time against the real sum of iteration times, the server's wall_s,
   and the whole command (process start included); virtual against real gradients per second.
2. Overhead against DDP. torch's DistributedDataParallel (gloo all-reduce) on the digits network,
   the same n, batch per worker, data shards, delay and straggler, timed here, against ``sync``
   (and the cutoff policies, under a straggler) through the parameter server: seconds per
   iteration and gradients per second in the steady state (after a warm-up). Then the messages
   alone: the server's pattern (send theta to n workers, receive n gradients) against an
   all-reduce among the n workers, for growing vectors (best of the rounds: other load only
   adds), fitted as latency + seconds per parameter, to say where the gather-and-broadcast
   costs more than a ring all-reduce and at what model size that matters against a --delay-s
   iteration.

    .venv/bin/python benchmarks/bench_distributed.py [--workers 3] [--iterations 40] \\
        [--delay-s 0.05] [--factor 5] [--learning ecdf,bandit] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=3, help="n workers (the server is one more process)")
    p.add_argument("--iterations", type=int, default=40, help="iterations of every run")
    p.add_argument("--warmup", type=int, default=5,
                   help="first iterations left out of the steady-state seconds per iteration")
    p.add_argument("--delay-s", type=float, default=0.05,
                   help="seconds added to every gradient (bdsgd distributed --delay-s, and DDP)")
    p.add_argument("--factor", type=float, default=5.0, help="the straggler (worker 0) takes this x")
    p.add_argument("--batch", type=int, default=16, help="samples per worker per iteration")
    p.add_argument("--learning", default="ecdf,bandit",
                   help="learning policies also run for real under the straggler (comma list; "
                        "'' for none): each costs one more job")
    p.add_argument("--sizes", default="1e5,1e6,4e6",
                   help="vector sizes (parameters) of the message benchmark, beside the model's")
    p.add_argument("--out", help="folder for the runs' JSON, metrics and traces (default: a new "
                                 "temporary folder, printed)")
    add_option(p)
    return p.parse_args()


# --------------------------------------------------------------------------- real jobs
def bdsgd_distributed(args, out: Path, name: str, policy: str, *, straggler: bool,
                      delay_s: float) -> dict:
    """One ``bdsgd distributed`` command; its result JSON plus the command's own wall time."""
    result = out / f"{name}.json"
    cmd = [sys.executable, "-m", "bdsgd", "distributed", "--workers", str(args.workers),
           "--policy", policy, "--iterations", str(args.iterations), "--config",
           str(out / "config.yaml"), "--late", "finish", "--delay-s", str(delay_s),
           "--json", str(result)]
    if straggler:
        cmd += ["--inject-straggler", f"0:{args.factor}"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    command_s = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}"
                 f"\n{proc.stderr[-2000:]}")
    run = json.loads(result.read_text())
    run["command_s"] = command_s
    print(f"  {name}: {run['wall_s']:.2f} s in the server, {command_s:.2f} s the command",
          file=sys.stderr, flush=True)
    return run


def steady(wall_time_s, warmup: int) -> float:
    """Seconds per iteration after the warm-up, from the cumulative wall times."""
    K = len(wall_time_s)
    return float((wall_time_s[K - 1] - wall_time_s[warmup - 1]) / (K - warmup))


# -------------------------------------------------------------------- DDP and messages
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ddp_phase(args, rank: int, group, straggler: bool, delay_s: float,
               compute_s: float) -> dict | None:
    """K iterations of DDP on ranks 1..n (rank 0 waits); rank 1 returns the timings."""
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    from bdsgd.tasks import WorkerStreams, load_task

    if rank == 0:
        dist.barrier()
        return None
    w, n, K = rank - 1, args.workers, args.warmup + args.iterations
    data = load_task("digits", "data")
    streams = WorkerStreams(len(data.train), n, args.batch, 0)
    torch.manual_seed(0)
    model = DistributedDataParallel(data.make_model(), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    factor = args.factor if straggler and w == 0 else 1.0
    steps, ends = [], []
    dist.barrier(group)
    start = time.perf_counter()
    for t in range(K):
        x, y = data.batch(data.train, streams.batch(t, np.array([w])))
        # the injected work comes before the backward pass, whose all-reduce then waits for it;
        # as in the server's workers, the straggler's whole work (delay + compute) is factor x
        # (compute: one forward + backward, measured alone: the step below holds the all-reduce)
        time.sleep(max(0.0, (delay_s + compute_s) * factor - compute_s))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()  # the all-reduce runs inside
        opt.step()
        steps.append(time.perf_counter() - t0)
        ends.append(time.perf_counter() - start)
    dist.barrier(group)
    dist.barrier()
    if rank != 1:
        return None
    return {"steady_s": steady(ends, args.warmup), "step_s_median": float(np.median(steps)),
            "iterations": args.iterations}


def _messages(args, rank: int, group, sizes: list[int]) -> dict | None:
    """Per size: the server's round (theta to each worker, a gradient back from each) and an
    all-reduce among the workers; rank 0 returns both."""
    import torch
    import torch.distributed as dist

    n, out = args.workers, {}
    for size in sizes:
        rounds = max(5, min(40, int(4e7 // size)))
        buf = torch.zeros(size + 3)
        inbox = [torch.empty(size + 3) for _ in range(n)]
        dist.barrier()
        times = []
        for _ in range(rounds + 2):
            t0 = time.perf_counter()
            if rank == 0:  # the server's receives wait already (its listener threads)
                reqs = [dist.irecv(inbox[r - 1], src=r) for r in range(1, n + 1)]
                for r in range(1, n + 1):  # it sends one after the other, as ps._send
                    dist.send(buf, dst=r)
                for req in reqs:
                    req.wait()
            else:
                dist.recv(buf, src=0)
                dist.send(buf, dst=0)
            times.append(time.perf_counter() - t0)
        ps = times[2:]
        dist.barrier()
        times = []
        if rank != 0:
            vec = torch.zeros(size)
            for _ in range(rounds + 2):
                dist.barrier(group)
                t0 = time.perf_counter()
                dist.all_reduce(vec, group=group)
                times.append(time.perf_counter() - t0)
        dist.barrier()
        if rank == 1:
            dist.send(torch.tensor(times[2:], dtype=torch.float64), dst=0)
        elif rank == 0:
            ar = torch.zeros(rounds, dtype=torch.float64)
            dist.recv(ar, src=1)
            ar = ar.tolist()
            out[size] = {"ps_round_s": min(ps), "allreduce_s": min(ar),
                         "ps_round_median_s": sorted(ps)[rounds // 2],
                         "allreduce_median_s": sorted(ar)[rounds // 2], "rounds": rounds}
    return out if rank == 0 else None


def _spawned(rank: int, args, port: int, sizes: list[int], out_dir: str, compute_s: float) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    world = args.workers + 1
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    group = dist.new_group(list(range(1, world)))
    result = {}
    for name, straggler, delay in (("ddp_calm", False, args.delay_s), ("ddp_zero", False, 0.0),
                                   ("ddp_straggler", True, args.delay_s)):
        result[name] = _ddp_phase(args, rank, group, straggler, delay, compute_s)
    result["messages"] = _messages(args, rank, group, sizes)
    dist.barrier()
    dist.destroy_process_group()
    kept = {k: v for k, v in result.items() if v is not None}
    if kept:
        Path(out_dir, f"spawned_{rank}.json").write_text(json.dumps(kept))


def ddp_and_messages(args, out: Path, sizes: list[int], compute_s: float) -> dict:
    import torch.multiprocessing as mp

    os.environ["OMP_NUM_THREADS"] = "1"
    start = time.perf_counter()
    mp.spawn(_spawned, args=(args, _free_port(), sizes, str(out), compute_s), nprocs=args.workers + 1,
             join=True)
    print(f"  DDP and messages: {time.perf_counter() - start:.2f} s", file=sys.stderr, flush=True)
    merged = {}
    for rank in range(args.workers + 1):
        path = out / f"spawned_{rank}.json"
        if path.exists():
            merged.update(json.loads(path.read_text()))
    merged["messages"] = {int(k): v for k, v in merged["messages"].items()}
    return merged


def compute_per_gradient(batch: int, n: int) -> tuple[float, int]:
    """Median seconds of one worker's forward + backward on the digits network (one thread),
    and the network's parameter count."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from bdsgd.tasks import WorkerStreams, load_task

    torch.set_num_threads(1)
    data = load_task("digits", "data")
    streams = WorkerStreams(len(data.train), n, batch, 0)
    model = data.make_model()
    times = []
    for t in range(300):
        x, y = data.batch(data.train, streams.batch(t, np.array([0])))
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        times.append(time.perf_counter() - t0)
    return float(np.median(times[50:])), sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------- virtual
def virtual(name: str, trace, cfg, n: int, batch: int, comm_s: float = 0.0):
    """Replay the policy on a trace (censored entries at their lower bound), each iteration
    charged comm_s more; (Replay, cells that were censored)."""
    import dataclasses

    import numpy as np

    from bdsgd.cluster.server import replay
    from bdsgd.policies.build import make_policy

    censored = int(trace.censored.sum())
    complete = dataclasses.replace(trace, censored=np.zeros_like(trace.censored))
    policy = make_policy(name, n, cfg.policies, seed=0, comm=comm_s, objective="throughput",
                         batch=batch, lr_scaling=cfg.training().lr_scaling)
    return replay(complete, policy, comm_s), censored


def main() -> None:
    args = parse_args()
    if args.warmup >= args.iterations:
        sys.exit("--iterations must exceed --warmup")
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    n, K = args.workers, args.iterations
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="bench_distributed_"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(json.dumps({
        "experiment": "bench", "traces": {"t": {"source": "simulate"}},
        "policies": {"static_backups": 1},  # static: c = n - 1
        "train": {"trace": "t", "tasks": ["digits"], "batch_size": args.batch,
                  # one test evaluation, after the last iteration; no checkpoint in the loop
                  "eval_every": 10 * K, "checkpoint_every": 10 * K}}))
    learning = [p for p in args.learning.split(",") if p]
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    print(f"outputs in {out}", file=sys.stderr)

    import numpy as np
    import pandas as pd

    from bdsgd.config import load_config
    from bdsgd.traces.io import read_trace
    from bdsgd.traces.schema import from_arrays

    compute_s, params = compute_per_gradient(args.batch, n)
    print(f"runs ({n} workers, {K} iterations, delay {args.delay_s} s, worker 0 {args.factor}x "
          f"in the straggler runs, --late finish):", file=sys.stderr)
    runs = {}
    for policy in ["sync", "static", *learning]:
        runs[policy] = bdsgd_distributed(args, out, policy, policy, straggler=True,
                                         delay_s=args.delay_s)
    runs["sync_calm"] = bdsgd_distributed(args, out, "sync_calm", "sync", straggler=False,
                                          delay_s=args.delay_s)
    runs["sync_zero"] = bdsgd_distributed(args, out, "sync_zero", "sync", straggler=False,
                                          delay_s=0.0)
    spawned = ddp_and_messages(args, out, [params, *sizes], compute_s)
    metrics = {k: pd.read_parquet(r["metrics"]) for k, r in runs.items()}
    for k, r in runs.items():
        r["steady_s"] = steady(metrics[k]["wall_time_s"].to_numpy(), args.warmup)

    # ------------------------------------------------------------------ 1. fidelity
    cfg = load_config(out / "config.yaml")
    sync_trace = read_trace(runs["sync"]["trace"])
    work = np.full((K, n), args.delay_s + compute_s)  # what the workers were told to take
    work[:, 0] *= args.factor
    injected = from_arrays(work, {"source": "injected", "time_unit": "s"})
    # one sync run without a straggler calibrates what the work leaves out, per iteration
    overhead = runs["sync_calm"]["steady_s"] - args.delay_s - compute_s
    print(f"\n1. Virtual clock against the real run ({n} workers, {K} iterations, worker 0 "
          f"{args.factor:g}x, delay {args.delay_s} s, --late finish). Ratios virtual / real.")
    print(f"{'policy':<8} {'trace':<5} {'censored':>8} {'same c':>7} {'virtual s':>9} "
          f"{'sum iter s':>10} {'wall_s':>7} {'command s':>9} | {'v/sum':>6} {'v/wall':>6} "
          f"{'v/cmd':>6} {'rate v/r':>8}")
    print("trace own: the run's recorded trace (censored entries at their bound); sync: the sync "
          "run's (complete); inj: the injected work alone, (delay + compute) x factor, no messages; "
          f"inj+c: the same + {1e3 * overhead:.2f} ms per iteration (sync, no straggler: seconds "
          "per iteration - delay - compute)")
    for policy in ["sync", "static", *learning]:
        run, m = runs[policy], metrics[policy]
        sum_iter = float(m["iteration_time_s"].sum())
        for label, trace, comm in (("own", read_trace(run["trace"]), 0.0),
                                   ("sync", sync_trace, 0.0), ("inj", injected, 0.0),
                                   ("inj+c", injected, overhead)):
            if label == "sync" and policy == "sync":
                continue
            rep, cens = virtual(policy, trace, cfg, n, args.batch, comm)
            v = float(rep.durations.sum())
            same = float(np.mean(rep.cutoffs == m["cutoff"].to_numpy()))
            print(f"{policy:<8} {label:<5} {cens:>8d} {same:>7.0%} {v:>9.3f} {sum_iter:>10.3f} "
                  f"{run['wall_s']:>7.3f} {run['command_s']:>9.2f} | {v / sum_iter:>6.3f} "
                  f"{v / run['wall_s']:>6.3f} {v / run['command_s']:>6.3f} "
                  f"{rep.gradients_per_s / run['gradients_per_s']:>8.3f}")
    print("Where the wall time goes (ms per iteration; the processes' start and stop: s):")
    print(f"{'run':<10} {'iteration':>9} {'policy':>7} {'server rest':>11} {'heartbeats':>10} "
          "| start + stop (s)")
    for k, run in runs.items():
        m = metrics[k]
        sum_iter, dec = float(m["iteration_time_s"].sum()), float(m["decision_s"].sum())
        # heartbeats are looked at while the server waits, so they are inside the iterations
        print(f"{k:<10} {1e3 * sum_iter / K:>9.2f} {1e3 * dec / K:>7.3f} "
              f"{1e3 * (run['wall_s'] - sum_iter - dec) / K:>11.2f} "
              f"{1e3 * run['heartbeat_check_s'] / K:>10.3f} "
              f"| {run['command_s'] - run['wall_s']:.2f}")
    fast = sync_trace.runtimes[:, 1:]
    print(f"Fast workers' recorded run-time, median {1e3 * float(np.median(fast)):.2f} ms = delay "
          f"{1e3 * args.delay_s:.0f} + compute {1e3 * compute_s:.2f} + "
          f"{1e3 * (float(np.median(fast)) - args.delay_s - compute_s):.2f} ms messages and "
          f"scheduling")

    # ------------------------------------------------------------- 2. against DDP
    print(f"\n2. Parameter server against DDP (all-reduce, gloo), steady state after "
          f"{args.warmup} iterations; {n} workers x {args.batch} samples, digits MLP "
          f"({params:,} parameters), compute {1e3 * compute_s:.2f} ms per gradient.")
    print(f"{'case':<34} {'PS s/it':>8} {'DDP s/it':>8} {'PS/DDP':>7} {'PS grad/s':>9} "
          f"{'DDP grad/s':>10} {'grad/s PS/DDP':>13} {'mean c':>6}")
    cases = [(f"no straggler, delay {args.delay_s:g}: sync", "sync_calm", "ddp_calm"),
             ("no straggler, delay 0: sync", "sync_zero", "ddp_zero")]
    cases += [(f"worker 0 {args.factor:g}x, delay {args.delay_s:g}: {p}", p, "ddp_straggler")
              for p in ["sync", "static", *learning]]
    for label, k, d in cases:
        ps, ddp = runs[k]["steady_s"], spawned[d]["steady_s"]
        c = float(metrics[k]["cutoff"].iloc[args.warmup:].mean())
        print(f"{label:<34} {ps:>8.4f} {ddp:>8.4f} {ps / ddp:>7.3f} {c / ps:>9.1f} "
              f"{n / ddp:>10.1f} {(c / ps) / (n / ddp):>13.3f} {c:>6.2f}")
    print("Per iteration beyond the work (delay + one gradient's compute), ms: messages, "
          "waking and Python")
    for delay, ps_key, ddp_key in ((0.0, "sync_zero", "ddp_zero"),
                                   (args.delay_s, "sync_calm", "ddp_calm")):
        work = delay + compute_s
        print(f"  delay {delay:g}: PS {1e3 * (runs[ps_key]['steady_s'] - work):.2f}, "
              f"DDP {1e3 * (spawned[ddp_key]['steady_s'] - work):.2f} (its step: forward, "
              f"backward with the all-reduce, optimizer, median "
              f"{1e3 * spawned[ddp_key]['step_s_median']:.2f})")

    msgs = spawned["messages"]
    print(f"\nMessages alone ({n} workers; the server sends theta to each, one after the other, "
          "and receives n gradients; all-reduce among the n workers), ms, best of the rounds "
          "(median in brackets):")
    print(f"{'parameters':>10} {'rounds':>6} {'PS round':>16} {'all-reduce':>16} {'PS/AR':>6}")
    for size in sorted(msgs):
        m = msgs[size]
        ps, ar = m["ps_round_s"], m["allreduce_s"]
        print(f"{size:>10,} {m['rounds']:>6} {1e3 * ps:>7.3f} [{1e3 * m['ps_round_median_s']:>6.3f}] "
              f"{1e3 * ar:>7.3f} [{1e3 * m['allreduce_median_s']:>6.3f}] {ps / ar:>6.2f}")
    big = [size for size in sorted(msgs) if size >= 100_000]
    x = np.array(big if len(big) >= 2 else sorted(msgs), float)
    fit = {}
    for key in ("ps_round_s", "allreduce_s"):
        y = np.array([msgs[int(s)][key] for s in x])
        slope, intercept = np.polyfit(x, y, 1)
        fit[key] = (intercept, slope)
    b_ps, b_ar = fit["ps_round_s"][1], fit["allreduce_s"][1]
    print(f"per parameter (least squares over {', '.join(f'{int(v):,}' for v in x)}): PS "
          f"{1e9 * b_ps:.2f} ns, all-reduce {1e9 * b_ar:.2f} ns")
    print(f"bytes per parameter and iteration, sent + received: the server 2n x 4 = {8 * n}, a "
          f"ring all-reduce's busiest process 2 x 2(n-1)/n x 4 = {16 * (n - 1) / n:.1f} (ratio "
          f"n^2 / 2(n-1) = {n * n / (2 * (n - 1)):.2f}: one link each); all processes together "
          f"{8 * n} against {8 * (n - 1)} (ratio {n / (n - 1):.2f}: one shared memory bus)")
    extra = b_ps - b_ar
    if extra > 0:
        p10 = 0.1 * (args.delay_s + compute_s) / extra
        print(f"the server's extra over the all-reduce reaches 10 % of a {args.delay_s:g} s "
              f"iteration at {p10:,.0f} parameters ({4 * p10 / 2**20:,.0f} MiB of float32); "
              f"at the digits MLP's {params:,} it is {1e3 * extra * params:.3f} ms")
    p10 = 0.1 * (args.delay_s + compute_s) / b_ps
    print(f"the server's whole round reaches 10 % of that iteration at {p10:,.0f} parameters "
          f"({4 * p10 / 2**20:,.0f} MiB)")
    summary = {"args": vars(args), "compute_s": compute_s, "params": params,
               "runs": {k: {key: r[key] for key in ("wall_s", "command_s", "steady_s",
                                                     "gradients_per_s", "mean_cutoff",
                                                     "censored_fraction", "stale_discarded")}
                        for k, r in runs.items()},
               "ddp": {k: v for k, v in spawned.items() if k != "messages"},
               "messages": msgs, "fit": fit}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
