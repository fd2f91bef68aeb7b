"""Every benchmark script starts and documents its flags (they are run by hand, not by CI), and
writes its own block of the results file."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
# the scripts, not the modules they share (results_md.py)
SCRIPTS = sorted(p for p in BENCHMARKS.glob("*.py") if 'if __name__ == "__main__":' in p.read_text())


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_script_shows_its_help(script, monkeypatch, capsys):
    """`python benchmarks/SCRIPT --help`, in this process: the script run as __main__ with its
    folder first on sys.path, as Python runs it (what it sets in the environment, undone).
    test_a_script_run_twice_with_results_keeps_one_block starts one as a process."""
    environ = dict(os.environ)
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    try:
        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(script), run_name="__main__")
    finally:
        os.environ.clear()
        os.environ.update(environ)
    out = capsys.readouterr().out
    assert done.value.code in (0, None), out
    assert "usage:" in out
    assert "--results PATH" in out  # every script can write its block of results.md


def test_the_policy_tables_bootstrap_resamples_both_policies_alike():
    """Paired blocks: a policy against itself differs by exactly 0 in every resample; one that
    takes one more gradient in the same time every iteration is ahead in every resample."""
    sys.path.insert(0, str(SCRIPTS[0].parent))
    try:
        from policy_table import BLOCK, RESAMPLES, block_bootstrap
    finally:
        sys.path.pop(0)
    rng = np.random.default_rng(0)
    iterations = np.arange(4 * BLOCK)
    duration = rng.lognormal(0.0, 0.5, iterations.size)
    rows = [pd.DataFrame({"policy": name, "iteration": iterations, "cutoff": cutoff,
                          "duration_s": duration}) for name, cutoff in (("a", 8), ("b", 7))]
    decisions = pd.concat(rows)
    same = block_bootstrap(decisions, "a", "a", 1.0, rng)
    assert same.shape == (RESAMPLES,) and not same.any()
    ahead = block_bootstrap(decisions, "a", "b", 1.0, rng)
    assert (ahead > 0).all()
    assert np.median(ahead) == pytest.approx(1 / duration.mean(), rel=0.2)


def test_the_policy_tables_interval_holds_the_spread_between_seeds():
    """Seeds whose margins differ but are each certain: the interval spans their spread (a
    within-seed bootstrap alone would be one point); one seed keeps its own draws."""
    sys.path.insert(0, str(SCRIPTS[0].parent))
    try:
        from policy_table import RESAMPLES, seed_bootstrap
    finally:
        sys.path.pop(0)
    rng = np.random.default_rng(0)
    certain = np.repeat(np.linspace(-1.0, 1.0, 10)[:, None], RESAMPLES, axis=1)
    low, high = np.quantile(seed_bootstrap(certain, rng), [0.025, 0.975])
    assert -0.7 < low < -0.2 and 0.2 < high < 0.7
    one = rng.standard_normal((1, RESAMPLES))
    assert np.array_equal(seed_bootstrap(one, rng), one[0])


def test_the_seeds_of_a_real_job_share_its_blocks_luck():
    """Ten models replayed on one real test part, one policy losing in one block of five: ten
    independent block resamples would average that block's luck away and call the loss certain;
    the same blocks in every seed leave it as uncertain as one trace makes it."""
    sys.path.insert(0, str(SCRIPTS[0].parent))
    try:
        from policy_table import BLOCK, margin
    finally:
        sys.path.pop(0)
    iterations = np.arange(5 * BLOCK)
    cutoff = np.where(iterations == 2 * BLOCK, 7, 8)  # one cut that did not pay
    decisions = pd.concat([pd.DataFrame({"policy": name, "iteration": iterations, "cutoff": c,
                                         "duration_s": 1.0})
                           for name, c in (("a/rate", cutoff), ("b", 8))])
    rate = {"a": cutoff.sum() / iterations.size, "b": 8.0}
    rows = {"a": {"rule": "rate", "gradients_per_s": rate["a"], "relative_to_oracle": rate["a"] / 8},
            "b": {"gradients_per_s": 8.0, "relative_to_oracle": 1.0}}
    rows["a/rate"] = rows["a"]
    runs = [(rows, decisions)] * 10
    _, mean, _, high = margin(runs, "a", "b", 0, shared=False)
    assert mean < 0 and high < 0
    _, mean, low, high = margin(runs, "a", "b", 0, shared=True)
    assert mean < 0 and low < 0 and high == 0.0


def test_the_policy_table_takes_model_policy_and_network_settings():
    sys.path.insert(0, str(SCRIPTS[0].parent))
    try:
        from policy_table import config
    finally:
        sys.path.pop(0)

    class Args:
        workers, iterations, epochs = 8, 100, 3
        model, policy = ["batch_size=4"], ["min_gain=0.3", "rule=ratio"]
        network = ["late=abandon"]

    cfg = config(Args, "calm", 1)
    assert (cfg.model.epochs, cfg.model.batch_size) == (3, 4)
    assert (cfg.policies.min_gain, cfg.policies.rule, cfg.seed) == (0.3, "ratio", 1)
    assert cfg.network.late == "abandon"


def results_writer():
    """benchmarks/results_md.py, the module the scripts share."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import results_md
    finally:
        sys.path.pop(0)
    return results_md


