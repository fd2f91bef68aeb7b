"""Bad flags, numbers and output paths: each is refused before any work with one line
``bdsgd: error: FILE: FIELD: MESSAGE`` on stderr (FILE may be the flag), exit status 2, and
nothing written; values at the edge of each range are still accepted.

Cases by class: ``FLAGS`` (every subcommand's flags as argparse reads them: missing, unknown,
ambiguous, not a choice, not a number), ``NUMBERS`` (a number out of its range, on the command
line or in a config), ``OUTPUTS`` (an output that cannot be written where it is asked for).
Each runs the CLI in this process; the broken pipe runs it as a process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from bdsgd.cli import build_parser, main
from bdsgd.cli.flags import SEED_MAX
from bdsgd.errors import UserError
from tests.helpers import REPO

SEED_OVER = str(SEED_MAX + 1)


@pytest.fixture
def ws(tmp_path):
    """A working folder: a trace, a CSV to import, a config, an empty folder and a plain file;
    the placeholders a case's arguments name them by."""
    from bdsgd.traces.io import write_trace
    from bdsgd.traces.schema import from_arrays

    trace = write_trace(from_arrays(np.random.default_rng(0).lognormal(size=(20, 3))),
                        tmp_path / "t.parquet")
    csv = tmp_path / "in.csv"
    csv.write_text("iteration,worker,runtime_s\n" + "".join(
        f"{t},{w},{1 + 0.1 * (t + w)}\n" for t in range(4) for w in range(2)))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"experiment": "e", "traces": {"sim": {
        "source": "simulate", "simulate": {"workers": 3, "iterations": 20}}}}))
    (tmp_path / "dir").mkdir()
    (tmp_path / "file.txt").write_text("not a folder\n")
    return {"tmp": str(tmp_path), "trace": str(trace), "csv": str(csv), "config": str(config),
            "dir": str(tmp_path / "dir"), "file": str(tmp_path / "file.txt"),
            "out": str(tmp_path / "out.parquet"), "json": str(tmp_path / "out.json"),
            "model": str(tmp_path / "model.pt"), "run": str(tmp_path / "run")}


def tree(root) -> dict:
    """Every path under ``root`` with its kind, size and modification time."""
    return {str(p.relative_to(root)): (p.is_dir(), p.stat().st_size, p.stat().st_mtime_ns)
            for p in Path(root).rglob("*")}


def refused(ws, capsys, args: list[str], names: str) -> str:
    """Run ``args`` (placeholders filled in): exit status 2, one line on stderr that starts
    ``bdsgd: error: `` and holds ``names`` (the flag or file and the field), nothing written or
    changed in the working folder. The line."""
    before = tree(ws["tmp"])
    code = main([a.format(**ws) for a in args])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("bdsgd: error: "), err
    assert names.format(**ws) in err, err
    assert tree(ws["tmp"]) == before  # no output, no change, no temporary file left
    for key in ("out", "json", "model", "run"):
        assert not os.path.exists(ws[key])
    return err


# ------------------------------------------------------------------ flags of every subcommand
THROUGHPUT = ["throughput", "{trace}", "--policies", "sync", "--json", "{json}"]
TRAIN = ["train", "--config", "{config}", "--task", "digits", "--policy", "sync", "--trace",
         "{trace}", "--out", "{run}"]
DISTRIBUTED = ["distributed", "--workers", "3", "--policy", "sync", "--iterations", "2",
               "--json", "{json}"]
GATHER = ["traces", "gather", "--config", "{config}", "--out", "{out}"]
SPLIT = ["traces", "split", "{trace}", "--train", "{out}", "--test", "{tmp}/test.parquet"]
SAMPLE = ["model", "sample", "{model}", "--out", "{out}"]
MODEL_TRAIN = ["model", "train", "{trace}", "--out", "{model}"]

