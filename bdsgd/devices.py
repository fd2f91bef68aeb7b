"""Where a process computes and who it is in a job: the device for ``train.device``, the torch
settings of a run, and the rank a launcher (torchrun or SLURM's srun) gave this process.

The virtual trainers, the parameter server's ranks and the trace gatherer all choose their
device here, so ``auto``, a missing GPU and the ranks' share of a node's GPUs mean one thing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess

import torch

from bdsgd.errors import UserError


def select_device(name: str, local_rank: int = 0, source: str = "config") -> torch.device:
    """The device for ``train.device`` (auto, cpu or cuda). The ranks of a node take its GPUs in
    turn by local rank: one each where there are enough, shared round robin where not. Asking
    for CUDA on a machine without it is a one-line error naming ``source`` (the config file)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UserError(source, "train.device", "cuda was asked for, and this machine has no "
                        "CUDA device")
    device = torch.device("cuda", local_rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def cpp_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend calls on Linux ($CXX, else g++), if it is on
    PATH. None also where $CXX holds arguments (``ccache g++``) or the platform's compiler is
    another (clang++ on macOS): ``policies.compile`` auto then runs eager."""
    return shutil.which(os.environ.get("CXX", "g++"))


@contextlib.contextmanager
def torch_threads(threads: int):
    """torch's CPU threads (``torch.set_num_threads``) for a block; the process's come back after.
    Decision latencies are measured under it, so each result records the count beside them."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def torch_settings(threads: int, device: torch.device):
    """Threads and deterministic kernels for the run; the process's settings come back after."""
    before = torch.get_deterministic_debug_mode()
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
        torch.backends.cudnn.benchmark = False
    # = use_deterministic_algorithms(True, warn_only=...), without importing torch._inductor
    # (seconds) for a flag that only matters to torch.compile. Some CUDA kernels have no
    # deterministic version: warn there rather than fail the run.
    torch.set_deterministic_debug_mode("warn" if device.type == "cuda" else "error")
    try:
        with torch_threads(threads):
            yield
    finally:
        torch.set_deterministic_debug_mode(before)


def rank_env() -> dict[str, int] | None:
    """Rank, world size and local rank from torchrun or srun; None when not launched as a rank."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return {"rank": int(env["RANK"]), "world": int(env["WORLD_SIZE"]),
                "local": int(env.get("LOCAL_RANK", 0)), "slurm": False}
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return {"rank": int(env["SLURM_PROCID"]), "world": int(env["SLURM_NTASKS"]),
                "local": int(env.get("SLURM_LOCALID", 0)), "slurm": True}
    return None


def slurm_rendezvous() -> None:
    """MASTER_ADDR / MASTER_PORT for env:// under srun: the job's first node, a per-job port."""
    if "MASTER_ADDR" not in os.environ:
        hosts = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                               capture_output=True, text=True, check=True).stdout.split()
        os.environ["MASTER_ADDR"] = hosts[0]
    os.environ.setdefault("MASTER_PORT", str(20000 + int(os.environ["SLURM_JOB_ID"]) % 20000))
