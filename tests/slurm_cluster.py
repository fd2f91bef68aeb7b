"""A single-node SLURM on this machine, for the tests: munged, slurmctld and slurmd started from
Debian's packages (slurmctld, slurmd, munge) with a slurm.conf written for this host, every
file (key, state, spool, logs, pid files) under one directory, so nothing of the system's
/etc/slurm or /etc/munge is read or changed. No slurmdbd: accounting is off, as on clusters where
sacct answers "Slurm accounting storage is disabled"."""

from __future__ import annotations

import getpass
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scontrol", "sinfo", "srun", "scancel", "sacct")
# Finished jobs stay visible to squeue this long: the slurm executor's status queries without
# accounting need it to be at least 3 x its init-seconds-before-status-checks (and >= 120 s).
MIN_JOB_AGE_S = 300


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

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def env(self) -> dict[str, str]:
        """The environment that points SLURM's clients at this cluster."""
        return dict(os.environ, SLURM_CONF=str(self.conf),
                    PATH=f"{self.bin}{os.pathsep}{os.environ['PATH']}")

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

    def stop(self, timeout_s: float = 30) -> None:
        """SIGTERM each daemon by its pid file (slurmd first), then wait for it to exit."""
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
