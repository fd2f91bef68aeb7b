"""The Snakemake DAG: lint-clean, builds for every shipped config, and end to end at tiny scale
twice with byte-identical result tables."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, tiny_config

SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def snakemake(*args: str, cwd: Path = REPO, timeout: int = 1200) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([SNAKEMAKE, *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_lint_clean():
    proc = snakemake("--lint", "--profile", "profiles/smoke")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Congratulations" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize("config", ["configs/smoke.yaml", "configs/paper.yaml"])
def test_dag_builds(config):
    proc = snakemake("-n", "--quiet", "rules", "--configfile", config, "--cores", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_invalid_config_is_rejected(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(tiny_config(model={"epochs": -1})))
    proc = snakemake("-n", "--configfile", str(bad), "--cores", "1")
    assert proc.returncode != 0
    assert "epochs" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_tiny_dag_end_to_end_is_byte_identical(tmp_path):
    """Run the whole DAG twice in two directories: same tables, byte for byte."""
    cfg = tiny_config()
    cfg["traces"]["pai"] = {"source": "import", "format": "alibaba-pai",
                            "path": str(REPO / "tests/data/alibaba_pai_job_1_norm.csv")}
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(cfg))
    outputs = []
    for name in ("a", "b"):
        workdir = tmp_path / name
        workdir.mkdir()
        proc = snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                         "--configfile", str(config), "--cores", "2")
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        outputs.append(workdir)
    a, b = outputs
    figures = a / "figures/tiny"
    for png in ("time_to_accuracy", "cutoff_over_time", "throughput", "runtime_distributions",
                "model_predictions"):
        assert (figures / f"{png}.png").stat().st_size > 10_000, png
    summary = (figures / "summary.csv").read_text().splitlines()
    assert summary[0].startswith("task,policy,seed,time_to_target_s,final_accuracy,"
                                 "gradients_per_s,mean_cutoff")
    assert len(summary) == 1 + 2  # digits x {sync, bdsgd} x seed 0
    for table in ("figures/tiny/summary.csv", "figures/tiny/throughput_summary.csv",
                  "results/tiny/runs/digits/sync/seed0/metrics.parquet",
                  "results/tiny/runs/digits/bdsgd/seed0/metrics.parquet",
                  "results/tiny/traces/sim/trace.parquet"):
        assert (a / table).read_bytes() == (b / table).read_bytes(), table
    for logs in (a / "logs/tiny").rglob("*.log"):
        assert logs.is_file()
    shutil.rmtree(tmp_path / "b")
