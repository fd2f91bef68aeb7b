"""The Snakemake DAG: lint-clean, end to end at tiny scale, a change reruns only the stages that
read it, and an interrupted DAG resumes its runs (make test-long). That every shipped config's DAG
builds: tests/plan/test_plan.py, whose dry runs the plan is held to."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bdsgd.config import from_dict
from bdsgd.config.stages import STAGE_READS, load_stage_config, slice_keys
from bdsgd.layout import Layout, cluster_draw, drawn_from
from tests.helpers import REPO, SNAKEMAKE, snakemake, tiny_config


def test_the_workflow_starts_without_torch():
    """What the Snakefile and its rules import from bdsgd loads no torch: every Snakemake run
    (and on a cluster every job's) parses the workflow, and torch's import there cost seconds."""
    sources = [REPO / "Snakefile", *sorted((REPO / "workflow/rules").glob("*.smk"))]
    imports = sorted({line.strip() for path in sources for line in path.read_text().splitlines()
                      if line.startswith(("from bdsgd", "import bdsgd"))})
    assert len(imports) > 5, imports
    proc = subprocess.run([sys.executable, "-c", "\n".join(
        [*imports, "import sys", "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"])],
        cwd=REPO, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "[]", proc.stdout[:300]


def test_lint_clean():
    proc = snakemake("--lint", "--profile", "profiles/smoke")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Congratulations" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


@pytest.mark.parametrize(("drop", "patch", "field"), [
    (None, {"model": {"epochs": -1}}, "epochs"),
    ("train", {}, "train"),  # the schema lets a stage's config leave it out, not the workflow's
])
def test_invalid_config_is_rejected(tmp_path, drop, patch, field):
    cfg = tiny_config(**patch)
    cfg.pop(drop, None)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "--configfile", str(bad), "--cores", "1")
    assert proc.returncode != 0
    assert field in proc.stdout + proc.stderr


@pytest.mark.slow
def test_tiny_dag_end_to_end_draws_every_figure_and_table(tiny_dag):
    """The session's DAG run draws the figures and tables and logs every rule. (Running it again
    gives the same bytes: test_cli's stages by hand and test_slurm's runs compare against it.)"""
    a, _, _ = tiny_dag
    figures = a / "figures/tiny"
    for png in ("time_to_accuracy", "cutoff_over_time", "throughput", "runtime_distributions",
                "model_predictions"):
        assert (figures / f"{png}.png").stat().st_size > 10_000, png
    summary = (figures / "summary.csv").read_text().splitlines()
    assert summary[0].startswith("task,policy,seed,time_to_target_s,final_accuracy,"
                                 "gradients_per_s,mean_cutoff")
    assert len(summary) == 1 + 2  # digits x {sync, bdsgd} x seed 0
    for sidecar in ("trace", "train", "test"):  # the simulator's truth, declared and written
        assert (a / f"results/tiny/traces/sim/{sidecar}.truth.npz").is_file(), sidecar
    assert list((a / "logs/tiny").rglob("*.log"))
    # the throughput study: every trace replayed on its two cluster draws, paired by draw
    study = pd.read_csv(figures / "throughput_draws.csv")
    assert set(study["trace"]) == {"sim", "pai"} and (study["draws"] == 2).all()
    assert (a / "results/tiny/throughput/sim/draw1/throughput.json").is_file()
    assert (a / "results/tiny/models/sim/draw1/model.pt").is_file()  # a cluster of its own
    assert not (a / "results/tiny/models/pai/draw1").exists()  # the same job, started elsewhere
    verdicts = pd.read_csv(figures / "draw_verdicts.csv")
    assert set(verdicts["pairs"]) == {"2 draws"} and set(verdicts["verdict"]) == {"too few draws"}
    assert "bdsgd" in (figures / "throughput_study.rst").read_text()


@pytest.mark.slow
def test_stage_configs_hold_what_each_stage_reads(tiny_dag):
    """Each stage's config file holds exactly what bdsgd.config.stages.STAGE_READS declares its command
    reads (less the flags its rule passes instead), with the values the whole config gives: of a
    trace's stages, that trace's; of a run's, its task's and trace's."""
    a, _, cfg = tiny_dag
    whole = from_dict(cfg)
    stages = a / "results/tiny/config"
    raw = {str(p.relative_to(stages).with_suffix("")): yaml.safe_load(p.read_text())
           for p in stages.rglob("*.yaml")}
    assert set(raw) == {"simulate_trace/sim", "train/digits@sim", "pilot/digits@sim",
                        "train_prior/prior", *(
        f"{stage}/{trace}" for stage in ("train_model", "evaluate_model", "throughput")
        for trace in ("sim", "pai"))}
    for name, data in raw.items():
        stage, instance = name.split("/")
        keys = slice_keys(stage)
        assert set(data) == {key.partition(".")[0] for key in keys}, name
        for section, value in data.items():
            declared = {k.partition(".")[2] for k in keys if k.startswith(f"{section}.")}
            assert not declared or set(value) == declared, (name, section)
        task, _, trace = instance.partition("@")  # a run's: <task>@<trace>
        # the prior's reads no trace, and holds the config's first by name
        trace = trace or (min(cfg["traces"]) if stage == "train_prior" else instance)
        assert set(data["traces"]) == {trace}, name
        sliced = load_stage_config(stages / f"{name}.yaml", stage)
        for key in keys:
            section, _, sub = key.partition(".")
            got, want = getattr(sliced, section), getattr(whole, section)
            if sub:
                got, want = getattr(got, sub), getattr(want, sub)
            if key == "traces":  # what makes the trace (split reads train_fraction as a flag)
                got, want = got[trace], dataclasses.replace(want[trace], train_fraction=0.5)
            elif key == "train.tasks":
                want = (task,)
            elif key == "train.target_accuracy":
                want = {task: want[task]}
            assert got == want, (name, key)
    # a run gets its task, policy and seed on the command line: no list of them in its config
    assert not {"policies", "seeds"} & set(raw["train/digits@sim"]["train"])
    assert raw["train/digits@sim"]["train"]["tasks"] == ["digits"]


