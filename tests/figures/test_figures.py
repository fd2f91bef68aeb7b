"""bdsgd figures on a small hand-made results folder: every file in every format, one fixed colour
and line style per policy, small multiples of integer cutoffs, replayed iterations counted from 0,
the time-to-target interval, the measured answers, the figure note, old runs without staleness,
byte-identical tables."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bdsgd import plotting
from bdsgd.cluster.schedules import MODES
from bdsgd.errors import UserError
from bdsgd.figures import (
    FALLBACK_COLOURS,
    FIGURES,
    POLICY_COLOURS,
    POLICY_DASHES,
    common,
    convergence,
    distributed,
    figure_files,
    inputs,
    over_time,
    render,
    replay,
)
from bdsgd.figures.distributed import agreement, distributed_replay_answer, replay_job
from bdsgd.figures.inputs import THROUGHPUT_COLUMNS, load_distributed, load_overhead, load_period_sweep
from bdsgd.figures.render import SUMMARY_COLUMNS, policy_colour, policy_style, render_all
from bdsgd.figures.verdicts import verdict_table
from bdsgd.outputs.io import write_json
from bdsgd.plotting import figure_note, save_figure, unit_label
from bdsgd.policies import NAMES
from bdsgd.stats import (
    block_bootstrap_interval,
    block_ratio_interval,
    median_interval,
    time_to_target_stats,
)
from tests.figure_results import (
    DECISIONS,
    DIST_CUTOFF,
    DIST_WORKERS,
    N_WORKERS,
    OVERHEAD_S,
    REPLAY_SYNC,
    REPO,
    ROWS,
    RUNS,
    _dist_runtimes,
)


def expected_files() -> set[str]:
    return {out for file, _, _ in FIGURES.values() for out in figure_files(file)}


def test_every_figure_in_every_format(rendered):
    out, written = rendered
    assert {p.name for p in written} == expected_files()
    assert len(written) == len(expected_files())
    for path in written:
        head = path.read_bytes()[:8]
        if path.suffix == ".png":
            assert head.startswith(b"\x89PNG") and path.stat().st_size > 10_000, path
        elif path.suffix == ".pdf":
            assert head.startswith(b"%PDF"), path
    assert not list(out.glob(".*.tmp"))  # no temporary file left behind


@pytest.mark.long  # a second render of every figure: make test-long (CI runs it)
def test_rerender_is_byte_identical(results, rendered, tmp_path):
    """Tables must repeat byte for byte; the PNGs and PDFs do too on the same libraries."""
    render_all(results, tmp_path)
    for name in sorted(expected_files()):
        assert (tmp_path / name).read_bytes() == (rendered[0] / name).read_bytes(), name


def test_figure_files_lists_a_pdf_beside_every_png():
    assert figure_files("summary.csv") == ["summary.csv"]
    assert figure_files("loss_curves.png") == ["loss_curves.png", "loss_curves.pdf"]
    for name, (file, caption, _) in FIGURES.items():
        assert (REPO / "workflow/report" / caption).is_file(), name
        assert file.endswith((".csv", ".png", ".rst")), name


def test_summary_columns_only_appended(rendered):
    summary = pd.read_csv(rendered[0] / "summary.csv")
    assert list(summary.columns) == SUMMARY_COLUMNS
    assert SUMMARY_COLUMNS[:10] == ["task", "policy", "seed", "time_to_target_s",
                                    "final_accuracy", "gradients_per_s", "mean_cutoff",
                                    "iterations", "virtual_time_s", "target_accuracy"]
    assert len(summary) == len(RUNS)
    staleness = summary.set_index(["policy", "seed"])["mean_staleness"]
    assert staleness["async", 0] == 1.5 and np.isnan(staleness["sync", 0])
    assert (summary["n_workers"] == N_WORKERS).all()


def test_old_runs_without_staleness_read_as_unavailable(results):
    _, metrics = render.load_runs(results)
    old = metrics[metrics["policy"] == "bdsgd"]
    assert len(old) == 2 * ROWS  # every row, not only the evaluated ones
    assert old["staleness"].isna().all() and old["gradients"].isna().all()
    assert (metrics.loc[metrics["policy"] == "async", "staleness"] == 1.5).all()


# ----------------------------------------------------------------------------- styles
# Okabe & Ito's colour-blind-safe palette, and the grey of the fixed baselines
OKABE_ITO = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00",
             "#CC79A7", "#999999"}


def test_every_policy_and_mode_has_its_own_fixed_style():
    names = (*NAMES, *MODES)
    assert set(POLICY_COLOURS) == set(names)
    assert {POLICY_COLOURS[p] for p in NAMES} <= OKABE_ITO
    modes = [POLICY_COLOURS[m] for m in MODES]  # colours no cutoff policy has, nor a fallback
    assert not set(modes) & ({POLICY_COLOURS[p] for p in NAMES} | set(FALLBACK_COLOURS))
    assert set(POLICY_DASHES) <= set(names)
    styles = [tuple(policy_style(name).values()) for name in names]
    assert len(set(styles)) == len(names)  # no two alike in both colour and line style
    for name in names:
        assert policy_style(name) == {"color": POLICY_COLOURS[name],
                                      "ls": POLICY_DASHES.get(name, "-")}
    # explore-<p>: p's colour, dash-dotted (no listed policy is); a name not in the table: the
    # same fallback every time
    assert policy_style("explore-bdsgd") == {"color": POLICY_COLOURS["bdsgd"], "ls": "-."}
    assert "-." not in POLICY_DASHES.values()
    assert policy_colour("new-policy") in FALLBACK_COLOURS
    assert policy_colour("new-policy") == policy_colour("new-policy")
    # a family sharing a colour tells apart in bars too
    hatches = {common.bar_style(p)["hatch"] for p in ("bdsgd", "bdsgd-model", "bdsgd-paper",
                                                        "explore-bdsgd")}
    assert len(hatches) == 4
    # an ablation arm <p>+<variant>: p's colour, a dash pattern and hatch of its own
    arms = ["bdsgd", "bdsgd+progress", "bdsgd+lr-sqrt", "bdsgd+lr-none", "bdsgd-paper"]
    assert {policy_colour(a) for a in arms} == {POLICY_COLOURS["bdsgd"]}
    assert len({str(policy_style(a)["ls"]) for a in arms}) == len(arms)
    assert len({common.bar_style(a)["hatch"] for a in arms}) == len(arms)


@pytest.fixture(scope="module")
def drawn(results):
    """Every figure this module inspects, drawn and kept open: name -> figure."""
    figures = {}
    saved = []
    summary, metrics = render.load_runs(results)
    _, decisions = render.load_throughput(results)
    predictions = inputs.load_predictions(results)
    with pytest.MonkeyPatch.context() as patch:
        for module in (render, convergence):
            patch.setattr(module, "save_figure", lambda fig, path: saved.append(fig) or [path])
        for name, draw in (
                ("time_to_accuracy", lambda p: render.time_to_accuracy(metrics, summary, p)),
                ("loss_curves", lambda p: render.loss_curves(metrics, p)),
                ("training_cutoff", lambda p: render.training_cutoff(metrics, summary, p)),
                ("cutoff_over_time", lambda p: render.cutoff_over_time(decisions, p)),
                ("model_predictions", lambda p: render.model_predictions(results, p, predictions))):
            draw(Path(f"{name}.png"))
            figures[name] = saved[-1]
    yield figures
    for fig in figures.values():
        render.plt.close(fig)


def _labelled_lines(fig) -> dict[str, set]:
    drawn = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            if not line.get_label().startswith(("_", "target")):
                drawn.setdefault(line.get_label(), set()).add((line.get_color(), line.get_linestyle()))
    return drawn


def test_curves_draw_each_policy_in_its_style_with_one_legend_below(drawn):
    # matplotlib reports a dash pattern of its own (a variant's) as "--"
    expected = {p: {(policy_colour(p), ls if isinstance(ls := policy_style(p)["ls"], str) else "--")}
                for p in {run[0] for run in RUNS}}
    for name in ("time_to_accuracy", "loss_curves"):
        fig = drawn[name]
        assert _labelled_lines(fig) == expected, name
        # one legend, the figure's, outside the panels: one entry per policy (and the target)
        assert not any(ax.get_legend() for ax in fig.axes), name
        (legend,) = fig.legends
        labels = [t.get_text() for t in legend.get_texts()]
        assert set(expected) <= set(labels) and len(labels) == len(set(labels)), name
        for ax in fig.axes:
            assert ax.get_xlabel() and ax.get_ylabel(), (name, ax.get_title())


def test_time_to_accuracy_states_its_interval_and_unit(drawn):
    fig = drawn["time_to_accuracy"]
    curves, bars = fig.axes[0], fig.axes[1]
    assert curves.get_xlabel() == "virtual wall-clock time (s), log scale"
    assert curves.get_xscale() == "log"
    assert "band: min to max over seeds" in curves.get_title()
    # min to max of m seeds covers the median with probability 1 - 2^(1-m): 50% at bdsgd's 2,
    # 0% (a point) at explore-bdsgd's 1 beside sync's 3
    assert bars.get_title().endswith("distribution-free interval\nfor the median (min to max),\n"
                                     "covering it with probability >= 50% at 2 seeds")
    assert fig.axes[3].get_title().endswith("(min to max),\ncovering it with probability >= 0% "
                                            "at 1-3 seeds")
    assert bars.get_ylabel() == "virtual time to target (s)"


def test_loss_curves_count_iterations_from_0(drawn):
    it_ax = drawn["loss_curves"].axes[0]
    assert it_ax.get_xlabel().startswith("training iteration, from 0")
    assert min(line.get_xdata().min() for line in it_ax.get_lines()
               if not line.get_label().startswith("_")) == 0
    assert "rolling mean" in it_ax.get_ylabel()


def _panels(fig) -> dict[str, object]:
    """The shown panels of a small-multiples figure by title's first line."""
    return {ax.get_title().split("\n")[0]: ax for ax in fig.axes if ax.get_visible()}


