"""Every benchmark script starts and documents its flags (they are run by hand, not by CI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_script_shows_its_help(script):
    run = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "usage:" in run.stdout


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


def test_the_policy_table_takes_model_and_policy_settings():
    sys.path.insert(0, str(SCRIPTS[0].parent))
    try:
        from policy_table import config
    finally:
        sys.path.pop(0)

    class Args:
        workers, iterations, epochs = 8, 100, 3
        model, policy = ["batch_size=4"], ["min_gain=0.3", "rule=ratio"]

    cfg = config(Args, "calm", 1)
    assert (cfg.model.epochs, cfg.model.batch_size) == (3, 4)
    assert (cfg.policies.min_gain, cfg.policies.rule, cfg.seed) == (0.3, "ratio", 1)
