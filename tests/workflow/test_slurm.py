"""The DAG on a real SLURM: a single-node cluster started for these tests (tests/slurm_cluster.py:
run_on_slurm, in the background from the session's start) runs the session's tiny DAG through
profiles/slurm and profiles/cluster-generic, each a part of it (slurm_cluster.PROFILES), every
job as a SLURM job, with the result tables of the session's local run (conftest.py: tiny_dag),
byte for byte; a dry run shows what each paper job asks SLURM for. The runs on the cluster are
long tests (make test-long, which CI runs): the tiny DAG through the profiles, then a
convergence run longer than its time limit that goes on in new jobs to the metrics of a local run."""

from __future__ import annotations

import re

import pytest
import yaml

from bdsgd.layout import Layout
from tests.helpers import REPO, job_stats, result_tables, snakemake, stamp_free
from tests.slurm_cluster import (
    LONG_RUN,
    MAX_RUN_S,
    PROFILES,
    missing_binaries,
    run_past_time_limit,
)

needs_slurm = pytest.mark.skipif(
    bool(missing_binaries()),
    reason=f"no SLURM here ({', '.join(missing_binaries())} missing): "
           "apt-get install slurmctld slurmd munge (.ci/run does)")


@needs_slurm
@pytest.mark.long
@pytest.mark.parametrize("profile", PROFILES)
def test_tiny_dag_on_slurm_equals_the_local_run(slurm_runs, tiny_dag, profile):
    run = slurm_runs[profile]
    out = run["out"]
    assert run["returncode"] == 0, out[-6000:]
    assert run["took"] < MAX_RUN_S, f"{profile}: the tiny DAG took {run['took']:.0f} s on SLURM"

    # every job but the local rules went to SLURM, and SLURM says each one completed
    stats = job_stats(out)
    remote = sum(n for rule, n in stats.items() if rule not in ("all", "stage_config", "resolved_config"))
    assert len(run["ids"]) == remote, (stats, run["ids"])
    assert set(run["states"].values()) == {"COMPLETED"}, run["states"]

    # the tables of the local run (a trace's provenance stamp aside: tests.helpers.stamp_free)
    local, _, _ = tiny_dag
    ours, theirs = result_tables(run["dir"], "tiny"), result_tables(local, "tiny")
    assert set(ours) <= set(theirs) and len(ours) >= 4, sorted(ours)
    assert [f for f in ours if stamp_free(ours[f]) != stamp_free(theirs[f])] == []
    assert all((run["dir"] / target).is_file() for target in PROFILES[profile][2])


@needs_slurm
@pytest.mark.long
def test_the_profiles_run_every_rule_of_the_dag_between_them(slurm_runs, tiny_dag):
    """Each rule the local DAG ran as a job went to SLURM through one profile or the other, but
    the figures of the whole DAG, which read every result (slurm_cluster.PROFILES)."""
    local, _, _ = tiny_dag
    log = min((local / ".snakemake" / "log").glob("*.snakemake.log"))  # the run's: the first
    rules = set(job_stats(log.read_text())) - {"all", "stage_config", "resolved_config"}
    on_slurm = {rule for profile in PROFILES for rule in job_stats(slurm_runs[profile]["out"])}
    assert rules - on_slurm == {"figures", "throughput_study"}, rules - on_slurm


@needs_slurm
@pytest.mark.long
def test_every_daemon_the_cluster_started_is_stopped(slurm_runs):
    """Also when a run or the cluster's start failed (slurm_cluster.run_on_slurm)."""
    assert slurm_runs["left_running"] == [], f"daemons left running: {slurm_runs['left_running']}"