def test_the_results_writer_replaces_only_its_own_block(tmp_path):
    """A second run of a command replaces its block; other commands' blocks, other scripts'
    sections, text written by hand and a fenced line that looks like a heading stay as they are."""
    md = results_writer()
    path = tmp_path / "results.md"
    own = md.command("benchmarks/b.py", ["--seeds", "2", "--results", str(path)])
    assert own == ".venv/bin/python benchmarks/b.py --seeds 2"
    assert md.command("b.py", ["--results=x.md", "--res", "y.md", "--resume"]) == (
        ".venv/bin/python benchmarks/b.py --resume")
    other = ".venv/bin/python benchmarks/b.py --seeds 3"
    path.write_text("# Benchmark results\n\nWritten by the scripts.\n\n"
                    "## a.py\n\n### `.venv/bin/python benchmarks/a.py`\n\nkept a\n\n"
                    "## b.py\n\nWhat b measures.\n\n"
                    f"### `{own}`\n\nold b\n\n### `{other}`\n\nkept b\n")
    md.write(path, "b.py", own, "first\n### `not a heading`\n")
    md.write(path, "b.py", own, "second\n### `not a heading`\n")
    text = path.read_text()
    assert text.count(f"### `{own}`") == 1 and text.count("### `not a heading`") == 1
    assert "second" in text and "first" not in text and "old b" not in text
    for kept in ("Written by the scripts.", "kept a", "What b measures.", "kept b"):
        assert text.count(kept) == 1, kept
    # the block stays where it was, between its section's text and the next block
    assert (text.index("What b measures.") < text.index("second") < text.index(f"### `{other}`"))
    md.write(path, "b.py", ".venv/bin/python benchmarks/b.py --seeds 4", "| a | b |", markdown=True)
    md.write(path, "c.py", ".venv/bin/python benchmarks/c.py", "c")
    text = path.read_text()
    assert text.index("kept b") < text.index("| a | b |") < text.index("## c.py")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## a.py", "## b.py", "## c.py"]
    assert "\n\n\n" not in text


@pytest.mark.slow  # starts the script twice
def test_a_script_run_twice_with_results_keeps_one_block(tmp_path):
    path = tmp_path / "results.md"
    path.write_text("# Benchmark results\n\n## bench_model.py\n\nkept\n")
    script = BENCHMARKS / "scenarios.py"
    for _ in range(2):
        run = subprocess.run([sys.executable, str(script), "--seeds", "1", "--results", str(path)],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
    text = path.read_text()
    assert text.count("### `.venv/bin/python benchmarks/scenarios.py --seeds 1`") == 1
    assert text.count("## scenarios.py") == 1 and "kept" in text
    assert "hindsight_best_mean_cutoff" in text  # what the script printed


@pytest.mark.long  # writes three data sets and trains each task's network: make test-long
def test_the_gpu_script_runs_end_to_end_at_toy_sizes(tmp_path):
    """benchmarks/gpu_check.py --tiny on this machine's CPU: the data written in the real
    formats and read back by the trainer, the bill's s measured for every task, one cell each,
    the one table printed."""
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_check.py"), "--tiny", "--device",
                           "cpu", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if line.split()[:1] and line.split()[0] in ("mnist", "cifar10", "imagenet")}
    assert sorted(rows) == ["cifar10", "imagenet", "mnist"], proc.stdout
    for task, row in rows.items():
        s, alone, batch, per_iteration = float(row[1]), float(row[3]), int(row[6]), float(row[7])
        assert s > 0 and alone > 0 and batch == 4 and per_iteration > 0, (task, row)
        assert row[-2:] == ["-", "-"]  # no GPU memory or utilisation on a CPU
    assert (tmp_path / "runs/imagenet/result.json").exists()


def test_the_decision_profile_accounts_for_the_whole_decision(monkeypatch, capsys):
    """bench_model.py --profile: the parts' shares add up to the decision, every part of bdsgd's
    predictor is timed, and the torch calls are counted by the module that made them."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    bench_model = runpy.run_path(str(BENCHMARKS / "bench_model.py"))
    bench_model["profile"](16, 5)
    out = capsys.readouterr().out
    shares = [float(line.rsplit(None, 1)[1].rstrip("%")) for line in out.splitlines()
              if line.endswith("%")]
    assert abs(sum(shares) - 100) < 0.5, out
    for part in ("model: filtering step", "model: draws", "persist: update", "persist: forecast",
                 "averaging: scores", "the rest"):
        assert part in out, part
    calls = out.split("torch calls in one decision: ")[1]
    assert int(calls.split(":")[0]) > 100 and "runtime_model/filtering.py" in calls
