"""Cyclic updates with dynamic delays: the token's schedule, the update rule, cost (resume and
the CLI run are test_asynchronous's, for both modes)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import bdsgd.sgd as sgd
from bdsgd.cluster.schedules import async_schedule
from bdsgd.cluster.schedules import cyclic_schedule as schedule
from bdsgd.training import run_spec, train_run
from bdsgd.training.record import COLUMNS
from tests.helpers import N_WORKERS, STALENESS, T_ROWS, make_cfg, metrics, summary, write

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_events import async_per_event, cyclic_per_event  # noqa: E402

sys.path.pop(0)


@pytest.mark.parametrize("comm_s", [0.0, 0.05, 2.0])
@pytest.mark.parametrize("slow", [False, True])
def test_schedules_equal_the_per_event_loops(comm_s, slow):
    """The trainers' schedules (running sums; a loop over the token's visits) give the updates
    that a loop over every gradient's finish gives, on random traces with and without a 10x
    straggler and with communication slower than the gradients."""
    runtimes = np.random.default_rng(7).lognormal(0.0, 0.6, (9, 5))
    runtimes[:, 2] *= 10.0 if slow else 1.0
    total = 5 * 40
    got, ref = schedule(runtimes, comm_s, total), cyclic_per_event(runtimes, comm_s, total)
    for key in ref:
        np.testing.assert_array_equal(getattr(got, key), ref[key])
    assert got.count.sum() == total
    a, ref_a = async_schedule(runtimes, comm_s, total), async_per_event(runtimes, comm_s,
                                                                               total)
    for key in ref_a:
        np.testing.assert_array_equal(getattr(a, key), ref_a[key])


def test_token_skips_a_slow_worker_and_its_gradients_wait():
    """Worker 0 takes 10 s a gradient, the others 1 s: the others push every second without
    waiting for it; its gradients carry the staleness."""
    runtimes = np.ones((T_ROWS, 4))
    runtimes[:, 0] = 10.0
    sched = schedule(runtimes, 0.0, 4 * 20)
    assert sched.time[-1] < 30  # sync would take 10 s an iteration
    slow = np.repeat(sched.worker, sched.count) == 0
    assert slow.sum() >= 2 and (sched.count >= 1).all()
    assert sched.staleness[slow].mean() > 3 * sched.staleness[~slow].mean()


def test_each_gradient_starts_from_the_newest_parameters():
    """Two equally fast workers (1 s a gradient) and a push that takes 0.5 s: worker 0's first
    push is applied at 1.5, while its second gradient, started at 1, runs on theta_0; its third,
    started at 2, on theta_2 (the updates at 1.5 and 2.0)."""
    sched = schedule(np.ones((4, 2)), 0.5, 6)
    assert sched.worker.tolist()[:3] == [0, 1, 0]
    np.testing.assert_allclose(sched.time[:3], [1.5, 2.0, 2.5])
    # gradient 0 of each worker and worker 0's gradient 1 (started at 1 < 1.5) are on theta_0
    assert sched.pull.tolist()[:3] == [0, 0, 0]
    assert sched.staleness.tolist()[:3] == [0, 1, 2]
    third = np.flatnonzero(np.repeat(sched.worker, sched.count) == 0)[2]
    assert sched.pull[third] == 2


def test_a_push_applies_the_sum_of_its_gradients_at_lr_over_n(tmp_path):
    """With momentum 0, the run's parameters equal applying, push by push, lr/n times the sum of
    the pushed gradients, each computed on the parameters of its worker's pull (recomputed here
    one gradient at a time from the schedule)."""
    runtimes = np.random.default_rng(1).lognormal(0.0, 0.5, (T_ROWS, N_WORKERS))
    path = write(tmp_path, runtimes)
    cfg = make_cfg(max_iterations=3, eval_every=3, momentum=0.0, staleness_lr="none")
    run = train_run(run_spec(cfg, "digits", "cyclic", 0, path, tmp_path / "run"))
    m = metrics(run)
    assert list(m.columns) == list(COLUMNS) and m["iteration"].iloc[-1] == 3
    assert m["gradients"].sum() == 3 * N_WORKERS
    np.testing.assert_allclose(m["lr"], 0.1 / N_WORKERS)

    from bdsgd.sgd import backward, take_gradient
    from bdsgd.tasks import WorkerStreams, load_task

    data = load_task("digits", "data")
    streams = WorkerStreams(len(data.train), N_WORKERS, 8, 0)
    sched = schedule(runtimes, 0.05, 3 * N_WORKERS)
    # each gradient's parameters, from the rule: those after every update applied by the
    # gradient's start, the end of its worker's previous gradient
    finish = np.cumsum(runtimes[np.arange(40) % T_ROWS], axis=0)
    pulls = [int((sched.time <= finish[k - 1, w]).sum()) if k > 0 else 0
             for w, k0, m_ in zip(sched.worker, sched.first, sched.count, strict=True)
             for k in range(k0, k0 + m_)]
    torch.manual_seed(0)
    model = data.make_model()
    thetas = [[p.detach().clone() for p in model.parameters()]]
    g = 0
    for w, k0, m_ in zip(sched.worker, sched.first, sched.count, strict=True):
        total = None
        for k, p in zip(range(k0, k0 + m_), pulls[g:g + m_], strict=True):
            with torch.no_grad():
                for param, value in zip(model.parameters(), thetas[p], strict=True):
                    param.copy_(value)
            x, y = data.batch(data.train, streams.batch(k, np.array([w])))
            backward(model, x, y, 64, torch.device("cpu"))
            grads = take_gradient(model)
            total = grads if total is None else [a + b for a, b in zip(total, grads, strict=True)]
        g += m_
        thetas.append([t - 0.1 / N_WORKERS * d for t, d in zip(thetas[-1], total, strict=True)])
    trained = torch.load(run / "model.pt", weights_only=True)
    for value, expected in zip(trained.values(), thetas[-1], strict=True):
        torch.testing.assert_close(value, expected, rtol=1e-4, atol=1e-6)


def test_only_the_pushed_gradients_are_computed(tmp_path, trace_path, monkeypatch):
    """One backward pass per (worker, pull, push) group, over exactly the applied gradients."""
    seen = []
    backward = sgd.backward

    def counted(model, x, y, chunk, device):
        seen.append(len(y))
        return backward(model, x, y, chunk, device)

    monkeypatch.setattr(sgd, "backward", counted)
    cfg = make_cfg(max_iterations=5, eval_every=5)
    run = train_run(run_spec(cfg, "digits", "cyclic", 0, trace_path, tmp_path / "run"))
    assert sum(seen) == 5 * N_WORKERS * 8  # samples: applied gradients x batch
    got = summary(run)
    assert got["gradients"] == 5 * N_WORKERS and set(STALENESS) <= got.keys()
    assert got["pushes"] >= len(seen) / 2


def test_free_pushes_make_the_schedule_asynchronous_sgds():
    """comm_s = 0: each worker pushes the instant its gradient finishes, so the updates, their
    order and their staleness are asynchronous SGD's, on a random trace and on one where every
    gradient of an instant ties."""
    runtimes = np.random.default_rng(4).lognormal(0.0, 0.5, (T_ROWS, N_WORKERS))
    equal = schedule(np.ones((T_ROWS, N_WORKERS)), 0.0, 60)
    np.testing.assert_array_equal(equal.staleness, async_schedule(
        np.ones((T_ROWS, N_WORKERS)), 0.0, 60).staleness)
    c, a = schedule(runtimes, 0.0, 60), async_schedule(runtimes, 0.0, 60)
    assert (c.count == 1).all()
    np.testing.assert_array_equal(c.worker, a.worker)
    np.testing.assert_array_equal(c.staleness, a.staleness)
    np.testing.assert_allclose(c.time, a.arrival)