@pytest.mark.slow  # runs snakemake
def test_paper_dry_run_shows_what_each_job_asks_slurm_for(tmp_path, monkeypatch):
    """Through profiles/slurm, a dry run of the paper config (plus a gathered trace and a
    distributed job, which it leaves out) lists each job's request: a GPU per convergence run,
    a task per process for gathering and distributed jobs, the user's partition."""
    monkeypatch.setenv("SBATCH_PARTITION", "gpu-a100")
    cfg = yaml.safe_load((REPO / "configs/paper.yaml").read_text())
    cfg["traces"]["cluster"] = {"source": "gather", "gather": {"workers": 32, "task": "cifar10"}}
    cfg["distributed"] = {"jobs": {"ps": {"workers": 4, "policy": "static", "task": "mnist"}}}
    cfg["resources"]["distributed_gpus_per_task"] = 1
    config = tmp_path / "paper.yaml"
    config.write_text(yaml.safe_dump(cfg))
    proc = snakemake("-n", "--profile", "profiles/slurm", "--configfile", str(config))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    requests: dict[str, set[str]] = {}
    for rule, resources in re.findall(r"^rule (\w+):\n(?:    .*\n)*?    resources: (.*)$", out,
                                      flags=re.MULTILINE):
        requests.setdefault(rule, set()).add(resources)
    train = requests.pop("train")
    assert len(train) == 1 and "gpu=1" in next(iter(train)), train
    # SIGTERM some minutes before the time limit (make test-long: the run resumes)
    assert "slurm_extra=--signal=TERM@180" in next(iter(train)).split(", "), train
    # a convergence run gets its train.threads as CPUs (not capped at Snakemake's own --cores)
    threads = re.findall(r"^rule train:\n(?:    .*\n)*?    threads: (\d+)$", out, flags=re.MULTILINE)
    assert threads and set(threads) == {str(cfg["train"]["threads"])}, set(threads)
    (distributed,) = requests.pop("distributed")
    for want in ("tasks=5", "mpi=srun", "cpus_per_task=1", "nodes=1", "slurm_extra=--gpus-per-task=1"):
        assert want in distributed.split(", "), (want, distributed)
    (gather,) = requests.pop("gather_trace")
    for want in ("tasks=32", "mpi=srun", "cpus_per_task=1", "nodes=1"):
        assert want in gather.split(", "), (want, gather)
    # the pilot trains as a run does: a GPU, the warning before its time limit
    (pilot,) = requests.pop("pilot")
    assert "gpu=1" in pilot and "slurm_extra=--signal=TERM@180" in pilot.split(", "), pilot
    # every job asks for the user's partition; no other job asks for a GPU
    assert all("slurm_partition=gpu-a100" in r for rs in (*requests.values(), train) for r in rs)
    assert not [r for rs in requests.values() for r in rs if re.search(r"\bgpu=[1-9]", r)]


@pytest.fixture(scope="module")
def runs_past_time_limit(slurm_runs, tmp_path_factory) -> dict:
    """A convergence run longer than its one-minute time limit, made locally and through each
    profile on a cluster started for it (slurm_cluster.run_past_time_limit): what that returns.
    After the tiny DAG's SLURM runs (``slurm_runs``): one cluster at a time on 2 cores, whose load
    would move the time limit's warnings."""
    return run_past_time_limit(tmp_path_factory.mktemp("time-limit"))


@needs_slurm
@pytest.mark.long
@pytest.mark.parametrize("profile", PROFILES)
def test_a_run_past_its_time_limit_resumes_in_new_jobs_to_the_local_metrics(runs_past_time_limit,
                                                                             profile):
    """SLURM warns the run before its limit; bdsgd checkpoints and stops, and its job fails
    (FAILED, not TIMEOUT: the warning came first); Snakemake submits the job again, which
    resumes from that very checkpoint, until the run is complete: its metrics are the local
    run's, byte for byte. (A job the warning reaches before bdsgd has started fails with no
    checkpoint; the next resumes from the one before.)"""
    runs = runs_past_time_limit
    run = runs[profile]
    out = run["out"]
    assert run["returncode"] == 0, out[-6000:]
    # the failed jobs' logs are in Snakemake's output (show-failed-logs), the last job's in its file
    log = (run["dir"] / Layout.of("tiny").run_log("sim", "digits", "static", 0)).read_text()
    stops = {int(i) for i in re.findall(r"stopped by signal 15 after iteration (\d+)", out)}
    resumes = {int(i) for i in re.findall(r"resumed from \S+ at iteration (\d+)", out)}
    last = [int(i) for i in re.findall(r"resumed from \S+ at iteration (\d+)", log)]
    # every resume is from a checkpoint a stop or the period wrote; the last job's is the newest
    # one but at most a period: a job still ending on a loaded machine may leave its stop's
    # checkpoint to the job after next (seen once with the slurm plugin: 73,873, then 72,000)
    period = LONG_RUN["checkpoint_every"]
    written = stops | set(range(period, runs["iterations"] + 1, period))
    assert stops and resumes <= written and len(last) == 1, (stops, resumes, last)
    assert last[0] in written and max(stops) - period <= last[0] <= max(stops), (stops, last)
    failed = [state for state in run["states"].values() if state != "COMPLETED"]
    assert set(failed) == {"FAILED"} and len(failed) >= len(stops), run["states"]

    ours, local = run["dir"] / runs["run"], runs["reference"] / runs["run"]
    assert (ours / "metrics.parquet").read_bytes() == (local / "metrics.parquet").read_bytes()
    assert not (ours / "checkpoint.pt").exists()  # the complete run removed it


@needs_slurm
@pytest.mark.long
def test_the_time_limit_runs_cluster_is_stopped(runs_past_time_limit):
    assert runs_past_time_limit["left_running"] == [], runs_past_time_limit["left_running"]
