"""What a user pays to train the run-time model: wall-clock seconds of ``bdsgd model train`` with
the defaults on a large trace, from the prior over clusters and from the initial values, and the
prior's own fit (once per experiment, shared by every trace and seed), side by side in one run,
each then scored on the trace's held-out part by its forecasts' log score (the averaging's,
``policies.averaging.log_score``, per iteration: what the decision reads).

The trace is the simulator's ``mixed`` scenario, n workers x 2T iterations: the model trains on
the first T and forecasts the rest. Threads: torch's, ``--threads`` (the machine's cores by
default: training is one process).

    .venv/bin/python benchmarks/bench_training.py [--workers 158] [--iterations 1000]
        [--threads 2] [--prior PRIOR.pt]
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

from bdsgd.cluster.cutoff import observation
from bdsgd.config import SimulateConfig, default_config
from bdsgd.policies.averaging import log_score
from bdsgd.policies.model_predictor import ModelPredictor
from bdsgd.runtime_model.checkpoint import load_model
from bdsgd.runtime_model.train import train_model, train_prior
from bdsgd.traces.simulate import simulate

SCORE_SCALE = 0.03  # policies.score_scale's default


def held_out_score(model_path: Path, runtimes: np.ndarray, backups: int) -> float:
    """Mean log score of the model's one-step forecasts of the held-out iterations, each
    observed as a server cutting the ``backups`` slowest would (the model learning while it
    serves, as deployed)."""
    cfg = default_config().policies
    predictor = ModelPredictor(load_model(model_path), seed=0, online=(
        cfg.online_every, cfg.online_window, cfg.online_learning_rate))
    n, scores = runtimes.shape[1], []
    for t, row in enumerate(runtimes):
        obs = observation(t, row, n - backups, 0.0)
        if t:
            scores.append(log_score(predictor.expected_order_stats(), obs, SCORE_SCALE))
        predictor.observe(obs)
    return float(np.mean(scores))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=158, help="workers of the trace")
    parser.add_argument("--iterations", type=int, default=1000,
                        help="iterations of the training part (the held-out part as long)")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch's threads")
    parser.add_argument("--prior", help="a prior to start from (default: fitted here, timed)")
    parser.add_argument("--score-iterations", type=int, default=200,
                        help="held-out iterations the forecasts are scored on")
    add_option(parser)
    args = parser.parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    cfg = default_config().model
    trace, _ = simulate(SimulateConfig(scenario="mixed", workers=args.workers,
                                       iterations=2 * args.iterations), seed=0)
    train, test = trace.split(0.5)
    held_out = test.runtimes[:args.score_iterations]
    backups = max(1, round(0.1 * args.workers))
    print(f"{args.workers} workers x {args.iterations} training iterations, {args.threads} "
          f"threads; defaults: {cfg.steps} steps, chunk {cfg.chunk}, batch {cfg.batch_size}; "
          f"held-out log score over {len(held_out)} iterations, {backups} cut each")
    with tempfile.TemporaryDirectory() as folder:
        prior = args.prior
        if prior is None:
            prior = Path(folder) / "prior.pt"
            start = time.perf_counter()
            train_prior(cfg, 0, prior, progress=False)
            print(f"prior over clusters ({cfg.prior_steps} steps, {cfg.prior_draws} draws of "
                  f"{cfg.prior_workers} x {cfg.prior_iterations} per scenario): "
                  f"{time.perf_counter() - start:.0f} s, once per experiment")
        for name, start_from in (("from the prior", prior), ("from the initial values", None)):
            out = Path(folder) / "model.pt"
            start = time.perf_counter()
            train_model(train, cfg, 0, out, progress=False, prior=start_from)
            seconds = time.perf_counter() - start
            score = held_out_score(out, held_out, backups)
            print(f"  {name:>24}: {seconds:6.0f} s ({seconds / 120:.2f} of 2 minutes), "
                  f"held-out log score {score:.3f}")


if __name__ == "__main__":
    main()
