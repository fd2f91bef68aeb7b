"""The learning-rate schedule in samples applied: the factor by hand, a cut run's rates by hand,
asynchronous updates one batch at a time, and a resumed scheduled run equal to an uninterrupted
one."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from bdsgd.sgd import lr_factor, rate_at_n, step_lr
from bdsgd.training import run_spec, train_run
from tests.helpers import crash_at_iteration, interrupted_then_resumed, make_cfg, metrics, write

X = np.random.default_rng(0).lognormal(size=(12, 4)) + 1.0


def test_the_factor_by_hand():
    assert lr_factor("constant", 0, 500, 32, 1000) == 1.0
    assert lr_factor("constant", 100, 0, 32, 1000) == pytest.approx(0.32)  # warm-up
    assert lr_factor("constant", 100, 96, 32, 1000) == 1.0
    assert lr_factor("cosine", 0, 500, 32, 1000) == pytest.approx(0.5)
    assert lr_factor("cosine", 0, 0, 32, 1000) == 1.0 and lr_factor("cosine", 0, 1000, 1, 1000) == 0
    assert lr_factor("cosine", 64, 0, 32, 1000) == pytest.approx(0.5)  # both: their product


def test_a_rate_per_lr_batch_samples_scales_to_the_clusters_step():
    """train.lr_batch: learning_rate per lr_batch samples, times the full step's n b; null: the
    rate at c = n itself."""
    tc = make_cfg(learning_rate=0.1, batch_size=32).train
    assert rate_at_n(tc, 158) == 0.1
    per_256 = dataclasses.replace(tc, lr_batch=256)
    assert rate_at_n(per_256, 158) == pytest.approx(0.1 * 158 * 32 / 256)  # Goyal's 0.1 kn/256
    assert step_lr(per_256, 79, 158, 0, 10**9) == pytest.approx(rate_at_n(per_256, 158) / 2)


def test_a_cut_run_moves_the_schedule_by_what_it_applies(tmp_path):
    """static at c = 3 of 4: each step applies 3 b samples, and its rate is
    lr * 3/4 * 0.5 (1 + cos(pi seen / (I n b)))."""
    cfg = make_cfg(static_backups=1, max_iterations=10, eval_every=10, lr_schedule="cosine",
                   weight_decay=1e-4)
    out = train_run(run_spec(cfg, task="digits", policy="static", seed=0, trace_path=write(tmp_path, X),
                    out_dir=tmp_path / "run"))
    b, total = cfg.train.batch_size, 10 * 4 * cfg.train.batch_size
    expected = [cfg.train.learning_rate * 0.75 * 0.5 * (1 + math.cos(math.pi * t * 3 * b / total))
                for t in range(10)]
    np.testing.assert_allclose(metrics(out)["lr"], expected, rtol=1e-12)


@pytest.mark.parametrize("policy", ["async", "cyclic"])
def test_the_modes_without_a_cutoff_warm_up_by_the_gradients_they_apply(tmp_path, policy):
    cfg = make_cfg(max_iterations=6, eval_every=6, warmup_samples=12 * 8,  # 12 gradients of 8
                   staleness_lr="none")  # every gradient at lr / n: the warm-up alone moves it
    out = train_run(run_spec(cfg, task="digits", policy=policy, seed=0, trace_path=write(tmp_path, X),
                    out_dir=tmp_path / "run"))
    lr = metrics(out)["lr"].to_numpy()
    assert (np.diff(lr[:3]) > 0).all() and lr[0] < cfg.train.learning_rate / 4 * 0.5
    assert lr[-1] == pytest.approx(cfg.train.learning_rate / 4)  # warmed up: lr / n a gradient


def test_a_resumed_scheduled_run_equals_an_uninterrupted_one(tmp_path, monkeypatch):
    cfg = make_cfg(static_backups=1, max_iterations=12, eval_every=4, checkpoint_every=4,
                   lr_schedule="cosine", warmup_samples=40)
    trace = write(tmp_path, X)

    def run(out):
        return train_run(run_spec(cfg, task="digits", policy="static", seed=0, trace_path=trace,
                         out_dir=out))

    whole = metrics(run(tmp_path / "whole"))
    crash_at_iteration(monkeypatch, 7)
    resumed = metrics(interrupted_then_resumed(monkeypatch, run, tmp_path / "resumed"))
    assert whole.equals(resumed)