FLAGS = {
    "import: --format not a format": (
        ["traces", "import", "--format", "parquet", "{csv}", "{out}"], "--format: parquet: not one of"),
    "import: --format missing": (["traces", "import", "{csv}", "{out}"], "--format: -: required"),
    "import: OUT missing": (["traces", "import", "--format", "csv", "{csv}"],
                            "OUT.parquet: -: required"),
    "simulate: --config missing": (["traces", "simulate", "--out", "{out}"],
                                   "--config: -: required"),
    "simulate: --seed a fraction": (["traces", "simulate", "--config", "{config}", "--out", "{out}",
                                     "--seed", "1.5"], "--seed: 1.5: not a whole number"),
    "gather: --workers a word": ([*GATHER, "--workers", "two"], "--workers: two: not a whole number"),
    "gather: --seed is not its flag": ([*GATHER, "--seed", "1"], "--seed: -: unrecognized argument"),
    "describe: --json takes no value": (["traces", "describe", "{trace}", "--json=yes"],
                                        "--json: yes: this flag takes no value"),
    "describe: TRACE missing": (["traces", "describe"], "TRACE: -: required"),
    "plot: --out missing": (["traces", "plot", "{trace}"], "--out: -: required"),
    "split: --test missing": (["traces", "split", "{trace}", "--train", "{out}"],
                              "--test: -: required"),
    "split: --tr ambiguous": (["traces", "split", "{trace}", "--tr", "{out}", "--test", "{json}"],
                              "--tr: -: ambiguous"),
    "split: --train-fraction a word": ([*SPLIT, "--train-fraction", "half"],
                                       "--train-fraction: half: not a number"),
    "model train: --epochs a fraction": ([*MODEL_TRAIN, "--epochs", "2.5"],
                                         "--epochs: 2.5: not a whole number"),
    "model train: --learning-rate is not its flag": ([*MODEL_TRAIN, "--learning-rate", "0.1"],
                                                     "--learning-rate: -: unrecognized argument"),
    "model evaluate: --rule not a rule": (["model", "evaluate", "{model}", "{trace}", "--rule",
                                           "fastest"], "--rule: fastest: not one of"),
    "model evaluate: TRACE missing": (["model", "evaluate", "{model}"], "TRACE: -: required"),
    "model sample: --iterations missing": (SAMPLE, "--iterations: -: required"),
    "model sample: --iterations in scientific notation": (
        [*SAMPLE, "--iterations", "1e3"], "--iterations: 1e3: not a whole number"),
    "throughput: --json missing": (THROUGHPUT[:4], "--json: -: required"),
    "throughput: --policies missing": (["throughput", "{trace}", "--json", "{json}"],
                                       "--policies: -: required"),
    "throughput: --rule not a rule": ([*THROUGHPUT, "--rule", "maximum"],
                                      "--rule: maximum: not one of"),
    "throughput: --comm-s a word": ([*THROUGHPUT, "--comm-s", "fast"],
                                    "--comm-s: fast: not a number"),
    "throughput: --comm-s without a value": ([*THROUGHPUT, "--comm-s"],
                                             "--comm-s: -: expected one argument"),
    "train: --task not a task": ([*TRAIN, "--seed", "0", "--task", "svhn"],
                                 "--task: svhn: not one of"),
    "train: --seed missing": (TRAIN, "--seed: -: required"),
    "distributed: --late not a mode": ([*DISTRIBUTED, "--late", "wait"], "--late: wait: not one of"),
    "distributed: --workers missing": (["distributed", *DISTRIBUTED[3:]],
                                       "--workers: -: required"),
    "distributed: --task not a task": ([*DISTRIBUTED, "--task", "svhn"], "--task: svhn: not one of"),
    "distributed: --inject-straggler without a colon": (
        [*DISTRIBUTED, "--inject-straggler", "1x5"], "--inject-straggler: 1x5: expected WORKER:FACTOR"),
    "distributed: --inject-straggler worker a word": (
        [*DISTRIBUTED, "--inject-straggler", "last:5"],
        "--inject-straggler: last:5: WORKER not a whole number"),
    "distributed: --kill-worker without an iteration": (
        [*DISTRIBUTED, "--kill-worker", "1"], "--kill-worker: 1: expected WORKER:ITERATION"),
    "distributed: --kill-worker iteration a fraction": (
        [*DISTRIBUTED, "--kill-worker", "1:2.5"], "--kill-worker: 1:2.5: ITERATION not a whole"),
    "figures: --out missing": (["figures", "{dir}"], "--out: -: required"),
    "bdsgd: no such command": (["simulate"], "COMMAND: simulate: not one of"),
    "model: ACTION missing": (["model"], "ACTION: -: required"),
    "traces: no such action": (["traces", "convert"], "ACTION: convert: not one of"),
}


