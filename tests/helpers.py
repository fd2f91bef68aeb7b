"""What the test modules share: paths, the tiny config, the commands as a user runs them, the
virtual cluster's small runs, and test doubles. Test modules import from here (or use
conftest.py's fixtures), never from one another."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests/data"


# ----------------------------------------------------------------------------- configs
def tiny_config(**overrides) -> dict:
    """The smallest config that exercises every stage (seconds, not minutes)."""
    cfg = {
        "experiment": "tiny",
        "seed": 0,
        "traces": {"sim": {"source": "simulate",
                           "simulate": {"workers": 6, "iterations": 120, "workers_per_node": 3}}},
        "model": {"epochs": 2, "samples": 16, "chunk": 16, "hidden_dim": 16},
        "throughput": {"policies": ["sync", "static", "elfving", "ecdf", "bandit", "bdsgd",
                                    "oracle", "oracle-myopic"]},
        "train": {"trace": "sim", "tasks": ["digits"], "policies": ["sync", "bdsgd"],
                  "seeds": [0], "batch_size": 8, "max_iterations": 30, "eval_every": 10,
                  "target_accuracy": {"digits": 0.5}},
    }
    cfg.update(overrides)
    return cfg


def tiny_dag_config() -> dict:
    """The session's tiny DAG (conftest.py: tiny_dag): the tiny config plus an imported trace."""
    cfg = tiny_config()
    cfg["traces"]["pai"] = {"source": "import", "format": "alibaba-pai",
                            "path": str(DATA / "alibaba_pai_job_1_norm.csv")}
    return cfg


# ---------------------------------------------------------------------------- commands
def run_cli(*args: str, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m bdsgd ARGS`` as a user would; fail the test with its output if asked."""
    env = dict(os.environ, PYTHONWARNINGS="error::DeprecationWarning:bdsgd")
    proc = subprocess.run([sys.executable, "-m", "bdsgd", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd or REPO, env=env, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"bdsgd {' '.join(map(str, args))} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def snakemake(*args: str, cwd: Path = REPO, timeout: int = 1200) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=timeout)


def run_dag(workdir: Path, config: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    proc = snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                     "--configfile", str(config), "--cores", "2")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


# ------------------------------------------------------------- the virtual cluster's runs
N_WORKERS, T_ROWS = 6, 12
STALENESS = ("mean_staleness", "max_staleness", "staleness_p50", "staleness_p90")


def make_cfg(wandb_mode="disabled", static_backups=2, comm_s=0.05, **train):
    from bdsgd.config import from_dict

    base = {"trace": "t", "tasks": ["digits"], "max_iterations": 30, "eval_every": 5,
            "batch_size": 8, "learning_rate": 0.1, "checkpoint_every": 10}
    return from_dict({"experiment": "test", "traces": {"t": {"source": "simulate"}},
                      "policies": {"static_backups": static_backups},
                      "throughput": {"comm_s": comm_s},
                      "train": {**base, **train}, "wandb": {"mode": wandb_mode}})


def write(tmp_path: Path, runtimes: np.ndarray, name: str = "trace") -> Path:
    """``runtimes`` as the trace file ``tmp_path/<name>.parquet``."""
    from bdsgd.traces.io import write_trace
    from bdsgd.traces.schema import from_arrays

    return write_trace(from_arrays(runtimes), tmp_path / f"{name}.parquet")


def metrics(run: Path) -> pd.DataFrame:
    return pd.read_parquet(run / "metrics.parquet")


def summary(run: Path) -> dict:
    return json.loads((run / "result.json").read_text())["summary"]


def crash_at_call(monkeypatch, module, name: str, k: int) -> None:
    """Make the k-th call of ``module.name`` raise, as a killed job would stop."""
    function, calls = getattr(module, name), []

    def crashing(*args):
        calls.append(1)
        if len(calls) == k:
            raise KeyboardInterrupt
        return function(*args)

    monkeypatch.setattr(module, name, crashing)


def crash_at_iteration(monkeypatch, k: int) -> None:
    """Make the k-th SGD step of the cutoff mode raise."""
    import bdsgd.training.synchronous as synchronous

    crash_at_call(monkeypatch, synchronous, "sgd_step", k)


def interrupted_then_resumed(monkeypatch, run, out: Path) -> Path:
    """``run(out)`` with the crash the caller installed: it dies leaving a checkpoint and no
    metrics; run again without the crash, it completes: the resumed run's folder."""
    with pytest.raises(KeyboardInterrupt):
        run(out)
    assert (out / "checkpoint.pt").exists()
    assert not (out / "metrics.parquet").exists()
    monkeypatch.undo()
    resumed = run(out)
    assert not (resumed / "checkpoint.pt").exists()  # a complete run leaves no checkpoint
    return resumed


# -------------------------------------------------------------------------- test doubles
class LastIteration:
    """Test double of the run-time model's predictor: last iteration's order statistics, with
    the censored workers put at the cutoff time."""

    def __init__(self):
        self.expected = None

    def observe(self, obs):
        self.expected = np.sort(np.where(obs.accepted, obs.runtimes, obs.cutoff_time))

    def expected_order_stats(self):
        return self.expected


class Regimes:
    """Test double of the simulator's Truth: blocks of 10 fast iterations (two quick workers,
    two slow) and 10 slow ones (all slow), with 5% noise."""

    def __init__(self, n=4):
        self.n = self.n_workers = n

    def predictive_draws(self, t, n_samples, rng):
        if (t // 10) % 2:
            return rng.uniform(10.0, 10.5, (n_samples, self.n))
        base = np.where(np.arange(self.n) < self.n // 2, 1.0, 3.0)
        return base * rng.uniform(0.95, 1.05, (n_samples, self.n))
