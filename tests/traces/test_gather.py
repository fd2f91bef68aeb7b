"""Gathering real run-times under torch.distributed: 3 workers x 20 iterations through the CLI and
torchrun, one in-process worker under torchrun's and srun's environment, and bad inputs."""

from __future__ import annotations

import socket
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from bdsgd.cli.commands import _config_name
from bdsgd.config import GatherConfig, from_dict
from bdsgd.errors import UserError
from bdsgd.traces import gather as gather_module
from bdsgd.traces.gather import gather
from bdsgd.traces.io import read_trace
from tests.helpers import REPO, tiny_config

RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
             "SLURM_JOB_ID", "SLURM_JOB_NODELIST", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def clean_env(monkeypatch):
    for var in RANK_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.long  # three worker processes and a server: make test-long (CI runs it)
def test_cli_gathers_three_workers(tmp_path, clean_env):
    """By name, from a config whose other trace is simulated, with the flags' workers and
    iterations (not the config's): one row per worker and iteration."""
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_config(traces={
        "sim": {"source": "simulate"},
        "real": {"source": "gather", "gather": {"workers": 2, "iterations": 5}}})))
    out = tmp_path / "gathered.parquet"
    run = subprocess.run([sys.executable, "-m", "bdsgd", "traces", "gather",
                          "--config", str(config), "--name", "real", "--workers", "3",
                          "--iterations", "20", "--out", str(out)],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert len(pd.read_parquet(out)) == 3 * 20
    trace = read_trace(out)
    assert trace.runtimes.shape == (20, 3) and trace.complete
    np.testing.assert_allclose(trace.compute_s + trace.comm_s, trace.runtimes)
    assert (trace.compute_s > 0).all() and (trace.comm_s > 0).all()
    assert trace.node.tolist() == [0, 0, 0]
    meta = trace.meta
    assert meta["source"] == "gather" and meta["backend"] == "gloo" and meta["world_size"] == 3
    assert meta["hosts"] == [socket.gethostname()] * 3 and meta["launcher"] == "torchrun"
    assert meta["gather"]["workers"] == 3 and meta["gather"]["iterations"] == 20
    assert meta["gather"]["task"] == "digits" and meta["seed"] == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "gathered.parquet"]


def test_without_a_name_the_configs_one_gathered_trace_is_gathered():
    """`bdsgd traces gather` without --name picks the config's only trace of source gather."""
    cfg = from_dict(tiny_config(traces={"sim": {"source": "simulate"},
                                        "real": {"source": "gather"}}))
    assert _config_name(cfg, None, "gather") == "real"
    assert _config_name(cfg, "real", "gather") == "real"


@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_single_worker_in_process(tmp_path, clean_env, launcher):
    """The worker path itself, as rank 0 of a world of 1, with the variables each launcher sets;
    the background load it starts is stopped when it is done."""
    if launcher == "torchrun":
        for var, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                           "MASTER_ADDR": "127.0.0.1"}.items():
            clean_env.setenv(var, value)
    else:
        for var, value in {"SLURM_PROCID": "0", "SLURM_NTASKS": "1", "SLURM_LOCALID": "0",
                           "SLURM_JOB_ID": "123", "MASTER_ADDR": "127.0.0.1"}.items():
            clean_env.setenv(var, value)
    clean_env.setenv("MASTER_PORT", str(free_port()))
    started, original = [], gather_module._start_background_load

    def start(n):
        started.extend(original(n))
        return started

    clean_env.setattr(gather_module, "_start_background_load", start)
    threads = torch.get_num_threads()
    try:
        gather(GatherConfig(iterations=3, batch_size=8, background_load=1), "data", 1,
               tmp_path / "one.parquet")
    finally:
        torch.set_num_threads(threads)
    trace = read_trace(tmp_path / "one.parquet")
    assert trace.runtimes.shape == (3, 1) and trace.meta["launcher"] == launcher
    assert trace.meta["seed"] == 1 and trace.meta["gather"]["batch_size"] == 8
    assert len(started) == 1 and all(p.poll() is not None for p in started)


def test_bad_inputs(tmp_path, clean_env):
    with pytest.raises(UserError, match="train.data_dir"):
        gather(GatherConfig(task="mnist"), tmp_path, 0, tmp_path / "x.parquet")
    with pytest.raises(UserError, match="at least 1 worker"):
        gather(GatherConfig(), "data", 0, tmp_path / "x.parquet", workers=0)
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="gather.backend: nccl needs CUDA"):
            gather(GatherConfig(backend="nccl"), "data", 0, tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()
