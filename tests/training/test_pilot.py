"""The pilot (bdsgd.training.pilot, workflow/rules/pilot.smk): a recipe that cannot reach its
target stops the workflow before its convergence runs; a good one lets them through."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from bdsgd.config import from_dict
from tests.helpers import REPO, snakemake, tiny_config


@pytest.mark.slow
def test_the_tiny_dags_pilot_passed_and_its_runs_followed(tiny_dag):
    """The session's DAG: the pilot ran the recipe's rate and the factors around it, reached the
    target, and the convergence runs of its task ran after it."""
    workdir, _, cfg = tiny_dag
    pilot = workdir / "results/tiny/pilot/sim/digits"
    verdict = json.loads((pilot / "pilot.json").read_text())
    assert verdict["passed"] and verdict["target_accuracy"] == cfg["train"]["target_accuracy"]["digits"]
    lr = from_dict(cfg).for_task("digits").training().learning_rate  # the recipe's
    assert [r["lr_factor"] for r in verdict["runs"]] == [0.5, 1.0, 2.0]
    assert [r["learning_rate"] for r in verdict["runs"]] == pytest.approx([lr / 2, lr, 2 * lr])
    for factor in ("0.5", "1", "2"):
        assert (pilot / f"lr{factor}/result.json").exists()
    run = workdir / "results/tiny/runs/sim/digits/sync/seed0/result.json"
    assert run.stat().st_mtime >= (pilot / "pilot.json").stat().st_mtime


@pytest.mark.long  # a DAG of pilots: make test-long (CI runs it)
def test_a_recipe_that_cannot_reach_its_target_stops_the_dag_before_its_runs(tmp_path):
    """A target digits cannot reach in 10 iterations: Snakemake stops at the pilot with its one
    line, naming the user's config file, the recipe, the accuracy reached and the budget, and no
    convergence run starts."""
    cfg = tiny_config()
    cfg["train"].update(policies=["sync"], max_iterations=10, target_accuracy={"digits": 0.99})
    cfg["pilot"] = {"lr_factors": [1.0]}
    config = tmp_path / "mine.yaml"
    config.write_text(yaml.safe_dump(cfg))
    dag = snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
                    "--configfile", str(config), "--cores", "2",
                    "results/tiny/runs/sim/digits/sync/seed0/result.json", timeout=600)
    assert dag.returncode != 0
    line = next(x for x in dag.stderr.splitlines() if x.startswith("bdsgd: error:"))
    assert f"{config}: train.recipes.digits:" in line and "budget of 10 iterations" in line
    assert "short of the target 0.99" in line, line
    assert not (tmp_path / "results/tiny/runs").exists()
    assert not (tmp_path / "results/tiny/pilot/sim/digits/pilot.json").exists()


@pytest.mark.long  # a DAG stopped for real and run again: make test-long (CI runs it)
def test_a_stopped_pilot_resumes_with_the_runs_it_finished(tmp_path):
    """bdsgd pilot run again after its verdict (or a stop): every run that finished with the same
    config is read back, not trained again."""
    cfg = tiny_config()
    cfg["pilot"] = {"lr_factors": [1.0, 2.0]}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    bdsgd = [sys.executable, "-m", "bdsgd"]
    trace = tmp_path / "sim.parquet"
    subprocess.run([*bdsgd, "traces", "simulate", "--config", str(config), "--name", "sim",
                    "--out", str(trace)], check=True, capture_output=True)
    pilot = [*bdsgd, "pilot", "--config", str(config), "--task", "digits", "--trace", str(trace),
             "--out", str(tmp_path / "pilot")]
    subprocess.run(pilot, check=True, capture_output=True)
    runs = sorted((tmp_path / "pilot").glob("lr*/result.json"))
    assert [r.parent.name for r in runs] == ["lr1", "lr2"]
    before = [r.stat().st_mtime_ns for r in runs]
    runs[1].unlink()  # as if the pilot had stopped before its second rate
    again = subprocess.run(pilot, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-2000:]
    assert runs[0].stat().st_mtime_ns == before[0] and runs[1].exists()
    assert json.loads((tmp_path / "pilot/pilot.json").read_text())["passed"]


def test_a_pilot_trains_its_tasks_recipe(tmp_path):
    """The pilot's config is loaded for its task (``bdsgd pilot --task``), as the workflow
    writes it: configs/paper.yaml's CIFAR-10 recipe sets the runs' rate, batch and budget, each
    factor's run at the recipe's rate times the factor."""
    from bdsgd.config.stages import load_stage_config
    from bdsgd.training import run_spec
    from bdsgd.training.pilot import at_rate, budget

    recipe = yaml.safe_load((REPO / "configs/paper.yaml").read_text())["train"]["recipes"]["cifar10"]
    cfg = load_stage_config(REPO / "configs/paper.yaml", "pilot", "cifar10")
    run = run_spec(at_rate(cfg, "cifar10", 2.0), "cifar10", "sync", 0, tmp_path / "t.parquet",
                   tmp_path / "lr2")
    assert run.cfg.training().learning_rate == 2 * recipe["learning_rate"]
    assert run.cfg.training().weight_decay == recipe["weight_decay"]
    assert budget(cfg) == f"{recipe['epochs']} epochs"