@pytest.mark.parametrize("case", FLAGS)
def test_flags(ws, capsys, case):
    args, names = FLAGS[case]
    refused(ws, capsys, args, names)


# -------------------------------------------------------------------------------- numbers
def _config(ws, section: dict) -> list[str]:
    """The working config with ``section`` merged in; ``--config`` and its path."""
    path = Path(ws["config"])
    cfg = yaml.safe_load(path.read_text())
    for key, value in section.items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    path.write_text(yaml.safe_dump(cfg))
    return ["--config", str(path)]


NUMBERS = {
    # seeds: 0 .. 2^64 - 1 in every subcommand that takes one
    "simulate: --seed negative": (["traces", "simulate", "--config", "{config}", "--out", "{out}",
                                   "--seed", "-1"], "--seed: -1: a seed is"),
    "model train: --seed negative": ([*MODEL_TRAIN, "--seed", "-3"], "--seed: -3: a seed is"),
    "model evaluate: --seed negative": (["model", "evaluate", "{model}", "{trace}", "--seed", "-7"],
                                        "--seed: -7: a seed is"),
    "model sample: --seed too big": ([*SAMPLE, "--iterations", "5", "--seed", SEED_OVER],
                                     f"--seed: {SEED_OVER}: a seed is"),
    "throughput: --seed negative": ([*THROUGHPUT, "--seed", "-1"], "--seed: -1: a seed is"),
    "train: --seed negative": ([*TRAIN, "--seed", "-2"], "--seed: -2: a seed is"),
    "distributed: --seed negative": ([*DISTRIBUTED, "--seed", "-1"], "--seed: -1: a seed is"),
    # counts: at least 1
    "gather: --workers 0": ([*GATHER, "--workers", "0"], "--workers: 0: must be at least 1"),
    "gather: --workers negative": ([*GATHER, "--workers", "-4"], "--workers: -4: must be at least 1"),
    "gather: --iterations 0": ([*GATHER, "--iterations", "0"], "--iterations: 0: must be at least 1"),
    "model train: --epochs 0": ([*MODEL_TRAIN, "--epochs", "0"], "--epochs: 0: must be at least 1"),
    "model train: --epochs negative": ([*MODEL_TRAIN, "--epochs", "-3"],
                                       "--epochs: -3: must be at least 1"),
    "model sample: --iterations 0": ([*SAMPLE, "--iterations", "0"],
                                     "--iterations: 0: must be at least 1"),
    "model sample: --iterations negative": ([*SAMPLE, "--iterations", "-10"],
                                            "--iterations: -10: must be at least 1"),
    "distributed: --workers 0": (["distributed", "--workers", "0", *DISTRIBUTED[3:]],
                                 "--workers: 0: must be at least 1"),
    "distributed: --iterations 0": ([*DISTRIBUTED, "--iterations", "0"],
                                    "--iterations: 0: must be at least 1"),
    # fractions: strictly between 0 and 1
    "split: --train-fraction 0": ([*SPLIT, "--train-fraction", "0"], "--train-fraction: 0: must be"),
    "split: --train-fraction 1": ([*SPLIT, "--train-fraction", "1"], "--train-fraction: 1: must be"),
    "split: --train-fraction 1.5": ([*SPLIT, "--train-fraction", "1.5"],
                                    "--train-fraction: 1.5: must be strictly between 0 and 1"),
    "split: --train-fraction negative": ([*SPLIT, "--train-fraction", "-0.2"],
                                         "--train-fraction: -0.2: must be"),
    "split: --train-fraction a percentage": ([*SPLIT, "--train-fraction", "80"],
                                             "--train-fraction: 80: must be"),
    "split: --train-fraction nan": ([*SPLIT, "--train-fraction", "nan"],
                                    "--train-fraction: nan: not a finite number"),
    # durations
    "throughput: --comm-s negative": ([*THROUGHPUT, "--comm-s", "-0.5"],
                                      "--comm-s: -0.5: must be at least 0"),
    "throughput: --comm-s inf": ([*THROUGHPUT, "--comm-s", "inf"], "--comm-s: inf: not a finite"),
    "distributed: --delay-s negative": ([*DISTRIBUTED, "--delay-s", "-0.1"],
                                        "--delay-s: -0.1: must be at least 0"),
    "distributed: --delay-s nan": ([*DISTRIBUTED, "--delay-s", "nan"], "--delay-s: nan: not a finite"),
    "distributed: --extra-parameters negative": ([*DISTRIBUTED, "--extra-parameters", "-1"],
                                                 "--extra-parameters: -1: must be at least 0"),
    "distributed: --heartbeat-s 0": ([*DISTRIBUTED, "--heartbeat-s", "0"],
                                     "--heartbeat-s: 0: must be greater than 0"),
    "distributed: --heartbeat-s negative": ([*DISTRIBUTED, "--heartbeat-s", "-5"],
                                            "--heartbeat-s: -5: must be greater than 0"),
    # WORKER:FACTOR and WORKER:ITERATION
    "distributed: straggler factor 0": ([*DISTRIBUTED, "--inject-straggler", "1:0"],
                                        "--inject-straggler: 1:0: FACTOR must be greater than 0"),
    "distributed: straggler factor negative": ([*DISTRIBUTED, "--inject-straggler", "1:-2"],
                                               "--inject-straggler: 1:-2: FACTOR must be greater"),
    "distributed: straggler factor inf": ([*DISTRIBUTED, "--inject-straggler", "1:inf"],
                                          "--inject-straggler: 1:inf: FACTOR not a finite number"),
    "distributed: straggler worker negative": ([*DISTRIBUTED, "--inject-straggler=-1:5"],
                                               "--inject-straggler: -1:5: WORKER must be at least 0"),
    "distributed: straggler worker past the last": ([*DISTRIBUTED, "--inject-straggler", "3:5"],
                                                    "--inject-straggler: 3: no such worker"),
    "distributed: kill iteration negative": ([*DISTRIBUTED, "--kill-worker", "1:-1"],
                                             "--kill-worker: 1:-1: ITERATION must be at least 0"),
    "distributed: kill worker past the last": ([*DISTRIBUTED, "--kill-worker", "5:1"],
                                               "--kill-worker: 5: no such worker"),
    # a config's numbers: its schema
    "config: throughput.comm_s negative": (
        [*THROUGHPUT, "{config_of:throughput: {comm_s: -1}}"], "{config}: throughput.comm_s"),
    "config: model.epochs 0": ([*MODEL_TRAIN, "{config_of:model: {epochs: 0}}"],
                               "{config}: model.epochs"),
    "config: simulate.iterations 1": (
        ["traces", "simulate", "--out", "{out}",
         "{config_of:traces: {sim: {source: simulate, simulate: {iterations: 1}}}}"],
        "{config}: traces.sim.simulate.iterations"),
    "config: train.learning_rate 0": (
        [*TRAIN, "--seed", "0", "{config_of:train: {trace: sim, tasks: [digits], learning_rate: 0}}"],
        "{config}: train.learning_rate"),
    "config: network.bandwidth_gbit_s 0": (
        [*THROUGHPUT, "{config_of:network: {bandwidth_gbit_s: 0}}"],
        "{config}: network.bandwidth_gbit_s"),
    "config: network.topology unknown": (
        [*THROUGHPUT, "{config_of:network: {topology: mesh}}"], "{config}: network.topology"),
    "config: train.gradient_s 0": (
        [*TRAIN, "--seed", "0", "{config_of:train: {trace: sim, tasks: [digits], gradient_s: 0}}"],
        "{config}: train.gradient_s"),
    "config: a straggler factor 0": (
        [*THROUGHPUT, "{config_of:distributed: {jobs: {j: {workers: 2, policy: sync, "
                      "inject_straggler: '1:0'}}}}"],
        "{config}: distributed.jobs.j.inject_straggler"),
}


