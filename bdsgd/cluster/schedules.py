"""Virtual-clock schedules of the training modes that apply no cutoff: asynchronous SGD and
cyclic pushes. The throughput stage's async reference and the trainers read the same schedule,
so a trace has one staleness whichever asks.

Both depend on the trace alone (arrival times are running sums of each worker's column, never
of the gradients), so each is computed whole, before any gradient is.

**Asynchronous** (``async_schedule``). Worker w computes gradients back to back; its k-th takes
x_{k mod T, w}, then it exchanges the gradient for the newest parameters: the push (the server's
update) and its pull take e = ``exchange_s`` together, of which the server's link is busy
l = ``link_s`` (``bdsgd.cluster.network``: l = 0 and e = comm_s under the constant topology). Pushes
queue for the link in the order they are ready: a push ready at r starts at b = max(r, the link's
free time), and the gradient arrives (is applied, and its worker starts its next one) at b + e.
With l = 0 nobody queues: a_{k,w} = sum_{i<=k} (x_{i mod T, w} + e).

**Tie rule**: arrivals are applied in order of (time, worker index). Gradients that arrive at
the same instant are applied one after the other, and their workers pull after the instant's
last update. A gradient's staleness is the number of updates applied between its pull and its
own update (u - p for update u whose parameters were theta_p), so on a trace whose n workers
are equally fast a round of n updates has staleness 0, 1, ..., n - 1.

**Cyclic** (``cyclic_schedule``). A token visits the workers 0, 1, ..., n-1, 0, ...; a worker
holding finished, unpushed gradients pushes their sum (the server applies it e = ``exchange_s``
later; one push on the wire at a time), one without any is skipped at no cost, and when nobody
has one the token waits for the next to finish. Each gradient starts on the newest parameters,
those after every update applied by its start (an instant's updates included). With e = 0 this
is the asynchronous schedule update for update, staleness included.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import heapq

import numpy as np

# The training modes that are no cutoff policy: ``--policy async|cyclic`` runs one of these
# schedules, and they need nothing a cutoff policy needs.
MODES = ASYNC, CYCLIC = ("async", "cyclic")


def is_mode(name: str) -> bool:
    """Whether ``name`` is a training mode rather than a cutoff policy."""
    return name in MODES


def arrivals(runtimes: np.ndarray, exchange_s: float, per_worker: int,
             link_s: float = 0.0) -> np.ndarray:
    """(per_worker, n): worker w's k-th gradient's arrival, its pushes queued for the link."""
    T, n = runtimes.shape
    rows = np.arange(per_worker) % T
    if link_s == 0:
        return np.cumsum(runtimes[rows] + exchange_s, axis=0)
    out = np.empty((per_worker, n))
    ready = [(float(runtimes[0, w]), w, 0) for w in range(n)]  # (push ready, worker, k)
    heapq.heapify(ready)
    free = 0.0
    while ready:  # the pushes in the order they are ready (ties by worker)
        r, w, k = heapq.heappop(ready)
        begin = max(r, free)
        free = begin + link_s
        out[k, w] = begin + exchange_s
        if k + 1 < per_worker:
            heapq.heappush(ready, (out[k, w] + float(runtimes[rows[k + 1], w]), w, k + 1))
    return out


@dataclasses.dataclass(frozen=True)
class AsyncSchedule:
    """The asynchronous run's updates in order (arrays of length n_updates)."""
    worker: np.ndarray     # the worker whose gradient update u applies
    index: np.ndarray      # that gradient's number k for its worker (its mini-batch's iteration)
    arrival: np.ndarray    # its arrival: the virtual time of update u
    staleness: np.ndarray  # updates applied between its pull and its arrival
    pull: np.ndarray       # update u ends its instant: the workers applied since the last pull
                           # now pull the parameters


