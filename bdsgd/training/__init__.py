"""Convergence runs on the virtual cluster: one process, a virtual clock fed by a run-time trace.

``train_run`` (``bdsgd train``) runs one (task, policy, seed): a cutoff policy trains
synchronous SGD with that cutoff (``synchronous``); a training mode of ``bdsgd.schedules.MODES``
runs instead: ``async`` (``asynchronous``: each gradient applied on arrival) or ``cyclic``
(``cyclic``: workers push their accumulated gradients in turn). Every mode writes the same
outputs (``record``) and resumes from its checkpoint alike (``run``).
"""

from __future__ import annotations

from pathlib import Path

from bdsgd.config import Config


def train_run(cfg: Config, task: str, policy: str, seed: int, trace_path, out_dir,
              model_path=None, history_path=None, paper_model_path=None) -> Path:
    """One convergence run; writes out_dir/{metrics.parquet, result.json, model.pt} (and
    out_dir/checkpoint.pt while it runs, from which an interrupted run resumes).
    ``history_path``: the trace's iterations before the replayed ones (its training part), which
    a policy that learns from observations sees first; async and cyclic check and record it.
    A policy <p>+<variant> trains with the train: keys its variant sets (``Config.for_task``),
    and records its own name."""
    from bdsgd.policies.build import policy_variant

    cfg = cfg.for_task(task, policy_variant(policy)[1])
    if policy == "async":
        from bdsgd.training.asynchronous import train_async

        return train_async(cfg, task, seed, trace_path, out_dir, history_path)
    if policy == "cyclic":
        from bdsgd.training.cyclic import train_cyclic

        return train_cyclic(cfg, task, seed, trace_path, out_dir, history_path)
    from bdsgd.training.synchronous import train_cutoff

    return train_cutoff(cfg, task, policy, seed, trace_path, out_dir, model_path, history_path,
                        paper_model_path)
