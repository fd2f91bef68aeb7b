"""The virtual cluster: communication from the network model (each topology by hand, the server's
pipeline against an event simulation), late workers that abandon or finish (by hand), pushes
queued on the server, the hindsight optimum against brute force, and one time base: the scaled
compute clock of a training run and a replay's, which give one trace one regime."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from bdsgd.cluster.clock import SyncClock, replay_cutoffs
from bdsgd.cluster.compute import Compute
from bdsgd.cluster.cutoff import hindsight_optimum, throughput
from bdsgd.cluster.network import Network
from bdsgd.cluster.schedules import arrivals
from bdsgd.cluster.server import replay
from bdsgd.policies import build
from bdsgd.traces.formats import import_trace
from bdsgd.traces.schema import from_arrays
from tests.helpers import DATA, make_cfg, write

# G / B = 1 ms, L = 0.1 ms, n = 4
LINK = {"gradient_bytes": 1e6, "bandwidth_bytes_s": 1e9, "latency_s": 1e-4}


@pytest.mark.parametrize("topology, shards, expected", [
    ("ps", 1, [2e-4 + (c + 4) * 1e-3 for c in (1, 2, 3, 4)]),
    ("sharded", 2, [2e-4 + (c + 4) * 0.5e-3 for c in (1, 2, 3, 4)]),
    ("ring", 1, [6 * (1e-4 + 0.25e-3)] * 4),  # over all n whatever c
])
def test_comm_of_bunched_arrivals_by_hand(topology, shards, expected):
    """Gradients done at once queue for the server's link: c pushes in, then n copies out."""
    np.testing.assert_allclose(Network(topology, shards=shards, **LINK).comm(4), expected,
                               rtol=1e-12)


def test_gradients_that_arrive_spread_out_cross_the_link_while_others_compute():
    """Arrivals 10 ms apart and a 1 ms push: each gradient has crossed before the next is done,
    so a cut saves the wait, not the pushes: D(c) = a_(c) + G/B + 2 L + n G/B."""
    a = np.array([0.01, 0.02, 0.03, 0.04])
    np.testing.assert_allclose(Network("ps", **LINK).durations(a), a + 1e-3 + 2e-4 + 4e-3,
                               rtol=1e-12)


def _event_line(a, s_in, h, latency):
    """A server by events: the link takes the gradients in turn, then the adder in turn."""
    link = add = -np.inf
    out = []
    for t in a:
        link = max(t, link) + s_in
        add = max(link + latency, add) + h
        out.append(add)
    return np.array(out)


@pytest.mark.parametrize("seed", range(4))
def test_the_servers_pipeline_is_the_event_simulation(seed):
    rng = np.random.default_rng(seed)
    a = np.sort(rng.exponential(2e-3, size=9))
    for gbyte_s in (0.5, 8.0):  # the adder the bottleneck, then the link
        net = Network("ps", aggregate_bytes_s=gbyte_s * 1e9, update_bytes_s=2e9, **LINK)
        tail = net.update_s + 1e-4 + 9 * 1e-3  # the step, then n copies out
        np.testing.assert_allclose(net.durations(a), _event_line(a, 1e-3, net.aggregate_s, 1e-4)
                                   + tail, rtol=1e-12)


def test_a_ring_cannot_run_backup_workers_that_finish():
    from bdsgd.cluster.virtual import build
    from bdsgd.errors import UserError

    cfg = make_cfg(network={"topology": "ring", "late": "finish"})
    with pytest.raises(UserError, match="network.late: finish"):
        build(cfg, from_arrays(np.ones((3, 3))), Network("ring", **LINK))


def test_the_constant_topology_charges_comm_s_whatever_moves():
    net = Network("constant", comm_s=0.05, **LINK)
    np.testing.assert_array_equal(net.comm(3), [0.05] * 3)
    assert net.link_s == 0.0 and net.exchange_s == 0.05


def test_an_asynchronous_push_holds_a_full_duplex_link_for_one_gradient():
    assert Network("ps", **LINK).link_s == pytest.approx(1e-3)
    assert Network("sharded", shards=4, **LINK).link_s == pytest.approx(0.25e-3)
    assert Network("ps", **LINK).exchange_s == pytest.approx(2e-3 + 2e-4)
    with pytest.raises(ValueError, match="no server"):
        _ = Network("ring", **LINK).link_s