def async_schedule(runtimes: np.ndarray, exchange_s: float, n_updates: int,
                   link_s: float = 0.0) -> AsyncSchedule:
    """The first ``n_updates`` updates of asynchronous SGD on the trace (cycled)."""
    n = runtimes.shape[1]
    per_worker = -(-(n_updates + 1) // n)
    while True:  # enough arrivals that none left out could come before the (n_updates+1)-th
        times = arrivals(runtimes, exchange_s, per_worker, link_s)
        order = np.lexsort((np.broadcast_to(np.arange(n), times.shape).ravel(), times.ravel()))
        if times.ravel()[order[n_updates]] <= times[-1].min():
            break
        per_worker *= 2
    index, worker = np.divmod(order[:n_updates + 1], n)
    sorted_times = times.ravel()[order]
    arrival = sorted_times[:n_updates]
    # a worker pulls after the last update of the instant it delivered at (k = 0: at time 0)
    previous = np.where(index[:n_updates] > 0, times[np.maximum(index[:n_updates] - 1, 0),
                                                      worker[:n_updates]], -np.inf)
    pulled_at = np.searchsorted(sorted_times, previous, side="right")
    return AsyncSchedule(worker[:n_updates], index[:n_updates], arrival,
                         np.arange(n_updates) - pulled_at, sorted_times[1:n_updates + 1] != arrival)


def async_reference(runtimes: np.ndarray, exchange_s: float = 0.0,
                    link_s: float = 0.0) -> dict[str, float]:
    """Asynchronous SGD over one pass of the trace, a throughput reference: the updates that
    arrive by the horizon H = min_w a_{T-1,w} (while every worker still has trace left), their
    rate and their staleness (``async_schedule``'s, tie rule included)."""
    arrival = arrivals(runtimes, exchange_s, len(runtimes), link_s)
    horizon = arrival[-1].min()
    sched = async_schedule(runtimes, exchange_s, int((arrival <= horizon).sum()), link_s)
    return {"gradients_per_s": float(len(sched.worker) / horizon),
            "mean_staleness": float(sched.staleness.mean()),
            "max_staleness": int(sched.staleness.max())}


@dataclasses.dataclass(frozen=True)
class CyclicSchedule:
    """The pushes in order (arrays of length n_updates) and the gradients each applies."""
    worker: np.ndarray     # the worker whose push update u applies
    time: np.ndarray       # the virtual time of update u
    first: np.ndarray      # its gradients are the worker's first[u] .. first[u] + count[u] - 1
    count: np.ndarray
    pull: np.ndarray       # per applied gradient (in update order): the updates applied before the
    staleness: np.ndarray  # pull whose parameters it used; updates between that pull and its push

    def groups(self) -> dict[int, list[tuple[int, int, int, int]]]:
        """pull p -> [(update, worker, first k, count)]: the gradients computed on theta_p that
        one backward pass gives (same worker, pull and push), to compute once theta_p holds."""
        out: dict[int, list] = collections.defaultdict(list)
        g = 0
        for u, (w, k0, m) in enumerate(zip(self.worker, self.first, self.count, strict=True)):
            pulls = self.pull[g:g + m]
            for p in np.unique(pulls):
                ks = k0 + np.flatnonzero(pulls == p)
                out[int(p)].append((u, int(w), int(ks[0]), len(ks)))
            g += m
        return out


def cyclic_schedule(runtimes: np.ndarray, exchange_s: float, n_gradients: int) -> CyclicSchedule:
    """The token's rounds on the trace (cycled) until n_gradients gradients are applied."""
    n = runtimes.shape[1]
    per_worker = n_gradients // n + 2
    # rows[w][k]: worker w's k-th gradient done; plain lists: the loop costs ~1 us a visit
    rows = [list(row) for row in arrivals(runtimes, 0.0, per_worker).T]
    pushed = [0] * n
    upcoming = [row[0] for row in rows]  # each worker's next unpushed gradient's finish
    worker, at, first, count = [], [], [], []
    s, j, applied = 0.0, 0, 0
    while applied < n_gradients:
        # the token skips, at no cost, every worker without a finished gradient to push; when
        # nobody has one it waits for the next to finish
        if min(upcoming) > s:
            s = min(upcoming)
        while upcoming[j] > s:
            j = (j + 1) % n
        while rows[j][-1] <= s:  # more of the worker's finish times than computed so far
            per_worker *= 2
            rows = [list(row) for row in arrivals(runtimes, 0.0, per_worker).T]
        done = bisect.bisect_right(rows[j], s)
        m = min(done - pushed[j], n_gradients - applied)
        s += exchange_s
        worker.append(j), at.append(s), first.append(pushed[j]), count.append(m)
        pushed[j] += m
        applied += m
        upcoming[j] = rows[j][pushed[j]]
        j = (j + 1) % n
    worker, first, count = np.array(worker), np.array(first), np.array(count)
    # each applied gradient's pull: the updates applied by its start (the end of its worker's
    # previous gradient), all of an instant's updates included
    u = np.repeat(np.arange(len(worker)), count)
    w = worker[u]
    k = np.arange(count.sum()) - np.repeat(np.cumsum(count) - count, count) + first[u]
    finish = np.array(rows)
    starts = np.where(k > 0, finish[w, np.maximum(k - 1, 0)], -np.inf)
    pull = np.searchsorted(np.array(at), starts, side="right")
    return CyclicSchedule(worker, np.array(at), first, count, pull, u - pull)