def test_cutoff_over_time_one_panel_per_policy_of_integer_steps(drawn):
    panels = _panels(drawn["cutoff_over_time"])
    # the default rule only (no bdsgd/ratio), oracle and sync included
    assert set(panels) == {f"sim: {p}" for p in ("sync", "static", "bdsgd", "oracle",
                                                   "explore-bdsgd", "bdsgd-paper")}
    for title, ax in panels.items():
        (line,) = ax.get_lines()
        assert line.get_color() == policy_colour(title.split(": ")[1])
        assert line.get_drawstyle() == "steps-post"  # the integer cutoff, unsmoothed
        x, y = line.get_xdata(), line.get_ydata()
        assert list(x) == list(range(DECISIONS))  # iteration ids 500, 503, ... counted from 0
        assert np.array_equal(y, np.round(y)) and set(y) == set(range(1, N_WORKERS + 1))
        assert ax.get_ylim() == (0.5, N_WORKERS + 0.5)  # one range 1..n in every panel
        assert all(float(t).is_integer() for t in ax.get_yticks())
        # the fixture's cutoffs change every iteration, over 1..4
        assert ax.get_title().split("\n")[1] == "c 1-4, changes 100%"
    assert {ax.get_xlabel() for ax in panels.values()} >= {"replayed iteration, from 0"}
    assert {ax.get_ylabel() for ax in panels.values()} >= {"cutoff c"}