def test_pushes_queue_for_the_link_by_hand():
    """Two workers ready at 1: the first holds the link 0.3, the second starts after it."""
    got = arrivals(np.array([[1.0, 1.0]]), exchange_s=0.5, per_worker=2, link_s=0.3)
    np.testing.assert_allclose(got, [[1.5, 1.8], [3.0, 3.3]])
    free = arrivals(np.array([[1.0, 2.0]]), exchange_s=0.5, per_worker=3)
    np.testing.assert_array_equal(free, np.cumsum([[1.5, 2.5]] * 3, axis=0))


def test_an_iteration_under_abandon_by_hand():
    clock = SyncClock(np.full(3, 0.5), 3, "abandon")
    first = clock.iteration(0, np.array([1.0, 2.0, 4.0]), 2)
    assert first.cutoff_time == 2.0 and first.duration == 2.5
    np.testing.assert_array_equal(first.runtimes, [1.0, 2.0, np.nan])
    second = clock.iteration(1, np.array([1.0, 1.0, 1.0]), 3)  # every worker fresh
    assert second.duration == 1.5 and second.late is None


def _event_line_with_stale(a, stale, s_in, h, latency):
    """The server by events with stale gradients too: the link takes every gradient in arrival
    order (a counted one first on a tie), the adder only the counted ones."""
    jobs = sorted([(t, 0) for t in a] + [(t, 1) for t in stale])
    link = add = -np.inf
    out = []
    for t, is_stale in jobs:
        link = max(t, link) + s_in
        if not is_stale:
            add = max(link + latency, add) + h
            out.append(add)
    return np.array(out)


@pytest.mark.parametrize("seed", range(4))
def test_stale_gradients_cross_the_link_in_the_event_simulations_order(seed):
    """Under finish, late workers' stale gradients reach the server during the next iteration:
    they hold its link (and only its link) in arrival order with the counted ones."""
    rng = np.random.default_rng(seed)
    a, stale = np.sort(rng.exponential(2e-3, size=9)), rng.exponential(2e-3, size=3)
    for gbyte_s in (0.5, 8.0):
        net = Network("ps", aggregate_bytes_s=gbyte_s * 1e9, update_bytes_s=2e9, **LINK)
        tail = net.update_s + 1e-4 + 9 * 1e-3
        np.testing.assert_allclose(net.durations(a, stale), _event_line_with_stale(
            a, stale, 1e-3, net.aggregate_s, 1e-4) + tail, rtol=1e-12)
        assert (net.durations(a, stale) >= net.durations(a) - 1e-15).all()


def test_a_stale_gradient_delays_the_next_iteration_on_a_busy_link():
    """One server, 1 ms a push, 0.1 ms latency. Iteration 0 cuts worker 2 (10.5 ms) at c = 2 and
    ends at 2 + 1 + 0.2 + 3 = 6.2 ms; under finish it delivers its stale gradient 4.3 ms into
    iteration 1, when the others' gradients arrive: the link takes four pushes, not three, and
    the iteration ends at 8.3 + 0.2 + 3 = 11.5 ms instead of 10.5."""
    net = Network("ps", **LINK)
    clock = SyncClock(net, 3, "finish")
    assert clock.iteration(0, np.array([1e-3, 1e-3, 10.5e-3]), 2).duration == pytest.approx(6.2e-3)
    assert clock.busy[2] == pytest.approx(4.3e-3)
    second = clock.iteration(1, np.array([4.3e-3, 4.3e-3, 1e-3]), 3)
    assert second.duration == pytest.approx(11.5e-3)
    assert net.durations(np.array([4.3e-3, 4.3e-3, 5.3e-3]))[-1] == pytest.approx(10.5e-3)


def test_an_iteration_under_finish_by_hand():
    """Worker 2 (4 s) is cut at tau = 2, the iteration ends at 2.5: it finishes 1.5 into the
    next one, which then waits for it; the server sees its run-time from its late start, 1.0."""
    clock = SyncClock(np.full(3, 0.5), 3, "finish")
    first = clock.iteration(0, np.array([1.0, 2.0, 4.0]), 2)
    assert first.duration == 2.5 and not first.late.any()
    np.testing.assert_array_equal(clock.busy, [0.0, 0.0, 1.5])
    second = clock.iteration(1, np.array([1.0, 1.0, 1.0]), 3)
    assert second.cutoff_time == 2.5 and second.duration == 3.0
    np.testing.assert_array_equal(second.runtimes, [1.0, 1.0, 1.0])


