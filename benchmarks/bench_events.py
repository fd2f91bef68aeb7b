"""Cost of the asynchronous and cyclic modes' event schedules per applied gradient (goal: far
below one gradient's computation, and below a loop over every gradient's finish event).

Side by side at 32 workers: the schedules the trainers use (``bdsgd.cluster.schedules.async_schedule``: n
running sums merged; ``cyclic_schedule``: a loop over the token's visits) against a per-event
Python loop over every gradient's finish (a heap of finish events), which also checks them: both
must give the same updates. It prints the time per applied gradient of each and their ratio, on
a calm cluster and on one with a worker 10x slower.

    .venv/bin/python benchmarks/bench_events.py [--workers 32] [--iterations 2000] [--comm-s 0.01]
"""

from __future__ import annotations

import argparse
import heapq
import time

import numpy as np
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

from bdsgd.cluster.schedules import async_schedule, cyclic_schedule


def async_per_event(runtimes: np.ndarray, comm_s: float, n_updates: int):
    """Asynchronous SGD one arrival at a time: (worker, index, arrival, staleness, pull)."""
    T, n = runtimes.shape
    heap = [(float(runtimes[0, w] + comm_s), w) for w in range(n)]
    heapq.heapify(heap)
    started, pulled_at, pending = np.zeros(n, np.int64), np.zeros(n, np.int64), []
    out = {k: [] for k in ("worker", "index", "arrival", "staleness", "pull")}
    for u in range(n_updates):
        a, w = heapq.heappop(heap)
        for key, value in zip(out, (w, started[w], a, u - pulled_at[w], False), strict=True):
            out[key].append(value)
        pending.append(w)
        if not heap or heap[0][0] != a:  # the instant's last arrival: its workers pull
            out["pull"][-1] = True
            for v in pending:
                pulled_at[v], started[v] = u + 1, started[v] + 1
                heapq.heappush(heap, (a + float(runtimes[started[v] % T, v] + comm_s), v))
            pending = []
    return {k: np.array(v) for k, v in out.items()}


def cyclic_per_event(runtimes: np.ndarray, comm_s: float, n_gradients: int):
    """The cyclic token one finish event at a time: (worker, time, first, count) per push."""
    T, n = runtimes.shape
    heap = [(float(runtimes[0, w]), w, 0) for w in range(n)]  # (finish, worker, k)
    heapq.heapify(heap)
    finished, pushed = np.zeros(n, np.int64), np.zeros(n, np.int64)
    out = {k: [] for k in ("worker", "time", "first", "count")}
    s, j, idle, applied = 0.0, 0, 0, 0
    while applied < n_gradients:
        while heap[0][0] <= s:  # every gradient finished by now
            f, w, k = heapq.heappop(heap)
            finished[w] = k + 1
            heapq.heappush(heap, (f + float(runtimes[(k + 1) % T, w]), w, k + 1))
        if finished[j] > pushed[j]:
            m = min(finished[j] - pushed[j], n_gradients - applied)
            s += comm_s
            for key, value in zip(out, (j, s, pushed[j], m), strict=True):
                out[key].append(value)
            pushed[j] += m
            applied += m
            idle = 0
        else:
            idle += 1
            if idle == n:
                s, idle = heap[0][0], 0
        j = (j + 1) % n
    return {k: np.array(v) for k, v in out.items()}


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=32, help="n workers")
    parser.add_argument("--iterations", type=int, default=2000,
                        help="synchronous-equivalent iterations: n x this many gradients applied")
    parser.add_argument("--comm-s", type=float, default=0.01, help="communication time (s)")
    add_option(parser)
    args = parser.parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    n, K = args.workers, args.iterations
    rng = np.random.default_rng(0)
    calm = rng.lognormal(0.0, 0.2, (500, n))
    straggler = calm.copy()
    straggler[:, 0] *= 10.0
    total = n * K
    for name, runtimes in (("calm", calm), ("a 10x straggler", straggler)):
        vec_a, a = timed(lambda r=runtimes: async_schedule(r, args.comm_s, total))
        loop_a, ref_a = timed(lambda r=runtimes: async_per_event(r, args.comm_s, total))
        assert np.array_equal(a.worker, ref_a["worker"]) and np.array_equal(a.pull, ref_a["pull"])
        assert np.array_equal(a.staleness, ref_a["staleness"])
        vec_c, c = timed(lambda r=runtimes: cyclic_schedule(r, args.comm_s, total))
        loop_c, ref_c = timed(lambda r=runtimes: cyclic_per_event(r, args.comm_s, total))
        assert np.array_equal(c.worker, ref_c["worker"]) and np.array_equal(c.count, ref_c["count"])
        print(f"{n} workers, {total:,} gradients, {name}:")
        print(f"  async  schedule {1e6 * vec_a / total:6.2f} us/gradient, per-event loop "
              f"{1e6 * loop_a / total:6.2f} us/gradient: {loop_a / vec_a:5.1f}x faster")
        print(f"  cyclic schedule {1e6 * vec_c / total:6.2f} us/gradient, per-event loop "
              f"{1e6 * loop_c / total:6.2f} us/gradient: {loop_c / vec_c:5.1f}x faster "
              f"({len(c.worker):,} pushes, mean staleness {c.staleness.mean():.1f})")


if __name__ == "__main__":
    main()
