"""Every policy of the registry and both modes as convergence runs: the cases where theory says
what must happen (no variance: no policy cuts; one 10x straggler: cutting it pays)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import bdsgd.training.synchronous as synchronous
from bdsgd.cluster.schedules import async_schedule, cyclic_schedule
from bdsgd.sgd import STALENESS_LR, apply_gradient, backward, noise_step, sgd_step, take_gradient
from bdsgd.tasks import load_task
from bdsgd.training import run_spec, train_run
from tests.helpers import (
    N_WORKERS,
    T_ROWS,
    crash_at_call,
    interrupted_then_resumed,
    make_cfg,
    metrics,
    write,
)

# predictive policies whose forecast of a constant trace has no spread, the oracle, and the
# two ways of never cutting: all wait for every worker at every iteration
NO_CUT = ["sync", "elfving", "ecdf", "bandit", "oracle", "oracle-myopic"]


def test_without_variance_every_policy_follows_syncs_trajectory(tmp_path):
    path = write(tmp_path, np.full((T_ROWS, N_WORKERS), 1.5), "constant")
    static0 = make_cfg(static_backups=0, max_iterations=12)
    runs = {"static": train_run(run_spec(static0, "digits", "static", 0, path, tmp_path / "static"))}
    cfg = make_cfg(max_iterations=12)
    runs |= {p: train_run(run_spec(cfg, "digits", p, 0, path, tmp_path / p)) for p in NO_CUT}
    reference = torch.load(runs["sync"] / "model.pt", weights_only=True)
    for policy, run in runs.items():
        assert (metrics(run)["cutoff"] == N_WORKERS).all(), policy
        trained = torch.load(run / "model.pt", weights_only=True)
        for name, value in reference.items():
            assert torch.equal(trained[name], value), (policy, name)
        assert metrics(run)["train_loss"].equals(metrics(runs["sync"])["train_loss"]), policy


@pytest.mark.slow
def test_cutting_a_10x_straggler_reaches_the_target_sooner(tmp_path):
    """Worker 0 always 10x slower: static with one backup (c = n - 1) reaches the target in less
    virtual time than sync; async and cyclic report their staleness, the straggler's the most."""
    runtimes = np.ones((T_ROWS, N_WORKERS))
    runtimes[:, 0] = 10.0
    path = write(tmp_path, runtimes, "straggler")
    cfg = make_cfg(static_backups=1, max_iterations=80, eval_every=4,
                   target_accuracy={"digits": 0.8})
    result = {p: json.loads((train_run(run_spec(cfg, "digits", p, 0, path, tmp_path / p))
                             / "result.json").read_text())["summary"]
              for p in ("sync", "static", "async", "cyclic")}
    sync, static = result["sync"]["time_to_target_s"], result["static"]["time_to_target_s"]
    assert static is not None and sync is not None and static < sync / 3
    for mode in ("async", "cyclic"):
        assert result[mode]["mean_staleness"] > 0
        assert result[mode]["max_staleness"] > result[mode]["staleness_p90"]


