"""From the paper's BDSGD to the project's, one change a rung: which change buys what.

A simulated trace (``--scenario``, ``--workers``), split in time; the models of the ladder
(``bdsgd.ladder``: the paper's, the ladder's own, the workflow's from a prior over clusters)
trained on its first part; then ``bdsgd ladder`` on its second part, every rung replayed with its
model and settings, warmed up on the first part. Printed: the ladder's table
(``bdsgd.figures.ladder.ladder_table``): each rung's throughput over the hindsight optimum, its
mean cutoff and how often it changes, and its paired ratio over the rung it follows with the
verdict (a batch-means interval over blocks of the same iterations).

    .venv/bin/python benchmarks/ladder.py [--scenario mixed] [--workers 8] [--iterations 400]
"""

from __future__ import annotations

import argparse

import yaml
from commands import bdsgd, output_folder  # sibling modules: benchmarks/ is sys.path[0]
from results_md import add_option, recorded

from bdsgd.figures.inputs import load_ladders
from bdsgd.figures.ladder import ladder_table
from bdsgd.ladder import TRAINED


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="mixed", help="the simulator's scenario")
    p.add_argument("--workers", type=int, default=8, help="n workers")
    p.add_argument("--iterations", type=int, default=400, help="iterations of the whole trace")
    p.add_argument("--straggler-start", type=float, default=0.4,
                   help="simulate.straggler_start: where a straggler scenario's straggler starts, "
                        "a fraction of the trace")
    p.add_argument("--seed", type=int, default=0, help="seed of the trace, models and policies")
    p.add_argument("--out", help="folder for the trace, models and replays (default: a new one)")
    add_option(p)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    out = output_folder(args.out, "ladder_")
    # the smoke profile's model and prior sizes (configs/smoke.yaml): minutes on a CPU
    model = {"epochs": 30, "prior_workers": args.workers, "prior_iterations": 100,
             "prior_draws": 1, "prior_steps": 30}
    base = {"experiment": "ladder", "seed": args.seed, "model": model,
            "traces": {"t": {"source": "simulate", "simulate": {
                "scenario": args.scenario, "workers": args.workers,
                "iterations": args.iterations, "straggler_start": args.straggler_start}}}}
    config = out / "config.yaml"
    config.write_text(yaml.safe_dump(base))
    trace, train, test = (out / f"{part}.parquet" for part in ("trace", "train", "test"))
    if not test.exists():  # a folder given again (--out) keeps its trace and models
        bdsgd("traces", "simulate", "--config", config, "--name", "t", "--out", trace)
        bdsgd("traces", "split", trace, "--train", train, "--test", test)
    clusters = out / "over-clusters.pt"
    if not clusters.exists():
        bdsgd("model", "prior", "--config", config, "--out", clusters, "--quiet")
    flags = {"paper": "--paper", **TRAINED, "model": f"--prior={clusters}"}
    for kind, how in flags.items():
        if not (out / f"{kind}.pt").exists():
            bdsgd("model", "train", train, "--config", config, "--out", out / f"{kind}.pt",
                  "--quiet", *how.split())
    results = out / "results" / "throughput" / "t"
    results.mkdir(parents=True, exist_ok=True)
    bdsgd("ladder", test, "--history", train, "--config", config, "--paper-model",
          out / "paper.pt", "--model", out / "model.pt",
          *(a for kind in TRAINED for a in (f"--{kind}-model", out / f"{kind}.pt")),
          "--json", results / "ladder.json", "--decisions", results / "ladder.parquet")
    table = ladder_table(load_ladders(out / "results"))
    print(f"{args.scenario}, {args.workers} workers, {args.iterations} iterations (replayed: the "
          f"second half), straggler from {args.straggler_start:.0%}; seed {args.seed}")
    shown = table.drop(columns=["trace", "order", "policy"]).set_index("rung")
    print(shown.astype(object).where(shown.notna(), "").to_string(
        float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
