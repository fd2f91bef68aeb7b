"""Stamp every result with where it came from: resolved config and its hash, git commit,
package versions and seed. Nothing here reads the clock, so stamped tables stay byte-identical
between two runs of the same commit and config."""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from bdsgd.config import Config

PACKAGES = ("bdsgd", "torch", "torchvision", "numpy", "scipy", "pandas", "pyarrow", "snakemake")


def git_commit(cwd: Path | None = None) -> str:
    """The commit of the working tree (with ``-dirty`` if it has changes), or ``unknown``."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=40", "--exclude=*"],
            cwd=cwd, capture_output=True, text=True, timeout=10, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "absent"
    return versions


def stamp(cfg: Config | None, seed: int | None, **extra: Any) -> dict[str, Any]:
    """The provenance block written into every result file."""
    return {
        "config": cfg.to_dict() if cfg is not None else None,
        "config_hash": cfg.hash() if cfg is not None else None,
        "git_commit": git_commit(),
        "versions": package_versions(),
        "seed": seed,
        **extra,
    }
