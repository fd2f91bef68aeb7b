"""The run-time model as a forecaster: emission families and censoring treatments, side by side.

1. Emission: for each trace, train a ``lognormal`` and a ``gaussian`` model on the
   first half and score the second half with ``bdsgd.evaluation.evaluate_model``: held-out
   predictive log-likelihood per observation, coverage of the 50 % / 90 % intervals of every
   order statistic, and the throughput of the bdsgd policy relative to the oracle.
2. Censoring bias: i.i.d. log-normal run-times (truth known), the slowest 40 % of every
   training iteration censored. Train with the censored likelihood and with the paper's
   imputation; after filtering on censored observations, compare the predicted tail order
   statistics E[x_(c)], c > 60 % of n, with the truth (relative bias, signed).

    .venv/bin/python benchmarks/model_quality.py [--epochs 100] [--traces mixed pai-job1]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
from pathlib import Path

import numpy as np
import torch
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

from bdsgd.cluster.cutoff import observation
from bdsgd.config import from_dict
from bdsgd.evaluation import evaluate_model
from bdsgd.policies.model_predictor import ModelPredictor
from bdsgd.runtime_model.checkpoint import load_model
from bdsgd.runtime_model.train import train_model
from bdsgd.traces.formats import import_trace
from bdsgd.traces.schema import from_arrays
from bdsgd.traces.simulate import SCENARIOS, simulate

REPO = Path(__file__).resolve().parents[1]
BASE = from_dict({"experiment": "quality", "traces": {"t": {"source": "simulate"}},
                  "train": {"trace": "t", "tasks": ["digits"]}})


def trace(name: str, seed: int):
    if name.startswith("pai-job"):
        return import_trace(REPO / f"tests/data/alibaba_pai_job_{name[-1]}_norm.csv", "alibaba-pai")
    sim = dataclasses.replace(BASE.traces["t"].simulate, scenario=name, workers=16,
                              iterations=1000)
    return simulate(sim, seed=seed)[0]


def quiet(fn, *args, **kw):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*args, **kw)


def emissions(args, out: Path) -> None:
    print("| trace | emission | held-out log-lik / obs | coverage 50 % | coverage 90 % "
          "| bdsgd / oracle |\n| --- | --- | ---: | ---: | ---: | ---: |")
    for name in args.traces:
        train, test = trace(name, args.seed).split(0.5)
        for emission in ("lognormal", "gaussian"):
            cfg = dataclasses.replace(BASE.model, emission=emission, epochs=args.epochs)
            path = quiet(train_model, train, cfg, seed=args.seed, out=out / f"{name}_{emission}.pt",
                         progress=False)
            result, _ = evaluate_model(load_model(path), test, rule="ratio", seed=args.seed)
            print(f"| {name} | {emission} | {result['heldout_loglik_per_obs']:.3f} | "
                  f"{result['coverage_50']:.3f} | {result['coverage_90']:.3f} | "
                  f"{result['throughput_relative_to_oracle']:.4f} |", flush=True)


def censoring_bias(args, out: Path) -> None:
    rng = np.random.default_rng(args.seed)
    n, c, sigma = 16, 10, 0.3
    x = np.exp(rng.normal(0, sigma, (400, n)))
    seen = from_arrays(x, meta={"source": "censored"}).cut_at(c)
    truth = np.sort(np.exp(rng.normal(0, sigma, (200_000, n))), axis=1).mean(0)[c:]
    print(f"\ncensoring bias: n = {n}, slowest {n - c} of {n} censored in training, "
          "predicted E[x_(c)] for the censored order statistics against the truth")
    for mode in ("likelihood", "impute"):
        cfg = dataclasses.replace(BASE.model, censoring=mode, epochs=args.epochs)
        path = quiet(train_model, seen, cfg, seed=args.seed, out=out / f"censor_{mode}.pt",
                     progress=False)
        pred = ModelPredictor(load_model(path), samples=4096, seed=args.seed)
        for t in range(50):
            pred.observe(observation(t, x[t], c, 0.0))
        bias = pred.expected_order_stats()[c:] / truth - 1
        print(f"  {mode:<10}: mean relative bias {bias.mean():+.3f} (max order statistic "
              f"{bias[-1]:+.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", nargs="+", default=["mixed", "load-shift", "pai-job1"],
                        choices=[*SCENARIOS, "pai-job1", "pai-job2"], help="traces to score")
    parser.add_argument("--epochs", type=int, default=100, help="run-time model training epochs")
    parser.add_argument("--seed", type=int, default=0, help="seed of simulation and training")
    parser.add_argument("--out", default="benchmarks/out/quality", help="folder for the models")
    add_option(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with recorded(args.results, __file__):
        emissions(args, out)
        censoring_bias(args, out)


if __name__ == "__main__":
    main()
