"""The ladder from Teng & Wood's BDSGD to the project's (``bdsgd ladder``): every rung replayed
with its own model and settings, and the figure, table and answers drawn from it."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from bdsgd.cli import main
from bdsgd.figures.inputs import load_ladders
from bdsgd.figures.ladder import (
    drift_answer,
    emission_answer,
    ladder,
    ladder_answer,
    ladder_table,
)
from bdsgd.ladder import RUNGS, TRAINED
from bdsgd.traces.io import write_trace
from bdsgd.traces.schema import from_arrays


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """A tiny trace (a lasting 6x straggler), the ladder's models in one epoch each, and
    ``bdsgd ladder`` into a results folder as the workflow lays it out."""
    root = tmp_path_factory.mktemp("ladder")
    rng = np.random.default_rng(0)
    x = rng.lognormal(0, 0.2, (80, 4))
    x[:, 3] *= 6.0
    train = write_trace(from_arrays(x[:40]), root / "train.parquet")
    test = write_trace(from_arrays(x[40:]), root / "test.parquet")
    config = root / "config.yaml"
    config.write_text("experiment: l\ntraces: {t: {source: simulate}}\n"
                      "model: {latent_dim: 4, worker_dim: 4, hidden_dim: 8, chunk: 8, "
                      "batch_size: 4}\n")
    models = {}
    for kind, flags in {"paper": "--paper", **TRAINED}.items():
        models[kind] = root / f"{kind}.pt"
        assert main(["model", "train", str(train), "--config", str(config), "--out",
                     str(models[kind]), "--epochs", "1", "--quiet", *flags.split()]) == 0
    out = root / "results" / "throughput" / "t"
    out.mkdir(parents=True)
    args = ["ladder", str(test), "--history", str(train), "--config", str(config),
            "--paper-model", str(models["paper"]), "--model", str(models["scratch"]),
            *(a for kind in TRAINED for a in (f"--{kind}-model", str(models[kind]))),
            "--json", str(out / "ladder.json"), "--decisions", str(out / "ladder.parquet")]
    assert main(args) == 0
    return root, args


def test_every_rung_is_replayed_in_order_with_its_own_policy(replayed):
    root, _ = replayed
    rungs = json.loads((root / "results/throughput/t/ladder.json").read_text())["rungs"]
    assert sorted(rungs, key=lambda r: rungs[r]["order"]) == list(RUNGS)
    assert {r: rungs[r]["policy"] for r in rungs} == {r: RUNGS[r].policy for r in RUNGS}
    assert all(0 < r["relative_to_oracle"] <= 1 + 1e-9 for r in rungs.values())
    decisions = pd.read_parquet(root / "results/throughput/t/ladder.parquet")
    assert set(decisions["policy"]) == set(RUNGS)
    assert (decisions.groupby("policy").size() == 40).all()


def test_the_table_figure_and_answers_pair_each_rung_with_the_one_it_follows(replayed, tmp_path):
    root, _ = replayed
    ladders = load_ladders(root / "results")
    table = ladder_table(ladders)
    assert table["rung"].tolist() == list(RUNGS)
    compared = table[table["against"] != ""]
    assert compared["verdict"].isin(["ahead", "behind", "level", "too few iterations"]).all()
    assert len(compared) == len(RUNGS) - 1
    answer = ladder_answer(table)
    assert answer.startswith("On t, Teng & Wood's BDSGD reaches")
    assert "learning (+ learning while serving) against prior:" in answer
    assert "likelihood against gaussian:" in emission_answer(ladders)
    assert "learning against prior:" in drift_answer(ladders)
    ladder(table, tmp_path / "ladder.png")
    assert (tmp_path / "ladder.png").stat().st_size > 10_000
    assert ladder_answer(ladder_table([])).startswith("Not measured")


def test_a_missing_model_is_one_line_and_writes_nothing(replayed, tmp_path, capsys):
    _, args = replayed
    bad = list(args)
    bad[bad.index("--model") + 1] = str(tmp_path / "nope.pt")
    bad[bad.index("--json") + 1] = str(tmp_path / "l.json")
    bad[bad.index("--decisions") + 1] = str(tmp_path / "l.parquet")
    assert main(bad) == 2
    assert "nope.pt" in capsys.readouterr().err
    assert not (tmp_path / "l.json").exists() and not (tmp_path / "l.parquet").exists()
