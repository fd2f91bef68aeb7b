"""A single-node SLURM on this machine, for the tests: munged, slurmctld and slurmd started from
Debian's packages (slurmctld, slurmd, munge) with a slurm.conf written for this host, every
file (key, state, spool, logs, pid files) under one directory, so nothing of the system's
/etc/slurm or /etc/munge is read or changed. No slurmdbd: accounting is off, as on clusters where
sacct answers "Slurm accounting storage is disabled"."""

from __future__ import annotations

import contextlib
import getpass
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "sinfo", "srun", "scancel", "sacct")
# Finished jobs stay visible to squeue this long: the slurm executor's status queries without
# accounting need it to be at least 3 x its init-seconds-before-status-checks (and >= 120 s), and
# run_profile asks, after a run, for the state of every job it submitted: longer than a run may
# take (MAX_RUN_S plus a minute before its timeout, LONG_RUN_S).
MIN_JOB_AGE_S = 1800


# The PATH at import (before a test puts the clients of bin/ first), with Debian's /usr/sbin, where
# the daemons are and which is not on a user's PATH
SBIN = f"{os.environ.get('PATH', '')}{os.pathsep}/usr/sbin{os.pathsep}/sbin"


def daemon(name: str) -> str | None:
    return shutil.which(name, path=SBIN)


