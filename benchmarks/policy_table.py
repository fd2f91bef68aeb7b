"""The policy x rule x trace throughput table of issues 12 and 13, measured in one run.

For each trace (the simulator's scenarios and the two real Alibaba PAI jobs): train the run-time
model on the first half, warm every learning policy up on it (``--cold``: don't), and replay
every policy under both decision rules on the second half with
``bdsgd.throughput.run_benchmark`` (the harness the CLI uses), and print throughput relative to
the exact hindsight ``oracle`` and, on simulated traces, to ``bayes`` (the better of its two
rules), which draws from the simulator's true dynamics given its true latent state.

    .venv/bin/python benchmarks/policy_table.py [--workers 32] [--iterations 2000] [--epochs 100]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import time
from pathlib import Path

import torch
import yaml

from bdsgd.config import from_dict
from bdsgd.runtime_model.train import train_model
from bdsgd.throughput import run_benchmark
from bdsgd.traces.formats import import_trace
from bdsgd.traces.io import write_trace
from bdsgd.traces.simulate import simulate, truth_path, write_truth

REPO = Path(__file__).resolve().parents[1]
REFERENCE_ITERATIONS = 500  # --epochs is for a training part this long
SCENARIOS = ("calm", "emerging-straggler", "node-contention", "load-shift", "mixed")
POLICIES = ["sync", "static", "elfving", "ecdf", "bandit", "bdsgd", "explore-bdsgd",
            "oracle-myopic", "async"]


def config(args, scenario: str):
    model = {"epochs": args.epochs}
    for item in args.model:
        key, _, value = item.partition("=")
        model[key] = yaml.safe_load(value)
    return from_dict({
        "experiment": "policy-table", "seed": args.seed,
        "traces": {"t": {"source": "simulate", "simulate": {
            "scenario": scenario, "workers": args.workers, "iterations": args.iterations}}},
        "model": model,
        "train": {"trace": "t", "tasks": ["digits"]},
    }, "<policy_table>")


def traces(args):
    for scenario in SCENARIOS:
        if scenario not in args.traces:
            continue
        cfg = config(args, scenario)
        trace, truth = simulate(cfg.traces["t"].simulate, seed=args.seed)
        yield f"sim {scenario}", trace, truth, cfg
    for job in (1, 2):
        if f"pai-job{job}" not in args.traces:
            continue
        csv = REPO / f"tests/data/alibaba_pai_job_{job}_norm.csv"
        yield f"alibaba job {job}", import_trace(csv, "alibaba-pai"), None, config(args, "mixed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=32, help="workers of the simulated traces")
    parser.add_argument("--iterations", type=int, default=2000,
                        help="iterations of the simulated traces (half trains the model)")
    parser.add_argument("--epochs", type=int, default=100,
                        help="run-time model training epochs for a 500-iteration training part "
                             "(a shorter one gets proportionally more)")
    parser.add_argument("--model", nargs="*", default=[], metavar="KEY=VALUE",
                        help="run-time model settings over the config's defaults, e.g. batch_size=2")
    parser.add_argument("--cold", action="store_true",
                        help="policies start cold on the test part (default: they first see the "
                             "training part, as the server that gathered it would have)")
    parser.add_argument("--seed", type=int, default=0, help="seed of simulation, training, policies")
    parser.add_argument("--out", default="benchmarks/out", help="folder for traces and models")
    parser.add_argument("--traces", nargs="+", default=[*SCENARIOS, "pai-job1", "pai-job2"],
                        choices=[*SCENARIOS, "pai-job1", "pai-job2"], help="traces to measure")
    parser.add_argument("--policies", nargs="+", default=POLICIES,
                        help="policies to replay (bayes is added on simulated traces)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out)

    lines = ["| trace | policy | ratio / oracle | rate / oracle | best / bayes |",
             "| --- | --- | ---: | ---: | ---: |"]
    for name, trace, truth, cfg in traces(args):
        stem = out / name.replace(" ", "_")
        train, test = trace.split(0.5)
        write_trace(test, f"{stem}_test.parquet")
        write_trace(train, f"{stem}_train.parquet")
        policies = args.policies + (["bayes"] if truth is not None else [])
        if truth is not None:
            write_truth(truth, truth_path(f"{stem}_test.parquet"))
        start = time.perf_counter()
        # the same training compute (epochs x iterations) and Adam steps for every trace: a
        # short training part (the Alibaba jobs: 150 and 119 iterations) gets more epochs
        epochs = max(args.epochs, round(args.epochs * REFERENCE_ITERATIONS / train.n_iterations))
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, epochs=epochs))
        with contextlib.redirect_stdout(io.StringIO()):
            model = train_model(train, cfg.model, seed=args.seed, out=f"{stem}_model.pt",
                                progress=False, config=cfg)
            rows = run_benchmark(f"{stem}_test.parquet", policies, model_path=model, rule="both",
                                 cfg=cfg, history_path=None if args.cold else
                                 f"{stem}_train.parquet")["policies"]
        print(f"{name}: n={trace.n_workers}, {test.n_iterations} test iterations, {epochs} epochs, "
              f"{time.perf_counter() - start:.0f} s", flush=True)
        bayes = max((rows[f"bayes/{r}"]["gradients_per_s"] for r in ("ratio", "rate")
                     if f"bayes/{r}" in rows), default=None)
        for policy in policies:
            pair = [rows.get(f"{policy}/{r}", rows[policy]) for r in ("ratio", "rate")]
            best = max(p["gradients_per_s"] for p in pair)
            cells = [f"{p['relative_to_oracle']:.4f}" for p in pair]
            if pair[0] is pair[1]:
                cells[1] = "(no rule)"
            rel_bayes = f"{best / bayes:.4f}" if bayes else ""
            lines.append(f"| {name} | {policy} | {cells[0]} | {cells[1]} | {rel_bayes} |")
    print("\n" + "\n".join(lines))


if __name__ == "__main__":
    main()
