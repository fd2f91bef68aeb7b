"""The ablation table, figure and answer (bdsgd.figures.ablations) on the hand-made results of
tests/figure_results.py, whose bdsgd has two variants: bdsgd+progress (two seeds) and bdsgd+lr-none
(one seed, never reaching the target)."""

from __future__ import annotations

import numpy as np
import pytest

from bdsgd.figures import ablations as module
from bdsgd.figures.ablations import ABLATION_COLUMNS, ablation_table, ablations, ablations_answer
from bdsgd.figures.render import load_runs, policy_colour


@pytest.fixture(scope="module")
def table(results):
    return ablation_table(load_runs(results)[0])


def test_the_table_has_the_policy_and_each_variant(table):
    assert list(table.columns) == ABLATION_COLUMNS
    assert list(table["policy"]) == ["bdsgd", "bdsgd+lr-none", "bdsgd+progress"]
    assert list(table["variant"]) == ["", "lr-none", "progress"] and set(table["base"]) == {"bdsgd"}
    arm = table.set_index("policy").loc["bdsgd+progress"]
    # reached at iterations 10 and 15, 1.0 and 1.1 s an iteration: times 10 and 16.5
    assert (arm["seeds"], arm["reached"]) == (2, 2)
    assert arm["median_time_to_target_s"] == pytest.approx(13.25)
    assert (arm["low_s"], arm["high_s"]) == pytest.approx((10.0, 16.5))
    assert arm["mean_cutoff"] == pytest.approx(2.5) and arm["n_workers"] == 4
    never = table.set_index("policy").loc["bdsgd+lr-none"]
    assert never["reached"] == 0 and np.isinf(never["median_time_to_target_s"])


def test_policies_without_variants_are_left_out(results):
    summary = load_runs(results)[0]
    assert ablation_table(summary[~summary["policy"].str.contains("+", regex=False)]).empty


def test_the_answer_states_the_measured_times_and_each_arms_verdict(table, results):
    from bdsgd.figures.verdicts import time_verdicts

    verdicts = time_verdicts(load_runs(results)[0])
    answer = ablations_answer(table, verdicts)
    assert answer.startswith("On digits (4 workers, median of 2 seeds): ")
    assert "bdsgd+progress reaches 0.5 in 13.2 s (mean cutoff 2.50)" in answer
    assert "bdsgd+lr-none reaches 0.5 in 0 of 2 seeds only (median: never)" in answer
    # each arm against its policy, paired by seed: two seeds decide nothing
    assert "bdsgd+progress against bdsgd: too few seeds (ratio" in answer
    assert "no ablation" in ablations_answer(table.iloc[:0], verdicts)


def test_the_figure_has_one_mark_per_arm_in_its_policys_colour(table, tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(module, "save_figure", lambda fig, path: figures.append(fig) or [path])
    ablations(table, tmp_path / "a.png", policy_colour)
    (fig,) = figures
    time_ax, cut_ax = fig.axes
    assert time_ax.get_xlabel() == "virtual time to target (s)"
    assert cut_ax.get_xlabel() == "mean cutoff c (gradients accepted of n = 4)"
    assert [t.get_text() for t in time_ax.get_yticklabels()] == list(table["policy"])
    # a marker per arm: the median (none for an arm that never reached it) and the mean cutoff
    marks = [line for line in cut_ax.get_lines() if line.get_linestyle() == "None"]
    assert [m.get_marker() for m in marks] == ["o", "D", "s"]
    assert {m.get_color() for m in marks} == {policy_colour("bdsgd")}
    medians = [line for line in time_ax.get_lines() if line.get_linestyle() == "None"]
    assert len(medians) == 2 and [t.get_text() for t in time_ax.texts].count("never") == 1
    module.plt.close(fig)
