"""Weights & Biases: one W&B run per convergence run (``bdsgd train``), real distributed job
(``bdsgd distributed``) and run-time model training (``bdsgd model train``), when the config's
wandb.mode is offline or online (disabled: wandb is not even imported).

W&B is for browsing and comparing runs; the figures and tables come from the project's own
Parquet metrics and result JSON, never from W&B. Each run holds:

    group     the experiment, so one experiment's runs sit together
    job_type  the policy (``model`` for model training), so the runs table groups by policy
    tags      task:<task>, trace:<trace>, seed:<seed> (those that apply)
    config    the whole resolved config (``Config.to_dict``, as result JSON stamps it), plus
              ``run``: the job type, the tags' values and the config hash
    history   one row per iteration (per epoch for the model) against the x axis ``x``
              (define_metric's step_metric): virtual time for convergence runs, wall time for
              distributed ones
    summary   the result's headline numbers (time to target, final accuracy, gradients per
              second, mean cutoff), so the runs table compares policies as it is

A convergence run's W&B run id is derived from the run's identity (``id_of``), so a run stopped
(a time limit, a preemption, Ctrl-C) and resumed from its checkpoint is one W&B run with every
iteration once: online, W&B resumes it; offline, where W&B cannot resume a run, the resumed
process replaces the interrupted one's folder and logs the checkpoint's rows first.

An offline run stays in ``<directory>/wandb/offline-run-*`` until ``wandb sync`` uploads it.
With wandb.osh_command_dir set, the run also asks wandb-osh (a process on a login node with
internet, watching that directory on a shared file system) to sync it, at most every
``OSH_EVERY_S`` seconds and at its end: wandb-osh's trigger file, ``<hash>.command`` holding the
offline run's directory, as its own hook writes it.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

from bdsgd.config import Config

OSH_EVERY_S = 60.0


class Run:
    """An open W&B run, and where it asks wandb-osh for a sync (None: it does not)."""

    def __init__(self, wandb_run, osh_command_dir: str | None):
        self.wandb, self.synced = wandb_run, time.monotonic()
        self.trigger = None
        if osh_command_dir is not None:
            run_dir = Path(wandb_run.dir).parent.resolve()  # .dir is the run's files/ folder
            name = hashlib.sha256(str(run_dir).encode()).hexdigest()[:16]
            self.trigger = Path(osh_command_dir).expanduser() / f"{name}.command"
            self.trigger.parent.mkdir(parents=True, exist_ok=True)

    def ask_for_sync(self) -> None:
        if self.trigger is not None:
            self.trigger.write_text(str(Path(self.wandb.dir).parent.resolve()))
            self.synced = time.monotonic()


def id_of(identity: dict) -> str:
    """The W&B run id of a run with this identity (its config hash, task, policy, seed, trace)."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def start(cfg: Config, job_type: str, name: str, directory: Path, x: str,
          run_id: str | None = None, history: Iterable[tuple[int, dict]] = (),
          **tags) -> Run | None:
    """A W&B run, or None when wandb.mode is disabled (then ``log`` and ``finish`` do nothing).
    ``run_id`` (``id_of``): the run an interrupted process of the same run began, which this one
    continues; ``history``: the (step, row)s that process logged, which an offline run logs
    again in the run that replaces it."""
    if cfg.wandb.mode == "disabled":
        return None
    import wandb

    offline = cfg.wandb.mode == "offline"
    Path(directory).mkdir(parents=True, exist_ok=True)
    if run_id is not None and offline:
        for interrupted in Path(directory, "wandb").glob(f"offline-run-*-{run_id}"):
            shutil.rmtree(interrupted)
    run = wandb.init(project=cfg.wandb.project, entity=cfg.wandb.entity, mode=cfg.wandb.mode,
                     group=cfg.experiment, job_type=job_type, name=name, id=run_id,
                     resume="allow" if run_id is not None and not offline else None,
                     tags=[f"{k}:{v}" for k, v in tags.items()],
                     config={**cfg.to_dict(),
                             "run": {"job_type": job_type, **tags, "config_hash": cfg.hash()}},
                     dir=str(directory))
    run.define_metric(x)
    run.define_metric("*", step_metric=x)  # every metric plots against x by default
    out = Run(run, cfg.wandb.osh_command_dir)
    for step, row in history if offline else ():
        log(out, row, step)
    return out


def log(run: Run | None, row: dict, step: int) -> None:
    """One history row at ``step``. NaN marks a value not measured in this row (the test
    accuracy between evaluations): left out, so W&B's lines join the measured points."""
    if run is None:
        return
    run.wandb.log({k: v for k, v in row.items() if not math.isnan(v)}, step=step)
    if time.monotonic() - run.synced > OSH_EVERY_S:
        run.ask_for_sync()


def finish(run: Run | None, summary: dict | None = None, exit_code: int = 0) -> None:
    """Close the run; ``summary``: its headline numbers (none for a stopped run)."""
    if run is None:
        return
    run.wandb.summary.update(summary or {})
    run.wandb.finish(exit_code=exit_code)
    run.ask_for_sync()  # after finish: the file then holds the whole run