def test_a_recorded_run_replayed_with_its_cutoffs_by_hand():
    """The by-hand iterations above as one record (rows cycle: the third iteration reads row 0
    again, after the fresh second one)."""
    x, comm = np.array([[1.0, 2.0, 4.0], [1.0, 1.0, 1.0]]), np.full(3, 0.5)
    np.testing.assert_array_equal(replay_cutoffs(x, [2, 3, 1], comm, "abandon"), [2.5, 1.5, 1.5])
    # finish: worker 2 finishes 1.5 into the second iteration, which waits for it
    np.testing.assert_array_equal(replay_cutoffs(x, [2, 3], comm, "finish"), [2.5, 3.0])


def test_a_late_gradient_before_the_next_decision_is_observed_not_applied():
    clock = SyncClock(np.full(3, 0.5), 3, "finish")
    obs = clock.iteration(0, np.array([1.0, 2.0, 2.3]), 2)  # worker 2 arrives at 2.3 <= 2.5
    np.testing.assert_array_equal(obs.runtimes, [1.0, 2.0, 2.3])
    np.testing.assert_array_equal(obs.accepted, [True, True, False])
    np.testing.assert_array_equal(obs.observed, [True, True, True])
    assert obs.cutoff == 2 and not clock.busy.any()


def test_finishing_late_work_costs_a_cut_that_comes_and_goes():
    """Stalls that move from worker to worker: abandoning them costs nothing at c = n - 1, while
    finishing them makes the next iteration wait for the stalled worker's late start."""
    x = np.array([[1.0, 1.0, 10.0], [1.0, 10.0, 1.0], [10.0, 1.0, 1.0]] * 4)
    trace, cfg = from_arrays(x), make_cfg(static_backups=1)
    rate = {late: replay(trace, build.make_policy("static", 3, cfg.policies), 0.0,
                         late).gradients_per_s for late in ("abandon", "finish")}
    assert rate["abandon"] == pytest.approx(2.0)
    assert rate["finish"] < 0.5 * rate["abandon"]


def test_a_late_start_is_not_read_as_slowness():
    """PAI job 2's second half, a calm cluster, under finish: persist cuts a worker now and then
    and waits for every worker again, within 2 % of ewma's throughput (which never cuts). Seen
    from the iteration's start, a cut worker's late start read as its slowness, and persist cut
    one worker in 85 of the 119 iterations, 5 % behind."""
    x = import_trace(DATA / "alibaba_pai_job_2_norm.csv", "alibaba-pai").runtimes[119:]
    cfg = make_cfg()
    runs = {name: replay(from_arrays(x), build.make_policy(name, 10, cfg.policies), 0.0, "finish")
            for name in ("persist", "ewma")}
    assert (runs["persist"].cutoffs < 10).sum() < 30
    assert runs["persist"].gradients_per_s > 0.98 * runs["ewma"].gradients_per_s


@pytest.mark.parametrize("seed", range(5))
def test_the_optimum_with_comm_of_c_is_the_brute_force_one(seed):
    rng = np.random.default_rng(seed)
    sorted_x = np.sort(rng.lognormal(size=(3, 4)), axis=1)
    comm = np.sort(rng.uniform(0, 1, size=4))  # comm grows with c, as for a server
    best = max(throughput(sorted_x, np.array(cuts), comm)
               for cuts in itertools.product(range(1, 5), repeat=3))
    cutoffs, rate = hindsight_optimum(sorted_x, comm)
    assert rate == pytest.approx(best, rel=1e-12)
    assert throughput(sorted_x, cutoffs, comm) == rate


def test_a_scaled_clock_counts_the_trace_in_gradient_times():
    compute = Compute.scaled(np.array([[1.0, 2.0], [3.0, 4.0]]), 0.01, "config")
    assert compute.typical == 2.5 and compute.factor == pytest.approx(0.004)
    assert compute.record()["gradient_s_from"] == "config"


