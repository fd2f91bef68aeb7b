"""The replay ablations: a trace censored as a server with backup workers records it, a run-time
model trained with either way of scoring censored run-times, replays under either late mode,
the policy's own forecasts in the decisions, and the figures and answers drawn from them."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from bdsgd.cli import main
from bdsgd.figures import replay_ablations
from bdsgd.figures.inputs import load_replay_ablations
from bdsgd.figures.render import policy_style
from bdsgd.traces.io import read_trace, write_trace
from bdsgd.traces.schema import from_arrays
from tests.helpers import REPO


def test_cut_at_censors_the_slowest_at_the_cutoff_time():
    x = np.array([[3.0, 1.0, 2.0, 4.0], [1.0, 1.0, 5.0, 0.5]])
    cut = from_arrays(x).cut_at(2)
    assert cut.censored.tolist() == [[True, False, False, True], [False, True, True, False]]
    # a censored run-time is the cutoff time x_(2), a lower bound of the true one
    assert cut.runtimes.tolist() == [[2.0, 1.0, 2.0, 2.0], [1.0, 1.0, 1.0, 0.5]]
    with pytest.raises(Exception, match="cut at least one"):
        from_arrays(x).cut_at(4)


def test_traces_censor_takes_backups_as_static_does(tmp_path, capsys):
    rng = np.random.default_rng(0)
    src = write_trace(from_arrays(rng.lognormal(size=(30, 10))), tmp_path / "t.parquet")
    for backups, cut in (("2", 2), ("0.05", 1)):  # a count; a fraction, at least one
        out = tmp_path / f"c{backups}.parquet"
        assert main(["traces", "censor", str(src), "--backups", backups, "--out", str(out)]) == 0
        assert (read_trace(out).censored.sum(axis=1) == cut).all()
    # no backup: nothing to censor
    assert main(["traces", "censor", str(src), "--backups", "0", "--out",
                 str(tmp_path / "x.parquet")]) == 2
    assert "--backups" in capsys.readouterr().err and not (tmp_path / "x.parquet").exists()


def test_replays_record_the_policys_forecast_under_either_late_mode(tmp_path):
    """A model trained on the censored part in a few steps, replayed under abandon and finish:
    the decisions hold the policy's forecast of its cutoff time and the realised one."""
    rng = np.random.default_rng(1)
    x = rng.lognormal(0, 0.3, (60, 4)) * np.where(rng.random((60, 4)) < 0.15, 4, 1)
    trace = write_trace(from_arrays(x[:30]), tmp_path / "train.parquet")
    test = write_trace(from_arrays(x[30:]), tmp_path / "test.parquet")
    censored = tmp_path / "train-censored.parquet"
    assert main(["traces", "censor", str(trace), "--backups", "1", "--out", str(censored)]) == 0
    model = tmp_path / "impute.pt"
    assert main(["model", "train", str(censored), "--out", str(model), "--epochs", "1",
                 "--quiet", "--censoring", "impute"]) == 0
    for late in ("abandon", "finish"):
        out = tmp_path / f"late-{late}"
        assert main(["throughput", str(test), "--policies", "bdsgd-model,explore-bdsgd-model,sync",
                     "--model", str(model), "--history", str(trace), "--late", late,
                     "--json", f"{out}.json", "--decisions", f"{out}.parquet"]) == 0
        assert json.loads(out.with_suffix(".json").read_text())["trace"]["late"] == late
        d = pd.read_parquet(f"{out}.parquet")
        model_rows, sync_rows = d[d["policy"] == "bdsgd-model"], d[d["policy"] == "sync"]
        assert model_rows["forecast_s"].notna().all() and sync_rows["forecast_s"].isna().all()
        realised = np.sort(x[30:], axis=1)[np.arange(30), model_rows["cutoff"].to_numpy() - 1]
        assert np.allclose(model_rows["realised_s"], realised)


def _arm(results, trace, file, policies, bias, rate):
    """One ablation arm's files: every policy forecasting exp(bias) times the realised time."""
    (results / "throughput" / trace).mkdir(parents=True, exist_ok=True)
    table = {p: {"relative_to_oracle": rate, "mean_cutoff": 7.0} for p in policies}
    (results / "throughput" / trace / f"{file}.json").write_text(json.dumps({"policies": table}))
    realised = np.linspace(1, 2, 20)
    pd.DataFrame([{"policy": p, "iteration": t, "cutoff": 7, "duration_s": 2 * rate,
                   "forecast_s": realised[t] * np.exp(bias), "realised_s": realised[t]}
                  for p in policies for t in range(20)]).to_parquet(
        results / "throughput" / trace / f"{file}.parquet")


def test_the_figures_and_answers_state_what_was_measured(tmp_path):
    results = tmp_path / "results"
    _arm(results, "sim", "censored-likelihood", ["bdsgd-model"], 0.0, 0.9)
    _arm(results, "sim", "censored-impute", ["bdsgd-model"], np.log(0.7), 0.5)
    both = ["bdsgd-model", "explore-bdsgd-model"]
    _arm(results, "sim", "late-abandon", both, 0.2, 1.0)
    _arm(results, "sim", "late-finish", both, 0.1, 0.5)
    table = replay_ablations.ablation_table(load_replay_ablations(results))
    assert len(table) == 6 and table["forecast_bias"].round(6).tolist()[:2] == [0.0, round(np.log(0.7), 6)]
    answer = replay_ablations.censoring_answer(table, pd.Series({"sim": 0.25}))
    assert "-30%" in answer and "0.500 of the hindsight optimum against 0.900" in answer
    assert answer.endswith("bdsgd-paper, which imputes with a Gaussian emission, reaches 0.250 "
                           "of it on the same test part.")
    # finishing halves the duration: twice the later half's throughput
    assert ("2.000x the throughput, ahead against bdsgd-model (ratio 2, 95% interval 2 to 2), "
            "forecast error 0.100") in replay_ablations.data_value_answer(table)
    for ablation in ("censoring", "data"):
        path = tmp_path / f"{ablation}.png"
        replay_ablations.draw(table, ablation, path, lambda trace: "s", policy_style)
        assert path.stat().st_size > 10_000 and path.with_suffix(".pdf").exists()
    assert len(table[table["ablation"] == "data"]) == 4


def test_without_ablations_the_answer_says_so(tmp_path):
    table = replay_ablations.ablation_table([])
    assert replay_ablations.censoring_answer(table, pd.Series()).startswith("Not measured")
    path = tmp_path / "c.png"
    replay_ablations.draw(table, "censoring", path, lambda trace: "s", policy_style)
    assert path.exists()


def test_the_readme_maps_every_reviewer_question():

    from bdsgd.figures import FIGURES
    from bdsgd.figures.answers import QUESTIONS

    readme = (REPO / "README.md").read_text()
    section = readme.split("## What the reviewers asked")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(QUESTIONS)
    for key, (who, _, figure) in QUESTIONS.items():
        assert figure in FIGURES, key
        assert f"`{figure}`" in rows[list(QUESTIONS).index(key)], key
        assert f"({who})" in rows[list(QUESTIONS).index(key)], key
