"""One builder for every run's policy (``bdsgd.policies.build``): each input that does not fit
the run is one line naming the file and the field, from every command that builds a policy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from bdsgd.cli import main
from bdsgd.config import default_config, from_dict
from bdsgd.devices import cpp_compiler
from bdsgd.errors import UserError
from bdsgd.policies import is_known
from bdsgd.policies.build import COMPILE_MIN_WORKERS, Inputs, build_policy, compiles
from bdsgd.runtime_model.checkpoint import checkpoint
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.traces.io import write_trace
from bdsgd.traces.schema import from_arrays

N = 4  # the trace's workers; the model below knows 6


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    x = np.random.default_rng(0).lognormal(0, 0.3, (20, N))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "experiment": "build", "traces": {"t": {"source": "simulate"}},
        "train": {"trace": "t", "tasks": ["digits"], "batch_size": 8, "max_iterations": 5}}))
    model = tmp_path / "six.pt"
    torch.save(checkpoint(RuntimeModel(default_config().model, 6)), model)
    return {"trace": write_trace(from_arrays(x), tmp_path / "t.parquet"), "model": model,
            "config": config, "out": tmp_path / "out"}


def one_line_error(capsys, argv: list[str]) -> str:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("bdsgd: error: ") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("command", ["throughput", "train", "distributed"])
def test_a_model_of_another_worker_count_is_one_line(files, capsys, command):
    f = files
    argv = {
        "throughput": ["throughput", f["trace"], "--policies", "sync,bdsgd", "--model", f["model"],
                       "--json", f["out"] / "t.json"],
        "train": ["train", "--config", f["config"], "--task", "digits", "--policy", "bdsgd",
                  "--seed", 0, "--trace", f["trace"], "--model", f["model"], "--out", f["out"]],
        "distributed": ["distributed", "--workers", N, "--policy", "bdsgd", "--iterations", 2,
                        "--config", f["config"], "--model", f["model"],
                        "--json", f["out"] / "d.json"],
    }[command]
    err = one_line_error(capsys, argv)
    assert f"{f['model']}: n_workers: " in err and "6 workers" in err and f"has {N}" in err
    assert not f["out"].exists()  # nothing half-written


def test_every_input_is_checked_against_the_run(files):
    cfg = from_dict({"experiment": "x", "traces": {"t": {"source": "simulate"}},
                     "policies": {"static_backups": N}}, "cfg.yaml")
    trace = from_arrays(np.ones((10, N)))
    with pytest.raises(UserError, match="cfg.yaml: policies.static_backups: "):
        build_policy("static", cfg, seed=0, n_workers=N, trace=trace)
    with pytest.raises(UserError, match="cfg.yaml: policies.static_backups: "):
        build_policy("explore-static", cfg, seed=0, n_workers=N, trace=trace)
    ok = from_dict({"experiment": "x", "traces": {"t": {"source": "simulate"}}}, "cfg.yaml")
    with pytest.raises(UserError, match="workers; the run has 4"):
        build_policy("ecdf", ok, seed=0, n_workers=N, trace=trace,
                     history=from_arrays(np.ones((3, N + 1))))
    with pytest.raises(UserError, match="train.max_iterations"):
        build_policy("bayes", ok, seed=0, n_workers=N, trace=trace, inputs=Inputs(truth=object()),
                     iterations=11)
    with pytest.raises(UserError, match="real cluster"):
        build_policy("oracle", ok, seed=0, n_workers=N, real=True)
    with pytest.raises(UserError, match="--policy: greedy: "):
        build_policy("greedy", ok, seed=0, n_workers=N, trace=trace)
    policy = build_policy("ecdf", ok, seed=0, n_workers=N, trace=trace,
                          history=from_arrays(np.ones((3, N))))
    assert policy.choose() == N  # warmed up on equal run-times: nothing to gain by cutting


@pytest.mark.parametrize("name, n, c", [("static-0pct", 20, 20), ("static-5pct", 20, 19),
                                        ("static-10pct", 20, 18), ("static-2pct", 10, 9),
                                        ("explore-static-10pct", 20, 18)])
def test_chen_et_als_sweep_names_the_backups_as_a_share_of_n(name, n, c):
    """static-<p>pct: p % of n as backups (at least one for p > 0), beside static's count."""
    from bdsgd.policies.build import make_policy

    policy = make_policy(name, n, default_config().policies, seed=0)
    inner = getattr(policy, "inner", policy)
    assert inner.c == c and inner.name == name.removeprefix("explore-")