def test_a_run_on_the_scaled_clock_with_a_network_records_both(tmp_path):
    """Given a gradient time, every iteration lasts D(c) of the run-times in seconds, f x."""
    from bdsgd.training import run_spec, train_run

    x = np.random.default_rng(0).lognormal(size=(12, 4)) + 1.0
    trace = write(tmp_path, x)
    cfg = make_cfg(static_backups=1, max_iterations=6, eval_every=6, clock="scaled",
                   gradient_s=0.01, network={"topology": "ps", "bandwidth_gbit_s": 1.0,
                                             "latency_s": 1e-4, "late": "abandon"})
    out = train_run(run_spec(cfg, task="digits", policy="static", seed=0, trace_path=trace,
                    out_dir=tmp_path / "run"))
    result = json.loads((out / "result.json").read_text())
    clock, net = result["clock"], result["clock"]["network"]
    f = 0.01 / np.median(x)
    assert clock["clock"] == "scaled" and clock["seconds_per_trace_unit"] == pytest.approx(f)
    metrics = pd.read_parquet(out / "metrics.parquet")
    expected = Network(**net).durations(f * np.sort(x[:6], axis=1))[:, 2]  # c = 3
    np.testing.assert_allclose(metrics["iteration_time_s"], expected, rtol=1e-9)
    assert net["gradient_bytes"] == 4 * (64 * 64 + 64 + 64 * 10 + 10)  # the digits MLP


def test_a_measured_gradient_time_is_recorded(tmp_path):
    from bdsgd.training import run_spec, train_run

    trace = write(tmp_path, np.ones((4, 3)))
    cfg = make_cfg(max_iterations=2, eval_every=2, clock="scaled")
    out = train_run(run_spec(cfg, task="digits", policy="sync", seed=0, trace_path=trace,
                    out_dir=tmp_path / "run"))
    clock = json.loads((out / "result.json").read_text())["clock"]
    assert clock["gradient_s_from"] == "measured" and 0 < clock["gradient_s"] < 1


def test_async_pushes_queue_on_the_servers_link_in_a_run(tmp_path):
    """An asynchronous run on a single server: its clock is the schedule whose pushes queue
    for the link (each exchange 2 G / B on it), and the result says which network it was."""
    from bdsgd.cluster.schedules import async_schedule
    from bdsgd.training import run_spec, train_run

    x = np.random.default_rng(1).lognormal(size=(8, 4)) * 0.01
    trace = write(tmp_path, x)
    network = {"topology": "ps", "bandwidth_gbit_s": 0.01, "latency_s": 1e-4}
    cfg = make_cfg(max_iterations=3, eval_every=3, network=network)
    out = train_run(run_spec(cfg, task="digits", policy="async", seed=0, trace_path=trace,
                    out_dir=tmp_path / "run"))
    net = Network(**json.loads((out / "result.json").read_text())["clock"]["network"])
    assert net.link_s > 0.5 * np.median(x)  # the link is the bottleneck here
    sched = async_schedule(x, net.exchange_s, 3 * 4, net.link_s)
    metrics = pd.read_parquet(out / "metrics.parquet")
    np.testing.assert_allclose(metrics["virtual_time_s"], sched.arrival[[3, 7, 11]])
    assert np.diff(sched.arrival).min() >= net.link_s * (1 - 1e-9)  # one push at a time


def test_a_ring_has_no_server_for_async_to_push_to(tmp_path):
    from bdsgd.errors import UserError
    from bdsgd.training import run_spec, train_run

    cfg = make_cfg(max_iterations=2, network={"topology": "ring"})
    with pytest.raises(UserError, match="network.topology: ring has no server for cyclic"):
        train_run(run_spec(cfg, task="digits", policy="cyclic", seed=0,
                           trace_path=write(tmp_path, np.ones((4, 3))), out_dir=tmp_path / "run"))


def test_worker_time_under_abandon_by_hand():
    """x = (1, 2, 4), c = 2, comm 0.5: D = 2.5, the three workers compute 1, 2 and 2.5 (cut,
    dropped at D); applied 1 + 2, dropped 2.5, idle 1.5 + 0.5. Then (1, 1, 1), c = 3: D = 1.5,
    applied 3, idle 1.5."""
    clock = SyncClock(np.full(3, 0.5), 3, "abandon")
    clock.iteration(0, np.array([1.0, 2.0, 4.0]), 2)
    np.testing.assert_allclose(clock.worker_s, [3.0, 2.5, 2.0])
    clock.iteration(1, np.array([1.0, 1.0, 1.0]), 3)
    np.testing.assert_allclose(clock.worker_s, [6.0, 2.5, 3.5])


