"""Bad input files, class by class: each case runs the command as a user would (in-process,
``bdsgd.cli.main``) and must stop with exit status 2, exactly one line on stderr
``bdsgd: error: FILE: FIELD: MESSAGE`` naming the bad file and the field, and no output left.

Classes: traces (Parquet, CSV and Alibaba PAI files with bad content of every kind, and
degenerate traces the cutoff stages refuse), damaged checkpoints and models, results folders
(``bdsgd figures`` checks every input before drawing any figure), messages (the file, never a
format; bdsgd's advice, never an upstream library's), a stop by signal, and property-based
tests of the trace reader and the config loader (anything either loads or is a UserError).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bdsgd.cli import main
from bdsgd.errors import UserError
from bdsgd.traces.io import read_trace, write_trace
from bdsgd.traces.schema import OPTIONAL, REQUIRED, from_arrays, from_frame
from tests.helpers import REPO, tiny_config

PAI = REPO / "tests/data/alibaba_pai_job_1_norm.csv"
RNG = np.random.default_rng(0)


# ------------------------------------------------------------------------------ helpers
def bdsgd(capsys, *args) -> tuple[int, str, str]:
    """``bdsgd ARGS`` in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error(result, file, field: str, absent: tuple = ()) -> str:
    """Exit 2 and one line ``bdsgd: error: FILE: FIELD...`` on stderr; nothing in ``absent``
    (the outputs) exists. The line, for more checks."""
    code, _, err = result
    lines = err.splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    line = lines[0]
    assert line.startswith(f"bdsgd: error: {file}: "), line
    assert field in line.removeprefix(f"bdsgd: error: {file}: ").split(": ")[0], line
    for path in absent:
        assert not Path(path).exists(), f"{path} was written"
    return line


def long_frame(T: int = 3, n: int = 3) -> pd.DataFrame:
    return from_arrays(RNG.lognormal(size=(T, n)) + 0.1).to_frame()


def write_parquet(path: Path, frame: pd.DataFrame, meta: bytes | None = None) -> Path:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    if meta is not None:
        table = table.replace_schema_metadata({b"bdsgd": meta})
    pq.write_table(table, path)
    return path


def trace_file(tmp_path: Path, runtimes, name: str = "trace") -> Path:
    return write_trace(from_arrays(np.asarray(runtimes, float)), tmp_path / f"{name}.parquet")


def config_file(tmp_path: Path, **overrides) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_config(**overrides)))
    return path


# =========================================================================== traces
# name -> (frame change, field the error names)
PARQUET_CONTENT = {
    "no rows": (lambda f: f.iloc[:0], "-"),
    "no iteration column": (lambda f: f.drop(columns="iteration"), "iteration"),
    "no worker column": (lambda f: f.drop(columns="worker"), "worker"),
    "no runtime_s column": (lambda f: f.drop(columns="runtime_s"), "runtime_s"),
    "unknown column": (lambda f: f.assign(speed=1.0), "speed"),
    "zero run-time": (lambda f: f.assign(runtime_s=f["runtime_s"].where(f.index != 4, 0.0)),
                      "runtime_s"),
    "negative run-time": (lambda f: f.assign(runtime_s=-f["runtime_s"]), "runtime_s"),
    "NaN run-time": (lambda f: f.assign(runtime_s=f["runtime_s"].where(f.index != 2)),
                     "runtime_s"),
    "infinite run-time": (lambda f: f.assign(runtime_s=np.inf), "runtime_s"),
    "text run-time": (lambda f: f.assign(runtime_s="1.5"), "runtime_s"),
    "boolean run-time": (lambda f: f.assign(runtime_s=True), "runtime_s"),
    "fractional iteration": (lambda f: f.assign(iteration=f["iteration"] + 0.5), "iteration"),
    "text iteration": (lambda f: f.assign(iteration=f["iteration"].astype(str) + "th"),
                       "iteration"),
    "NaN worker": (lambda f: f.assign(worker=f["worker"].where(f.index != 1)), "worker"),
    "text censored": (lambda f: f.assign(censored="no"), "censored"),
    "censored 2": (lambda f: f.assign(censored=2), "censored"),
    "duplicate row": (lambda f: pd.concat([f, f.iloc[[3]]], ignore_index=True),
                      "iteration/worker"),
    "worker missing from an iteration": (lambda f: f.drop(index=4).reset_index(drop=True),
                                         "iteration 1"),
    "worker changes node": (lambda f: f.assign(node=np.where(f.index == 4, 9, f["worker"])),
                            "node"),
    "fractional node": (lambda f: f.assign(node=0.5), "node"),
    "negative compute_s": (lambda f: f.assign(compute_s=-1.0), "compute_s"),
    "NaN comm_s": (lambda f: f.assign(comm_s=np.nan), "comm_s"),
}


@pytest.mark.parametrize("case", PARQUET_CONTENT)
def test_parquet_trace_with_bad_content(case, tmp_path, capsys):
    change, field = PARQUET_CONTENT[case]
    trace = write_parquet(tmp_path / "bad.parquet", change(long_frame()))
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert_one_error(bdsgd(capsys, "traces", "split", trace, "--train", a, "--test", b),
                     trace, field, (a, b))


