"""bdsgd figures on a small hand-made results folder: every file in every format, one fixed colour
per policy, the time-to-target interval, old runs without staleness, byte-identical tables."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bdsgd.clock import replay_cutoffs
from bdsgd.errors import UserError
from bdsgd.figures import (
    FALLBACK_COLOURS,
    FIGURES,
    POLICY_COLOURS,
    distributed,
    figure_files,
    render,
)
from bdsgd.figures.distributed import agreement, distributed_replay_answer, replay_job
from bdsgd.figures.inputs import load_distributed
from bdsgd.figures.render import SUMMARY_COLUMNS, policy_colour, policy_style, render_all
from bdsgd.figures.stats import median_interval, time_to_target_stats
from bdsgd.io import write_json
from bdsgd.policies import NAMES
from bdsgd.schedules import MODES
from bdsgd.traces.io import write_trace
from bdsgd.traces.schema import from_arrays

REPO = Path(__file__).resolve().parents[1]
N_WORKERS, ROWS, EVAL_EVERY, TARGET = 4, 30, 5, 0.5
# (policy, seed, iteration at which the run reaches the target or None, staleness columns?)
RUNS = [("sync", s, 20 + 2 * s, True) for s in range(3)] + \
       [("async", s, [10, None][s], True) for s in range(2)] + \
       [("bdsgd", s, 15, False) for s in range(2)] + [("explore-bdsgd", 0, 25, True)]


def _metrics(policy: str, seed: int, reach: int | None, new_style: bool) -> pd.DataFrame:
    """One run's metrics.parquet: accuracy climbs to 0.6 at ``reach`` (never: stays at 0.4)."""
    it = np.arange(1, ROWS + 1)
    step = 1.0 + 0.1 * seed + (0.5 if policy == "sync" else 0.0)
    acc = np.where(it >= reach, 0.6, 0.4) if reach else np.full(ROWS, 0.4)
    evaluated = (it % EVAL_EVERY == 0) | (it == ROWS)
    cutoff = np.full(ROWS, N_WORKERS) if policy == "sync" else 2 + it % 2
    df = pd.DataFrame({
        "iteration": it, "virtual_time_s": step * it, "cutoff": cutoff,
        "iteration_time_s": np.full(ROWS, step), "lr": np.full(ROWS, 0.1),
        "train_loss": 2.0 / np.sqrt(it) + 0.01 * seed, "test_accuracy": np.where(evaluated, acc, np.nan),
        "test_loss": np.where(evaluated, 1.0 - acc, np.nan)})
    if new_style:
        df["gradients"] = N_WORKERS if policy == "async" else cutoff
        df["staleness"] = 1.5 if policy == "async" else 0.0
    return df


def _write_run(results: Path, policy: str, seed: int, reach: int | None, new_style: bool):
    # an old results folder: runs/<task>/..., without a trace
    run = results / f"runs/{'sim/' if new_style else ''}digits/{policy}/seed{seed}"
    run.mkdir(parents=True)
    metrics = _metrics(policy, seed, reach, new_style)
    metrics.to_parquet(run / "metrics.parquet", index=False)
    hit = metrics["virtual_time_s"][metrics["test_accuracy"] >= TARGET]
    summary = {"task": "digits", "policy": policy, "seed": seed, "target_accuracy": TARGET,
               "time_to_target_s": float(hit.iloc[0]) if len(hit) else None,
               "final_accuracy": float(metrics["test_accuracy"].iloc[-1]),
               "final_test_loss": float(metrics["test_loss"].iloc[-1]),
               "gradients_per_s": 3.0, "mean_cutoff": float(metrics["cutoff"].mean()),
               "iterations": ROWS, "virtual_time_s": float(metrics["virtual_time_s"].iloc[-1]),
               "n_workers": N_WORKERS, **({"trace": "sim"} if new_style else {})}
    if policy in MODES:
        summary |= {"mean_staleness": 1.5, "max_staleness": 3, "staleness_p50": 1.0,
                    "staleness_p90": 3.0}
    (run / "result.json").write_text(json.dumps({"summary": summary}))


# a distributed job: DIST_WORKERS workers, worker 2 five times slower, cutoff DIST_CUTOFF; its
# server spends OVERHEAD_S per iteration beyond the cutoff time (what the virtual clock leaves out);
# its replayed policy waits for all workers in the first REPLAY_SYNC iterations
DIST_WORKERS, DIST_CUTOFF, OVERHEAD_S, REPLAY_SYNC = 3, 2, 0.002, 3


def _dist_runtimes() -> np.ndarray:
    x = np.random.default_rng(1).uniform(0.02, 0.03, size=(ROWS, DIST_WORKERS))
    x[:, 2] *= 5
    return x


