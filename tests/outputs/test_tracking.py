"""Weights & Biases, offline: real tiny `bdsgd train`, `bdsgd model train` and `bdsgd distributed`
commands log their runs, read back from the `run-*.wandb` files they leave (tests/wandb_records.py).
The first two run in this process (what the console script calls): W&B's service process starts
once for them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from bdsgd.config import from_dict
from bdsgd.traces.io import write_trace
from bdsgd.traces.schema import from_arrays
from tests import wandb_records
from tests.distributed_jobs import WANDB_PROJECT as PROJECT
from tests.helpers import bdsgd_in_process, tiny_config, wandb_offline_env


def bdsgd(capsys, *args) -> None:
    proc = bdsgd_in_process(capsys, *args)
    assert proc.returncode == 0, proc.stderr


HEADLINE = ("time_to_target_s", "final_accuracy", "gradients_per_s", "mean_cutoff")


@pytest.fixture(autouse=True)
def offline_only(tmp_path: Path, monkeypatch):
    """Every W&B file under tmp_path, no server within reach (helpers.wandb_offline_env)."""
    for var, value in wandb_offline_env(tmp_path / "wandb-home").items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("WANDB_MODE", raising=False)


@pytest.fixture
def setup(tmp_path: Path) -> tuple[dict, Path, Path]:
    """(config, its file, a 6-worker trace)."""
    cfg = tiny_config(wandb={"mode": "offline", "project": PROJECT,
                             "osh_command_dir": str(tmp_path / "osh")})
    cfg["train"].update(max_iterations=12, eval_every=5)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    runtimes = np.random.default_rng(3).lognormal(0.0, 0.5, (40, 6))
    return cfg, path, write_trace(from_arrays(runtimes), tmp_path / "trace.parquet")


def offline_run(directory: Path) -> dict:
    """The one offline run under ``directory``: its folder, run record, config, x axes (metric
    -> its step_metric), history rows and summary (every summary update, in order)."""
    (path,) = directory.glob("wandb/offline-run-*/run-*.wandb")
    records = wandb_records.records(path)
    (run,) = [r.run for r in records if r.HasField("run")]
    summary: dict = {}
    for r in records:
        if r.HasField("summary"):
            summary.update(wandb_records.items(r.summary.update))
    config = wandb_records.items(run.config.update)
    config.pop("_wandb")  # wandb's own
    return {"dir": path.parent, "run": run, "config": config, "summary": summary,
            "x": {r.metric.name or r.metric.glob_name: r.metric.step_metric
                  for r in records if r.HasField("metric")},
            "history": [wandb_records.items(r.history.item) for r in records
                        if r.HasField("history")]}


def check_run(logged: dict, job_type: str, tags: set[str], x: str, group: str = "tiny") -> None:
    run = logged["run"]
    assert (run.project, run.run_group, run.job_type) == (PROJECT, group, job_type)
    assert set(run.tags) == tags
    assert logged["x"] == {x: "", "*": x}


@pytest.mark.slow  # wandb's service process
def test_a_convergence_run_logs_its_config_rows_and_summary(tmp_path, setup, capsys):
    cfg, config, trace = setup
    out = tmp_path / "run"
    bdsgd(capsys, "train", "--config", config, "--task", "digits", "--policy", "sync", "--seed", "0",
            "--trace", trace, "--out", out)
    logged = offline_run(out)
    check_run(logged, "sync", {"task:digits", "trace:sim", "seed:0"}, "virtual_time_s")
    result = json.loads((out / "result.json").read_text())
    resolved = from_dict(cfg).to_dict()
    assert logged["config"] == {**resolved, "run": {
        "job_type": "sync", "task": "digits", "trace": "sim", "seed": 0,
        "config_hash": result["config_hash"]}}
    assert resolved == result["config"]  # the config result.json stamps
    metrics = pd.read_parquet(out / "metrics.parquet")
    rows = logged["history"]
    assert [r["_step"] for r in rows] == list(metrics["iteration"]) == list(range(1, 13))
    assert [r["virtual_time_s"] for r in rows] == list(metrics["virtual_time_s"])
    evaluated = list(metrics["iteration"][metrics["test_accuracy"].notna()])
    assert [r["iteration"] for r in rows if "test_accuracy" in r] == evaluated
    assert {5, 10, 12} <= set(evaluated)  # every eval_every and the last (and near the target)
    assert {k: logged["summary"][k] for k in HEADLINE} == {k: result["summary"][k]
                                                           for k in HEADLINE}
    # wandb-osh's trigger: a file in its command directory naming the run's folder
    (trigger,) = (tmp_path / "osh").glob("*.command")
    assert Path(trigger.read_text()) == logged["dir"].resolve()


@pytest.mark.slow  # wandb's service process
def test_model_training_logs_its_epochs(tmp_path, setup, capsys):
    """As the workflow runs it: the trace's name as a flag, W&B's settings in the config."""
    _, config, trace = setup
    out = tmp_path / "model" / "model.pt"
    bdsgd(capsys, "model", "train", trace, "--config", config, "--out", out, "--epochs", "2",
            "--quiet", "--trace-name", "sim")
    logged = offline_run(out.parent)
    check_run(logged, "model", {"trace:sim", "seed:0"}, "epoch")
    assert logged["config"]["model"]["epochs"] == 2 and logged["config"]["run"]["job_type"] == "model"
    assert [r["epoch"] for r in logged["history"]] == [1, 2]
    assert logged["summary"]["final_elbo"] == logged["history"][-1]["elbo"]
    assert logged["summary"]["epochs"] == 2


@pytest.mark.slow  # a server and 2 workers: the session's (tests/distributed_jobs.py)
def test_a_distributed_run_logs_against_wall_time(distributed_jobs):
    result, _ = distributed_jobs["wandb"]
    logged = offline_run(Path(result["metrics"]).parent)
    check_run(logged, "sync", {"task:digits", "trace:t", "seed:0"}, "wall_time_s", group="dist")
    assert [r["wall_time_s"] for r in logged["history"]] == list(
        pd.read_parquet(result["metrics"])["wall_time_s"])
    assert {k: logged["summary"][k] for k in HEADLINE[1:]} == {k: result[k] for k in HEADLINE[1:]}
    assert "time_to_target_s" in logged["summary"]


@pytest.mark.slow  # wandb's service process
def test_a_stopped_and_resumed_run_is_one_wandb_run_with_every_iteration_once(tmp_path, setup,
                                                                             monkeypatch):
    """SIGTERM (a time limit, a preemption) at iteration 7 of 12: the run checkpoints at 7 and
    stops; the same command resumes it. W&B then holds one run, whose id is the run's identity,
    with iterations 1..12 once each."""
    import os
    import signal

    import bdsgd.training.synchronous as synchronous
    from bdsgd.config import load_config
    from bdsgd.errors import Stopped
    from bdsgd.training import run_spec, train_run

    _, config, trace = setup
    cfg = load_config(config)
    step, calls = synchronous.sgd_step, []

    def preempted(*args):
        calls.append(1)
        if len(calls) == 7:
            os.kill(os.getpid(), signal.SIGTERM)  # the stop request, read at the row's end
        return step(*args)

    monkeypatch.setattr(synchronous, "sgd_step", preempted)
    out = tmp_path / "run"
    with pytest.raises(Stopped):
        train_run(run_spec(cfg, "digits", "sync", 0, trace, out))
    assert len(list(out.glob("wandb/offline-run-*"))) == 1  # the interrupted run's
    monkeypatch.setattr(synchronous, "sgd_step", step)
    train_run(run_spec(cfg, "digits", "sync", 0, trace, out))
    logged = offline_run(out)  # exactly one offline run folder
    assert [r["_step"] for r in logged["history"]] == list(range(1, 13))
    assert logged["run"].run_id == logged["dir"].name.rsplit("-", 1)[1]
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert [r["virtual_time_s"] for r in logged["history"]] == list(metrics["virtual_time_s"])
