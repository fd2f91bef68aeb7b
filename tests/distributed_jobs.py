"""The real distributed jobs the test session reads (conftest.py: distributed_jobs), each a
`bdsgd distributed` command with a parameter server and 3 workers on gloo (CPU), run at once:
each mostly starts processes and waits on sleeping workers. No process of a job may outlive
it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.helpers import REPO, run_cli, wandb_offline_env

WORKERS = 3
# Each worker's injected wait an iteration, and the straggler's (worker 1) factor on it: waits
# that dwarf what a loaded 2-core machine adds to an iteration (messages, scheduling: tenths of a
# second while the session's other runs go on), so that who is late is the injection's doing.
DELAY_S, SLOW = 0.2, 5
WANDB_PROJECT = "bdsgd-test"


def write_config(path: Path, **sections) -> Path:
    path.write_text(yaml.safe_dump({
        "experiment": "dist", "traces": {"t": {"source": "simulate"}},
        "policies": {"static_backups": 1},  # static: c = n - 1
        "train": {"trace": "t", "tasks": ["digits"], "batch_size": 16, "eval_every": 10,
                  "checkpoint_every": 5}, **sections}))
    return path


def distributed(tmp: Path, config: Path, name: str, *flags: str, workers: int = WORKERS,
                env: dict[str, str] | None = None) -> tuple[dict, subprocess.CompletedProcess]:
    """Run `bdsgd distributed`; (its result, its process). Afterwards no process of the job
    (whose command line holds the result's path) may still run."""
    out = tmp / f"{name}.json"
    proc = run_cli("distributed", "--workers", workers, "--config", config, "--json", out,
                   *flags, env=env)
    left = processes_of(out)
    assert not left, f"processes left behind: {left}"
    return json.loads(out.read_text()), proc


def processes_of(out: Path) -> str:
    """The processes whose command line holds ``out`` (a job's result path), as pgrep lists them."""
    return subprocess.run(["pgrep", "-f", str(out)], capture_output=True, text=True).stdout.strip()


@dataclass
class Resumed:
    """The killed-and-resumed job: what was seen when the first attempt was killed, and the
    second attempt's result and process."""

    checkpointed: bool  # the server's checkpoint existed while the job still ran
    left: str  # processes of the job alive after the kill
    wrote_result: bool  # the killed attempt left a result behind
    result: dict
    proc: subprocess.CompletedProcess


def killed_and_resumed(tmp: Path, config: Path, name: str, *flags: str,
                       env: dict[str, str]) -> Resumed:
    """SIGKILL the job as a whole (server, workers, launcher) once the server has checkpointed
    (train.checkpoint_every: 5), then run the same command again."""
    out = tmp / f"{name}.json"
    args = [sys.executable, "-m", "bdsgd", "distributed", "--workers", str(WORKERS), "--config",
            str(config), "--json", str(out), *flags]
    job = subprocess.Popen(args, process_group=0, cwd=REPO, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoint = tmp / f"{name}.checkpoint.pt"
    try:
        deadline = time.monotonic() + 300
        while not checkpoint.exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        checkpointed = checkpoint.exists() and job.poll() is None
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    time.sleep(0.5)
    left, wrote = processes_of(out), out.exists()
    result, proc = distributed(tmp, config, name, *flags, env=env)
    return Resumed(checkpointed, left, wrote, result, proc)


def logged_to_wandb(tmp: Path, env: dict[str, str]) -> tuple[dict, subprocess.CompletedProcess]:
    """A sync job of 2 workers and 6 iterations in ``tmp``, logging to W&B offline (project
    WANDB_PROJECT), every W&B file under ``tmp`` (tests/outputs/test_tracking.py reads them)."""
    tmp.mkdir()
    config = write_config(tmp / "config.yaml",
                          wandb={"mode": "offline", "project": WANDB_PROJECT})
    env = {k: v for k, v in env.items() if k != "WANDB_MODE"} | wandb_offline_env(tmp / "home")
    return distributed(tmp, config, "wandb", "--policy", "sync", "--iterations", "6",
                       "--heartbeat-s", "30", workers=2, env=env)


def run_distributed_jobs(workdir: Path, _config: Path, env: dict[str, str]) -> dict:
    """The session's jobs, in ``env``, at once, in ``workdir`` (the tiny DAG's config is not
    theirs). Worker 1 waits SLOW x as long (DELAY_S), 30 iterations, a checkpoint every 5:
    "sync" (whose worker 2 also dies at iteration 5), "static" (c = n - 1, late gradients abandoned): (result,
    process) each; and "finish" (static with late: finish, its messages padded to a bigger
    model's), killed once it has checkpointed and run again (Resumed); and "wandb", a job that
    logs to W&B offline (``logged_to_wandb``)."""
    workdir.mkdir(parents=True)
    config = write_config(workdir / "config.yaml")
    common = ("--iterations", "30", "--inject-straggler", f"1:{SLOW}", "--delay-s", str(DELAY_S))
    with ThreadPoolExecutor(max_workers=4) as pool:
        started = {
            "wandb": pool.submit(logged_to_wandb, workdir / "wandb", env),
            "sync": pool.submit(distributed, workdir, config, "sync", "--policy", "sync",
                                "--kill-worker", "2:5", *common, env=env),
            "static": pool.submit(distributed, workdir, config, "static", "--policy", "static",
                                  *common, env=env),
            "finish": pool.submit(killed_and_resumed, workdir, config, "finish", "--policy",
                                  "static", "--late", "finish", "--extra-parameters", "5000",
                                  *common, env=env)}
        return {name: future.result() for name, future in started.items()}