@pytest.mark.parametrize("case", NUMBERS)
def test_numbers(ws, capsys, case):
    args, names = NUMBERS[case]
    expanded = []
    for arg in args:  # "{config_of:YAML}": --config with that YAML merged into the config
        if arg.startswith("{config_of:"):
            expanded += _config(ws, yaml.safe_load(arg[len("{config_of:"):-1]))
        else:
            expanded.append(arg)
    refused(ws, capsys, expanded, names)


def test_library_refuses_a_split_fraction_outside_0_1(tmp_path):
    from bdsgd.traces.io import write_split
    from bdsgd.traces.schema import from_arrays

    trace = from_arrays(np.ones((10, 2)))
    for fraction in (0.0, 1.0, -0.5, 2.0):
        with pytest.raises(UserError, match="train_fraction"):
            write_split(trace, fraction, tmp_path / "a.parquet", tmp_path / "b.parquet")
    assert not any(tmp_path.iterdir())


def test_library_refuses_zero_epochs_and_writes_no_model(tmp_path):
    from dataclasses import replace

    from bdsgd.config import default_config
    from bdsgd.runtime_model.train import train_model
    from bdsgd.traces.schema import from_arrays

    cfg = replace(default_config().model, epochs=0)
    with pytest.raises(UserError, match="model.epochs"):
        train_model(from_arrays(np.ones((10, 2))), cfg, seed=0, out=tmp_path / "m.pt",
                    progress=False)
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------------------- output paths
OUTPUTS = {
    "import: OUT an existing folder": (["traces", "import", "--format", "csv", "{csv}", "{dir}"],
                                       "{dir}: OUT: is an existing folder"),
    "import: OUT below a file": (["traces", "import", "--format", "csv", "{csv}",
                                  "{file}/t.parquet"], "{file}/t.parquet: OUT: {file} is a file"),
    "import: OUT the input itself": (["traces", "import", "--format", "csv", "{csv}", "{csv}"],
                                     "{csv}: OUT: is also an input"),
    "simulate: --out an existing folder": (["traces", "simulate", "--config", "{config}", "--out",
                                            "{dir}"], "{dir}: --out: is an existing folder"),
    "simulate: --out the config": (["traces", "simulate", "--config", "{config}", "--out",
                                    "{config}"], "{config}: --out: is also an input"),
    "gather: --out an existing folder": (["traces", "gather", "--config", "{config}", "--out",
                                          "{dir}"], "{dir}: --out: is an existing folder"),
    "gather: --out empty": (["traces", "gather", "--config", "{config}", "--out", ""],
                            "'': --out: an empty path"),
    "plot: --out an existing file": (["traces", "plot", "{trace}", "--out", "{file}"],
                                     "{file}: --out: is an existing file"),
    "plot: --out below a file": (["traces", "plot", "{trace}", "--out", "{file}/figs"],
                                 "{file}/figs: --out: {file} is a file"),
    "split: --train an existing folder": (["traces", "split", "{trace}", "--train", "{dir}",
                                           "--test", "{out}"], "{dir}: --train: is an existing"),
    "split: --test an existing folder": (["traces", "split", "{trace}", "--train", "{out}",
                                          "--test", "{dir}"], "{dir}: --test: is an existing"),
    "split: --train the trace split": (["traces", "split", "{trace}", "--train", "{trace}",
                                        "--test", "{out}"], "{trace}: --train: is also an input"),
    "split: --train and --test one file": (["traces", "split", "{trace}", "--train", "{out}",
                                            "--test", "{out}"], "{out}: --train/--test: the same"),
    "model train: --out an existing folder": (["model", "train", "{trace}", "--out", "{dir}"],
                                              "{dir}: --out: is an existing folder"),
    "model train: --out the trace": (["model", "train", "{trace}", "--out", "{trace}"],
                                     "{trace}: --out: is also an input"),
    "model evaluate: --json an existing folder": (
        ["model", "evaluate", "{model}", "{trace}", "--json", "{dir}"],
        "{dir}: --json: is an existing folder"),
    "model evaluate: --predictions an existing folder": (
        ["model", "evaluate", "{model}", "{trace}", "--predictions", "{dir}"],
        "{dir}: --predictions: is an existing folder"),
    "model sample: --out an existing folder": ([*SAMPLE[:3], "--iterations", "5", "--out", "{dir}"],
                                               "{dir}: --out: is an existing folder"),
    "model sample: --out the model": ([*SAMPLE[:3], "--iterations", "5", "--out", "{model}"],
                                      "{model}: --out: is also an input"),
    "throughput: --json an existing folder": (
        ["throughput", "{trace}", "--policies", "sync", "--json", "{dir}"],
        "{dir}: --json: is an existing folder"),
    "throughput: --json the trace": (["throughput", "{trace}", "--policies", "sync", "--json",
                                      "{trace}"], "{trace}: --json: is also an input"),
    "throughput: --decisions an existing folder": ([*THROUGHPUT, "--decisions", "{dir}"],
                                                   "{dir}: --decisions: is an existing folder"),
    "throughput: --decisions below a file": ([*THROUGHPUT, "--decisions", "{file}/d.parquet"],
                                             "{file}/d.parquet: --decisions: {file} is a file"),
    "train: --out an existing file": ([*TRAIN[:-1], "{file}", "--seed", "0"],
                                      "{file}: --out: is an existing file"),
    "distributed: --json an existing folder": ([*DISTRIBUTED[:-1], "{dir}"],
                                               "{dir}: --json: is an existing folder"),
    "distributed: --json below a file": ([*DISTRIBUTED[:-1], "{file}/r.json"],
                                         "{file}/r.json: --json: {file} is a file"),
    "distributed: --json's metrics an existing folder": (
        [*DISTRIBUTED[:-1], "{dir}.json"], "{dir}.metrics.parquet: --json: is an existing folder"),
    "figures: --out an existing file": (["figures", "{dir}", "--out", "{file}"],
                                        "{file}: --out: is an existing file"),
    "figures: --out below a file": (["figures", "{dir}", "--out", "{file}/figs"],
                                    "{file}/figs: --out: {file} is a file"),
}


