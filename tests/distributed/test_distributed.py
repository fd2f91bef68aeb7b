"""Real distributed training: a parameter server and 3 workers on gloo (CPU), the session's jobs
(tests/distributed_jobs.py), each a real `bdsgd distributed` command. The commands it must
refuse are refused before any process starts: those run in this process."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from bdsgd.cli import main
from bdsgd.devices import select_device
from bdsgd.distributed.ps import Round
from bdsgd.traces.io import read_trace, write_trace
from bdsgd.traces.schema import from_arrays
from tests.distributed_jobs import DELAY_S, SLOW, WORKERS, Resumed, processes_of, write_config


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "config.yaml")


def refused(tmp_path: Path, config: Path, capsys, *flags: str) -> str:
    """`bdsgd distributed` with 3 workers and flags it must refuse, in this process: exit
    status 2, no result, no process left; its stderr."""
    out = tmp_path / "bad.json"
    code = main(["distributed", "--workers", str(WORKERS), "--config", str(config),
                 "--json", str(out), "--delay-s", "0.02", *flags])
    assert not processes_of(out)
    assert code == 2 and not out.exists()
    return capsys.readouterr().err


def test_a_round_applies_only_its_own_iterations_gradients():
    rnd = Round(t=5, need=2)
    assert not rnd.offer(0, 4, "stale")  # an earlier iteration's gradient: never applied
    assert rnd.offer(1, 5, "g1")
    assert not rnd.offer(1, 5, "again")  # c counts distinct workers
    assert rnd.offer(2, 5, "g2") and rnd.done
    assert not rnd.offer(0, 5, "late")  # past the cutoff
    assert rnd.accepted == {1: "g1", 2: "g2"}


@pytest.mark.slow
def test_cutting_an_injected_straggler_is_faster_in_wall_time(distributed_jobs):
    """Worker 1 takes SLOW x as long: static (c = n - 1) finishes 30 iterations in clearly less
    wall time than sync, which waits for it every time."""
    (sync, _), (static, _) = distributed_jobs["sync"], distributed_jobs["static"]
    assert sync["iterations"] == static["iterations"] == 30
    assert static["wall_s"] < 0.5 * sync["wall_s"]
    assert static["gradients"] == 30 * (WORKERS - 1)
    metrics = pd.read_parquet(static["metrics"])
    assert (metrics["cutoff"] == WORKERS - 1).all() and metrics["test_accuracy"].notna().any()
    assert static["threads"] >= 1 and static["decision_latency_p50_s"] > 0
    # its replay on the virtual clock: the same cutoffs, each iteration the (n-1)-th recorded
    # run-time (late workers abandon, the communication is in the run-times)
    replay, trace = pd.read_parquet(static["replay"]), read_trace(static["trace"])
    assert (replay["replay_cutoff"] == WORKERS - 1).all() and len(replay) == 30
    tau = np.sort(trace.runtimes, axis=1)[:, -2]
    np.testing.assert_allclose(replay["virtual_s"], tau)
    np.testing.assert_allclose(replay["replay_s"], tau)


@pytest.mark.slow
def test_a_killed_worker_is_censored_and_training_goes_on(distributed_jobs):
    """Worker 2 of the sync job SIGKILLs itself at iteration 5: it is found dead, censored from
    then on, and the job trains its 30 iterations on the others."""
    result, proc = distributed_jobs["sync"]
    assert result["iterations"] == 30
    assert [d["worker"] for d in result["dead_workers"]] == [2]
    assert "worker 2 is dead" in proc.stdout
    trace = read_trace(result["trace"])
    assert trace.censored[6:, 2].all() and not trace.censored[6:, :2].any()
    assert result["gradients"] == pd.read_parquet(result["metrics"])["cutoff"].sum()
    # replayed, sync waits for all 3 throughout: for the dead one, its censored lower bound
    assert (pd.read_parquet(result["replay"])["replay_cutoff"] == WORKERS).all()


@pytest.mark.slow
def test_finish_records_the_late_run_times_and_the_trace_trains_a_model(distributed_jobs, tmp_path):
    """late: finish: the straggler's gradients all arrive after the cutoff, are counted as stale
    and never applied (every iteration applies exactly c gradients), and its run-times turn from
    censored to observed in the recorded trace, which validates and trains a run-time model. The
    job was killed and resumed on the way: all of it holds across the resume."""
    finish, (abandon, _) = distributed_jobs["finish"].result, distributed_jobs["static"]
    assert finish["stale_discarded"] > 0
    assert finish["gradients"] == pd.read_parquet(finish["metrics"])["cutoff"].sum() == 30 * 2
    assert finish["censored_fraction"] < abandon["censored_fraction"]
    trace = read_trace(finish["trace"])
    assert trace.meta["source"] == "distributed" and trace.censored[:, 1].mean() < 1
    # the slow worker, seen: its injected wait (SLOW - 1) x DELAY_S longer than worker 0's (at
    # least half of it in the medians; the rest of a run-time grows with the load)
    observed = trace.runtimes[~trace.censored[:, 1], 1]
    assert np.median(observed) - np.median(trace.runtimes[:, 0]) > 0.5 * (SLOW - 1) * DELAY_S
    model = tmp_path / "model.pt"
    assert main(["model", "train", finish["trace"], "--out", str(model), "--epochs", "2",
                 "--quiet"]) == 0
    assert model.exists()


@pytest.mark.slow
def test_the_server_records_each_workers_own_compute_seconds(distributed_jobs):
    """The metrics' compute_s: per iteration each worker's compute seconds as the worker measured
    them (its gradient and its injected wait: DELAY_S, SLOW x for the straggler), none where no
    gradient of that iteration came. Under abandon the server takes the first 2 of 3 each
    iteration: the straggler is cut and drops its work nearly every time (on a loaded machine
    another worker may start an iteration later than it); under finish its late gradients carry
    its own seconds, across the job's kill and resume. A wait is a lower bound of the seconds it
    is in; the gradient's own seconds grow with the machine's load."""
    (static, _), finish = distributed_jobs["static"], distributed_jobs["finish"].result
    x = np.stack(pd.read_parquet(static["metrics"])["compute_s"])
    assert x.shape == (30, WORKERS)
    assert (np.isfinite(x).sum(axis=1) >= 2).all()  # 3 where the straggler was in time too
    straggler = x[~np.isnan(x[:, 1]), 1]
    assert len(straggler) <= 5 and (straggler >= SLOW * DELAY_S).all(), x[:, 1]
    assert (x[:, [0, 2]][np.isfinite(x[:, [0, 2]])] >= DELAY_S).all()
    y = np.stack(pd.read_parquet(finish["metrics"])["compute_s"])
    late = y[~np.isnan(y[:, 1]), 1]
    assert len(late) >= 3 and (late >= SLOW * DELAY_S).all() and (y[:, [0, 2]] >= DELAY_S).all()
    # the straggler's (SLOW - 1) x DELAY_S more of waiting, at least half of it in the medians
    assert np.median(late) - np.median(y[:, [0, 2]]) > 0.5 * (SLOW - 1) * DELAY_S


def test_bad_flags_are_one_line_errors(tmp_path, config, capsys):
    for flags, field in ((("--inject-straggler", "1x5"), "--inject-straggler"),
                         (("--kill-worker", "7:3"), "--kill-worker"),
                         (("--policy", "bdsgd"), "--model")):
        err = refused(tmp_path, config, capsys, "--policy", "sync", "--iterations", "2", *flags)
        assert err.count("\n") == 1 and field in err, err


def test_a_delay_trace_that_does_not_fit_is_refused_before_any_process(tmp_path, config, capsys):
    """--delay-trace of 2 workers for 3, or one with a censored value: one line naming the file
    and the field, before the job starts."""
    two = tmp_path / "two.parquet"
    write_trace(from_arrays(np.ones((5, 2)), {"source": "test"}), two)
    sync = ("--policy", "sync", "--iterations", "2", "--delay-trace")
    err = refused(tmp_path, config, capsys, *sync, str(two))
    assert err.count("\n") == 1 and f"{two}: workers:" in err, err
    censored = tmp_path / "censored.parquet"
    cut = np.zeros((5, WORKERS), dtype=bool)
    cut[2, 1] = True
    write_trace(from_arrays(np.ones((5, WORKERS)), {"source": "test"}, censored=cut), censored)
    err = refused(tmp_path, config, capsys, *sync, str(censored))
    assert err.count("\n") == 1 and str(censored) in err, err


def test_ranks_take_the_nodes_gpus_in_turn(monkeypatch):
    """One GPU per rank where there are enough, round robin where not; cpu stays cpu."""
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    devices = [select_device("auto", local) for local in range(4)]
    assert [d.index for d in devices] == [0, 1, 0, 1] and chosen == devices
    assert select_device("cpu", 3) == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for machines without CUDA")
def test_asking_for_cuda_without_a_gpu_is_one_line_error(tmp_path, config, capsys):
    cfg = yaml.safe_load(config.read_text())
    cfg["train"]["device"] = "cuda"
    config.write_text(yaml.safe_dump(cfg))
    err = refused(tmp_path, config, capsys, "--policy", "sync", "--iterations", "2")
    assert err.count("\n") == 1 and "train.device" in err, err


@pytest.mark.slow
def test_a_killed_job_resumes_from_the_servers_checkpoint(distributed_jobs):
    """SIGKILL the whole job (server, workers, launcher) once the server has checkpointed: no
    process is left, and the same command resumes from the checkpoint instead of from zero."""
    run: Resumed = distributed_jobs["finish"]
    assert run.checkpointed and not run.left and not run.wrote_result
    assert "resumed from" in run.proc.stdout
    assert run.result["resumed_from_iteration"] >= 5 and run.result["iterations"] == 30
    assert not Path(run.result["metrics"]).with_name("finish.checkpoint.pt").exists()
    metrics = pd.read_parquet(run.result["metrics"])
    assert metrics["iteration"].tolist() == list(range(1, 31))
