"""Every ``bdsgd`` entry point: each starts as a program, each subcommand's --help documents every
flag, the DAG's stages run by hand (no Snakemake) reproduce the session DAG's results, and bad
input is one line on stderr and exit status 2.

``ENTRY_POINTS`` must list every subcommand the parser has: adding one without a smoke test here
fails ``test_every_entry_point_is_smoke_tested``.
"""

from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from bdsgd.cli import build_parser, main
from bdsgd.errors import Stopped, UserError
from tests.helpers import REPO, result_tables, stamp_free

ENTRY_POINTS = [
    "traces import", "traces simulate", "traces gather", "traces describe", "traces split",
    "traces plot", "traces censor",  # its runs: tests/figures/test_replay_ablations.py
    "model train", "model evaluate", "model sample", "throughput", "train", "figures",
    "model prior",  # its runs: tests/runtime_model/test_prior.py
    "distributed",  # its runs: tests/distributed/test_distributed.py
    "plan",  # its runs: tests/plan/test_plan.py
    "pilot",  # its runs: tests/training/test_pilot.py
    "ladder",  # its runs: tests/test_ladder.py
]
CONTRACT_KEYS = {"gradients_per_s", "relative_to_oracle", "mean_cutoff", "decision_ms_p50"}
# Each program a user or a job starts, once as a process: the console script and `python -m`
# (the stages' commands: every other test calls them in-process or through these), and the
# per-process entry points that `bdsgd distributed` and `bdsgd traces gather` start.
PROGRAMS = {
    "bdsgd": [str(Path(sys.executable).with_name("bdsgd"))],
    "python -m bdsgd": [sys.executable, "-m", "bdsgd"],
    "python -m bdsgd.distributed.launch": [sys.executable, "-m", "bdsgd.distributed.launch"],
    "python -m bdsgd.traces.gather": [sys.executable, "-m", "bdsgd.traces.gather"],
}


def leaves(parser: argparse.ArgumentParser, prefix: str = "") -> list[str]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [prefix.strip()]
    return [leaf for name, p in subs[0].choices.items() for leaf in leaves(p, f"{prefix} {name}")]


def test_every_entry_point_is_smoke_tested():
    assert sorted(leaves(build_parser())) == sorted(ENTRY_POINTS)


