"""The virtual cluster: clock, cutoffs, union-batch gradients, lr scaling, resume, CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

import bdsgd.cluster.server as loop
from bdsgd.cli import main
from bdsgd.errors import UserError
from bdsgd.policies.build import make_policy, warm_up
from bdsgd.tasks import WorkerStreams, _lenet, _mlp, _resnet20, load_task
from bdsgd.traces.io import read_trace, write_trace
from bdsgd.traces.schema import from_arrays
from bdsgd.training import run_spec, train_run
from bdsgd.training.record import time_to_target
from tests.helpers import (
    N_WORKERS,
    REPO,
    T_ROWS,
    bdsgd_in_process,
    crash_at_iteration,
    interrupted_then_resumed,
    make_cfg,
    metrics,
    summary,
    write,
)


def test_time_to_target_is_first_evaluated_time_at_or_above_target():
    m = pd.DataFrame({"virtual_time_s": [1.0, 2.0, 3.0, 4.0, 5.0],
                      "test_accuracy": [np.nan, 0.5, np.nan, 0.91, 0.95]})
    assert time_to_target(m, 0.9) == 4.0
    assert time_to_target(m, 0.91) == 4.0
    assert time_to_target(m, 0.5) == 2.0
    assert time_to_target(m, 0.99) is None


def test_worker_streams_are_disjoint_shards_that_change_each_epoch():
    streams = WorkerStreams(n_samples=100, n_workers=4, batch_size=5, seed=0)
    assert streams.per_epoch == 5
    epoch = np.stack([streams.batch(t, np.arange(4)) for t in range(5)])
    assert len(np.unique(epoch)) == 100  # every sample once per epoch, no worker overlap
    first = streams.batch(0, np.array([1, 3]))
    assert np.array_equal(first, np.concatenate([epoch[0][5:10], epoch[0][15:20]]))
    assert not np.array_equal(streams.batch(5, np.arange(4)), epoch[0])
    with pytest.raises(ValueError, match="exceed"):
        WorkerStreams(n_samples=10, n_workers=4, batch_size=3, seed=0)


@pytest.mark.parametrize("make_model, shape", [
    (_mlp, (64,)), (_lenet, (1, 28, 28)), (_resnet20, (3, 32, 32))])
def test_union_batch_gradient_equals_mean_of_worker_gradients(make_model, shape):
    torch.manual_seed(0)
    model = make_model(10)
    c, batch = 3, 4
    x = torch.randn(c * batch, *shape)
    y = torch.randint(0, 10, (c * batch,))

    def grads(loss):
        model.zero_grad()
        loss.backward()
        return torch.cat([p.grad.ravel() for p in model.parameters()])

    union = grads(F.cross_entropy(model(x), y))
    per_worker = torch.stack([
        grads(F.cross_entropy(model(xw), yw))
        for xw, yw in zip(x.split(batch), y.split(batch), strict=True)])
    torch.testing.assert_close(union, per_worker.mean(0), rtol=1e-5, atol=1e-6)


def test_clock_and_cutoffs_follow_the_trace_under_sync_and_static(tmp_path, trace_path):
    cfg = make_cfg(network={"late": "abandon"})
    runtimes = np.sort(np.random.default_rng(3).lognormal(0.0, 0.5, (T_ROWS, N_WORKERS)), axis=1)
    rows = np.arange(30) % T_ROWS  # 30 iterations cycle the 12-row trace 2.5 times
    for policy, c in (("sync", N_WORKERS), ("static", N_WORKERS - 2)):
        run = train_run(run_spec(cfg, "digits", policy, 0, trace_path, tmp_path / policy))
        m = metrics(run)
        assert (m["cutoff"] == c).all()
        step = runtimes[rows, c - 1] + 0.05
        np.testing.assert_allclose(m["iteration_time_s"], step)
        np.testing.assert_allclose(m["virtual_time_s"], np.cumsum(step))
        assert m["iteration"].tolist() == list(range(1, 31))
        assert m["test_accuracy"].notna().tolist() == [(i % 5 == 0) for i in range(1, 31)]
        summary = json.loads((run / "result.json").read_text())["summary"]
        assert summary["iterations"] == 30 and summary["trace_cycles"] == 2.5
        assert summary["mean_cutoff"] == c
        assert summary["gradients_per_s"] == pytest.approx(30 * c / step.sum())
        assert summary["final_accuracy"] == m["test_accuracy"].iloc[-1]
        assert summary["time_to_target_s"] == time_to_target(m, summary["target_accuracy"])


def test_same_inputs_give_byte_identical_metrics(tmp_path, trace_path):
    cfg = make_cfg(max_iterations=12)
    a = train_run(run_spec(cfg, "digits", "static", 1, trace_path, tmp_path / "a"))
    b = train_run(run_spec(cfg, "digits", "static", 1, trace_path, tmp_path / "b"))
    c = train_run(run_spec(cfg, "digits", "static", 2, trace_path, tmp_path / "c"))
    assert (a / "metrics.parquet").read_bytes() == (b / "metrics.parquet").read_bytes()
    assert not metrics(a)["train_loss"].equals(metrics(c)["train_loss"])  # the seed matters


def test_resumed_run_equals_uninterrupted_run(tmp_path, trace_path, monkeypatch):
    cfg = make_cfg(checkpoint_every=5)
    # The oracle replays a precomputed cutoff sequence with a counter: a stateful policy.
    whole = train_run(run_spec(cfg, "digits", "oracle", 0, trace_path, tmp_path / "whole"))

    crash_at_iteration(monkeypatch, 18)
    resumed = interrupted_then_resumed(
        monkeypatch, lambda out: train_run(run_spec(cfg, "digits", "oracle", 0, trace_path, out)),
        tmp_path / "resumed")
    assert (resumed / "metrics.parquet").read_bytes() == (whole / "metrics.parquet").read_bytes()
    wallclock = json.loads((resumed / "result.json").read_text())["wallclock"]
    assert wallclock["resumed_from_iteration"] == 15
    assert metrics(whole)["cutoff"].nunique() > 1  # the replayed policy did vary its cutoff


def test_a_stop_at_the_last_row_leaves_the_outputs_to_the_next_job(tmp_path, trace_path,
                                                                    monkeypatch):
    """SIGTERM (a time limit's warning) heard at the run's last row: the job fails whatever it
    writes, and Snakemake removes a failed job's outputs. So the run stops with its final
    checkpoint and writes nothing; the same command writes the outputs from it, the metrics an
    uninterrupted run's, without training again."""
    import signal

    from bdsgd.errors import Stopped
    from bdsgd.training.record import Recorder

    cfg = make_cfg(checkpoint_every=5)
    whole = train_run(run_spec(cfg, "digits", "oracle", 0, trace_path, tmp_path / "whole"))
    record = Recorder.record

    def warned_at_the_end(rec, model, row, save):
        if row["iteration"] >= rec.end:
            rec.stop.append(signal.SIGTERM)
        record(rec, model, row, save)

    monkeypatch.setattr(Recorder, "record", warned_at_the_end)
    out = tmp_path / "warned"
    with pytest.raises(Stopped):
        train_run(run_spec(cfg, "digits", "oracle", 0, trace_path, out))
    assert (out / "checkpoint.pt").exists() and not (out / "metrics.parquet").exists()
    monkeypatch.undo()
    train_run(run_spec(cfg, "digits", "oracle", 0, trace_path, out))
    assert (out / "metrics.parquet").read_bytes() == (whole / "metrics.parquet").read_bytes()
    assert not (out / "checkpoint.pt").exists()
    wallclock = json.loads((out / "result.json").read_text())["wallclock"]
    assert wallclock["resumed_from_iteration"] == metrics(whole)["iteration"].iloc[-1]


def test_history_warms_up_learning_policies_and_resumes(tmp_path, trace_path, monkeypatch):
    """--history: ecdf first sees the earlier iterations (a worker 5x slow in all of them), so
    its first cutoff already leaves workers out; sync is unaffected; an interrupted run
    resumes to the same metrics (the warm-up is redone before the replay)."""
    before = np.random.default_rng(4).lognormal(0.0, 0.1, (40, N_WORKERS))
    before[:, 0] *= 5.0
    history = write_trace(from_arrays(before), tmp_path / "history.parquet")
    cfg = make_cfg(checkpoint_every=5)
    cold = train_run(run_spec(cfg, "digits", "ecdf", 0, trace_path, tmp_path / "cold"))
    warm = train_run(run_spec(cfg, "digits", "ecdf", 0, trace_path, tmp_path / "warm",
                     history_path=history))
    assert metrics(cold)["cutoff"].iloc[0] == N_WORKERS  # nothing seen yet: wait for all
    ecdf = make_policy("ecdf", N_WORKERS, cfg.policies, comm=0.05)
    warm_up(ecdf, read_trace(history), 0.05)
    assert metrics(warm)["cutoff"].iloc[0] == ecdf.choose() < N_WORKERS
    result = json.loads((warm / "result.json").read_text())
    assert result["history"] == {"path": str(history), "n_iterations": 40}
    sync = train_run(run_spec(cfg, "digits", "sync", 0, trace_path, tmp_path / "sync", history_path=history))
    assert (metrics(sync)["cutoff"] == N_WORKERS).all()

    crash_at_iteration(monkeypatch, 18)
    with pytest.raises(KeyboardInterrupt):
        train_run(run_spec(cfg, "digits", "ecdf", 0, trace_path, tmp_path / "resumed", history_path=history))
    monkeypatch.undo()
    resumed = train_run(run_spec(cfg, "digits", "ecdf", 0, trace_path, tmp_path / "resumed",
                        history_path=history))
    assert (resumed / "metrics.parquet").read_bytes() == (warm / "metrics.parquet").read_bytes()


def test_checkpoint_of_another_run_is_discarded(tmp_path, trace_path, monkeypatch, caplog):
    cfg = make_cfg(checkpoint_every=5)
    crash_at_iteration(monkeypatch, 8)
    with pytest.raises(KeyboardInterrupt):
        train_run(run_spec(cfg, "digits", "static", 0, trace_path, tmp_path / "run"))
    monkeypatch.undo()
    fresh = train_run(run_spec(cfg, "digits", "static", 1, trace_path, tmp_path / "fresh"))
    other = train_run(run_spec(cfg, "digits", "static", 1, trace_path, tmp_path / "run"))  # seed changed
    assert "discarding" in caplog.text  # a warning through bdsgd.training.run's logger
    assert (other / "metrics.parquet").read_bytes() == (fresh / "metrics.parquet").read_bytes()


@pytest.mark.parametrize("scaling, chunk", [("linear", 5), ("sqrt", 7), ("none", 128)])
def test_update_uses_union_of_fastest_workers_and_scaled_learning_rate(tmp_path, trace_path,
                                                                         scaling, chunk):
    cfg = make_cfg(max_iterations=1, momentum=0.0, lr_scaling=scaling, chunk_samples=chunk)
    run = train_run(run_spec(cfg, "digits", "static", 0, trace_path, tmp_path / "run"))
    c = N_WORKERS - 2
    lr = 0.1 * {"linear": c / N_WORKERS, "sqrt": (c / N_WORKERS) ** 0.5, "none": 1.0}[scaling]
    assert metrics(run)["lr"].tolist() == [pytest.approx(lr)]

    # By hand: the c fastest workers of trace row 0, their mini-batches, one SGD step.
    task = load_task("digits", "unused")
    torch.manual_seed(0)
    model = task.make_model()
    row0 = np.random.default_rng(3).lognormal(0.0, 0.5, (T_ROWS, N_WORKERS))[0]
    fastest = np.sort(np.argsort(row0, kind="stable")[:c])
    streams = WorkerStreams(len(task.train), N_WORKERS, 8, seed=0)
    x, y = task.batch(task.train, streams.batch(0, fastest))
    F.cross_entropy(model(x), y).backward()
    expected = {k: p - lr * p.grad for k, p in model.named_parameters()}
    trained = torch.load(run / "model.pt", weights_only=True)
    for name, value in expected.items():
        torch.testing.assert_close(trained[name], value.detach())


def test_diverged_run_still_writes_valid_result(tmp_path, trace_path):
    run = train_run(run_spec(make_cfg(max_iterations=5, learning_rate=1e12), "digits", "sync", 0,
                    trace_path, tmp_path / "run"))
    assert metrics(run)["train_loss"].isna().any()
    summary = json.loads((run / "result.json").read_text())["summary"]
    assert summary["final_test_loss"] is None and summary["time_to_target_s"] is None


def test_bdsgd_policy_without_model_names_the_flag(tmp_path, trace_path):
    with pytest.raises(UserError) as err:
        train_run(run_spec(make_cfg(), "digits", "bdsgd", 0, trace_path, tmp_path / "run"))
    assert err.value.file == "--model"


def test_bad_inputs_are_user_errors(tmp_path, trace_path):
    with pytest.raises(UserError, match="not found"):
        train_run(run_spec(make_cfg(), "digits", "sync", 0, tmp_path / "absent.parquet", tmp_path / "r"))
    with pytest.raises(UserError) as err:
        train_run(run_spec(make_cfg(batch_size=1000), "digits", "sync", 0, trace_path, tmp_path / "r"))
    assert err.value.field == "train.batch_size"
    with pytest.raises(UserError) as err:
        train_run(run_spec(make_cfg(target_accuracy={"mnist": 0.9}), "digits", "sync", 0, trace_path,
                  tmp_path / "r"))
    assert err.value.field == "train.target_accuracy.digits"
    censored = np.zeros((T_ROWS, N_WORKERS), bool)
    censored[2, 1] = True
    bad = write_trace(from_arrays(np.ones((T_ROWS, N_WORKERS)), censored=censored),
                      tmp_path / "censored.parquet")
    with pytest.raises(UserError, match="censored"):
        train_run(run_spec(make_cfg(), "digits", "sync", 0, bad, tmp_path / "r"))


def test_cli_train_writes_run_and_reports_bad_input_in_one_line(tmp_path, trace_path, capsys):
    """`bdsgd train`, in this process (the program: tests/cli/test_cli.py; its runs as processes:
    the session's DAG and its stages by hand, and test_sigterm_checkpoints_...)."""
    config = tmp_path / "config.yaml"
    config.write_text("experiment: cli\ntraces: {t: {source: simulate}}\n"
                      "train: {trace: t, tasks: [digits], max_iterations: 10, eval_every: 5,"
                      " batch_size: 8, target_accuracy: {digits: 0.5}}\n")
    base = ["train", "--config", str(config), "--task", "digits",
            "--policy", "static", "--seed", "0", "--out", str(tmp_path / "run")]
    ok = bdsgd_in_process(capsys, *base, "--trace", trace_path)
    assert ok.returncode == 0, ok.stderr
    assert "n=6 workers" in ok.stdout and "T=12" in ok.stdout
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    assert result["policy"] == "static" and result["config_hash"]
    assert len(metrics(tmp_path / "run")) == 10

    # The same command line with a missing trace.
    code = main(base + ["--trace", str(tmp_path / "missing.parquet")])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("bdsgd: error: ") and "missing.parquet" in err


@pytest.mark.slow  # starts wandb's service process
def test_wandb_offline_logs_the_run(tmp_path, trace_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = make_cfg("offline", max_iterations=5)
    run = train_run(run_spec(cfg, "digits", "sync", 0, trace_path, tmp_path / "run"))
    assert list((run / "wandb").glob("offline-run-*"))


def test_the_bdsgd_policys_filtering_is_on_the_virtual_clock(tmp_path, trace_path, monkeypatch):
    """charge_decision_time charges all of the policy's work per iteration: the bdsgd policy
    filters in observe (after the iteration), which a clock that timed only choose would miss.
    The server's clock is a fake that only the filtering step moves (0.25 s a step)."""
    from bdsgd.policies.model_predictor import ModelPredictor
    from bdsgd.runtime_model.checkpoint import checkpoint
    from bdsgd.runtime_model.model import RuntimeModel

    model_path = tmp_path / "model.pt"
    cfg = make_cfg(max_iterations=12, charge_decision_time=True, network={"late": "abandon"})
    torch.save(checkpoint(RuntimeModel(cfg.model, N_WORKERS)), model_path)
    clock = {"ns": 0}
    monkeypatch.setattr(loop, "perf_counter_ns", lambda: clock["ns"])
    filtering = ModelPredictor.observe

    def observe(self, obs):
        filtering(self, obs)
        clock["ns"] += 250_000_000

    monkeypatch.setattr(ModelPredictor, "observe", observe)
    run = train_run(run_spec(cfg, "digits", "bdsgd", 0, trace_path, tmp_path / "run", model_path=model_path))
    m = metrics(run)
    x = np.sort(read_trace(trace_path).runtimes, axis=1)
    served = x[np.arange(12) % T_ROWS, m["cutoff"].to_numpy() - 1] + 0.05
    np.testing.assert_allclose(m["iteration_time_s"], served + 0.25)
    np.testing.assert_allclose(m["virtual_time_s"], np.cumsum(served + 0.25))


@pytest.mark.long  # a process stopped for real: make test-long (CI runs it)
def test_sigterm_checkpoints_and_the_same_command_resumes_to_identical_metrics(tmp_path, trace_path,
                                                                               capsys):
    """SLURM's preemption notice, sent for real: the run stops at an iteration boundary with a
    checkpoint and exit status 143; rerun (in this process), it resumes there (not from zero)
    and ends with the metrics of a run never stopped."""
    import os
    import signal
    import time

    import yaml

    from bdsgd.config import load_config

    train = {"trace": "t", "tasks": ["digits"], "max_iterations": 1500, "eval_every": 500,
             "batch_size": 8, "learning_rate": 0.1, "checkpoint_every": 50}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"experiment": "test", "traces": {"t": {"source": "simulate"}},
                                      "throughput": {"comm_s": 0.05}, "train": train}))
    run = tmp_path / "run"
    args = ["train", "--config", config, "--task", "digits", "--policy", "static", "--seed", "0",
            "--trace", trace_path, "--out", run]
    proc = subprocess.Popen([sys.executable, "-m", "bdsgd", *map(str, args)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONWARNINGS="error::DeprecationWarning:bdsgd"))
    try:
        deadline = time.monotonic() + 120
        while not (run / "checkpoint.pt").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "stopped by signal 15" in err and "resumes" in err
    assert not (run / "metrics.parquet").exists()  # nothing half-written
    stopped_at = len(torch.load(run / "checkpoint.pt", weights_only=True)["metrics"]["iteration"])
    assert 50 <= stopped_at < 1500

    resumed = bdsgd_in_process(capsys, *args)
    assert resumed.returncode == 0, resumed.stderr
    assert f"at iteration {stopped_at}" in resumed.stdout
    whole = train_run(run_spec(load_config(config), "digits", "static", 0, trace_path, tmp_path / "whole"))
    assert (run / "metrics.parquet").read_bytes() == (whole / "metrics.parquet").read_bytes()