def test_training_cutoff_one_panel_per_policy_with_every_seed(drawn):
    panels = _panels(drawn["training_cutoff"])
    cutoff_policies = {p for p, _, _, _ in RUNS if p not in MODES}
    # the old runs without a trace (bdsgd) and those on sim; no training mode
    assert set(panels) == {"digits: bdsgd", "digits: bdsgd+progress", "digits: bdsgd+lr-none",
                           "digits: bdsgd-paper", "digits on sim: sync",
                           "digits on sim: explore-bdsgd"}
    assert {t.split(": ")[1] for t in panels} == cutoff_policies
    for title, ax in panels.items():
        policy = title.split(": ")[1]
        seeds = {s for p, s, _, _ in RUNS if p == policy}
        lines = ax.get_lines()
        assert {line.get_label() for line in lines} == {f"seed {s}" for s in seeds}
        assert {line.get_color() for line in lines} == {policy_colour(policy)}
        for line in lines:
            assert line.get_drawstyle() == "steps-post" and line.get_xdata()[0] == 0
        low, high = ax.get_ylim()
        assert low > 0 and high == N_WORKERS + 0.5  # fitted to the cutoffs, not from 0
    # bdsgd alternates 2, 3 in both seeds; sync waits for all 4
    assert panels["digits: bdsgd"].get_title().split("\n")[1] == "c 2-3, changes 100%"
    assert panels["digits on sim: sync"].get_title().split("\n")[1] == "c 4, changes 0%"


def test_model_predictions_show_the_orders_the_decision_reads(drawn):
    (ax,) = drawn["model_predictions"].axes
    labels = [line.get_label() for line in ax.get_lines()]
    # n = 4 workers: the orders n-2, n-1, n
    assert labels == [f"c = {name} = {c}: predicted E[x_(c)], band 90% interval"
                      for name, c in (("n-2", 2), ("n-1", 3), ("n", 4))]
    assert all(line.get_xdata()[0] == 0 for line in ax.get_lines())  # ids from 100: from 0
    assert ax.get_xlabel() == "replayed iteration, from 0" and ax.get_ylabel() == "run-time (s)"
    # realised inside the band but on every fourth iteration
    assert "75% inside the band" in ax.get_legend().get_texts()[1].get_text()


