"""The DAG on a real SLURM: a single-node cluster started for these tests (tests/slurm_cluster.py)
runs the smoke DAG through profiles/slurm and profiles/cluster-generic, every job as a SLURM job,
with the result tables of a local run; and a dry run shows what each paper job asks SLURM for."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.slurm_cluster import Cluster, missing_binaries
from tests.test_workflow import run_dag, snakemake

# The smoke config, cut to what shows SLURM at work in minutes on a 2-core machine: every rule
# runs (both trace sources, the run-time model, throughput, convergence runs, a real distributed
# job, figures), but
# - two convergence runs, not 22: more policies and seeds are more jobs of the same rule;
# - the distributed job has 1 worker: it asks for workers + 1 tasks of one core each, and the
#   node has this machine's cores (2 here);
# - every job asks for 1000 MB: the node has this machine's memory, and without cgroups SLURM
#   only schedules by the number (the smoke jobs use less).
MEM_KEYS = ("simulate_mem_mb", "gather_mem_mb", "model_mem_mb", "throughput_mem_mb",
            "train_mem_mb", "distributed_mem_mb")
# Status polling for a test: the first check 2 s after a submission, not 40 (the profiles' values
# suit a cluster with hundreds of jobs); outputs are on this machine's disk: no latency to wait.
FAST = ("--latency-wait", "5")
FAST_SLURM = (*FAST, "--slurm-init-seconds-before-status-checks", "2")
FAST_GENERIC = (*FAST, "--seconds-between-status-checks", "2")
MAX_RUN_S = 600

needs_slurm = pytest.mark.skipif(
    bool(missing_binaries()),
    reason=f"no SLURM here ({', '.join(missing_binaries())} missing): "
           "apt-get install slurmctld slurmd munge (.ci/run does)")


def smoke_for_slurm(path: Path) -> Path:
    cfg = yaml.safe_load((REPO / "configs/smoke.yaml").read_text())
    cfg["traces"]["pai-job1"]["path"] = str(REPO / cfg["traces"]["pai-job1"]["path"])
    cfg["train"].update(policies=["sync", "bdsgd"], seeds=[0])
    cfg["distributed"]["jobs"]["straggler"].update(workers=1, inject_straggler="0:5")
    cfg["resources"] = dict.fromkeys(MEM_KEYS, 1000)
    path.write_text(yaml.safe_dump(cfg))
    return path


def tables(root: Path) -> dict[str, bytes]:
    """Every result and summary table, but the distributed job's: it measures wall time."""
    files = [p for d in ("results/smoke", "figures/smoke") for p in (root / d).rglob("*")
             if p.suffix in (".csv", ".parquet") and "distributed" not in p.parts]
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def job_stats(out: str) -> dict[str, int]:
    """Snakemake's "Job stats" table: rule -> jobs."""
    table = out[out.index("Job stats:"):].splitlines()[3:]
    rows = [line.split() for line in table[:next(i for i, r in enumerate(table) if r.startswith("total"))]]
    return {rule: int(count) for rule, count in rows}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A running single-node SLURM; SLURM_CONF and PATH point every client at it. Every daemon it
    started is stopped afterwards, also when a test or the start fails."""
    cluster = Cluster(tmp_path_factory.mktemp("slurm"))
    with pytest.MonkeyPatch.context() as mp:
        for name in ("SLURM_CONF", "PATH"):
            mp.setenv(name, cluster.env[name])
        try:
            cluster.start()
            yield cluster
        finally:
            cluster.stop()
    assert cluster.running() == [], f"daemons left running: {cluster.running()}"


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    """The same DAG on this machine, without SLURM: (config, working directory)."""
    root = tmp_path_factory.mktemp("local")
    config = smoke_for_slurm(root / "smoke.yaml")
    run_dag(root / "run", config)
    yield config, root / "run"
    shutil.rmtree(root)


def finished_jobs(cluster: Cluster, ids: set[str]) -> dict[str, str]:
    """SLURM's own state of these jobs (slurmctld keeps them MinJobAge after they end)."""
    out = subprocess.run(["squeue", "--states=all", "--noheader", "--format=%i|%T"],
                         capture_output=True, text=True, check=True, env=cluster.env).stdout
    states = dict(line.split("|") for line in out.split())
    return {i: states.get(i, "unknown to slurmctld") for i in ids}


@needs_slurm
@pytest.mark.slow
@pytest.mark.parametrize(("profile", "flags", "submitted"), [
    ("slurm", FAST_SLURM, r"has been submitted with SLURM jobid (\d+)"),
    ("cluster-generic", FAST_GENERIC, r"with external jobid '(\d+)'"),
])
def test_smoke_dag_on_slurm_equals_a_local_run(cluster, local_run, tmp_path, profile, flags,
                                                submitted):
    config, local = local_run
    workdir = tmp_path / "run"
    workdir.mkdir()
    start = time.monotonic()
    proc = snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                     "--profile", str(REPO / "profiles" / profile), "--configfile", str(config),
                     *flags, timeout=MAX_RUN_S + 60)
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert took < MAX_RUN_S, f"{profile}: the smoke DAG took {took:.0f} s on SLURM"

    # every job but the local rules went to SLURM, and SLURM says each one completed
    stats = job_stats(out)
    remote = sum(n for rule, n in stats.items() if rule not in ("all", "stage_config", "resolved_config"))
    ids = set(re.findall(submitted, out))
    assert len(ids) == remote, (stats, ids)
    states = finished_jobs(cluster, ids)
    assert set(states.values()) == {"COMPLETED"}, states

    ours, theirs = tables(workdir), tables(local)
    assert sorted(ours) == sorted(theirs) and len(ours) > 10, sorted(ours)
    assert [f for f in ours if ours[f] != theirs[f]] == []
    assert (workdir / "results/smoke/distributed/straggler/result.json").is_file()


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
    # a convergence run gets its train.threads as CPUs (not capped at Snakemake's own --cores)
    threads = re.findall(r"^rule train:\n(?:    .*\n)*?    threads: (\d+)$", out, flags=re.MULTILINE)
    assert threads and set(threads) == {str(cfg["train"]["threads"])}, set(threads)
    (distributed,) = requests.pop("distributed")
    for want in ("tasks=5", "mpi=srun", "cpus_per_task=1", "nodes=1", "slurm_extra=--gpus-per-task=1"):
        assert want in distributed.split(", "), (want, distributed)
    (gather,) = requests.pop("gather_trace")
    for want in ("tasks=32", "mpi=srun", "cpus_per_task=1", "nodes=1"):
        assert want in gather.split(", "), (want, gather)
    # every job asks for the user's partition; no other job asks for a GPU
    assert all("slurm_partition=gpu-a100" in r for rs in (*requests.values(), train) for r in rs)
    assert not [r for rs in requests.values() for r in rs if re.search(r"\bgpu=[1-9]", r)]