def test_a_recipe_in_epochs_trains_the_same_samples_on_any_cluster(tmp_path):
    """train.epochs: the 10-worker PAI job and a 4-worker cluster train as many samples (the
    epochs' worth, rounded up to a whole iteration), not as many iterations; the plan bills the
    same iterations."""
    from bdsgd.plan import TRAIN_SAMPLES, jobs
    from bdsgd.traces.formats import import_trace

    pai = import_trace(REPO / "tests/data/alibaba_pai_job_1_norm.csv", "alibaba-pai")
    traces = {10: write_trace(from_arrays(pai.runtimes[:30], pai.meta), tmp_path / "pai.parquet"),
              4: write(tmp_path, np.ones((30, 4)), "four")}
    cfg = make_cfg(epochs=0.5, batch_size=8, eval_every=100, max_iterations=1, clock="scaled",
                   gradient_s=0.05)  # PAI's normalised units need a gradient time
    samples = len(load_task("digits", "data").train)
    assert samples == TRAIN_SAMPLES["digits"]
    for n, path in traces.items():
        run = train_run(run_spec(cfg, "digits", "sync", 0, path, tmp_path / f"n{n}"))
        applied = summary(run)["gradients"] * 8  # sync applies n gradients of 8 an iteration
        assert 0.5 * samples <= applied < 0.5 * samples + n * 8, n
        assert summary(run)["iterations"] == math.ceil(0.5 * samples / (n * 8))
    [billed] = [j for j in jobs(cfg, {"digits": 1e-6}, "cpu") if j.rule == "train"
                and j.name == "t/digits/sync"]
    iterations = math.ceil(0.5 * samples / (16 * 8))  # the simulated trace t: 16 workers
    evaluations = 1 + math.ceil(0.1 * iterations)  # every 100th, and each near the target
    assert billed.hours == pytest.approx(
        (iterations * 16 * 8 * 1e-6 + evaluations * 360 * 1e-6 / 3) / 3600)


def test_a_recorded_traces_seeds_replay_it_from_spread_offsets():
    """Seed 0 replays a recorded trace from its start; seeds 1, 2, ... from offsets spread over
    it (wrapping round); a simulated trace's seeds each have their own draw, replayed whole."""
    from bdsgd.traces.schema import from_arrays, replay_start

    x = np.arange(1.0, 41.0).reshape(20, 2)
    recorded = from_arrays(x, meta={"source": "alibaba-pai"})
    assert replay_start(recorded, 0) is recorded
    starts = [replay_start(recorded, s).meta["rotated"] for s in range(1, 6)]
    assert len(set(starts)) == 5 and all(0 < k < 20 for k in starts)
    one = replay_start(recorded, 1)
    k = one.meta["rotated"]
    assert np.array_equal(one.runtimes, np.r_[x[k:], x[:k]])
    assert sorted(one.iterations) == sorted(recorded.iterations)
    simulated = from_arrays(x, meta={"source": "simulate"})
    assert replay_start(simulated, 3) is simulated