def _truncated(path: Path) -> None:
    whole = write_parquet(path, long_frame()).read_bytes()
    path.write_bytes(whole[: len(whole) // 2])


# name -> (how the file is damaged, field)
PARQUET_DAMAGE = {
    "metadata not JSON": (lambda p: write_parquet(p, long_frame(), b"{not json"), "metadata"),
    "not Parquet": (lambda p: p.write_bytes(b"iteration,worker,runtime_s\n0,0,1\n"), "-"),
    "empty file": (lambda p: p.write_bytes(b""), "-"),
    "cut short": (_truncated, "-"),
    "missing file": (lambda p: None, "-"),
}


@pytest.mark.parametrize("case", PARQUET_DAMAGE)
def test_damaged_parquet_trace(case, tmp_path, capsys):
    damage, field = PARQUET_DAMAGE[case]
    trace = tmp_path / "bad.parquet"
    damage(trace)
    out = tmp_path / "t.json"
    assert_one_error(bdsgd(capsys, "throughput", trace, "--policies", "sync", "--json", out),
                     trace, field, (out,))


HEADER = "iteration,worker,runtime_s"
# name -> (CSV text, field)
CSV_CONTENT = {
    "empty file": ("", "-"),
    "header only": (HEADER + "\n", "-"),
    "no runtime_s column": ("iteration,worker\n0,0\n", "runtime_s"),
    "no worker column": ("iteration,runtime_s\n0,1.0\n", "worker"),
    "no iteration column": ("worker,runtime_s\n0,1.0\n", "iteration"),
    "unknown column": (HEADER + ",gpu\n0,0,1.0,3\n", "gpu"),
    "zero run-time": (HEADER + "\n0,0,1.0\n0,1,0\n", "row 1, runtime_s"),
    "negative run-time": (HEADER + "\n0,0,-1.0\n", "row 0, runtime_s"),
    "text run-time": (HEADER + "\n0,0,1.0\n0,1,fast\n", "row 1, runtime_s"),
    "blank run-time": (HEADER + "\n0,0,1.0\n0,1,\n", "row 1, runtime_s"),
    "infinite run-time": (HEADER + "\n0,0,inf\n", "row 0, runtime_s"),
    "fractional iteration": (HEADER + "\n0.5,0,1.0\n", "row 0, iteration"),
    "text iteration": (HEADER + "\n0,0,1.0\nfirst,1,1.0\n", "row 1, iteration"),
    "blank worker": (HEADER + "\n0,0,1.0\n0,,1.0\n", "row 1, worker"),
    "text censored": (HEADER + ",censored\n0,0,1.0,maybe\n", "censored"),
    "censored 2": (HEADER + ",censored\n0,0,1.0,2\n", "censored"),
    "duplicate row": (HEADER + "\n0,0,1.0\n0,1,1.0\n0,1,2.0\n", "row 2, iteration/worker"),
    "worker missing from an iteration": (HEADER + "\n0,0,1.0\n0,1,1.0\n1,0,1.0\n",
                                         "iteration 1"),
    "worker changes node": (HEADER + ",node\n0,0,1.0,0\n1,0,1.0,1\n", "node"),
    "negative compute_s": (HEADER + ",compute_s\n0,0,1.0,-0.5\n", "row 0, compute_s"),
    "text comm_s": (HEADER + ",comm_s\n0,0,1.0,slow\n", "row 0, comm_s"),
    "ragged row": (HEADER + "\n0,0,1.0\n0,1,1.0,7,8\n", "-"),
}


def assert_import_refused(fmt: str, text: str, field: str, tmp_path, capsys) -> None:
    """`bdsgd traces import --format FMT` of a file holding ``text``: one line naming the
    file and ``field``, and no trace written."""
    src, out = tmp_path / "in.csv", tmp_path / "out.parquet"
    src.write_text(text)
    assert_one_error(bdsgd(capsys, "traces", "import", "--format", fmt, src, out),
                     src, field, (out,))


@pytest.mark.parametrize("case", CSV_CONTENT)
def test_csv_import_with_bad_content(case, tmp_path, capsys):
    assert_import_refused("csv", *CSV_CONTENT[case], tmp_path, capsys)


@pytest.mark.parametrize("fmt", ["csv", "alibaba-pai"])
@pytest.mark.parametrize("case", ["binary", "missing"])
def test_unreadable_import_file(fmt, case, tmp_path, capsys):
    src, out = tmp_path / "in.csv", tmp_path / "out.parquet"
    if case == "binary":
        src.write_bytes(bytes(range(256)) * 4)
    assert_one_error(bdsgd(capsys, "traces", "import", "--format", fmt, src, out), src, "-",
                     (out,))


PAI_HEADER = ",worker,gpu,time,batch_time_norm"


def pai_text(rows, header: str = PAI_HEADER) -> str:
    """A PAI job file: ``rows`` of (worker, time, batch_time_norm), gpu 25."""
    lines = [header] + [f"{i},{w},25,{t},{b}" for i, (w, t, b) in enumerate(rows)]
    return "\n".join(lines) + "\n"


GOOD_PAI = [(w, t, 400 + 10 * w + t) for t in (1, 11, 21) for w in (0, 1, 2)]


def _pai_with(position: int, value) -> list:
    rows = list(GOOD_PAI)
    w, t, b = rows[position]
    rows[position] = value(w, t, b)
    return rows


PAI_CONTENT = {
    "header only": (PAI_HEADER + "\n", "-"),
    "no time column": (pai_text(GOOD_PAI).replace("time,", "t,", 1), "time"),
    "no worker column": (pai_text(GOOD_PAI).replace(",worker,", ",w,", 1), "worker"),
    "no batch_time_norm column": (pai_text(GOOD_PAI).replace("batch_time_norm", "bt"),
                                  "batch_time_norm"),
    "no gpu column": (pai_text(GOOD_PAI).replace("gpu", "card"), "gpu"),
    "text worker": (pai_text(_pai_with(4, lambda w, t, b: ("w1", t, b))), "row 4, worker"),
    "fractional time": (pai_text(_pai_with(2, lambda w, t, b: (w, 1.5, b))), "row 2, time"),
    "blank time": (pai_text(_pai_with(5, lambda w, t, b: (w, "", b))), "row 5, time"),
    "zero batch time": (pai_text(_pai_with(3, lambda w, t, b: (w, t, 0))),
                        "row 3, batch_time_norm"),
    "negative batch time": (pai_text(_pai_with(7, lambda w, t, b: (w, t, -5))),
                            "row 7, batch_time_norm"),
    "text batch time": (pai_text(_pai_with(1, lambda w, t, b: (w, t, "slow"))),
                        "row 1, batch_time_norm"),
    "duplicate row in a complete iteration": (
        pai_text(GOOD_PAI[:3] + [(1, 1, 500)] + GOOD_PAI[3:]), "row 3, time/worker"),
    "no iteration has every worker": (pai_text([(0, 1, 400), (1, 11, 410)]), "time"),
}


@pytest.mark.parametrize("case", PAI_CONTENT)
def test_alibaba_pai_import_with_bad_content(case, tmp_path, capsys):
    assert_import_refused("alibaba-pai", *PAI_CONTENT[case], tmp_path, capsys)


def test_good_pai_rows_import(tmp_path, capsys):
    """The rows the cases above spoil import as they are."""
    src, out = tmp_path / "job.csv", tmp_path / "out.parquet"
    src.write_text(pai_text(GOOD_PAI))
    code, _, err = bdsgd(capsys, "traces", "import", "--format", "alibaba-pai", src, out)
    assert code == 0 and err == "", err
    assert read_trace(out).n_workers == 3


# ------------------------------------------------------------- degenerate: one worker
ONE_WORKER = np.array([[1.0], [2.0], [1.5], [3.0], [1.2], [2.2]])


def _throughput(tmp_path, trace):
    out = tmp_path / "t.json"
    return ("throughput", trace, "--policies", "sync,static", "--json", out), (out,)


def _history(tmp_path, trace):
    good = trace_file(tmp_path, RNG.lognormal(size=(6, 3)) + 0.1, "good")
    out = tmp_path / "t.json"
    return ("throughput", good, "--policies", "ecdf", "--history", trace, "--json", out), (out,)


def _train(tmp_path, trace):
    run = tmp_path / "run"
    return (("train", "--config", config_file(tmp_path), "--task", "digits", "--policy", "sync",
             "--seed", 0, "--trace", trace, "--out", run), (run / "metrics.parquet",
                                                             run / "result.json"))


def _model_train(tmp_path, trace):
    out = tmp_path / "m.pt"
    return ("model", "train", trace, "--out", out, "--epochs", 1, "--quiet"), (out, f"{out}.ckpt")


@pytest.mark.parametrize("stage", [_throughput, _history, _train, _model_train],
                         ids=["throughput", "throughput --history", "train", "model train"])
def test_a_trace_of_one_worker_is_refused_where_cutoffs_are_chosen(stage, tmp_path, capsys):
    trace = trace_file(tmp_path, ONE_WORKER, "one")
    args, outputs = stage(tmp_path, trace)
    line = assert_one_error(bdsgd(capsys, *args), trace, "workers", outputs)
    assert "at least 2 workers" in line


def test_a_trace_of_one_worker_is_described_split_and_imported(tmp_path, capsys):
    trace = trace_file(tmp_path, ONE_WORKER, "one")
    assert bdsgd(capsys, "traces", "describe", trace)[0] == 0
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert bdsgd(capsys, "traces", "split", trace, "--train", a, "--test", b)[0] == 0
    src = tmp_path / "one.csv"
    src.write_text(HEADER + "\n0,0,1.0\n1,0,2.0\n")
    assert bdsgd(capsys, "traces", "import", "--format", "csv", src, tmp_path / "c.parquet")[0] == 0


# ---------------------------------------------------------------- gaps: a warning
def test_a_gap_in_a_parquet_trace_is_one_warning_naming_the_first_missing_iteration(
        tmp_path, capsys):
    frame = long_frame(6, 2)
    frame = frame[~frame["iteration"].isin([2, 4])]  # labels 0, 1, 3, 5
    trace = write_parquet(tmp_path / "gap.parquet", frame)
    code, _, err = bdsgd(capsys, "traces", "describe", trace)
    assert code == 0
    assert err.splitlines() == [err.strip()] and err.startswith(
        f"bdsgd: warning: {trace}: iteration 2: missing"), err
    assert read_trace(trace).iterations.tolist() == [0, 1, 3, 5]  # labels kept


def test_a_gap_in_an_imported_csv_is_one_warning(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text(HEADER + "\n0,0,1\n0,1,2\n1,0,1\n1,1,2\n7,0,1\n7,1,2\n")
    code, _, err = bdsgd(capsys, "traces", "import", "--format", "csv", src, tmp_path / "o.parquet")
    assert code == 0
    assert err.startswith(f"bdsgd: warning: {src}: iteration 2: missing") and \
        len(err.splitlines()) == 1, err


def test_sampled_pai_iterations_are_no_warning(tmp_path, capsys):
    """The PAI files sample every 10th iteration and lose rows: no warning on import, nor when
    the Parquet trace it wrote is read again (its metadata declares the sampling)."""
    out = tmp_path / "pai.parquet"
    code, _, err = bdsgd(capsys, "traces", "import", "--format", "alibaba-pai", PAI, out)
    assert code == 0 and err == "", err
    code, _, err = bdsgd(capsys, "traces", "describe", out)
    assert code == 0 and err == "", err
    assert read_trace(out).meta["dropped_iterations"] >= 0


def test_a_contiguous_trace_is_no_warning(tmp_path, capsys):
    trace = trace_file(tmp_path, RNG.lognormal(size=(5, 3)) + 0.1)
    code, _, err = bdsgd(capsys, "traces", "describe", trace)
    assert code == 0 and err == ""


# ======================================================= damaged checkpoints and models
class NotTensors:
    """An object a weights-only load refuses (torch says: re-run with weights_only=False)."""


def _save(obj):
    return lambda path: torch.save(obj, path)


def _cut(obj):
    def damage(path):
        torch.save(obj, path)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    return damage


def _pickled(obj):
    return lambda path: path.write_bytes(pickle.dumps(obj))


# what may be wrong with any torch file bdsgd reads back: name -> (damage, field)
TORCH_DAMAGE = {
    "garbage": (lambda p: p.write_bytes(b"\x00garbage" * 64), "-"),
    "empty": (lambda p: p.write_bytes(b""), "-"),
    "cut short": (_cut({"weights": torch.zeros(1000)}), "-"),
    "a list": (_save([1, 2, 3]), "-"),
    "not tensors": (_save({"state": NotTensors()}), "-"),
}


def _upstream_advice_absent(line: str) -> None:
    for advice in ("weights_only", "Weights only", "trusted source", "download=True"):
        assert advice not in line, line


def _train_args(tmp_path):
    trace = trace_file(tmp_path, RNG.lognormal(size=(12, 3)) + 0.1)
    config, run = config_file(tmp_path), tmp_path / "run"
    return trace, config, run, ("train", "--config", config, "--task", "digits", "--policy",
                                "sync", "--seed", 0, "--trace", trace, "--out", run)


def _identity(config, trace, run) -> dict:
    from bdsgd.training import run_spec
    from bdsgd.training.run import prepare

    return prepare(run_spec(config, "digits", "sync", 0, trace, run)).identity


TRAIN_CHECKPOINT = {
    **TORCH_DAMAGE,
    "no identity": (lambda p, ident: torch.save({"model": {}}, p), "identity"),
    "no model": (lambda p, ident: torch.save({"identity": ident}, p), "model"),
    "another network": (lambda p, ident: torch.save(
        {"identity": ident, "model": {"w": torch.zeros(3)}}, p), "model"),
}


@pytest.mark.parametrize("case", TRAIN_CHECKPOINT)
def test_damaged_train_checkpoint(case, tmp_path, capsys):
    trace, config, run, args = _train_args(tmp_path)
    ckpt = run / "checkpoint.pt"
    run.mkdir()
    damage, field = TRAIN_CHECKPOINT[case]
    if case in TORCH_DAMAGE:
        damage(ckpt)
    else:
        damage(ckpt, _identity(config, trace, run))
    before = ckpt.read_bytes()
    line = assert_one_error(bdsgd(capsys, *args), ckpt, field,
                            (run / "metrics.parquet", run / "result.json"))
    assert "delete it to start" in line
    _upstream_advice_absent(line)
    assert ckpt.read_bytes() == before  # never silently redone from zero


def _model_train_args(tmp_path):
    trace = trace_file(tmp_path, RNG.lognormal(size=(12, 3)) + 0.1)
    out = tmp_path / "m.pt"
    return trace, out, ("model", "train", trace, "--out", out, "--epochs", 2, "--seed", 0,
                        "--quiet")


def _fingerprint(trace: Path) -> dict:
    from bdsgd.config import default_config
    from bdsgd.runtime_model.train import _fingerprint

    return _fingerprint([read_trace(trace)], replace(default_config().model, epochs=2), 0, None)


MODEL_TRAIN_CHECKPOINT = {
    **TORCH_DAMAGE,
    "another trace's": (lambda p, fp: torch.save({"fingerprint": {"seed": 5}}, p), "fingerprint"),
    "another model version": (lambda p, fp: torch.save(
        {"fingerprint": fp, "model": {"w": torch.zeros(2)}, "optimizer": {}}, p), "model"),
}


@pytest.mark.parametrize("case", MODEL_TRAIN_CHECKPOINT)
def test_damaged_model_training_checkpoint(case, tmp_path, capsys):
    trace, out, args = _model_train_args(tmp_path)
    ckpt = Path(f"{out}.ckpt")
    damage, field = MODEL_TRAIN_CHECKPOINT[case]
    if case in TORCH_DAMAGE:
        damage(ckpt)
    else:
        damage(ckpt, _fingerprint(trace))
    before = ckpt.read_bytes()
    line = assert_one_error(bdsgd(capsys, *args), ckpt, field, (out,))
    assert "delete it to start afresh" in line
    _upstream_advice_absent(line)
    assert ckpt.read_bytes() == before


@pytest.fixture(scope="module")
def trained_model(tmp_path_factory) -> Path:
    from bdsgd.config import default_config
    from bdsgd.runtime_model.train import train_model

    root = tmp_path_factory.mktemp("model")
    cfg = replace(default_config().model, epochs=1, hidden_dim=4, chunk=4, samples=4)
    return train_model(from_arrays(RNG.lognormal(size=(8, 3)) + 0.1), cfg, 0, root / "m.pt",
                       progress=False)


MODEL_FILE = {
    **TORCH_DAMAGE,
    "missing": (lambda p, good: None, "-"),
    "another format": (lambda p, good: torch.save({**good, "format": "other/1"}, p), "format"),
    "another worker count": (lambda p, good: torch.save({**good, "n_workers": 7}, p), "config"),
}


@pytest.mark.parametrize("case", MODEL_FILE)
def test_damaged_model_file(case, tmp_path, capsys, trained_model):
    model, out = tmp_path / "bad.pt", tmp_path / "s.parquet"
    damage, field = MODEL_FILE[case]
    if case in TORCH_DAMAGE:
        damage(model)
    else:
        damage(model, torch.load(trained_model, weights_only=True))
    line = assert_one_error(bdsgd(capsys, "model", "sample", model, "--iterations", 3, "--out",
                                  out), model, field, (out,))
    _upstream_advice_absent(line)


def _server(ckpt: Path) -> SimpleNamespace:
    """What ParameterServer._resume reads of its server: the checkpoint and the job's identity."""
    return SimpleNamespace(ckpt=ckpt, _identity=lambda: {"job": 1})


SERVER_CHECKPOINT = {
    **TORCH_DAMAGE,
    "no identity": (lambda p: torch.save({"rows": []}, p), "identity"),
    "its job's, cut down": (lambda p: torch.save({"identity": json.dumps({"job": 1})}, p), "-"),
}


@pytest.mark.parametrize("case", SERVER_CHECKPOINT)
def test_damaged_distributed_server_checkpoint(case, tmp_path):
    from bdsgd.distributed.ps import ParameterServer

    ckpt = tmp_path / "result.checkpoint.pt"
    damage, field = SERVER_CHECKPOINT[case]
    damage(ckpt)
    server = _server(ckpt)
    server.model = torch.nn.Linear(2, 1)
    server.optimizer = torch.optim.SGD(server.model.parameters(), lr=0.1)
    with pytest.raises(UserError) as err:
        ParameterServer._resume(server)
    assert (err.value.file, err.value.field) == (str(ckpt), field)
    assert "delete it to start the job afresh" in err.value.message
    _upstream_advice_absent(str(err.value))


# ===================================================================== results folders
ROWS = 12


def _metrics(seed: int) -> pd.DataFrame:
    it = np.arange(1, ROWS + 1)
    return pd.DataFrame({"iteration": it, "virtual_time_s": 1.0 * it + seed, "cutoff": 2 + it % 2,
                         "iteration_time_s": 1.0, "lr": 0.1, "train_loss": 1.0 / it,
                         "test_accuracy": np.where(it % 4 == 0, 0.1 * (it // 4), np.nan),
                         "test_loss": np.where(it % 4 == 0, 1.0, np.nan)})


def results_folder(root: Path) -> Path:
    """A small results folder as the DAG lays it out: one trace with its test part, throughput,
    model predictions, and two convergence runs."""
    results = root / "results"
    for sub in ("traces/sim", "throughput/sim", "models/sim"):
        (results / sub).mkdir(parents=True)
    write_trace(from_arrays(RNG.lognormal(size=(20, 3)) + 0.1), results / "traces/sim/trace.parquet")
    write_trace(from_arrays(RNG.lognormal(size=(10, 3)) + 0.1), results / "traces/sim/test.parquet")
    (results / "throughput/sim/throughput.json").write_text(json.dumps({"policies": {
        p: {"rule": None, "gradients_per_s": 3.0, "relative_to_oracle": 0.9, "mean_cutoff": 2.0,
            "cutoff_std": 0.5, "decision_ms_p50": 0.1, "decision_ms_p99": 0.2,
            "mean_iteration_s": 1.0} for p in ("sync", "static", "oracle")},
        "trace": {"n_workers": 3, "runtime_median": 1.0, "time_unit": "s",
                  "in_seconds": True}}))
    pd.DataFrame([{"policy": p, "iteration": t, "cutoff": 1 + t % 3, "duration_s": 1.0 + t % 2}
                  for p in ("sync", "static", "oracle") for t in range(10)]).to_parquet(
        results / "throughput/sim/decisions.parquet")
    pd.DataFrame([{"period": k, "policy": p, "gradients_per_s": 3.0, "relative_to_oracle": 0.9,
                   "mean_cutoff": 2.0, "fixed_ratio": 1.0, "fixed_low": 1.0, "fixed_high": 1.0}
                  for k in (1, 5) for p in ("ecdf", "oracle-fixed")]
                 ).to_csv(results / "throughput/sim/period_sweep.csv", index=False)
    pd.DataFrame([{"ratio": 0.1, "topology": "ps", "policy": p, "gradients_per_s": 3.0,
                   "relative_to_oracle": 0.9, "relative_to_sync": 1.0, "mean_cutoff": 2.0,
                   "sync_low": 1.0, "sync_high": 1.0}
                  for p in ("sync", "oracle")]).to_csv(results / "throughput/sim/comm_sweep.csv",
                                                       index=False)
    pd.DataFrame([{"order": c, "iteration": t, "predicted_mean": 1.0 + c, "lo90": 0.5 + c,
                   "hi90": 1.5 + c, "realised": 1.0 + c} for c in (2, 3) for t in range(8)]
                 ).to_parquet(results / "models/sim/predictions.parquet")
    for policy in ("sync", "static"):
        run = results / f"runs/sim/digits/{policy}/seed0"
        run.mkdir(parents=True)
        _metrics(0).to_parquet(run / "metrics.parquet", index=False)
        (run / "result.json").write_text(json.dumps({"summary": {
            "task": "digits", "policy": policy, "seed": 0, "target_accuracy": 0.2,
            "time_to_target_s": 8.0, "final_accuracy": 0.3, "gradients_per_s": 2.0,
            "mean_cutoff": 2.5, "iterations": ROWS, "virtual_time_s": 12.0, "n_workers": 3}}))
    return results


def _rewrite_parquet(change):
    def damage(path: Path):
        change(pd.read_parquet(path)).to_parquet(path)
    return damage


def _json(change):
    def damage(path: Path):
        path.write_text(json.dumps(change(json.loads(path.read_text()))))
    return damage


def _unlink(path: Path):
    path.unlink()


def _garbage(path: Path):
    path.write_bytes(b"\x00\x01 not this file")


RUN = "runs/sim/digits/static/seed0"
# name -> (file under the results folder, damage, field)
RESULTS = {
    "result.json not JSON": (f"{RUN}/result.json", lambda p: p.write_text("{\"summary\": "), "-"),
    "result.json a list": (f"{RUN}/result.json", _json(lambda d: [d]), "summary"),
    "result.json without summary": (f"{RUN}/result.json", _json(lambda d: {}), "summary"),
    "summary without task": (f"{RUN}/result.json",
                             _json(lambda d: {"summary": {**d["summary"], "task": None}}),
                             "summary.task"),
    "seed as text": (f"{RUN}/result.json",
                     _json(lambda d: {"summary": {**d["summary"], "seed": "zero"}}),
                     "summary.seed"),
    "no target accuracy": (f"{RUN}/result.json", _json(lambda d: {"summary": {
        k: v for k, v in d["summary"].items() if k != "target_accuracy"}}),
        "summary.target_accuracy"),
    "metrics missing": (f"{RUN}/metrics.parquet", _unlink, "-"),
    "metrics damaged": (f"{RUN}/metrics.parquet", _garbage, "-"),
    "metrics without test_accuracy": (f"{RUN}/metrics.parquet",
                                      _rewrite_parquet(lambda f: f.drop(columns="test_accuracy")),
                                      "test_accuracy"),
    "metrics without rows": (f"{RUN}/metrics.parquet", _rewrite_parquet(lambda f: f.iloc[:0]),
                             "-"),
    "throughput.json not JSON": ("throughput/sim/throughput.json", _garbage, "-"),
    "throughput.json without policies": ("throughput/sim/throughput.json", _json(lambda d: {}),
                                         "policies"),
    "a throughput entry not an object": ("throughput/sim/throughput.json",
                                         _json(lambda d: {"policies": {"sync": 3}}),
                                         "policies.sync"),
    "decisions missing": ("throughput/sim/decisions.parquet", _unlink, "-"),
    "decisions damaged": ("throughput/sim/decisions.parquet", _garbage, "-"),
    "decisions without cutoff": ("throughput/sim/decisions.parquet",
                                 _rewrite_parquet(lambda f: f.drop(columns="cutoff")), "cutoff"),
    "decisions without duration_s": ("throughput/sim/decisions.parquet",
                                     _rewrite_parquet(lambda f: f.drop(columns="duration_s")),
                                     "duration_s"),
    "throughput.json without the trace's workers": (
        "throughput/sim/throughput.json",
        _json(lambda d: {**d, "trace": {"runtime_median": 1.0}}), "trace.n_workers"),
    "a decision time not a number": (
        "throughput/sim/throughput.json",
        _json(lambda d: {**d, "policies": {**d["policies"], "sync": {
            **d["policies"]["sync"], "decision_ms_p50": "fast"}}}), "policies.sync.decision_ms_p50"),
    "period sweep missing": ("throughput/sim/period_sweep.csv", _unlink, "-"),
    "period sweep without period": ("throughput/sim/period_sweep.csv",
                                    lambda p: p.write_text("policy\necdf\n"), "period"),
    "comm sweep missing": ("throughput/sim/comm_sweep.csv", _unlink, "-"),
    "comm sweep not a table of the sweep": ("throughput/sim/comm_sweep.csv", _garbage, "ratio"),
    "comm sweep without rows": ("throughput/sim/comm_sweep.csv",
                                lambda p: p.write_text(p.read_text().splitlines()[0] + "\n"), "-"),
    "trace damaged": ("traces/sim/trace.parquet", _garbage, "-"),
    "trace without runtime_s": ("traces/sim/trace.parquet",
                                _rewrite_parquet(lambda f: f.drop(columns="runtime_s")),
                                "runtime_s"),
    "test part damaged": ("traces/sim/test.parquet", _garbage, "-"),
    "predictions damaged": ("models/sim/predictions.parquet", _garbage, "-"),
    "predictions without realised": ("models/sim/predictions.parquet",
                                     _rewrite_parquet(lambda f: f.drop(columns="realised")),
                                     "realised"),
}


@pytest.mark.parametrize("case", RESULTS)
def test_results_folder_with_a_bad_file(case, tmp_path, capsys):
    results = results_folder(tmp_path)
    file, damage, field = RESULTS[case]
    damage(results / file)
    out = tmp_path / "figures"
    assert_one_error(bdsgd(capsys, "figures", results, "--out", out), results / file, field,
                     (out,))


# name -> (what is removed, field)
RESULTS_MISSING = {
    "no runs": ("runs", "runs"),
    "no throughput": ("throughput", "throughput"),
    "no traces": ("traces", "traces"),
    "no model predictions": ("models", "model predictions"),
}


@pytest.mark.parametrize("case", RESULTS_MISSING)
def test_results_folder_missing_a_stage(case, tmp_path, capsys):
    import shutil

    results = results_folder(tmp_path)
    folder, field = RESULTS_MISSING[case]
    shutil.rmtree(results / folder)
    out = tmp_path / "figures"
    assert_one_error(bdsgd(capsys, "figures", results, "--out", out), results, field, (out,))


def test_the_intact_results_folder_reads(tmp_path):
    """The folder the tests above damage passes every check of ``bdsgd figures`` (the drawing
    itself: tests/figures/test_figures.py, and the CLI's on the session's runs: tests/cli/test_cli.py)."""
    from bdsgd.figures.render import load_all

    summary, *_ = load_all(results_folder(tmp_path))
    assert len(summary) > 0


# ============================================================================ messages
def test_an_imported_csv_trace_is_named_by_its_file_not_its_format(tmp_path, capsys):
    src, trace = tmp_path / "in.csv", tmp_path / "one_iteration.parquet"
    src.write_text(HEADER + "\n0,0,1.0\n0,1,2.0\n0,2,1.5\n")
    assert bdsgd(capsys, "traces", "import", "--format", "csv", src, trace)[0] == 0
    out = tmp_path / "m.pt"
    line = assert_one_error(bdsgd(capsys, "model", "train", trace, "--out", out, "--quiet"),
                            trace, "iteration", (out,))
    assert "csv: " not in line


def test_an_imported_pai_trace_is_named_by_its_file_not_its_format(tmp_path, capsys):
    src, trace = tmp_path / "job.csv", tmp_path / "pai.parquet"
    src.write_text(pai_text([(0, t, 400 + t) for t in (1, 11, 21)]))  # one worker
    assert bdsgd(capsys, "traces", "import", "--format", "alibaba-pai", src, trace)[0] == 0
    out = tmp_path / "m.pt"
    line = assert_one_error(bdsgd(capsys, "model", "train", trace, "--out", out, "--quiet"),
                            trace, "workers", (out,))
    assert "alibaba-pai: " not in line


def test_a_model_evaluated_on_an_imported_trace_names_the_file(tmp_path, capsys, trained_model):
    trace = tmp_path / "pai.parquet"
    assert bdsgd(capsys, "traces", "import", "--format", "alibaba-pai", PAI, trace)[0] == 0
    out = tmp_path / "e.json"
    line = assert_one_error(bdsgd(capsys, "model", "evaluate", trained_model, trace, "--json",
                                  out), trace, "worker", (out,))
    assert "alibaba-pai: " not in line


@pytest.mark.parametrize("case", ["not tensors", "a list"])
def test_torch_advice_is_not_passed_on(case, tmp_path, capsys):
    model = tmp_path / "m.pt"
    TORCH_DAMAGE[case][0](model)
    line = assert_one_error(bdsgd(capsys, "model", "sample", model, "--iterations", 2, "--out",
                                  tmp_path / "s.parquet"), model, "-")
    _upstream_advice_absent(line)
    assert "bdsgd model train" in line  # what to do, in bdsgd's terms


def _cifar_corrupted(root: Path) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in ("batches.meta", *(f"data_batch_{k}" for k in range(1, 6)), "test_batch"):
        (folder / name).write_bytes(b"not the release")
    return folder


# task -> (make the data folder, file the error names, words it must say)
DATA_SETS = {
    "mnist": (lambda root: None, lambda root: root / "MNIST" / "raw", "lacks"),
    "cifar10": (_cifar_corrupted, lambda root: root / "cifar-10-batches-py", "corrupted"),
    "imagenet": (lambda root: None, lambda root: root / "imagenet", "lacks"),
}


@pytest.mark.parametrize("task", DATA_SETS)
def test_a_missing_data_set_is_said_in_bdsgd_terms(task, tmp_path, capsys):
    make, named, words = DATA_SETS[task]
    data = tmp_path / "data"
    make(data)
    trace = trace_file(tmp_path, RNG.lognormal(size=(6, 3)) + 0.1)
    config = config_file(tmp_path)
    cfg = yaml.safe_load(config.read_text())
    cfg["train"].update(data_dir=str(data), tasks=[task], target_accuracy={task: 0.5})
    config.write_text(yaml.safe_dump(cfg))
    run = tmp_path / "run"
    line = assert_one_error(bdsgd(capsys, "train", "--config", config, "--task", task, "--policy",
                                  "sync", "--seed", 0, "--trace", trace, "--out", run),
                            named(data), "train.data_dir", (run / "result.json",))
    assert words in line and "downloads nothing" in line
    _upstream_advice_absent(line)


# ============================================================================= signals
SLOW_MODEL = {"epochs": 3, "chunk": 8, "hidden_dim": 8, "checkpoint_every": 1000, "batch_size": 4}


@pytest.mark.long  # a process stopped for real: make test-long (CI runs it)
def test_sigterm_stops_model_training_with_a_checkpoint_and_the_command_resumes(tmp_path):
    trace = trace_file(tmp_path, RNG.lognormal(size=(24, 4)) + 0.1)
    config = config_file(tmp_path, model=SLOW_MODEL)
    out = tmp_path / "m.pt"
    ckpt = Path(f"{out}.ckpt")
    cmd = [sys.executable, "-m", "bdsgd", "model", "train", str(trace), "--out", str(out),
           "--config", str(config), "--quiet"]
    env = dict(os.environ, PYTHONWARNINGS="error::DeprecationWarning:bdsgd")
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          cwd=REPO, env=env) as proc:
        try:
            first = proc.stdout.readline()  # training has started (its handlers are set)
            assert first.startswith("training run-time model"), first
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bdsgd: stopped by signal 15 after epoch "), err
    assert str(ckpt) in lines[0]
    assert ckpt.is_file() and not out.exists()
    stopped_at = torch.load(ckpt, weights_only=True)["epoch"]
    assert 1 <= stopped_at < SLOW_MODEL["epochs"]

    again = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    assert f"resuming from {ckpt} at epoch {stopped_at}" in again.stdout
    assert out.is_file() and not ckpt.exists()


# ================================================================== property-based tests
SMALL = settings(max_examples=60, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture,
                                        HealthCheck.too_slow])

CELL = st.one_of(st.none(), st.booleans(), st.integers(-3, 5),
                 st.floats(allow_nan=True, allow_infinity=True, width=32),
                 st.sampled_from(["1", "x", "", "true"]))
# a column: all of one kind (a realistic dtype) or anything (an object column)
COLUMN_KIND = st.sampled_from(["int", "float", "bool", "text", "mixed"])
KIND = {"int": st.integers(-2, 4), "float": st.floats(-1.0, 5.0, width=32) | st.just(np.nan),
        "bool": st.booleans(), "text": st.sampled_from(["0", "1.5", "a", ""]), "mixed": CELL}


@st.composite
def frames(draw) -> pd.DataFrame:
    rows = draw(st.integers(0, 8))
    names = draw(st.lists(st.sampled_from([*REQUIRED, *OPTIONAL, "extra"]), unique=True,
                          max_size=8))
    columns = {}
    for name in names:
        kind = draw(COLUMN_KIND)
        columns[name] = draw(st.lists(KIND[kind], min_size=rows, max_size=rows))
    if draw(st.booleans()) and rows:  # a good trace's shape more often than by chance
        T = draw(st.integers(1, rows))
        columns.update(iteration=[i % T for i in range(rows)],
                       worker=[i // T for i in range(rows)],
                       runtime_s=draw(st.lists(st.floats(0.01, 10.0), min_size=rows,
                                               max_size=rows)))
    return pd.DataFrame(columns, index=range(rows))


def _valid(trace) -> None:
    T, n = trace.runtimes.shape
    assert T >= 1 and n >= 1
    assert np.isfinite(trace.runtimes).all() and (trace.runtimes > 0).all()
    assert trace.censored.shape == (T, n) and trace.censored.dtype == bool
    assert len(trace.iterations) == T and len(np.unique(trace.iterations)) == T
    assert len(trace.workers) == n and len(np.unique(trace.workers)) == n


@SMALL
@given(frame=frames(), strict=st.booleans())
def test_any_frame_loads_to_a_valid_trace_or_is_a_user_error(frame, strict):
    try:
        trace = from_frame(frame, "f.parquet", {}, strict=strict)
    except UserError as exc:
        assert exc.file == "f.parquet" and "\n" not in str(exc)
        return
    _valid(trace)


@SMALL
@given(frame=frames(), meta=st.one_of(st.none(), st.binary(max_size=12),
                                      st.sampled_from([b'{"time_unit": "s"}', b"[1, 2]", b"7"])))
def test_any_parquet_file_reads_to_a_valid_trace_or_is_a_user_error(frame, meta, tmp_path):
    path = tmp_path / "t.parquet"
    try:
        write_parquet(path, frame, meta)
    except (pa.ArrowException, ValueError, TypeError):
        path.write_bytes(b"PAR1" + repr(frame.to_dict()).encode()[:50])  # unwritable: junk
    try:
        trace = read_trace(path)
    except UserError as exc:
        assert exc.file == str(path) and "\n" not in str(exc)
        return
    _valid(trace)


JSON = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-5, 100),
                              st.floats(-1.0, 100.0), st.text(max_size=6)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.text(max_size=6), inner,
                                                            max_size=3)),
                    max_leaves=8)