def test_the_two_part_step_is_the_same_update_and_measures_the_noise():
    """noise_step updates as sgd_step does (the mean of the two parts is the union's mean), and
    its statistics are the squared norms of the two parts' and the whole batch's gradients."""
    data = load_task("digits", "data")
    x, y = data.batch(data.train, np.arange(40))
    cpu = torch.device("cpu")
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        model = data.make_model()
        models.append((model, torch.optim.SGD(model.parameters(), lr=0.1)))
    for model, optimizer in models:  # a step before leaves its .grad behind
        sgd_step(model, optimizer, x[:8], y[:8], 64, cpu)
    parts = []
    for xs, ys in ((x[:24], y[:24]), (x[24:], y[24:]), (x, y)):
        models[0][0].zero_grad(set_to_none=True)
        backward(models[0][0], xs, ys, 64, cpu)
        parts.append(sum(float((g * g).sum()) for g in take_gradient(models[0][0])))
    loss, stats = noise_step(*models[0], x, y, 24, 7, cpu)
    assert loss == pytest.approx(sgd_step(*models[1], x, y, 64, cpu), rel=1e-5)
    for a, b in zip(models[0][0].parameters(), models[1][0].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(stats, [(parts[0] + parts[1]) / 2, parts[2],
                                       2 / (1 / 24 + 1 / 16), 40], rtol=1e-4)


def test_the_progress_objective_learns_the_noise_scale_and_resumes(tmp_path, monkeypatch):
    """train.objective progress: the policy gets the gradient statistics (its noise scale is in
    the result), its cutoffs differ from the throughput rule's, and an interrupted run resumes
    to identical metrics (the replay shows the policy the recorded statistics again)."""
    runtimes = np.random.default_rng(5).lognormal(0.0, 0.6, (T_ROWS, N_WORKERS))
    path = write(tmp_path, runtimes, "noisy")
    progress = make_cfg(max_iterations=30, objective="progress")
    whole = train_run(run_spec(progress, "digits", "ecdf", 0, path, tmp_path / "whole"))
    result = json.loads((whole / "result.json").read_text())["summary"]
    assert result["objective"] == "progress" and result["gradient_noise_scale"] > 0
    throughput = train_run(run_spec(make_cfg(max_iterations=30), "digits", "ecdf", 0, path,
                           tmp_path / "throughput"))
    assert not metrics(whole)["cutoff"].equals(metrics(throughput)["cutoff"])

    crash_at_call(monkeypatch, synchronous, "noise_step", 17)
    resumed = interrupted_then_resumed(
        monkeypatch, lambda out: train_run(run_spec(progress, "digits", "ecdf", 0, path, out)),
        tmp_path / "resumed")
    assert (resumed / "metrics.parquet").read_bytes() == (whole / "metrics.parquet").read_bytes()


def test_a_round_of_async_moves_as_far_as_a_synchronous_step(tmp_path):
    """Equal run-times out of step (the first gradients staggered), momentum 0, a model whose
    gradient does not depend on the parameters (a linear loss): after the first round every
    gradient is n - 1 updates stale, and a round of n staleness-aware updates moves the
    parameters by lr x the mean of the n gradients, exactly one synchronous step."""
    n, lr = 5, 0.1
    runtimes = np.ones((8, n))
    runtimes[0] += np.arange(n) / n  # staggered starts, then equally fast
    sched = async_schedule(runtimes, 0.0, 6 * n)
    assert (sched.staleness[n:] == n - 1).all()
    share = STALENESS_LR["inverse"](sched.staleness, n)
    model = torch.nn.Linear(3, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0)
    grads = torch.randn(n, 3)  # worker w's gradient, the same at any parameters
    before = model.weight.detach().clone()
    for u in range(n, 2 * n):  # the second round
        apply_gradient(model, optimizer, [grads[sched.worker[u]].reshape(1, 3) * float(share[u])])
    torch.testing.assert_close(model.weight.detach() - before, -lr * grads.mean(0).reshape(1, 3))


@pytest.mark.parametrize("mode", ["async", "cyclic"])
def test_staleness_scaled_learning_rate(tmp_path, mode):
    """train.staleness_lr inverse: each gradient's rate is lr / (staleness + 1); the rows report
    the mean rate of their gradients, and the run differs from one at lr / n."""
    runtimes = np.random.default_rng(2).lognormal(0.0, 0.5, (T_ROWS, N_WORKERS))
    path = write(tmp_path, runtimes, "trace")
    runs = {how: train_run(run_spec(make_cfg(max_iterations=4, eval_every=4, staleness_lr=how), "digits",
                           mode, 0, path, tmp_path / how)) for how in ("none", "inverse")}
    sched = (async_schedule if mode == "async" else cyclic_schedule)(runtimes, 0.05,
                                                                  4 * N_WORKERS)
    per_gradient = 0.1 / (sched.staleness + 1)
    rows = np.cumsum(metrics(runs["inverse"])["gradients"].to_numpy())
    expected = [per_gradient[a:b].mean() for a, b in zip([0, *rows[:-1]], rows, strict=True)]
    np.testing.assert_allclose(metrics(runs["inverse"])["lr"], expected)
    np.testing.assert_allclose(metrics(runs["none"])["lr"], 0.1 / N_WORKERS)
    assert metrics(runs["none"])["train_loss"].iloc[-1] != metrics(runs["inverse"])[
        "train_loss"].iloc[-1]


def test_staleness_scaling_is_the_same_rule_in_both_modes(tmp_path):
    """With free pushes cyclic's schedule is async's, so under staleness_lr inverse (with
    momentum) both must train the same parameters: each scales the gradient, not the rate."""
    runtimes = np.random.default_rng(2).lognormal(0.0, 0.5, (T_ROWS, N_WORKERS))
    path = write(tmp_path, runtimes, "trace")
    cfg = make_cfg(comm_s=0.0, max_iterations=4, eval_every=4, staleness_lr="inverse",
                   momentum=0.9)
    a, c = (torch.load(train_run(run_spec(cfg, "digits", mode, 0, path, tmp_path / mode)) / "model.pt",
                       weights_only=True) for mode in ("async", "cyclic"))
    for name, value in a.items():
        torch.testing.assert_close(c[name], value, rtol=1e-5, atol=1e-7)