@pytest.mark.parametrize("program", PROGRAMS)
def test_each_program_starts_and_shows_its_usage(program):
    proc = subprocess.run([*PROGRAMS[program], "--help"], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: "), proc.stdout
    if program in ("bdsgd", "python -m bdsgd"):  # the console script is the CLI
        assert all(command.split()[0] in proc.stdout for command in ENTRY_POINTS)


@pytest.mark.parametrize("command", ENTRY_POINTS)
def test_help_documents_every_flag(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([*command.split(), "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    parser = build_parser()
    for word in command.split():
        parser = next(a for a in parser._actions
                      if isinstance(a, argparse._SubParsersAction)).choices[word]
    for action in parser._actions:
        assert action.help, f"{command}: {action.dest} has no help"
        for flag in action.option_strings:
            assert flag in out


# ------------------------------------------------------ the stages, by hand and in the DAG
@pytest.mark.long  # the stages run by hand once more: make test-long (CI runs it)
def test_the_stages_by_hand_reproduce_the_dags_results(tiny_dag, stages_by_hand):
    """The DAG's commands run by hand, on the whole config file (no stage config files), make
    the session DAG's tables byte for byte (less a trace's provenance stamp: tests.helpers.
    stamp_free), the same models, and the same traces' truths and statistics."""
    dag, _, cfg = tiny_dag
    hand, _, _ = stages_by_hand
    ours, theirs = result_tables(hand, "tiny"), result_tables(dag, "tiny")
    assert sorted(ours) == sorted(theirs) and len(ours) > 10, sorted(ours)
    for table in ("figures/tiny/summary.csv", "figures/tiny/throughput_summary.csv",
                  "results/tiny/runs/sim/digits/sync/seed0/metrics.parquet",
                  "results/tiny/runs/sim/digits/bdsgd/seed0/metrics.parquet",
                  "results/tiny/traces/sim/trace.parquet"):
        assert table in ours, table
    assert [f for f in ours if stamp_free(ours[f]) != stamp_free(theirs[f])] == []
    for trace in cfg["traces"]:
        for other in ("describe.json", *(f"{part}.truth.npz" for part in ("trace", "train", "test")
                                         if cfg["traces"][trace]["source"] == "simulate")):
            path = f"results/tiny/traces/{trace}/{other}"
            assert (hand / path).read_bytes() == (dag / path).read_bytes(), path
        path = f"results/tiny/models/{trace}/model.pt"
        ours_model, theirs_model = (torch.load(d / path, weights_only=False) for d in (hand, dag))
        assert same(ours_model, theirs_model, "provenance"), path
    for policy in cfg["train"]["policies"]:
        path = f"results/tiny/runs/sim/digits/{policy}/seed0/model.pt"
        ours_net, theirs_net = (torch.load(d / path, weights_only=True) for d in (hand, dag))
        assert same(ours_net, theirs_net), path


def same(a, b, *besides: str) -> bool:
    """Whether two checkpoints hold the same values (tensors equal bit for bit), but at the
    top-level keys ``besides``."""
    if isinstance(a, dict):
        keys = a.keys() - set(besides)
        return keys == b.keys() - set(besides) and all(same(a[k], b[k]) for k in keys)
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return a == b


@pytest.mark.slow
def test_traces_describe(tiny_dag, capsys):
    dag, _, _ = tiny_dag  # the DAG's describe_trace: `traces describe --json`
    stats = json.loads((dag / "results/tiny/traces/pai/describe.json").read_text())
    assert stats["workers"] == 10
    assert main(["traces", "describe", str(dag / "results/tiny/traces/sim/trace.parquet")]) == 0
    assert capsys.readouterr().out.strip()


def test_traces_gather_refuses_a_trace_of_another_source(tmp_path, config_file, capsys):
    """The tiny config's only trace is simulated: gather refuses it by name, writing nothing.
    (A gathered trace, by name: tests/traces/test_gather.py.)"""
    out = tmp_path / "gathered.parquet"
    code = main(["traces", "gather", "--config", str(config_file), "--name", "sim",
                 "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "traces.sim" in err
    assert not out.exists()


@pytest.mark.slow
def test_traces_plot(tiny_dag):
    dag, _, _ = tiny_dag  # the DAG's trace_figures: `bdsgd traces plot` of the imported trace
    for kind in ("runtime_cdf", "heatmap", "cov"):
        assert (dag / f"figures/tiny/traces/pai_{kind}.png").stat().st_size > 10_000


@pytest.mark.slow
def test_throughput_contract(tiny_dag):
    dag, _, _ = tiny_dag
    table = json.loads((dag / "results/tiny/throughput/sim/throughput.json").read_text())
    for name in ("sync", "static", "elfving", "ecdf", "bandit", "bdsgd", "oracle"):
        assert set(table["policies"][name]) >= CONTRACT_KEYS, name
    # late workers finish (the default): the hindsight plan of independent iterations is a
    # reference the replay cannot beat, and reaches it only where no cut worker starts late
    assert table["trace"]["late"] == "finish"
    assert 0.5 < table["policies"]["oracle"]["relative_to_oracle"] <= 1.0
    decisions = pd.read_parquet(dag / "results/tiny/throughput/sim/decisions.parquet")
    assert {"policy", "iteration", "cutoff"} <= set(decisions.columns)


@pytest.mark.slow
def test_model_sample(tiny_dag, tmp_path):
    dag, _, _ = tiny_dag
    assert main(["model", "sample", str(dag / "results/tiny/models/sim/model.pt"),
                 "--iterations", "20", "--out", str(tmp_path / "sampled.parquet")]) == 0
    assert len(pd.read_parquet(tmp_path / "sampled.parquet")) == 20 * 6


@pytest.mark.slow
def test_figures_and_summary(tiny_dag):
    dag, _, _ = tiny_dag  # the DAG's figures rule: `bdsgd figures` of its results folder
    summary = pd.read_csv(dag / "figures/tiny/summary.csv")
    assert list(summary.columns[:7]) == ["task", "policy", "seed", "time_to_target_s",
                                         "final_accuracy", "gradients_per_s", "mean_cutoff"]
    assert sorted(summary["policy"]) == ["bdsgd", "sync"]
    assert (summary["mean_cutoff"] <= 6).all()


# ------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("args", [
    ["traces", "describe", "missing.parquet"],
    ["traces", "import", "--format", "csv", "missing.csv", "out.parquet"],
    ["throughput", "missing.parquet", "--policies", "sync", "--json", "out.json"],
    ["figures", "no-such-results", "--out", "figs"],
    ["train", "--config", "missing.yaml", "--task", "digits", "--policy", "sync", "--seed", "0",
     "--trace", "t.parquet", "--out", "run"],
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, args):
    monkeypatch.chdir(tmp_path)
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("bdsgd: error: ") and err.count("\n") == 1, err
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_errors_survive_a_process_boundary():
    """A process pool pickles a worker's exception back to its parent: it must arrive whole, or
    the parent reports a broken pool instead of the file and field."""
    error = pickle.loads(pickle.dumps(UserError("t.parquet", "runtime_s", "negative")))
    assert isinstance(error, UserError) and str(error) == "t.parquet: runtime_s: negative"
    stopped = pickle.loads(pickle.dumps(Stopped(15, "run.ckpt", 7)))
    assert (stopped.signum, stopped.checkpoint, stopped.iteration) == (15, "run.ckpt", 7)