@pytest.mark.parametrize("case", OUTPUTS)
def test_outputs(ws, capsys, case):
    args, names = OUTPUTS[case]
    if "metrics" in names:  # the result's metrics go beside it: <stem>.metrics.parquet
        Path(ws["dir"] + ".metrics.parquet").mkdir()
    refused(ws, capsys, args, names)


# -------------------------------------------------------------- the edges are still accepted
EDGES = {
    "split --train-fraction 0.01": (["traces", "split", "T", "--train", "a", "--test", "b",
                                     "--train-fraction", "0.01"], "train_fraction", 0.01),
    "split --train-fraction 0.99": (["traces", "split", "T", "--train", "a", "--test", "b",
                                     "--train-fraction", "0.99"], "train_fraction", 0.99),
    "throughput --comm-s 0": (["throughput", "T", "--policies", "sync", "--json", "o",
                               "--comm-s", "0"], "comm_s", 0.0),
    "model train --epochs 1": (["model", "train", "T", "--out", "m", "--epochs", "1"], "epochs", 1),
    "model sample --iterations 1": (["model", "sample", "M", "--out", "o", "--iterations", "1"],
                                    "iterations", 1),
    "gather --workers 1": (["traces", "gather", "--config", "c", "--out", "o", "--workers", "1"],
                           "workers", 1),
    "distributed --seed 0": ([*DISTRIBUTED, "--seed", "0"], "seed", 0),
    "distributed --seed 2^64 - 1": ([*DISTRIBUTED, "--seed", str(SEED_MAX)], "seed", SEED_MAX),
    "distributed --workers 1 --iterations 1": (
        ["distributed", "--workers", "1", "--iterations", "1", "--policy", "sync", "--json", "o"],
        "iterations", 1),
    "distributed --delay-s 0": ([*DISTRIBUTED, "--delay-s", "0"], "delay_s", 0.0),
    "distributed --heartbeat-s 0.001": ([*DISTRIBUTED, "--heartbeat-s", "0.001"], "heartbeat_s",
                                        0.001),
    "distributed: a straggler faster (0:0.5)": ([*DISTRIBUTED, "--inject-straggler", "0:0.5"],
                                                "inject_straggler", (0, 0.5)),
    "distributed: killed at iteration 0": ([*DISTRIBUTED, "--kill-worker", "2:0"], "kill_worker",
                                           (2, 0)),
}