def test_the_stages_are_the_workflows_rules():
    """Every stage of STAGE_READS is a rule of the workflow, which passes its config file."""
    rules = "".join(p.read_text() for p in (REPO / "workflow/rules").glob("*.smk"))
    for stage in STAGE_READS:
        assert f"rule {stage}:" in rules, stage
        assert f'PATHS.stage_config("{stage}", ' in rules, stage


def test_layout_names_the_files_the_dag_writes():
    """bdsgd.layout's paths are the files users and tests read (the names must not change)."""
    paths = Layout.of("x")
    assert paths.trace("sim", "test") == "results/x/traces/sim/test.parquet"
    assert paths.truth("sim") == "results/x/traces/sim/trace.truth.npz"
    assert paths.model("sim", "predictions.parquet") == "results/x/models/sim/predictions.parquet"
    assert paths.throughput("sim") == "results/x/throughput/sim/throughput.json"
    assert (paths.run("result.json", "sim", "digits", "sync", 0)
            == "results/x/runs/sim/digits/sync/seed0/result.json")
    assert paths.run("result.json") == "results/x/runs/{trace}/{task}/{policy}/seed{seed}/result.json"
    assert paths.trace(cluster_draw("sim", 2), "train") == "results/x/traces/sim/draw2/train.parquet"
    assert cluster_draw("sim", 0) == "sim" and drawn_from("sim/draw2") == ("sim", 2)
    assert drawn_from("sim") == ("sim", 0)
    assert paths.distributed("j") == "results/x/distributed/j/result.json"
    assert paths.stage_config() == "results/x/config/{stage}/{name}.yaml"
    assert paths.run_log() == "logs/x/runs/{trace}/{task}/{policy}/seed{seed}.log"
    assert paths.trace_log("split", "sim") == "logs/x/traces/sim/split.log"
    assert paths.config_log() == "logs/x/config.log"
    assert paths.figures_log("sim") == "logs/x/figures/sim.log"
    assert paths.trace_figure("sim_cov.pdf") == "figures/x/traces/sim_cov.pdf"


def pending(workdir: Path, config: Path) -> dict[str, set[str]]:
    """What a dry run would (re)build: rule -> output files, from ``snakemake --summary``."""
    proc = snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                     "--configfile", str(config), "--cores", "2", "--summary")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    header = next(i for i, row in enumerate(rows) if row[:1] == ["output_file"])
    assert rows[header][2] == "rule" and rows[header][-1] == "plan", rows[header]
    jobs: dict[str, set[str]] = {}
    for row in rows[header + 1:]:
        if len(row) == len(rows[header]) and row[-1] != "no update":
            jobs.setdefault(row[2], set()).add(row[0])
    return jobs


UPSTREAM = {"simulate_trace", "import_trace", "gather_trace", "split_trace",
            "split_simulated_trace", "describe_trace", "trace_figures", "train_prior", "train_model",
            "evaluate_model", "throughput", "throughput_draw"}


