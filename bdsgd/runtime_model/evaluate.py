"""How good is a trained run-time model on a held-out trace, as a forecaster and as a policy.

Forecast metrics filter on the FULL observations of the held-out trace (every run-time seen, as
if the server always waited for everyone) and score the one-step predictive p(x_{t+1} | x_{1:t}):
the joint log-likelihood per observation (in the trace's unit, Monte Carlo over S draws of the
cluster state), the coverage of the central 50 % and 90 % predictive intervals of every order
statistic x_(c), and the error of E[x_(c)] against the realised x_(c).

The policy metric is the real deployment: the ``bdsgd`` policy (predicted order statistics plus
a decision rule) replays the trace and filters only on the censored observations its own
cutoffs produce; its throughput is divided by the hindsight oracle's.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from bdsgd.config import PoliciesConfig
from bdsgd.errors import UserError
from bdsgd.policies import make_policy
from bdsgd.policies.oracle import hindsight_optimum, throughput
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.throughput import default_config, replay
from bdsgd.traces.schema import Trace


@torch.no_grad()
def forecast_metrics(model: RuntimeModel, trace: Trace, samples: int,
                     seed: int) -> tuple[dict, pd.DataFrame]:
    """Predictive log-likelihood, interval coverage, order-statistic error (full observations),
    and the per-iteration predictions of every order statistic (for the predictions figure)."""
    gen = torch.Generator().manual_seed(seed)
    x_all = torch.as_tensor(trace.runtimes / model.scale_s, dtype=torch.float32)
    no_censoring = torch.zeros(x_all.shape[1], dtype=torch.bool)
    state, parts = model.eval().initial_state(1), model.parts()
    loglik, lo50, hi50, lo90, hi90, mean = [], [], [], [], [], []
    for t in range(x_all.shape[0]):
        mix = model.predictive(state, samples, gen, parts)  # (components, S, n)
        joint = model.log_likelihood(mix, x_all[t], no_censoring, parts)  # (S,)
        loglik.append(float(torch.logsumexp(joint, 0)) - math.log(samples))
        draws = model.emitter.unspace(model.draws(state, samples, gen, parts)).sort(dim=-1).values
        q = torch.quantile(draws, torch.tensor([0.05, 0.25, 0.75, 0.95]), dim=0)
        for out, row in zip((lo90, lo50, hi50, hi90), q, strict=True):
            out.append(row.numpy())
        mean.append(draws.mean(0).numpy())
        state = model.step(state, x_all[t][None], no_censoring[None], parts)
    realised = np.sort(x_all.numpy(), axis=1)
    mean = np.array(mean)
    n = x_all.shape[1]
    err = np.abs(mean - realised) * model.scale_s
    metrics = {
        # per observation, as a density over the trace's unit (hence the - log m)
        "heldout_loglik_per_obs": float(np.mean(loglik) / n - math.log(model.scale_s)),
        "coverage_50": float(np.mean((realised >= np.array(lo50)) & (realised <= np.array(hi50)))),
        "coverage_90": float(np.mean((realised >= np.array(lo90)) & (realised <= np.array(hi90)))),
        "order_stat_mae_s": float(err.mean()),
        "order_stat_rel_error": float(np.mean(err / (realised * model.scale_s))),
        "order_stat_bias_s": float(np.mean(mean - realised) * model.scale_s),
    }
    T = x_all.shape[0]
    predictions = pd.DataFrame({
        "iteration": np.repeat(trace.iterations, n),
        "order": np.tile(np.arange(1, n + 1), T),
        "predicted_mean": (mean * model.scale_s).ravel(),
        "lo90": (np.array(lo90) * model.scale_s).ravel(),
        "hi90": (np.array(hi90) * model.scale_s).ravel(),
        "realised": (realised * model.scale_s).ravel(),
    })
    return metrics, predictions


def evaluate(model: RuntimeModel, trace: Trace, rule: str = "rate", seed: int = 0,
             comm_s: float = 0.0, policies: PoliciesConfig | None = None,
             ) -> tuple[dict, pd.DataFrame]:
    """Forecast and policy metrics of ``model`` on the held-out ``trace`` (JSON-able), and the
    per-iteration predictions (iteration, order, predicted_mean, lo90, hi90, realised)."""
    if trace.n_workers != model.n_workers:
        raise UserError(trace.meta.get("source", "<trace>"), "worker",
                        f"trace has {trace.n_workers} workers, the model {model.n_workers}")
    result, predictions = forecast_metrics(model, trace, model.config.samples, seed)
    policies = policies or default_config().policies
    policy = make_policy("bdsgd", trace.n_workers, policies, rule=rule, seed=seed, comm_s=comm_s,
                         model=model)
    run = replay(trace, policy, comm_s)
    sorted_x = np.sort(trace.runtimes, axis=1)
    _, oracle_rate = hindsight_optimum(sorted_x, comm_s)
    sync_rate = throughput(sorted_x, np.full(len(sorted_x), trace.n_workers), comm_s)
    result.update({
        "throughput_relative_to_oracle": run.gradients_per_s / oracle_rate,
        "throughput_gradients_per_s": run.gradients_per_s,
        "oracle_gradients_per_s": oracle_rate,
        "sync_relative_to_oracle": float(sync_rate / oracle_rate),
        "mean_cutoff": float(run.cutoffs.mean()),
        "decision_ms_p50": float(np.median(run.decision_ns) / 1e6),
        "rule": rule, "n_workers": trace.n_workers, "iterations": trace.n_iterations,
        "emission": model.config.emission, "censoring": model.config.censoring,
        "forecast_filtered_on": "full observations",
        "policy_filtered_on": "censored observations of its own cutoffs",
    })
    return result, predictions