@pytest.mark.parametrize("case", EDGES)
def test_values_at_the_edges_are_accepted(case):
    args, dest, value = EDGES[case]
    assert getattr(build_parser().parse_args(args), dest) == value


def test_edge_split_and_replay_run(ws, capsys):
    """The smallest fraction, into a folder not there yet, over files already there; a replay
    with no communication time."""
    out = f"{ws['tmp']}/new/deeper"
    Path(ws["tmp"], "b.parquet").write_text("an old file")
    assert main(["traces", "split", ws["trace"], "--train-fraction", "0.01", "--train",
                 f"{out}/a.parquet", "--test", f"{ws['tmp']}/b.parquet"]) == 0
    assert main(["traces", "import", "--format", "csv", ws["csv"], f"{out}/i.parquet"]) == 0
    assert main(["throughput", f"{ws['tmp']}/b.parquet", "--policies", "sync", "--comm-s", "0",
                 "--json", f"{out}/t.json"]) == 0
    assert main(["throughput", ws["trace"], "--policies", "sync", "--json",
                 f"{out}/t.json"]) == 0  # an existing output file is replaced
    assert capsys.readouterr().err == ""


def test_a_kill_after_the_last_iteration_is_a_warning(tmp_path, capsys):
    from bdsgd.distributed.launch import job_from_args
    from bdsgd.entry import show_messages

    show_messages()  # as the command's entry point does
    job = job_from_args(build_parser().parse_args([*DISTRIBUTED[:-1], str(tmp_path / "r.json"),
                                                   "--kill-worker", "1:2"]))
    assert job.kill == (1, 2)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bdsgd: warning: --kill-worker: 1:2: "), err


def test_help_is_still_argparse(capsys):
    with pytest.raises(SystemExit) as done:
        main(["throughput", "--help"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("usage: bdsgd throughput")


# ------------------------------------------------------------------------------- broken pipe
def test_a_reader_that_leaves_early_is_no_traceback(ws):
    """`bdsgd traces describe T | head -1`: the pipe is closed before bdsgd writes."""
    with subprocess.Popen([sys.executable, "-m", "bdsgd", "traces", "describe", ws["trace"]],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO) as proc:
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 1 and err == "", err


def test_messages_to_a_reader_that_left_do_not_stop_the_run(ws, tmp_path):
    """`bdsgd model train T --out M | head -1`: its progress lines go nowhere, the model is
    trained all the same, and nothing is said about the pipe (stderr holds the progress bar)."""
    model = tmp_path / "model.pt"
    with subprocess.Popen([sys.executable, "-m", "bdsgd", "model", "train", ws["trace"], "--out",
                           model, "--epochs", "2"], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, cwd=REPO) as proc:
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 0 and "Error" not in err and "Traceback" not in err, err
    assert model.is_file()