@st.composite
def mutated_configs(draw) -> dict:
    """The tiny config with one key anywhere in it replaced (or added) by any JSON value."""
    cfg = json.loads(json.dumps(tiny_config()))
    node = cfg
    while True:
        keys = list(node) if isinstance(node, dict) else []
        key = draw(st.sampled_from([*keys, "extra"])) if keys else "extra"
        if isinstance(node.get(key), dict) and draw(st.booleans()):
            node = node[key]
            continue
        node[key] = draw(JSON)
        return cfg


@SMALL
@given(data=st.one_of(mutated_configs(), st.dictionaries(st.text(max_size=10), JSON,
                                                         max_size=5)))
def test_any_mapping_is_a_config_or_a_user_error(data):
    from bdsgd.config import from_dict

    try:
        from_dict(data, "c.yaml")
    except UserError as exc:
        assert exc.file == "c.yaml" and "\n" not in str(exc)


# --------------------------------------------------------------------------------- configs
BASE_CONFIG = {"experiment": "x", "traces": {"t": {"source": "simulate"}}}
TRAIN_SECTION = {"trace": "t", "tasks": ["digits"]}
# name -> (what the config file holds: text, bytes, a mapping, or None for no file; the field)
CONFIGS = {
    "not YAML": ("experiment: [unclosed", "-"),
    "a list": ("- a\n- b\n", "-"),
    "empty": ("", "-"),
    "not UTF-8": (b"\xff\xfe\x00experiment", "-"),
    "missing": (None, "-"),
    "unknown top-level key": ({**BASE_CONFIG, "experimnt": "y"}, "(top level)"),
    "unknown key in train": ({**BASE_CONFIG, "train": {**TRAIN_SECTION, "lr": 0.1}}, "train"),
    "seed as text": ({**BASE_CONFIG, "seed": "x"}, "seed"),
    "experiment with a slash": ({**BASE_CONFIG, "experiment": "a/b"}, "experiment"),
    "no traces": ({**BASE_CONFIG, "traces": {}}, "traces"),
    "import without a path": ({**BASE_CONFIG, "traces": {"t": {"source": "import",
                                                               "format": "csv"}}}, "traces.t"),
    "train.trace not a trace": ({**BASE_CONFIG, "train": {**TRAIN_SECTION, "trace": "u"}},
                                "train.trace"),
    "unknown decision rule": ({**BASE_CONFIG, "policies": {"rule": "fastest"}}, "policies.rule"),
    "unknown replayed policy": ({**BASE_CONFIG, "throughput": {"policies": ["nosuch"]}},
                                "throughput.policies.0"),
    "unknown task": ({**BASE_CONFIG, "train": {**TRAIN_SECTION, "tasks": ["svhn"]}},
                     "train.tasks.0"),
    "unknown W&B mode": ({**BASE_CONFIG, "wandb": {"mode": "loud"}}, "wandb.mode"),
    "unknown late mode": ({**BASE_CONFIG, "network": {"late": "sometimes"}}, "network.late"),
    "unknown clock": ({**BASE_CONFIG, "train": {**TRAIN_SECTION, "clock": "wall"}},
                      "train.clock"),
    "a sweep without ratios": ({**BASE_CONFIG, "throughput": {"comm_ratios": []}},
                               "throughput.comm_ratios"),
    "train.trace lists a trace that is not one": (
        {**BASE_CONFIG, "train": {**TRAIN_SECTION, "trace": ["t", "u"]}}, "train.trace"),
    "a recipe sets a key recipes do not": (
        {**BASE_CONFIG, "train": {**TRAIN_SECTION, "recipes": {"digits": {"seeds": [1]}}}},
        "train.recipes.digits"),
    "a recipe of an unknown task": (
        {**BASE_CONFIG, "train": {**TRAIN_SECTION, "recipes": {"svhn": {}}}}, "train.recipes"),
}


@pytest.mark.parametrize("case", CONFIGS)
def test_bad_config_file(case, tmp_path, capsys):
    content, field = CONFIGS[case]
    config = tmp_path / "config.yaml"
    if isinstance(content, bytes):
        config.write_bytes(content)
    elif isinstance(content, str):
        config.write_text(content)
    elif content is not None:
        config.write_text(yaml.safe_dump(content))
    trace = write_trace(from_arrays(RNG.lognormal(size=(10, 3)) + 0.1), tmp_path / "t.parquet")
    out = tmp_path / "out.json"
    assert_one_error(bdsgd(capsys, "throughput", trace, "--policies", "sync", "--config", config,
                           "--json", out), config, field, (out,))


def test_a_directory_as_config_is_one_line(tmp_path, capsys):
    trace = write_trace(from_arrays(RNG.lognormal(size=(10, 3)) + 0.1), tmp_path / "t.parquet")
    assert_one_error(bdsgd(capsys, "throughput", trace, "--policies", "sync", "--config",
                           tmp_path, "--json", tmp_path / "out.json"), tmp_path, "-")