def test_shown_orders_and_unit_labels():
    assert render.shown_orders([1, 2, 3, 4, 5, 6, 7, 8]) == [6, 7, 8]
    assert render.shown_orders([2, 4]) == [2, 4]
    assert unit_label("s") == "s"
    # a unit that states a range its values may leave names no range
    assert unit_label("normalised 0-1000") == "normalised units"


# ----------------------------------------------------------------------------- answers
def test_answers_state_what_was_measured(results):
    summary, metrics = render.load_runs(results)
    _, decisions = render.load_throughput(results)
    predictions = inputs.load_predictions(results)
    # bdsgd's seeds reach 0.5 at iteration 15 at 1.0 and 1.1 s an iteration: median 15.75;
    # sync's at the evaluations of iterations 20, 25, 25 at 1.5, 1.6, 1.7 s: 30, 40, 42.5 s;
    # explore-bdsgd's one seed at 25 s; async's second seed never does; bdsgd+progress's at
    # iterations 10 and 15 at 1.0 and 1.1 s: median 13.25
    verdicts = verdict_table(summary, decisions)
    assert render.time_to_accuracy_answer(metrics, summary, verdicts) == (
        "On digits, the median time to target over 2 seeds: bdsgd 15.8 s, bdsgd-paper 21 s. "
        "bdsgd against bdsgd-paper: too few seeds (ratio 0.75, 95% interval 0.75 to 0.75, 2 "
        "seeds). On digits on sim, the median time to target over 3 seeds: sync 40 s.")
    assert render.cutoff_over_time_answer(decisions) == (
        "On sim, bdsgd changes its cutoff on 100% of iterations and ranges 1-4 (mean 2.5); "
        "bdsgd-paper changes its cutoff on 100% of iterations and ranges 1-4 (mean 2.5); "
        "oracle changes its cutoff on 100% of iterations and ranges 1-4 (mean 2.5) of n = 4.")
    assert render.training_cutoff_answer(metrics) == (
        "During training on digits, bdsgd's cutoff ranges 2-3 (mean 2.5) and changes on 100% "
        "of iterations (mean over 2 seeds); bdsgd-paper's cutoff ranges 2-3 (mean 2.5) and "
        "changes on 100% of iterations (mean over 2 seeds).")
    assert render.model_predictions_answer(predictions) == (
        "On sim, the realised x_(c) fell inside the 90% prediction interval on 75% of held-out "
        "iterations for c = 2..4 (c = 2: 75%, c = 3: 75%, c = 4: 75%).")


def test_cutoff_changes_by_hand():
    assert convergence.cutoff_changes(np.array([8, 8, 7, 7, 8])) == {
        "changes": 0.5, "low": 7, "high": 8, "mean": 7.6}
    assert convergence.cutoff_changes(np.array([5]))["changes"] == 0.0


# ----------------------------------------------------------------------------- units, note
def test_virtual_time_unit_follows_the_clock(tmp_path):
    """Under clock scaled the virtual time is seconds; under recorded it is the trace's unit."""
    result = tmp_path / "result.json"
    for clock, meta, unit in (("scaled", {"time_unit": "normalised 0-1000"}, "s"),
                              ("recorded", {"time_unit": "normalised 0-1000"}, "normalised 0-1000"),
                              ("recorded", {}, "s")):
        result.write_text(json.dumps({"clock": {"clock": clock}, "trace_meta": meta}))
        assert inputs.virtual_time_unit(result) == unit
    result.write_text(json.dumps({"summary": {}}))  # a run without a clock record: recorded
    assert inputs.virtual_time_unit(result) == "s"


def test_replayed_step_counts_from_0():
    ids = pd.Series([1510, 1501, 1520, 1501, 1510])
    assert inputs.replayed_step(ids).tolist() == [1, 0, 2, 0, 1]


def test_figure_note_is_read_from_the_results_and_printed_under_every_figure(results, tmp_path,
                                                                             monkeypatch):
    assert inputs.load_note(results) is None  # no config.yaml: no note
    (tmp_path / "config.yaml").write_text("experiment: x\nfigure_note: smoke scale\n")
    assert inputs.load_note(tmp_path) == "smoke scale"
    (tmp_path / "config.yaml").write_text("experiment: x\nfigure_note: 3\n")
    with pytest.raises(UserError, match="figure_note"):
        inputs.load_note(tmp_path)
    # render_all draws every figure inside the note's block
    (tmp_path / "config.yaml").write_text("figure_note: smoke scale\n")
    seen = []
    monkeypatch.setattr(render, "_render_all", lambda *_: seen.append(plotting._NOTE.get()))
    render_all(tmp_path, tmp_path / "out")
    assert seen == ["smoke scale"]
    # a figure saved in the block has the note over it; outside, none
    for note, texts in (("smoke scale", ["smoke scale"]), (None, [])):
        fig, ax = render.plt.subplots()
        ax.plot([0, 1])
        with figure_note(note):
            save_figure(fig, tmp_path / "f.png")
        assert [t.get_text() for t in fig.texts] == texts
        assert (tmp_path / "f.pdf").is_file()


