"""Time to target resolved where it matters (every row evaluated near the target), and runs that
stop a margin after reaching it, in every training mode."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bdsgd.training import run_spec, train_run
from tests.helpers import make_cfg, metrics, summary, write

X = np.random.default_rng(0).lognormal(size=(12, 4)) + 1.0
TARGET = 0.4  # what every mode reaches on digits within 60 rows (cyclic, the slowest, by ~30)


def run(tmp_path, policy="sync", **train):
    cfg = make_cfg(**{"max_iterations": 60, "target_accuracy": {"digits": TARGET}, **train})
    out = train_run(run_spec(cfg, task="digits", policy=policy, seed=0, trace_path=write(tmp_path, X),
                    out_dir=tmp_path / policy))
    return metrics(out), summary(out)


def test_near_the_target_every_row_is_evaluated_until_it_is_reached(tmp_path):
    """Evaluations 5 rows apart, and within 1.0 of the target (always near once one evaluation
    is known): every row from the first evaluation to the first at the target is evaluated, then
    every 5th again, and time to target is that row's time, as with an evaluation every row."""
    sparse, result = run(tmp_path / "a", eval_every=5, eval_near_target=1.0)
    dense, _ = run(tmp_path / "b", eval_every=1, eval_near_target=0.0)
    reached = int(np.argmax(dense["test_accuracy"].to_numpy() >= TARGET))
    assert reached > 5 and sparse["test_accuracy"][4:reached + 1].notna().all()
    assert result["time_to_target_s"] == dense["virtual_time_s"][reached]
    later = sparse["test_accuracy"][reached + 1:]
    assert later.notna().sum() <= math.ceil(len(later) / 5) + 1  # back to every 5th


@pytest.mark.parametrize("policy", ["static", "async", "cyclic"])
def test_a_run_stops_a_margin_after_the_target(tmp_path, policy):
    rows, result = run(tmp_path, policy, eval_every=1, stop_at_target=0.5)
    reached = int(rows["iteration"][rows["test_accuracy"] >= TARGET].iloc[0])
    assert rows["iteration"].iloc[-1] == math.ceil(1.5 * reached) < 60
    assert result["time_to_target_s"] is not None and rows["test_accuracy"].iloc[-1] >= 0