@pytest.mark.slow
@pytest.mark.parametrize("change", ["none", "seed", "wandb.mode", "train.learning_rate"])
def test_a_change_reruns_only_what_reads_it(tiny_dag, tmp_path, change):
    """One more seed adds its runs, on the cluster drawn for it (simulated, split and modelled
    already: the throughput study's draw 1), and redraws the figures; a new train: key reruns
    the pilot and the convergence runs; a new wandb.mode reruns
    the stages that log to W&B (model training and the convergence runs) and what reads their
    outputs. None touches an existing trace (each stage reads its own config file,
    results/<exp>/config/<rule>/<name>.yaml)."""
    a, _, cfg = tiny_dag
    cfg = yaml.safe_load(yaml.safe_dump(cfg))
    runs = "results/tiny/runs/sim/digits"
    if change == "seed":
        cfg["train"]["seeds"] = [0, 1]
    elif change == "wandb.mode":
        cfg["wandb"] = {"mode": "offline"}
    elif change == "train.learning_rate":
        cfg["train"]["learning_rate"] = 0.01
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    jobs = pending(a, changed)
    if change == "none":
        assert jobs == {}, jobs
        return
    if change == "wandb.mode":
        assert jobs["stage_config"] == {f"results/tiny/config/{stage}.yaml" for stage in (
            "train/digits@sim", "train_model/sim", "train_model/pai", "train_prior/prior")}
        assert {"train_prior", "train_model", "evaluate_model", "throughput", "train",
                "figures"} <= set(jobs)
        assert not {"simulate_trace", "import_trace", "split_trace", "describe_trace"} & set(jobs)
        return
    outputs = ("result.json", "metrics.parquet", "model.pt")
    if change == "seed":  # the new runs only: no existing output changes
        assert "stage_config" not in jobs
    assert not UPSTREAM & set(jobs), jobs
    assert set(jobs) <= {"resolved_config", "stage_config", "pilot", "train", "figures",
                         "throughput_study"}, jobs
    assert "figures" in jobs
    if change == "seed":  # the pilot trains seed 0 only
        assert jobs["train"] == {f"{runs}/{p}/seed1/{f}" for p in ("sync", "bdsgd") for f in outputs}
        assert "pilot" not in jobs
    else:  # the train stage's config changed: every run reads it, and the pilot
        assert jobs["stage_config"] == {f"results/tiny/config/{stage}/digits@sim.yaml"
                                        for stage in ("train", "pilot")}
        assert jobs["train"] == {f"{runs}/{p}/seed0/{f}" for p in ("sync", "bdsgd") for f in outputs}
        assert jobs["pilot"] == {"results/tiny/pilot/sim/digits/pilot.json"}


def test_a_distributed_job_asks_for_a_task_per_process_and_launches_through_srun(tmp_path):
    """A distributed job declares workers + 1 tasks with the SLURM executor's mpi convention;
    with resources.distributed_launcher: srun its command is one srun step of those tasks."""
    cfg = yaml.safe_load((REPO / "configs/smoke.yaml").read_text())
    cfg["resources"] = {"distributed_launcher": "srun", "distributed_gpus_per_task": 1}
    path = tmp_path / "srun.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "--printshellcmds", "--configfile", str(path), "--cores", "1",
                     "--directory", str(tmp_path), "--snakefile", str(REPO / "Snakefile"),
                     "results/smoke/distributed/straggler/result.json")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "tasks=4" in out and "mpi=srun" in out and "gpus_per_task=1" in out
    assert "srun -n 4 bdsgd distributed" in out
    assert "--workers 3 --policy static" in out and "--inject-straggler 1:5" in out


@pytest.mark.long  # a DAG stopped for real and run again: make test-long (CI runs it)
def test_an_interrupted_dag_resumes_its_runs_instead_of_redoing_them(tmp_path):
    """Ctrl-C (SIGINT to Snakemake's process group) while a convergence run is under way: the
    run checkpoints, Snakemake stops cleanly, and the same command finishes the run from its
    checkpoint."""
    cfg = tiny_config()
    cfg["train"].update(policies=["sync"], max_iterations=200, checkpoint_every=5)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    target = "results/tiny/runs/sim/digits/sync/seed0"
    run = tmp_path / target
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    args = [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
            "--configfile", str(config), "--cores", "2", "--rerun-incomplete", f"{target}/result.json"]
    with subprocess.Popen(args, process_group=0, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL) as dag:
        try:
            deadline = time.monotonic() + 300
            while not (run / "checkpoint.pt").exists() and dag.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.2)
            assert (run / "checkpoint.pt").exists() and dag.poll() is None
            os.killpg(dag.pid, signal.SIGINT)
            assert dag.wait(timeout=120) != 0
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(dag.pid, signal.SIGKILL)
    assert (run / "checkpoint.pt").exists() and not (run / "result.json").exists()
    again = snakemake(*args[1:], env=env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    result = json.loads((run / "result.json").read_text())
    assert result["wallclock"]["resumed_from_iteration"] >= 5, result["wallclock"]
    assert pd.read_parquet(run / "metrics.parquet")["iteration"].tolist() == list(range(1, 201))
