"""Chen et al.'s static backup workers: a fraction of n keeps at least one backup on a small job;
counts and fractions that round to one or more are unchanged."""

from __future__ import annotations

import pytest

from bdsgd.config import default_config
from bdsgd.policies.baselines import Static
from bdsgd.policies.build import build_policy


@pytest.mark.parametrize("n, c", [(2, 1), (3, 2), (4, 3), (5, 4), (8, 7), (16, 14), (158, 142)])
def test_a_fraction_of_backups_keeps_at_least_one(n, c):
    assert Static(n, 0.1).c == c


def test_static_backups_unchanged_where_the_fraction_rounds_to_one_or_more():
    for n in range(6, 200):  # round(0.1 n) >= 1: the backups are round(0.1 n), as before
        assert Static(n, 0.1).c == n - int(round(0.1 * n)), n
    assert Static(8, 0.1).c == 7 and Static(16, 0.1).c == 14
    assert Static(16, 0.05).c == 15 and Static(8, 0.05).c == 7  # 0.4 rounds to none: one
    assert Static(1, 0.1).c == 1  # a lone worker is always waited for


def test_no_backups_and_counts_are_unchanged():
    assert Static(3, 0.0).c == 3 and Static(16, 0.0).c == 16  # 0: sync
    assert Static(8, 2).c == 6 and Static(4, 1).c == 3 and Static(3, 2.5).c == 1


def test_the_default_config_gives_a_small_job_a_backup():
    cfg = default_config()
    assert cfg.policies.static_backups == 0.1
    for n in (3, 4):
        assert build_policy("static", cfg, seed=0, n_workers=n).choose() == n - 1


# ------------------------------------------------------------ 3. the threads of a timing
