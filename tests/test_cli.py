"""A subprocess smoke test of every ``bdsgd`` entry point, run as a user would run it.

``ENTRY_POINTS`` must list every subcommand the parser has: adding one without a smoke test here
fails ``test_every_entry_point_is_smoke_tested``.
"""

from __future__ import annotations

import argparse
import json
import pickle

import pandas as pd
import pytest

from bdsgd.cli import build_parser
from bdsgd.errors import Stopped, UserError
from tests.conftest import REPO, run_cli

ENTRY_POINTS = [
    "traces import", "traces simulate", "traces gather", "traces describe", "traces split",
    "traces plot",
    "model train", "model evaluate", "model sample", "throughput", "train", "figures",
    "distributed",  # its runs: tests/test_distributed.py
]
CONTRACT_KEYS = {"gradients_per_s", "relative_to_oracle", "mean_cutoff", "decision_ms_p50"}


def leaves(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [prefix.strip()]
    return [leaf for name, p in subs[0].choices.items() for leaf in leaves(p, f"{prefix} {name}")]


def test_every_entry_point_is_smoke_tested():
    assert sorted(leaves(build_parser())) == sorted(ENTRY_POINTS)


@pytest.mark.parametrize("command", ENTRY_POINTS)
def test_help_documents_every_flag(command):
    out = run_cli(*command.split(), "--help").stdout
    parser = build_parser()
    for word in command.split():
        parser = next(a for a in parser._actions
                      if isinstance(a, argparse._SubParsersAction)).choices[word]
    for action in parser._actions:
        assert action.help, f"{command}: {action.dest} has no help"
        for flag in action.option_strings:
            assert flag in out


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """Every stage by hand, in order, on a tiny config: the DAG without Snakemake."""
    import yaml

    from tests.conftest import tiny_config

    d = tmp_path_factory.mktemp("cli")
    cfg = d / "config.yaml"
    cfg.write_text(yaml.safe_dump(tiny_config()))
    run_cli("traces", "simulate", "--config", cfg, "--out", d / "trace.parquet")
    run_cli("traces", "import", "--format", "alibaba-pai",
            REPO / "tests/data/alibaba_pai_job_2_norm.csv", d / "pai.parquet")
    run_cli("traces", "split", d / "trace.parquet", "--train-fraction", "0.5",
            "--train", d / "train.parquet", "--test", d / "test.parquet")
    run_cli("model", "train", d / "train.parquet", "--config", cfg, "--out", d / "model.pt",
            "--quiet")
    results = d / "results"
    run_cli("model", "evaluate", d / "model.pt", d / "test.parquet",
            "--json", results / "models/sim/evaluation.json")
    run_cli("throughput", d / "test.parquet", "--policies",
            "sync,static,elfving,ecdf,bandit,bdsgd,oracle", "--model", d / "model.pt",
            "--config", cfg, "--json", results / "throughput/sim/throughput.json",
            "--decisions", results / "throughput/sim/decisions.parquet")
    for policy in ("sync", "bdsgd"):
        run_cli("train", "--config", cfg, "--task", "digits", "--policy", policy, "--seed", 0,
                "--trace", d / "test.parquet", "--model", d / "model.pt",
                "--out", results / f"runs/digits/{policy}/seed0")
    return d


def test_traces_describe(pipeline):
    stats = json.loads(run_cli("traces", "describe", "--json", pipeline / "pai.parquet").stdout)
    assert stats["workers"] == 10
    assert run_cli("traces", "describe", pipeline / "trace.parquet").stdout.strip()


def test_traces_gather(tmp_path, config_file):
    import yaml

    out = tmp_path / "gathered.parquet"
    # The tiny config's only trace is simulated: gather refuses it by name, writing nothing.
    proc = run_cli("traces", "gather", "--config", config_file, "--name", "sim", "--out", out,
                   check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "traces.sim" in proc.stderr
    assert not out.exists()
    cfg = yaml.safe_load(config_file.read_text())
    cfg["traces"]["real"] = {"source": "gather", "gather": {"workers": 2, "iterations": 3}}
    config_file.write_text(yaml.safe_dump(cfg))
    run_cli("traces", "gather", "--config", config_file, "--name", "real", "--out", out)
    assert len(pd.read_parquet(out)) == 2 * 3


def test_traces_plot(pipeline):
    run_cli("traces", "plot", pipeline / "pai.parquet", "--name", "pai", "--out", pipeline / "tf")
    for kind in ("runtime_cdf", "heatmap", "cov"):
        assert (pipeline / f"tf/pai_{kind}.png").stat().st_size > 10_000


def test_throughput_contract(pipeline):
    table = json.loads((pipeline / "results/throughput/sim/throughput.json").read_text())
    for name in ("sync", "static", "elfving", "ecdf", "bandit", "bdsgd", "oracle"):
        assert set(table["policies"][name]) >= CONTRACT_KEYS, name
    assert table["policies"]["oracle"]["relative_to_oracle"] == pytest.approx(1.0)
    decisions = pd.read_parquet(pipeline / "results/throughput/sim/decisions.parquet")
    assert {"policy", "iteration", "cutoff"} <= set(decisions.columns)


def test_model_sample(pipeline):
    run_cli("model", "sample", pipeline / "model.pt", "--iterations", 20,
            "--out", pipeline / "sampled.parquet")
    assert len(pd.read_parquet(pipeline / "sampled.parquet")) == 20 * 6


def test_figures_and_summary(pipeline):
    out = pipeline / "figs"
    results = pipeline / "results"
    # The figures read traces and predictions from the results folder, as the DAG lays it out.
    (results / "traces/sim").mkdir(parents=True, exist_ok=True)
    (results / "traces/sim/trace.parquet").write_bytes((pipeline / "trace.parquet").read_bytes())
    run_cli("model", "evaluate", pipeline / "model.pt", pipeline / "test.parquet",
            "--json", results / "models/sim/evaluation.json",
            "--predictions", results / "models/sim/predictions.parquet")
    run_cli("figures", results, "--out", out)
    summary = pd.read_csv(out / "summary.csv")
    assert list(summary.columns[:7]) == ["task", "policy", "seed", "time_to_target_s",
                                         "final_accuracy", "gradients_per_s", "mean_cutoff"]
    assert sorted(summary["policy"]) == ["bdsgd", "sync"]
    assert (summary["mean_cutoff"] <= 6).all()


@pytest.mark.parametrize("args", [
    ["traces", "describe", "missing.parquet"],
    ["traces", "import", "--format", "csv", "missing.csv", "out.parquet"],
    ["throughput", "missing.parquet", "--policies", "sync", "--json", "out.json"],
    ["figures", "no-such-results", "--out", "figs"],
    ["train", "--config", "missing.yaml", "--task", "digits", "--policy", "sync", "--seed", "0",
     "--trace", "t.parquet", "--out", "run"],
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args):
    proc = run_cli(*args, check=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("bdsgd: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_errors_survive_a_process_boundary():
    """A process pool pickles a worker's exception back to its parent: it must arrive whole, or
    the parent reports a broken pool instead of the file and field."""
    error = pickle.loads(pickle.dumps(UserError("t.parquet", "runtime_s", "negative")))
    assert isinstance(error, UserError) and str(error) == "t.parquet: runtime_s: negative"
    stopped = pickle.loads(pickle.dumps(Stopped(15, "run.ckpt", 7)))
    assert (stopped.signum, stopped.checkpoint, stopped.iteration) == (15, "run.ckpt", 7)