# ----------------------------------------------------------------------------- intervals
def test_median_interval_by_hand():
    # fewer than six seeds: min to max, with its coverage of the median 1 - 2^(1 - m)
    assert median_interval([30.0, 10.0]) == (20.0, 10.0, 30.0, 0.5)
    assert median_interval([10.0, 40.0, 20.0]) == (20.0, 10.0, 40.0, 0.75)
    assert median_interval([5.0, 1.0, 4.0, 2.0, 3.0]) == (3.0, 1.0, 5.0, 0.9375)
    assert all(np.isnan(median_interval([])))
    # a seed that never reached the target sorts last
    assert median_interval([10.0, np.inf, 20.0]) == (20.0, 10.0, np.inf, 0.75)


def test_median_interval_narrows_to_the_order_statistics_that_cover_95_percent():
    """20 seeds: [x_(6), x_(15)] covers the median with P(6 <= Bin(20, 1/2) <= 14) = 0.9586;
    [x_(7), x_(14)] would cover only 0.8847."""
    median, low, high, coverage = median_interval(np.arange(1.0, 21.0))
    assert (median, low, high) == (10.5, 6.0, 15.0)
    assert coverage == pytest.approx(0.958611, abs=1e-6)


def test_block_bootstrap_interval_covers_what_the_pairing_shares():
    """Two replays of the same iterations: a statistic of both, its interval from blocks drawn
    alike for both. The same series gives exactly 1; one whose every deviation is twice the
    other's, a tight interval at 2 (the shared spread cancels); independent ones twice as
    variable, a wider one around 2 that still excludes 1; fewer than two blocks, none."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(0.0, 1.0, (2, 400))
    def cv_ratio(a, b):
        return (a.std() / a.mean()) / (b.std() / b.mean())
    assert block_bootstrap_interval(cv_ratio, 10 + x, 10 + x) == (1.0, 1.0)
    low, high = block_bootstrap_interval(cv_ratio, 10 + 2 * x, 10 + x)
    assert 1.95 < low < 2.0 < high < 2.05
    low, high = block_bootstrap_interval(cv_ratio, 10 + 2 * x, 10 + y)
    assert 1.5 < low < 2.0 < high < 2.5 and high - low > 0.2
    assert all(np.isnan(block_bootstrap_interval(cv_ratio, x[:1], x[:1])))
    # seeded: a result repeats
    assert block_bootstrap_interval(cv_ratio, x, x[::-1]) == block_bootstrap_interval(
        cv_ratio, x, x[::-1])


def test_time_to_target_stats_count_seeds_that_reached():
    summary = pd.DataFrame({"task": "t", "trace": "sim", "policy": ["a", "a", "a", "b", "b"],
                            "seed": [0, 1, 2, 0, 1],
                            "time_to_target_s": [10.0, None, 30.0, None, None]})
    stats = time_to_target_stats(summary).set_index("policy")
    # the seed that never reached counts as infinitely slow
    assert stats.loc["a", ["seeds", "reached", "median", "low", "high"]].tolist() == \
        [3, 2, 30.0, 10.0, np.inf]
    assert stats.loc["b", ["seeds", "reached"]].tolist() == [2, 0]
    assert np.isinf(stats.loc["b", "median"])


# ----------------------------------------------------------------------------- distributed
def test_distributed_replay_waits_for_the_recorded_cutoff(results):
    """The virtual iteration (the server's replay, here ``replay_cutoffs``) is the c-th smallest
    recorded run-time (the censored worker's lower bound never counts); the real one is that plus
    the server's overhead."""
    [job] = load_distributed(results)
    replay = replay_job(job)
    tau = np.sort(_dist_runtimes(), axis=1)[:, DIST_CUTOFF - 1]
    np.testing.assert_allclose(replay["virtual_s"], tau)
    np.testing.assert_allclose(replay["real_s"], tau + OVERHEAD_S)
    found = agreement(replay)
    assert found["total_ratio"] == pytest.approx(tau.sum() / (tau + OVERHEAD_S).sum())
    assert found["median_error"] == pytest.approx(np.median(OVERHEAD_S / (tau + OVERHEAD_S)))
    # the job's own replay: its policy waited for all workers, the censored ones at their lower
    # bound (the real cutoff time), in its first REPLAY_SYNC iterations
    assert found["same_cutoff"] == pytest.approx(1 - REPLAY_SYNC / ROWS)
    np.testing.assert_allclose(replay["replay_s"][:REPLAY_SYNC], tau[:REPLAY_SYNC])


def test_distributed_replay_answer_states_the_measured_agreement():
    replay = pd.DataFrame({"iteration": [1, 2, 3, 4], "cutoff": 2, "real_s": [1.0, 1.0, 1.0, 1.0],
                           "virtual_s": [0.9, 1.1, 0.8, 1.0], "replay_cutoff": 2, "replay_s": 1.0})
    answer = distributed_replay_answer({"a": replay})
    # total 3.8 / 4; |error| 0.1, 0.1, 0.2, 0: median 10 %, 90th percentile 17 %
    assert "0.95 (a)" in answer and "10 % (a)" in answer and "17 % (a)" in answer
    assert "cutoff in 100 % (a) of the iterations" in answer
    both = distributed_replay_answer({"a": replay, "b": replay.assign(virtual_s=2.0,
                                                                      replay_cutoff=[2, 2, 3, 2])})
    assert "0.95 (a), 2.00 (b)" in both
    assert "cutoff in 100 % (a), 75 % (b) of the iterations" in both
    assert distributed_replay_answer({}).startswith("No distributed job")


def test_distributed_replay_draws_real_and_virtual_per_job(results, tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(distributed, "save_figure", lambda fig, path: figures.append(fig) or [path])
    distributed.distributed_replay(load_distributed(results), tmp_path / "d.png", policy_style)
    [fig] = figures
    time_ax, cut_ax, total_ax = fig.axes
    for ax in fig.axes:
        assert ax.get_xlabel() == "iteration, from 0" and ax.get_ylabel()
        assert all(len(line.get_xdata()) == ROWS for line in ax.get_lines())
    own = "virtual clock, policy replayed"
    for ax, labels in ((time_ax, ["real run", "virtual clock"]), (cut_ax, ["real run", own]),
                       (total_ax, ["real run", "virtual clock", own])):
        assert [line.get_label() for line in ax.get_lines()] == labels
        assert ax.get_lines()[0].get_color() == policy_colour("static")
    assert "(s)" in time_ax.get_ylabel() and "(s)" in total_ax.get_ylabel()
    assert set(cut_ax.get_lines()[0].get_ydata()) == {DIST_CUTOFF}
    assert set(cut_ax.get_lines()[1].get_ydata()) == {DIST_CUTOFF, DIST_WORKERS}
    render.plt.close(fig)


def test_distributed_replay_without_jobs_says_so(tmp_path):
    written = distributed.distributed_replay([], tmp_path / "d.png", policy_style)
    assert [p.name for p in written] == ["d.png", "d.pdf"]
    assert all(p.stat().st_size > 0 for p in written)


@pytest.mark.parametrize("damage, file, field", [
    (lambda job: write_json(job / "result.json", {"job": {"policy": "static", "late": 3,
                                                          "workers": DIST_WORKERS}}),
     "result.json", "job.late"),
    (lambda job: pd.read_parquet(job / "result.metrics.parquet").head(3).to_parquet(
        job / "result.metrics.parquet"), "result.trace.parquet", "-"),
    (lambda job: (job / "result.trace.parquet").write_text("no parquet"),
     "result.trace.parquet", "-"),
    (lambda job: pd.read_parquet(job / "result.replay.parquet").assign(replay_cutoff=0).to_parquet(
        job / "result.replay.parquet"), "result.replay.parquet", "replay_cutoff"),
    (lambda job: (job / "result.replay.parquet").unlink(), "result.replay.parquet", "-"),
])
def test_a_damaged_distributed_job_stops_render_all(results, tmp_path, damage, file, field):
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    damage(copy / "distributed/straggler")
    with pytest.raises(UserError) as err:
        render_all(copy, tmp_path / "out")
    assert err.value.file == str(copy / "distributed/straggler" / file)
    assert err.value.field == field
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_block_ratio_interval_by_hand():
    """Two blocks of two iterations: ratios (4/2)/(4/2) = 1 and (1/4)/(4/2) = 0.125, sd 0.6187;
    centred on the whole replay's (5/6)/(8/4) = 0.4167, not on their mean 0.5625; t(1, 0.975) =
    12.706, so 0.4167 -+ 12.706 x 0.6187 / sqrt(2) = 0.4167 -+ 5.5589."""
    low, high = block_ratio_interval([2, 2, 1, 0], [1, 1, 2, 2], [2, 2, 2, 2], [1, 1, 1, 1],
                                     blocks=2)
    assert (low, high) == pytest.approx((5 / 12 - 5.55893, 5 / 12 + 5.55893), abs=1e-4)
    same = block_ratio_interval([2, 3] * 20, [1.0, 2.0] * 20, [2, 3] * 20, [1.0, 2.0] * 20)
    assert same == pytest.approx((1.0, 1.0))
    assert all(np.isnan(block_ratio_interval([2], [1.0], [2], [1.0])))


# ----------------------------------------------------------------------------- the replay's
def _drawn(results, monkeypatch, draw) -> list:
    """The figures ``draw(table, decisions, periods, overhead)`` makes, not saved."""
    figures = []
    for module in (replay, over_time):
        monkeypatch.setattr(module, "save_figure", lambda fig, path: figures.append(fig) or [path])
    table, decisions = render.load_throughput(results)
    draw(table, decisions, load_period_sweep(results), load_overhead(results))
    return figures


def _labelled(ax) -> bool:
    return bool(ax.get_xlabel() or ax.get_ylabel()) and bool(ax.get_title())


def test_throughput_dots_on_a_fitted_axis_with_values_and_intervals(results, monkeypatch, tmp_path):
    [fig] = _drawn(results, monkeypatch,
                   lambda t, d, p, o: replay.throughput_bars(t, d, tmp_path / "b.png"))
    ax = fig.axes[0]
    bars = [line for line in ax.get_lines() if len(line.get_xdata()) == 1
            and line.get_marker() in common.MARKERS.values()]
    # sync, static, bdsgd under each rule, explore-bdsgd, bdsgd-paper, the oracle's plan
    assert len(bars) == 7
    table, _ = render.load_throughput(results)
    rows = replay.throughput_intervals(table, render.load_throughput(results)[1])
    lowest = np.nanmin(rows[["relative_to_oracle", "low", "high"]].to_numpy())
    assert ax.get_ylim()[0] == pytest.approx(max(0, lowest - 0.02))  # fitted, and stated
    assert f"axis from {max(0, lowest - 0.02):.2f}" in ax.get_title()
    assert ax.get_ylabel() == "throughput / hindsight oracle"
    values = sorted(float(t.get_text()) for t in ax.texts)
    shown = table[table["policy"] != "async"]["relative_to_oracle"]
    assert values == sorted(round(v, 3) for v in shown)
    assert sum(len(line.get_xdata()) == 2 for line in ax.get_lines()) >= len(bars)  # whiskers
    render.plt.close(fig)


def test_throughput_over_time_a_panel_per_policy(results, monkeypatch, tmp_path):
    [fig] = _drawn(results, monkeypatch, lambda t, d, p, o: over_time.throughput_over_time(
        d, {"sim": "s"}, tmp_path / "o.png"))
    panels = [ax for ax in fig.axes if ax.axison]
    # sync, static, bdsgd, oracle, explore-bdsgd, bdsgd-paper (default rule)
    assert len(panels) == 6
    assert all(_labelled(ax) for ax in panels)
    assert "accepted gradients / s" in panels[0].get_ylabel()
    for ax in panels:
        policy = ax.get_title().split(": ")[1].split("\n")[0]
        assert ax.get_lines()[1].get_color() == policy_colour(policy)
    render.plt.close(fig)


def test_worker_time_and_its_answer(results, monkeypatch, tmp_path):
    [fig] = _drawn(results, monkeypatch,
                   lambda t, d, p, o: replay.worker_time(t, tmp_path / "w.png"))
    ax = fig.axes[0]
    assert _labelled(ax) and len(ax.get_yticklabels()) == 7  # the oracle too
    assert any("idle 30.0%" in t.get_text() for t in ax.texts)  # sync: idle 0.3
    table, _ = render.load_throughput(results)
    answer = replay.worker_time_answer(table)
    assert "30.0% of their time under sync" in answer and "under oracle" in answer
    assert "6.0% of their time under bdsgd-paper (computing dropped gradients 12.0%)" in answer
    render.plt.close(fig)


def test_period_sweep_lines_and_the_fixed_reference(results, monkeypatch, tmp_path):
    [fig] = _drawn(results, monkeypatch,
                   lambda t, d, p, o: replay.period_sweep(p, tmp_path / "p.png"))
    ax = fig.axes[0]
    labels = {line.get_label(): line for line in ax.get_lines()}
    assert set(labels) == {"bdsgd", "bdsgd-paper", "oracle-fixed (c = 3)"}
    assert list(labels["bdsgd"].get_xdata()) == [1, 10] and _labelled(ax)
    answer = replay.period_sweep_answer(load_period_sweep(results))
    assert "bdsgd goes from 0.969 deciding every 1 iteration(s) (ahead against the fixed cutoff: " \
           "ratio 1.02, 95% interval 1.01 to 1.03) to 0.960 deciding every 10 iteration(s) " \
           "(too few iterations against the fixed cutoff" in answer
    assert "best fixed cutoff in hindsight reaches 0.950" in answer
    render.plt.close(fig)


def test_decision_overhead_against_the_iteration(results, monkeypatch, tmp_path):
    [fig] = _drawn(results, monkeypatch, lambda t, d, p, o: replay.decision_overhead(
        o, tmp_path / "d.png"))
    ax = fig.axes[0]
    dots = [line for line in ax.get_lines() if line.get_marker() == "o"]
    assert len(dots) == 6 and ax.get_yscale() == "log" and _labelled(ax)
    # sync's median: 0.01 ms of a 1.5 s iteration, in its colour
    [sync] = [d for d in dots if d.get_label() == "sync"]
    assert sync.get_color() == policy_colour("sync")
    assert sync.get_ydata()[0] == pytest.approx(0.01e-3 / 1.5)
    overhead = load_overhead(results)
    # the slowest decision's, and each BDSGD's, against its own iteration
    assert replay.decision_overhead_answer(overhead) == (
        "On sim (n = 4), a decision: bdsgd's takes 0.03 ms at the median and 0.09 ms at the "
        "99th percentile: 0.00% and 0.01% of its 1.5 s iteration; bdsgd-paper's (the slowest) "
        "takes 0.07 ms at the median and 0.21 ms at the 99th percentile: 0.00% and 0.01% of its "
        "1.5 s iteration.")
    # a replay without seconds (a normalised trace, no gradient time) is not drawn
    assert replay.iteration_seconds(overhead).tolist() == pytest.approx([1.5] * len(overhead))
    assert replay.iteration_seconds(overhead.assign(in_seconds=False)).isna().all()
    render.plt.close(fig)


def test_throughput_answers_state_the_fixture(results):
    table, decisions = render.load_throughput(results)
    answer = replay.throughput_answer(table, decisions, verdict_table(pd.DataFrame(
        columns=["task", "trace", "policy", "seed", "time_to_target_s"]), decisions))
    assert answer.startswith("On sim, bdsgd/rate reaches 0.700")
    assert "bdsgd against sync: too few iterations (ratio 1, 95% interval 0.649 to 1.35" in answer
    said = over_time.throughput_over_time_answer(decisions)
    cv = over_time.variability(decisions).set_index("policy")
    assert f"{cv.loc['bdsgd', 'rate_cv']:.2f} under bdsgd" in said


def test_throughput_summary_appends_the_replay_measures(rendered):
    table = pd.read_csv(rendered[0] / "throughput_summary.csv")
    assert list(table.columns) == THROUGHPUT_COLUMNS
    assert THROUGHPUT_COLUMNS[:7] == ["trace", "policy", "rule", "gradients_per_s",
                                      "relative_to_oracle", "mean_cutoff", "cutoff_std"]
    assert table.set_index("policy").loc["sync", "idle_fraction"] == 0.3
    assert not any(c.startswith("decision_ms") for c in table.columns)  # wall-clock: kept out


def test_every_answer_that_states_bdsgd_states_the_papers_beside_it(rendered):
    """Teng & Wood's BDSGD beside ours: every section of answers.rst that names bdsgd (the
    policy, not bdsgd-model or a variant) names bdsgd-paper too."""
    out, _ = rendered
    text = (out / "answers.rst").read_text()
    sections = dict(re.findall(r"\.\. answer (\S+) --\n(.*?)\n\.\. end", text, re.S))
    naming = [k for k, said in sections.items() if re.search(r"\bbdsgd\b(?![-+])", said)]
    assert {"time_to_accuracy", "throughput", "cutoff_over_time", "training_cutoff",
            "throughput_over_time", "worker_time", "period_sweep", "ablations",
            "comm_sweep", "decision_overhead"} <= set(naming)
    assert [k for k in naming if "bdsgd-paper" not in sections[k]] == []


def test_the_reviewers_table_keeps_wall_clock_answers_in_the_captions(rendered):
    """reviewers.csv repeats byte for byte between runs: the decision overhead, wall-clock,
    is stated in answers.rst (its caption) only; the replay's other answers are in both."""
    out, _ = rendered
    table = pd.read_csv(out / "reviewers.csv").set_index("question")
    assert table.loc["decision_overhead", "answer"].startswith("wall-clock")
    assert "ms at the median" in (out / "answers.rst").read_text()
    assert table.loc["idle_time", "figure"] == "worker_time"
    assert "of their time under sync" in table.loc["idle_time", "answer"]
    assert "best fixed cutoff in hindsight" in table.loc["fixed_cutoff", "answer"]
