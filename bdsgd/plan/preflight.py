"""What a config says that can be checked against its traces, data and cluster before any job
runs: by ``bdsgd plan`` and when the workflow starts (its ``onstart``), so that a wrong setting
stops the workflow before its first job with one line naming the config file and the key,
never a per-stage file hours into the run.

    traces.<name>.path          an imported trace's file exists
    policies.static_backups     leaves at least one worker to wait for on every trace
    throughput.ablations.backups  the same for the censoring ablation's traces
    distributed.jobs.<job>.workers  a job whose policy reads a run-time model has that model's
                                (the first train trace's) worker count
    train.data_dir              holds the folders of every task that reads one (``data``: off for
                                a plan made away from the cluster's file system)
"""

from __future__ import annotations

from pathlib import Path

from bdsgd.config import Config
from bdsgd.config.validate import data_folders
from bdsgd.errors import UserError
from bdsgd.layout import explored, policy_parts
from bdsgd.policies import spec


def trace_workers(cfg: Config, name: str) -> int:
    """n of a trace, from its config (simulate, gather) or its file (import)."""
    trace = cfg.trace(name)
    if trace.source == "simulate":
        return trace.simulate.workers
    if trace.source == "gather":
        return trace.gather.workers
    from bdsgd.traces.formats import import_trace

    return import_trace(trace.path, trace.format).n_workers


def pilot_traces(cfg: Config) -> dict[str, str]:
    """Each convergence trace -> the trace its task's pilot runs on (``bdsgd.training.pilot``):
    the first of train.trace with as many workers, since a cluster's size is what changes a
    recipe's batch and steps. An imported trace is its own (its size is in its file, which the
    workflow does not read to build its DAG)."""
    def size(name: str):
        spec = cfg.trace(name)
        return name if spec.source == "import" else trace_workers(cfg, name)

    first: dict = {}
    for name in cfg.train_traces():
        first.setdefault(size(name), name)
    return {name: first[size(name)] for name in cfg.train_traces()}


def _static(policies) -> bool:
    """Whether ``policies`` run Chen et al.'s static cutoff at policies.static_backups."""
    return any((explored(base) or base) == "static"
               for base, _ in map(policy_parts, policies))


def check(cfg: Config, data: bool = True) -> None:
    """Raise the first of the config's problems as a UserError naming ``cfg.source`` and its key."""
    for name, trace in cfg.traces.items():
        if trace.source == "import" and not Path(trace.path).is_file():
            raise UserError(cfg.source, f"traces.{name}.path", f"no such file: {trace.path}")
    workers = {name: trace_workers(cfg, name) for name in cfg.traces}
    tc = cfg.training()
    backups = cfg.policies.static_backups
    if backups >= 1 and _static([*cfg.throughput.policies, *tc.policies]):
        for name, n in workers.items():
            if backups >= n:
                raise UserError(cfg.source, "policies.static_backups", f"{backups:g} backup "
                                f"workers leave none of trace {name}'s {n} workers to wait for")
    ablated = cfg.throughput.ablations
    for name in ablated.traces:
        if ablated.backups >= 1 and ablated.backups >= workers[name]:
            raise UserError(cfg.source, "throughput.ablations.backups", f"{ablated.backups:g} "
                            f"backup workers leave none of trace {name}'s {workers[name]} workers")
    first = cfg.train_traces()[0]
    for job_name, job in cfg.distributed.jobs.items():
        if spec(job.policy).needs_model and job.workers != workers[first]:
            raise UserError(cfg.source, f"distributed.jobs.{job_name}.workers", f"{job.workers}: "
                            f"policy {job.policy} reads the run-time model of trace {first}, "
                            f"which has {workers[first]} workers")
    if data:
        for task in tc.tasks:
            for folder in data_folders(task, tc.data_dir):
                if not folder.is_dir():
                    raise UserError(cfg.source, "train.data_dir", f"{folder} is missing: task "
                                    f"{task} reads it (bdsgd.tasks)")