def test_worker_time_under_finish_by_hand():
    """As above, but worker 2 finishes its cut gradient 1.5 into the next iteration: that
    iteration (c = 3) waits for its arrival at 2.5, D = 3; applied 3, dropped the stale 1.5,
    idle 2 + 2 + 0.5."""
    clock = SyncClock(np.full(3, 0.5), 3, "finish")
    clock.iteration(0, np.array([1.0, 2.0, 4.0]), 2)
    clock.iteration(1, np.array([1.0, 1.0, 1.0]), 3)
    np.testing.assert_allclose(clock.worker_s, [6.0, 4.0, 6.5])
    assert clock.worker_s.sum() == pytest.approx(3 * (2.5 + 3.0))  # n sum_t D_t


def test_a_replay_reports_its_idle_and_dropped_fractions():
    x = np.array([[1.0, 2.0, 4.0], [1.0, 1.0, 1.0]])
    cfg = make_cfg(static_backups=1)
    run = replay(from_arrays(x), build.make_policy("static", 3, cfg.policies), 0.5, "abandon")
    np.testing.assert_array_equal(run.cutoffs, [2, 2])
    # second iteration: c = 2 of (1, 1, 1): D = 1.5, applied 2, dropped 1 (worker 2), idle 1.5
    assert run.wasted_fraction == pytest.approx(3.5 / 12.0)
    assert run.idle_fraction == pytest.approx(3.5 / 12.0)


def test_a_late_worker_owes_one_gradient_at_most():
    """Under finish, a worker 5x slower than the cutoff's iterations works on one gradient at a
    time: busy through an iteration, it never starts that iteration's, so its lag stays below
    its run-time and waiting for it costs at most two of its gradients, however long it was cut."""
    clock = SyncClock(np.zeros(3), 3, "finish")
    x = np.array([1.0, 1.0, 5.0])
    for t in range(50):
        clock.iteration(t, x, 2)
        assert clock.busy[2] < 5.0, t
    assert clock.iteration(50, x, 3).duration <= 10.0


@pytest.mark.parametrize("source", ["alibaba-pai", "simulate"])
def test_one_trace_on_one_network_is_one_regime_in_the_replay_and_in_a_run(tmp_path, source):
    """The throughput replay and a convergence run of the same task, trace and network charge
    communication against compute alike (``comm_to_compute``), a normalised PAI trace included;
    without a gradient time the PAI trace's replay is the config's one-line error."""
    from bdsgd.cluster.virtual import for_replay
    from bdsgd.config import SimulateConfig
    from bdsgd.errors import UserError
    from bdsgd.throughput import run_benchmark
    from bdsgd.traces.io import write_trace
    from bdsgd.traces.simulate import simulate
    from bdsgd.training import run_spec, train_run

    trace = (import_trace(DATA / "alibaba_pai_job_1_norm.csv", source)
             if source == "alibaba-pai" else
             simulate(SimulateConfig(workers=6, iterations=20), 0)[0])
    path = write_trace(from_arrays(trace.runtimes[:20], trace.meta), tmp_path / "t.parquet")
    network = {"topology": "ps", "bandwidth_gbit_s": 0.1, "task": "digits", "gradient_s": 0.02}
    cfg = make_cfg(clock="scaled", gradient_s=0.02, max_iterations=3, eval_every=3,
                   network=network)
    replayed = run_benchmark(path, ["sync"], cfg=cfg)["trace"]["comm_to_compute"]
    run = train_run(run_spec(cfg, "digits", "sync", 0, path, tmp_path / "run"))
    trained = json.loads((run / "result.json").read_text())["clock"]["comm_to_compute"]
    assert replayed == pytest.approx(trained, rel=1e-12) and replayed > 0.01
    if source == "alibaba-pai":
        bare = make_cfg(network={**network, "gradient_s": None})
        with pytest.raises(UserError, match="network.gradient_s: the trace .* is in unit"):
            for_replay(bare, trace)
