"""Shared fixtures: a tiny experiment config, written to disk like a user's, and the tiny
DAG run once for every test module that reads its outputs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


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


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_config()))
    return path


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


@pytest.fixture(scope="session")
def tiny_dag(tmp_path_factory):
    """The tiny DAG (a simulated and an imported trace), run once for every test module that
    reads it (none writes into it): (working directory, config file, config)."""
    root = tmp_path_factory.mktemp("dag")
    cfg = tiny_config()
    cfg["traces"]["pai"] = {"source": "import", "format": "alibaba-pai",
                            "path": str(REPO / "tests/data/alibaba_pai_job_1_norm.csv")}
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(cfg))
    run_dag(root / "a", config)
    yield root / "a", config, cfg
    shutil.rmtree(root)
