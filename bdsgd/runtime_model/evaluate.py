"""How good is a trained run-time model on a held-out trace, as a forecaster.

Forecast metrics filter on the FULL observations of the held-out trace (every run-time seen, as
if the server always waited for everyone) and score the one-step predictive p(x_{t+1} | x_{1:t}):
the joint log-likelihood per observation (in the trace's unit, Monte Carlo over S draws of the
cluster state), the coverage of the central 50 % and 90 % predictive intervals of every order
statistic x_(c), and the error of E[x_(c)] against the realised x_(c).

How good it is as a policy, filtering only on the censored observations its own cutoffs
produce, is ``bdsgd.evaluation.evaluate_model``'s question.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from bdsgd.errors import UserError
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.traces.schema import Trace


@torch.no_grad()
def forecast_metrics(model: RuntimeModel, trace: Trace, samples: int,
                     seed: int) -> tuple[dict, pd.DataFrame]:
    """Predictive log-likelihood, interval coverage, order-statistic error (full observations),
    and the per-iteration predictions of every order statistic (iteration, order,
    predicted_mean, lo90, hi90, realised: the predictions figure's table)."""
    if trace.n_workers != model.n_workers:
        raise UserError(trace.file, "worker",
                        f"trace has {trace.n_workers} workers, the model {model.n_workers}")
    gen = torch.Generator().manual_seed(seed)
    x_all = torch.as_tensor(trace.runtimes / model.scale_s, dtype=torch.float32)
    no_censoring = torch.zeros(x_all.shape[1], dtype=torch.bool)
    state, params = model.eval().initial_state(1), model.step_parameters()
    loglik, lo50, hi50, lo90, hi90, mean = [], [], [], [], [], []
    for t in range(x_all.shape[0]):
        mix = model.predictive(state, samples, gen, params)  # (components, S, n)
        joint = model.log_likelihood(mix, x_all[t], no_censoring, params)  # (S,)
        loglik.append(float(torch.logsumexp(joint, 0)) - math.log(samples))
        v = model.draws(state, model.noise(samples, gen), params)
        draws = model.emitter.unspace(v).sort(dim=-1).values
        q = torch.quantile(draws, torch.tensor([0.05, 0.25, 0.75, 0.95]), dim=0)
        for out, row in zip((lo90, lo50, hi50, hi90), q, strict=True):
            out.append(row.numpy())
        mean.append(draws.mean(0).numpy())
        state = model.step(state, x_all[t][None], no_censoring[None], params)
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
