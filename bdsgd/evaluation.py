"""A trained run-time model judged on a held-out trace (``bdsgd model evaluate``): as a
forecaster, and as the ``bdsgd`` policy it drives, replayed against the hindsight optimum."""

from __future__ import annotations

import numpy as np
import pandas as pd

from bdsgd.cluster.virtual import for_replay
from bdsgd.config import Config, default_config
from bdsgd.policies.build import Inputs, build_policy
from bdsgd.traces.io import require_complete
from bdsgd.traces.schema import Trace


def evaluate_model(model, trace: Trace, rule: str = "rate", seed: int = 0,
                   cfg: Config | None = None, model_path: str = "--model"
                   ) -> tuple[dict, pd.DataFrame]:
    """A trained run-time model on a held-out trace (``bdsgd model evaluate``): as a forecaster
    (``runtime_model.evaluate.forecast_metrics``, filtering on full observations) and in its
    real deployment, the ``bdsgd`` policy replaying the trace and filtering only on the censored
    observations its own cutoffs produce, its throughput divided by the hindsight oracle's, on
    the config's virtual cluster (``bdsgd.cluster.virtual.for_replay``).
    Returns the metrics (JSON-able) and the per-iteration predictions; ``threads``, torch's
    CPU threads in this process, under which ``decision_ms_p50`` was measured."""
    import torch

    from bdsgd.runtime_model.evaluate import forecast_metrics

    cfg = cfg or default_config()
    require_complete(trace, trace.file)
    cluster = for_replay(cfg, trace)
    result, predictions = forecast_metrics(model, trace, model.config.samples, seed)
    policy = build_policy("bdsgd", cfg, seed=seed, n_workers=trace.n_workers, trace=trace,
                          inputs=Inputs(model, model_path), comm=cluster.timing, rule=rule)
    run = cluster.replay(trace.runtimes, policy)
    _, oracle_rate = cluster.optimum(trace.runtimes)
    sync_rate = cluster.sync_rate(trace.runtimes)
    result.update({
        "throughput_relative_to_oracle": run.gradients_per_s / oracle_rate,
        "throughput_gradients_per_s": run.gradients_per_s,
        "oracle_gradients_per_s": oracle_rate,
        "sync_relative_to_oracle": float(sync_rate / oracle_rate),
        "mean_cutoff": float(run.cutoffs.mean()),
        "decision_ms_p50": float(np.median(run.decision_ns) / 1e6),
        "threads": torch.get_num_threads(),
        "rule": rule, "n_workers": trace.n_workers, "iterations": trace.n_iterations,
        "comm_to_compute": cluster.comm_to_compute(trace.runtimes),
        "emission": model.config.emission, "censoring": model.config.censoring,
        "forecast_filtered_on": "full observations",
        "policy_filtered_on": "censored observations of its own cutoffs",
    })
    return result, predictions
