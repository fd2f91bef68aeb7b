"""The torch threads that decision latencies are measured under: the throughput replay, model
evaluate and a convergence run each run on the threads asked (or the config's) and record them."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from bdsgd.cli import main
from bdsgd.config import default_config, from_dict
from bdsgd.throughput import run_benchmark
from tests.helpers import make_cfg, write


@pytest.fixture
def small_trace(tmp_path):
    return write(tmp_path, np.random.default_rng(1).lognormal(0.0, 0.4, (30, 6)))


def test_throughput_runs_on_the_threads_asked_and_records_them(small_trace, monkeypatch):
    from bdsgd.cluster.virtual import VirtualCluster

    seen = []
    real = VirtualCluster.replay

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(VirtualCluster, "replay", spy)
    before = torch.get_num_threads()
    asked = 2 if before == 1 else 1
    result = run_benchmark(small_trace, ["sync", "ecdf", "async"], rule="both", threads=asked)
    assert seen and set(seen) == {asked}
    assert torch.get_num_threads() == before  # restored
    assert result["threads"] == asked
    for name, row in result["policies"].items():
        assert row["threads"] == asked and "decision_ms_p50" in row, name
    assert {"default_rule", "trace", "history", "provenance", "policies"} <= result.keys()


def test_throughput_threads_default_to_the_config(small_trace):
    cfg = from_dict({"experiment": "x", "traces": {"t": {"source": "simulate"}},
                     "resources": {"throughput_threads": 3}})
    assert run_benchmark(small_trace, ["sync"], cfg=cfg)["threads"] == 3
    assert run_benchmark(small_trace, ["sync"])["threads"] == 1  # the schema's default


def test_cli_threads_flag_and_the_stage_config(small_trace, tmp_path):
    out = tmp_path / "t.json"
    main(["throughput", str(small_trace), "--policies", "sync,static", "--json", str(out),
          "--threads", "2"])
    assert json.loads(out.read_text())["threads"] == 2
    # the workflow's stage config file: what STAGE_READS declares for throughput, threads included
    stage = tmp_path / "throughput.yaml"
    stage.write_text("experiment: x\nseed: 0\ntraces: {t: {source: simulate}}\n"
                     "policies: {rule: rate}\nthroughput: {comm_s: 0.0}\n"
                     "resources: {throughput_threads: 2}\n")
    out.unlink()
    main(["throughput", str(small_trace), "--policies", "sync", "--config", str(stage),
          "--json", str(out)])
    table = json.loads(out.read_text())
    assert table["threads"] == 2 and table["policies"]["sync"]["threads"] == 2
    out.unlink()
    assert main(["throughput", str(small_trace), "--policies", "sync", "--json", str(out),
                 "--threads", "0"]) == 2
    assert not out.exists()


def test_model_evaluate_records_its_threads(tmp_path):
    from bdsgd.evaluation import evaluate_model
    from bdsgd.runtime_model.checkpoint import load_model
    from bdsgd.runtime_model.train import train_model
    from bdsgd.traces.schema import from_arrays

    base = default_config().model
    mcfg = dataclasses.replace(base, latent_dim=4, worker_dim=4, hidden_dim=16, chunk=16,
                               batch_size=4, epochs=1, samples=16)
    x = np.random.default_rng(2).lognormal(0.0, 0.3, (40, 4))
    train_model(from_arrays(x[:30]), mcfg, seed=0, out=tmp_path / "m.pt", progress=False)
    result, _ = evaluate_model(load_model(tmp_path / "m.pt"), from_arrays(x[30:]))
    assert result["threads"] == torch.get_num_threads() and "decision_ms_p50" in result


def test_a_convergence_run_records_its_threads(tmp_path, small_trace):
    from bdsgd.training import run_spec, train_run

    cfg = make_cfg(max_iterations=6, eval_every=3, threads=1)
    train_run(run_spec(cfg, task="digits", policy="ecdf", seed=0, trace_path=small_trace,
              out_dir=tmp_path / "run"))
    wallclock = json.loads((tmp_path / "run" / "result.json").read_text())["wallclock"]
    assert wallclock["threads"] == 1 and "decision_latency_p50_s" in wallclock


def test_an_entry_point_keeps_freed_memory_where_malloc_is_glibcs():
    """``keep_freed_memory`` raises glibc's mmap and trim thresholds (mallopt says 1 to each);
    where the C library is another, it reports that it changed nothing. In a child process:
    the allocator's settings are the process's own."""
    import platform
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "from bdsgd.entry import keep_freed_memory; "
                           "print(keep_freed_memory())"], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == str(platform.libc_ver()[0] == "glibc")
