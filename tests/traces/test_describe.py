"""Trace statistics on traces with known answers, and the `bdsgd traces` subcommands end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from bdsgd.traces.describe import LABELS, describe, format_description
from bdsgd.traces.io import read_trace
from bdsgd.traces.schema import from_arrays
from tests.helpers import DATA, bdsgd_in_process


def test_one_slow_worker():
    """Three workers at 1 s and one at 10 s every iteration: CoV = sd([1,1,1,10])/3.25 and the
    hindsight optimum always drops the slow one."""
    x = np.tile([1.0, 1.0, 1.0, 10.0], (20, 1))
    stats = describe(from_arrays(x, {"source": "test"}))
    cov = np.sqrt((3 * 2.25**2 + 6.75**2) / 4) / 3.25
    assert stats["cov_mean"] == pytest.approx(cov) and stats["cov_p90"] == pytest.approx(cov)
    assert stats["frac_best_cutoff_below_n"] == 1.0 and stats["hindsight_best_mean_cutoff"] == 3
    assert stats["hindsight_speedup_over_sync"] == pytest.approx((3 / 1) / (4 / 10))
    assert stats["p50_s"] == 1.0 and stats["mean_s"] == 3.25 and stats["max_s"] == 10.0
    assert (stats["workers"], stats["iterations"], stats["source"]) == (4, 20, "test")


def test_identical_workers_never_cut():
    stats = describe(from_arrays(np.full((5, 3), 2.0), {"source": "test", "time_unit": "ms"}))
    assert stats["cov_mean"] == 0 and stats["frac_best_cutoff_below_n"] == 0
    assert stats["p99_over_p50"] == 1 and stats["time_unit"] == "ms"


def test_occasional_straggler_fraction():
    """A 5x straggler in 3 of 10 iterations: only those are worth cutting."""
    x = np.ones((10, 8))
    x[[2, 5, 7], 4] = 5.0
    stats = describe(from_arrays(x, {"source": "test"}))
    assert stats["frac_best_cutoff_below_n"] == pytest.approx(0.3)
    assert stats["censored_fraction"] == 0


def test_censored_fraction_and_json():
    x = np.arange(1, 13, dtype=float).reshape(3, 4)
    censored = np.zeros((3, 4), bool)
    censored[1, 3] = censored[2, 3] = True
    stats = describe(from_arrays(x, {"source": "test"}, censored=censored))
    assert stats["censored_fraction"] == pytest.approx(2 / 12)
    assert json.loads(json.dumps(stats)) == stats
    assert all(type(v) in (int, float, str) for v in stats.values())
    text = format_description(stats)
    assert len(text.splitlines()) == len(LABELS) and "censored run-times (fraction)" in text


# ------------------------------------------------------------------------------ the CLI
@pytest.fixture
def bdsgd(capsys):
    """`bdsgd ARGS` (in this process: tests/cli/test_cli.py starts the program)."""
    return lambda *args: bdsgd_in_process(capsys, *args)


def test_cli_import_describe_split(tmp_path, bdsgd):
    out = tmp_path / "pai.parquet"
    run = bdsgd("traces", "import", "--format", "alibaba-pai",
                DATA / "alibaba_pai_job_2_norm.csv", out)
    assert run.returncode == 0, run.stderr
    assert "238 iterations x 10 workers" in run.stdout
    run = bdsgd("traces", "describe", out, "--json")
    assert run.returncode == 0, run.stderr
    stats = json.loads(run.stdout)
    assert stats["workers"] == 10 and stats["iterations"] == 238
    assert stats["time_unit"] == "normalised 0-1000"
    run = bdsgd("traces", "describe", out)
    assert "CoV per iteration: median" in run.stdout
    run = bdsgd("traces", "split", out, "--train-fraction", "0.25",
                "--train", tmp_path / "a.parquet", "--test", tmp_path / "b.parquet")
    assert run.returncode == 0, run.stderr
    assert read_trace(tmp_path / "a.parquet").n_iterations == 60
    assert read_trace(tmp_path / "b.parquet").n_iterations == 178


def test_cli_simulate(tmp_path, bdsgd):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "experiment": "t",
        "traces": {"sim": {"source": "simulate", "simulate": {"workers": 8, "iterations": 50}}},
        "train": {"trace": "sim", "tasks": ["digits"]}}))
    out = tmp_path / "sim.parquet"
    run = bdsgd("traces", "simulate", "--config", config, "--seed", 4, "--out", out)
    assert run.returncode == 0, run.stderr
    trace = read_trace(out)
    assert trace.runtimes.shape == (50, 8) and trace.meta["seed"] == 4
    assert trace.meta["params"]["scenario"] == "mixed" and trace.meta["provenance"]["config_hash"]
    assert (tmp_path / "sim.truth.npz").is_file()


def test_cli_bad_inputs_exit_2_with_one_line(tmp_path, bdsgd):
    bad = tmp_path / "bad.csv"
    bad.write_text("iteration,worker,runtime_s\n0,0,1\n0,1,-3\n")
    run = bdsgd("traces", "import", "--format", "csv", bad, tmp_path / "x.parquet")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip() == (f"bdsgd: error: {bad}: row 1, runtime_s: run-time must be "
                                  "finite and > 0, got -3.0")
    assert not (tmp_path / "x.parquet").exists()
    run = bdsgd("traces", "describe", tmp_path / "missing.parquet")
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert "missing.parquet: -: trace file not found" in run.stderr