def _write_distributed(results: Path) -> None:
    """A distributed job's files as ``bdsgd.distributed.ps`` writes them: result.json, metrics,
    the recorded trace (the worker the cutoff cut censored at the cutoff time) and its replay."""
    job = results / "distributed/straggler"
    job.mkdir(parents=True)
    x = _dist_runtimes()
    tau = np.sort(x, axis=1)[:, DIST_CUTOFF - 1]
    cut = x > tau[:, None]
    recorded = np.where(cut, tau[:, None], x)
    own = np.where(np.arange(ROWS) < REPLAY_SYNC, DIST_WORKERS, DIST_CUTOFF)
    comm = np.zeros(DIST_WORKERS)
    pd.DataFrame({"iteration": np.arange(1, ROWS + 1),
                  "virtual_s": replay_cutoffs(recorded, np.full(ROWS, DIST_CUTOFF), comm),
                  "replay_cutoff": own, "replay_s": replay_cutoffs(recorded, own, comm)}
                 ).to_parquet(job / "result.replay.parquet", index=False)
    write_trace(from_arrays(recorded, {
        "source": "distributed", "policy": "static", "late": "abandon", "time_unit": "s",
        "workers": DIST_WORKERS}, censored=cut), job / "result.trace.parquet")
    it = np.arange(1, ROWS + 1)
    pd.DataFrame({"iteration": it, "wall_time_s": np.cumsum(tau + OVERHEAD_S),
                  "cutoff": DIST_CUTOFF, "iteration_time_s": tau, "lr": 0.1,
                  "train_loss": 1.0 / it, "live_workers": DIST_WORKERS, "stale": 0,
                  "decision_s": 1e-5, "test_accuracy": np.where(it % 10 == 0, 0.5, np.nan)}
                 ).to_parquet(job / "result.metrics.parquet", index=False)
    write_json(job / "result.json", {
        "policy": "static", "late": "abandon", "workers": DIST_WORKERS, "iterations": ROWS,
        "job": {"policy": "static", "late": "abandon", "workers": DIST_WORKERS,
                "iterations": ROWS, "task": "digits", "seed": 0}})


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """A results folder as the DAG lays it out: one trace, its throughput replay and model
    predictions, the convergence runs of RUNS and one distributed job."""
    results = tmp_path_factory.mktemp("figures") / "results"
    rng = np.random.default_rng(0)
    for sub in ("traces/sim", "throughput/sim", "models/sim"):
        (results / sub).mkdir(parents=True)
    pd.DataFrame({"runtime_s": rng.lognormal(size=200)}).to_parquet(
        results / "traces/sim/trace.parquet")
    policies = {"sync": None, "static": None, "bdsgd": "rate", "bdsgd/ratio": "ratio",
                "oracle": None, "explore-bdsgd": "rate"}
    (results / "throughput/sim/throughput.json").write_text(json.dumps({"policies": {
        name: {"rule": rule, "gradients_per_s": 3.0, "relative_to_oracle": 0.9 - 0.1 * i,
               "mean_cutoff": 3.0, "cutoff_std": 0.5}
        for i, (name, rule) in enumerate(policies.items())}}))
    pd.DataFrame([{"policy": p, "iteration": t, "cutoff": 1 + (t + i) % N_WORKERS}
                  for i, p in enumerate(policies) for t in range(40)]).to_parquet(
        results / "throughput/sim/decisions.parquet")
    pd.DataFrame([{"ratio": ratio, "topology": topology, "policy": p, "gradients_per_s": 3.0,
                   "relative_to_oracle": 0.9, "relative_to_sync": 1.1 - ratio / 10,
                   "mean_cutoff": 3.0}
                  for ratio in (0.1, 1.0) for topology in ("ps", "sharded", "ring")
                  for p in ("sync", "bdsgd", "oracle")]).to_csv(
        results / "throughput/sim/comm_sweep.csv", index=False)
    pd.DataFrame([{"order": c, "iteration": t, "predicted_mean": 1.0 + c, "lo90": 0.5 + c,
                   "hi90": 1.5 + c, "realised": 1.0 + c + 0.1 * t % 1}
                  for c in (2, 4) for t in range(20)]).to_parquet(
        results / "models/sim/predictions.parquet")
    for run in RUNS:
        _write_run(results, *run)
    _write_distributed(results)
    return results


def expected_files() -> set[str]:
    return {out for file, _, _ in FIGURES.values() for out in figure_files(file)}


@pytest.fixture(scope="module")
def rendered(results, tmp_path_factory) -> tuple[Path, list[Path]]:
    """Every figure and table of ``results``, rendered once: (the folder, the files written)."""
    out = tmp_path_factory.mktemp("rendered")
    return out, render_all(results, out)


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
        assert file.endswith((".csv", ".png")), name


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


# ----------------------------------------------------------------------------- colours
def test_every_policy_and_mode_has_its_own_fixed_colour():
    names = (*NAMES, *MODES)
    assert set(POLICY_COLOURS) == set(names)
    assert len(set(POLICY_COLOURS.values())) == len(POLICY_COLOURS)  # no two alike
    for name in names:
        assert policy_style(name) == {"color": POLICY_COLOURS[name], "ls": "-"}
    # explore-<p>: p's colour, dashed; a name not in the table: the same fallback every time
    assert policy_style("explore-bdsgd") == {"color": POLICY_COLOURS["bdsgd"], "ls": "--"}
    assert policy_colour("new-policy") in FALLBACK_COLOURS
    assert policy_colour("new-policy") == policy_colour("new-policy")


def test_figures_draw_each_policy_in_its_colour(results, tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(render, "save_figure", lambda fig, path: figures.append(fig) or [path])
    summary, metrics = render.load_runs(results)
    render.time_to_accuracy(metrics, summary, tmp_path / "t.png")
    render.loss_curves(metrics, tmp_path / "l.png")
    render.training_cutoff(metrics, summary, tmp_path / "c.png")
    drawn = {}
    for fig in figures:
        for ax in fig.axes:
            for line in ax.get_lines():
                if not line.get_label().startswith(("_", "target")):
                    drawn.setdefault(line.get_label(), set()).add(line.get_color())
    assert drawn == {p: {policy_colour(p)} for p in ("sync", "async", "bdsgd", "explore-bdsgd")}
    # the cutoff figure has the cutoff policies only
    cutoff_labels = {line.get_label() for line in figures[2].axes[0].get_lines()}
    assert not cutoff_labels & set(MODES)
    for fig in figures:
        render.plt.close(fig)


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
        assert ax.get_xlabel() == "iteration" and ax.get_ylabel()
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