def missing_binaries() -> list[str]:
    return [b for b in DAEMONS if daemon(b) is None] + [b for b in CLIENTS if shutil.which(b) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_line() -> str:
    """This machine as slurmd sees it (NodeName=<host> CPUs=... RealMemory=...)."""
    out = subprocess.run([daemon("slurmd"), "-C"], capture_output=True, text=True, check=True).stdout
    return out.splitlines()[0]


@dataclass
class Cluster:
    root: Path
    # the environment its daemons and clients start from (default: this process's, now)
    base_env: dict[str, str] = field(default_factory=lambda: dict(os.environ))

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def env(self) -> dict[str, str]:
        """The environment that points SLURM's clients at this cluster."""
        return dict(self.base_env, SLURM_CONF=str(self.conf),
                    PATH=f"{self.bin}{os.pathsep}{self.base_env['PATH']}")

    def write_clients(self) -> None:
        """bin/: each client with SLURM_CONF set. The SLURM executor's job step drops every
        SLURM_* variable, SLURM_CONF too, before its `srun`: a cluster's clients find their
        config in /etc/slurm (or slurmd's /run/slurm/conf), which this cluster leaves alone."""
        self.bin.mkdir(exist_ok=True)
        for client in CLIENTS:
            path, real = self.bin / client, shutil.which(client, path=SBIN)
            path.write_text(f'#!/bin/sh\nSLURM_CONF={self.conf} exec {real} "$@"\n')
            path.chmod(0o755)

    def pid_files(self) -> dict[str, Path]:
        return {d: self.root / f"{d}.pid" for d in DAEMONS}

    def write_config(self) -> None:
        user = getpass.getuser()
        node = node_line()
        host = node.split()[0].removeprefix("NodeName=")
        for sub in ("state", "spool", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self.conf.write_text(f"""\
ClusterName=bdsgdtest
SlurmctldHost={host}(127.0.0.1)
SlurmUser={user}
SlurmdUser={user}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={self.root}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={self.root}/state
SlurmdSpoolDir={self.root}/spool
SlurmctldPidFile={self.root}/slurmctld.pid
SlurmdPidFile={self.root}/slurmd.pid
SlurmctldLogFile={self.root}/slurmctld.log
SlurmdLogFile={self.root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge={MIN_JOB_AGE_S}
{node} NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def start(self, timeout_s: float = 60) -> None:
        self.write_config()
        self.write_clients()
        munge = self.root / "munge"
        subprocess.run([daemon("munged"), "--force", f"--socket={munge}/munge.socket",
                        f"--key-file={munge}/munge.key", f"--pid-file={self.root}/munged.pid",
                        f"--log-file={munge}/munged.log", f"--seed-file={munge}/munged.seed"],
                       check=True, env=self.env)
        # slurmctld -i: ignore state a previous run could have left (there is none: a new root)
        subprocess.run([daemon("slurmctld"), "-i", "-f", str(self.conf)], check=True, env=self.env)
        subprocess.run([daemon("slurmd"), "-f", str(self.conf)], check=True, env=self.env)
        self.wait_idle(timeout_s)

    def wait_idle(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            proc = subprocess.run(["sinfo", "--noheader", "--format=%T"], capture_output=True,
                                  text=True, env=self.env)
            state = (proc.stdout + proc.stderr).strip()
            if state == "idle":
                return
            time.sleep(1)
        raise RuntimeError(f"the test SLURM's node is not idle after {timeout_s:.0f} s "
                           f"(sinfo: {state!r}); logs in {self.root}")

    def running(self) -> list[str]:
        """The daemons started here that are still alive."""
        alive = []
        for daemon, pid_file in self.pid_files().items():
            if pid_file.exists() and _alive(int(pid_file.read_text())):
                alive.append(daemon)
        return alive

    def cancel_jobs(self, timeout_s: float = 60) -> None:
        """Cancel the jobs still in the queue and wait for them to leave it: a job's processes
        (its slurmstepd and what that runs) would outlive the daemons, and train on."""
        def queued() -> str:
            return subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True,
                                  text=True, env=self.env).stdout.strip()

        if not queued():
            return
        subprocess.run(["scancel", f"--user={getpass.getuser()}"], env=self.env)
        deadline = time.monotonic() + timeout_s
        while queued() and time.monotonic() < deadline:
            time.sleep(1)

    def stop(self, timeout_s: float = 30) -> None:
        """Cancel the jobs left (``cancel_jobs``, with the controller alive), then SIGTERM each
        daemon by its pid file (slurmd first) and wait for it to exit."""
        if "slurmctld" in self.running():
            self.cancel_jobs()
        for daemon in reversed(DAEMONS):
            pid_file = self.pid_files()[daemon]
            if not pid_file.exists():
                continue
            pid = int(pid_file.read_text())
            if not _alive(pid):
                continue
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie has exited: its parent (not us, the daemons fork) has not reaped it yet
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


# ------------------------------------------------------------------- the tiny DAG on SLURM
# The session's tiny DAG config (tests/helpers.py: tiny_dag_config), plus what shows SLURM at
# work in minutes on a 2-core machine: every rule runs (both trace sources, the run-time model,
# throughput, convergence runs, figures) and a real distributed job, but
# - the distributed job has 1 worker: it asks for workers + 1 tasks of one core each, and the
#   node has this machine's cores (2 here);
# - every job asks for 1000 MB: the node has this machine's memory, and without cgroups SLURM
#   only schedules by the number (the jobs use less).
# Neither changes what another stage reads: the tables are the local run's.
MEM_KEYS = ("simulate_mem_mb", "gather_mem_mb", "model_mem_mb", "throughput_mem_mb",
            "train_mem_mb", "distributed_mem_mb")
STRAGGLER = {"workers": 1, "policy": "static", "iterations": 30, "delay_s": 0.02,
             "inject_straggler": "0:5"}
# Status polling for a test: the first check 2 s after a submission, not 40, and then every 2 s,
# not 10 or 30 (the profiles' values suit a cluster with hundreds of jobs); outputs are on this
# machine's disk: no latency to wait.
FAST = ("--latency-wait", "5", "--seconds-between-status-checks", "2")
# profile -> its flags for a test, how its output names a submitted job's SLURM id, and the
# targets it makes: between them every rule that runs as a job, at its own resource request.
# profiles/slurm the simulated trace's stages (a drawn cluster, the prior, run-time models, their
# evaluation, the throughput replay and a further draw's, the trace's figures, the pilot and a
# convergence run that reads a model); profiles/cluster-generic, whose submission and status
# scripts are what it adds, the imported trace's stages (its description too) and the
# distributed job (workers + 1 tasks). The figures of the whole DAG (rules figures and
# throughput_study) read every result: they run in the local DAG and by hand.
PROFILES = {
    "slurm": ((*FAST, "--slurm-init-seconds-before-status-checks", "2"),
              r"has been submitted with SLURM jobid (\d+)",
              ("results/tiny/throughput/sim/draw1/throughput.json",
               "results/tiny/models/sim/evaluation.json",
               "results/tiny/runs/sim/digits/bdsgd/seed0/metrics.parquet",
               "figures/tiny/traces/sim_heatmap.png")),
    "cluster-generic": (FAST, r"with external jobid '(\d+)'",
                        ("results/tiny/throughput/pai/throughput.json",
                         "results/tiny/traces/pai/describe.json",
                         "results/tiny/distributed/straggler/result.json")),
}
MAX_RUN_S = 600


def for_slurm(cfg: dict, path: Path) -> Path:
    """``cfg`` with the distributed job and the memory requests above, written to ``path``."""
    import copy

    import yaml

    cfg = copy.deepcopy(cfg)
    cfg["distributed"] = {"jobs": {"straggler": STRAGGLER}}
    cfg["resources"] = dict.fromkeys(MEM_KEYS, 1000)
    path.write_text(yaml.safe_dump(cfg))
    return path


def finished_jobs(env: dict[str, str], ids: set[str]) -> dict[str, str]:
    """SLURM's own state of these jobs (slurmctld keeps them MinJobAge after they end)."""
    out = subprocess.run(["squeue", "--states=all", "--noheader", "--format=%i|%T"],
                         capture_output=True, text=True, check=True, env=env).stdout
    states = dict(line.split("|") for line in out.split())
    return {i: states.get(i, "unknown to slurmctld") for i in ids}


@contextlib.contextmanager
def started_cluster(root: Path, env: dict[str, str] | None = None) -> Iterator[Cluster]:
    """A cluster started in the new directory ``root`` from ``env`` (default: this process's
    environment), stopped when the block ends, also when it failed (``Cluster.running`` after:
    the daemons still alive)."""
    cluster = Cluster(root, dict(os.environ if env is None else env))
    root.mkdir()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def run_profile(profile: str, run_dir: Path, config: Path, env: dict[str, str],
                args: Sequence[str] = (), targets: Sequence[str] | None = None,
                timeout: int = MAX_RUN_S + 60) -> dict:
    """The DAG of ``config`` through ``profiles/<profile>`` (with its PROFILES flags, ``args``, and
    ``targets``, default its PROFILES targets) in the new directory ``run_dir``, on the cluster
    of ``env``: the directory, Snakemake's exit status and output, the seconds it took and
    SLURM's state of each job it submitted."""
    from tests.helpers import REPO, snakemake

    flags, submitted, profile_targets = PROFILES[profile]
    targets = profile_targets if targets is None else targets
    run_dir.mkdir()
    start = time.monotonic()
    # the targets first: an option of many values (--set-resources) would take them
    proc = snakemake(*targets, "--snakefile", str(REPO / "Snakefile"), "--directory",
                     str(run_dir), "--profile", str(REPO / "profiles" / profile), "--configfile",
                     str(config), *flags, *args, timeout=timeout, env=env)
    took = time.monotonic() - start
    out = proc.stdout + proc.stderr
    ids = set(re.findall(submitted, out))
    return {"dir": run_dir, "returncode": proc.returncode, "out": out, "took": took, "ids": ids,
            "states": finished_jobs(env, ids)}


def run_profiles(workdir: Path, config: Path, env: dict[str, str] | None = None,
                 args: Callable[[str], Sequence[str]] = lambda profile: (), **options) -> dict:
    """The DAG of ``config`` through each of PROFILES at once, every job a SLURM job of a cluster
    started for them in ``workdir/cluster`` from ``env`` and stopped after: per profile, what
    ``run_profile`` returns (in ``workdir/run-<profile>``, with ``args(profile)`` and
    ``options``); and ``left_running``, the daemons still alive after the stop."""
    from concurrent.futures import ThreadPoolExecutor

    def run(profile: str) -> dict:
        return run_profile(profile, workdir / f"run-{profile}", config, cluster.env,
                           args=args(profile), **options)

    from tests.helpers import stop_subprocesses

    with started_cluster(workdir / "cluster", env) as cluster, ThreadPoolExecutor(len(PROFILES)) as pool:
        try:
            runs = dict(zip(PROFILES, pool.map(run, PROFILES), strict=True))
        except BaseException:  # a session stopped: end the runs, so that the pool and cluster can
            stop_subprocesses()
            raise
    return {**runs, "left_running": cluster.running()}


def run_on_slurm(workdir: Path, config: Path, env: dict[str, str] | None = None) -> dict:
    """The DAG of ``config`` (made ``for_slurm``) through each of PROFILES (``run_profiles``)."""
    import yaml

    workdir.mkdir(parents=True, exist_ok=True)
    return run_profiles(workdir, for_slurm(yaml.safe_load(config.read_text()), workdir / "config.yaml"),
                        env)


# ------------------------------------------------------ a convergence run past its time limit
# One convergence run of the tiny config (static: no run-time model to train first), a union batch
# of 1200 digits an iteration, against a time limit of one minute (SLURM's shortest). Its length
# is set by this machine's speed (``long_run_iterations``): RUN_S seconds of training, more than
# a job can give it before the warning (at most 59 s in) however fast the machine, and a few jobs
# where starting one takes half of its minute (a fixed number of iterations is dozens of jobs on
# a slow core). Test evaluations and checkpoints every 2000 iterations, and a checkpoint when it
# stops.
LONG_RUN = {"policies": ["static"], "batch_size": 200, "eval_every": 2000,
            "checkpoint_every": 2000}
RUN_S = 120
# The profiles' warning (180 s before the limit) is longer than the whole minute: SLURM would
# send it at the job's start, before bdsgd listens. The test asks for 1 s, which SLURM's checks
# (every 30 s) make 1 to 31 s: 29 to 59 s into the job, bdsgd started (on a loaded machine a job
# may be warned before: it stops with no checkpoint, and the next resumes from the one before).
WARNING_S = 1
# Snakemake's limit for the run: jobs of at most ~90 s each, both profiles at once on a 2-core
# machine, where a job warned early resumes from the checkpoint before; the retries' bound far
# above
LONG_RUN_S = 2700


def time_limit_config(path: Path, iterations: int) -> Path:
    """The tiny config with LONG_RUN of ``iterations`` as its only convergence run, a one-minute
    time limit and the memory requests of ``for_slurm``, written to ``path``; no pilot (it would
    train sync at LONG_RUN's length three times before the run)."""
    import yaml

    from tests.helpers import tiny_config

    cfg = tiny_config()
    cfg["train"].update(LONG_RUN, max_iterations=iterations)
    cfg["pilot"] = {"enabled": False}
    cfg["resources"] = {**dict.fromkeys(MEM_KEYS, 1000), "train_runtime_min": 1}
    path.write_text(yaml.safe_dump(cfg))
    return path


def long_run_dir() -> str:
    """LONG_RUN's run folder in a working directory (static, simulated trace, seed 0)."""
    from bdsgd.layout import Layout

    return Layout.of("tiny").run_dir("sim", "digits", "static", 0)


def long_run_iterations(workdir: Path, env: dict[str, str] | None = None) -> int:
    """The iterations of LONG_RUN that take about RUN_S seconds on this machine, in whole
    checkpoint periods: a run of one period made locally in ``workdir``, timed by its own
    wall-clock (its result's, preparing the data and model included, so a slight overestimate
    of an iteration's time)."""
    import json

    from tests.helpers import run_dag

    period = LONG_RUN["checkpoint_every"]
    workdir.mkdir(parents=True)
    run = long_run_dir()
    run_dag(workdir, time_limit_config(workdir / "config.yaml", period), env,
            targets=[f"{run}/metrics.parquet"])
    seconds = json.loads((workdir / run / "result.json").read_text())["wallclock"]["seconds"]
    return period * max(2, round(RUN_S / seconds))


def warning_at(profile: str, seconds: int) -> str:
    """The train rule's slurm_extra in ``profiles/<profile>`` (its --signal) with the warning
    ``seconds`` before the time limit, as --set-resources takes it."""
    import yaml

    from tests.helpers import REPO

    cfg = yaml.safe_load((REPO / "profiles" / profile / "config.yaml").read_text())
    extra = cfg["set-resources"]["train"]["slurm_extra"]
    return f"train:slurm_extra={re.sub(r'@[0-9]+', f'@{seconds}', extra)}"


def run_past_time_limit(workdir: Path, env: dict[str, str] | None = None) -> dict:
    """LONG_RUN, of ``long_run_iterations`` (in ``workdir/calibrate``), on this machine with
    Snakemake alone (the reference, in ``workdir/local``), then through each of PROFILES
    (``run_profiles``), warned WARNING_S before its limit: what ``run_profiles`` returns, with
    ``run``, the run's folder under each working directory, ``reference``, the local one's
    working directory, and ``iterations``."""
    from tests.helpers import run_dag

    workdir.mkdir(parents=True, exist_ok=True)
    iterations = long_run_iterations(workdir / "calibrate", env)
    config = time_limit_config(workdir / "config.yaml", iterations)
    run = long_run_dir()
    targets = [f"{run}/metrics.parquet"]
    run_dag(workdir / "local", config, env, targets=targets)
    runs = run_profiles(workdir, config, env, targets=targets, timeout=LONG_RUN_S,
                        args=lambda profile: ("--set-resources", warning_at(profile, WARNING_S)))
    return {**runs, "run": run, "reference": workdir / "local", "iterations": iterations}