@pytest.mark.parametrize("name", ["static-100pct", "static-5", "static-pct", "static--5pct"])
def test_a_static_sweep_name_out_of_range_is_unknown(name):
    assert not is_known(name)


def test_the_papers_bdsgd_reads_its_own_model_and_rule(files, tmp_path, capsys):
    """bdsgd-paper: the model `bdsgd model train --paper` trains (Gaussian emission, censored
    run-times imputed), read from --paper-model (its absence one line naming that flag), the
    ratio rule whatever policies.rule, and no margin; bdsgd keeps --model and the config's."""
    cfg = default_config()
    paper = tmp_path / "paper.pt"
    assert main(["model", "train", str(files["trace"]), "--out", str(paper), "--epochs", "1",
                 "--paper", "--quiet"]) == 0
    saved = torch.load(paper, weights_only=True)["config"]
    assert (saved["emission"], saved["censoring"]) == ("gaussian", "impute")
    err = one_line_error(capsys, ["throughput", files["trace"], "--policies", "bdsgd-paper",
                                  "--model", paper, "--json", tmp_path / "t.json"])
    assert "--paper-model: bdsgd-paper: " in err
    model = RuntimeModel(cfg.model, N)
    policy = build_policy("bdsgd-paper", cfg, seed=0, n_workers=N,
                          inputs=Inputs(paper_model=model, paper_model_path=str(paper)))
    assert (policy.rule, policy.min_gain) == ("ratio", 0.0) and cfg.policies.rule == "rate"
    ours = build_policy("bdsgd-model", cfg, seed=0, n_workers=N, inputs=Inputs(model=model))
    assert (ours.rule, ours.min_gain) == ("rate", cfg.policies.min_gain)


def test_compile_auto_compiles_at_scale_where_a_compiler_is_installed(monkeypatch, tmp_path):
    """policies.compile: true and false as set; auto only from COMPILE_MIN_WORKERS workers, and
    only where $CXX (else g++) is on PATH, so that a machine without one runs eager."""
    big = COMPILE_MIN_WORKERS
    assert compiles(True, 8) and not compiles(False, 4096)
    assert not compiles("auto", big - 1)
    compiler = tmp_path / "c++"
    compiler.write_text("#!/bin/sh\n")
    compiler.chmod(0o755)
    monkeypatch.setenv("CXX", str(compiler))
    assert cpp_compiler() == str(compiler) and compiles("auto", big)
    monkeypatch.setenv("CXX", str(tmp_path / "missing"))
    assert cpp_compiler() is None and not compiles("auto", big)


@pytest.mark.long  # two failing compilations in a fresh process, ~1 min: make test-long
def test_a_compilation_that_fails_runs_eager_under_auto_and_is_an_error_under_true(tmp_path):
    """A C++ compiler that is installed but cannot build (here one that fails every build, as one
    without Python's headers does): auto warns and runs eager, true is a one-line error naming
    policies.compile. In a fresh process with its own inductor cache, so nothing is reused."""
    fake = tmp_path / "g++"
    fake.write_text('#!/bin/sh\ncase "$1" in --version) echo "g++ (fake) 12"; exit 0;; esac\n'
                    'echo "cannot build" >&2; exit 1\n')
    fake.chmod(0o755)
    script = f"""
import dataclasses, logging
from bdsgd.config import default_config
from bdsgd.errors import UserError
from bdsgd.policies.build import make_policy
from bdsgd.runtime_model.model import RuntimeModel
logging.basicConfig(level=logging.WARNING)
cfg = default_config()
model = RuntimeModel(cfg.model, {COMPILE_MIN_WORKERS})
auto = make_policy("bdsgd-model", {COMPILE_MIN_WORKERS}, cfg.policies, model=model)
print("step", auto.predictor.step == auto.predictor.model.step)
try:
    make_policy("bdsgd-model", {COMPILE_MIN_WORKERS},
                dataclasses.replace(cfg.policies, compile=True), model=model)
except UserError as exc:
    print("error", exc.field)
"""
    env = {**os.environ, "CXX": str(fake), "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:2] == ["step True", "error policies.compile"]
    assert "policies.compile auto: torch.compile failed (CppCompileError" in done.stderr
