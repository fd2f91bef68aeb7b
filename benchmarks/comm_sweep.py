"""Where cutting workers stops paying: every causal policy and the hindsight optimum against the
ratio of communication to compute, for a single, a sharded parameter server and a ring.

A simulated straggler trace (``--scenario``, ``--workers``), split in time; the run-time model
trained on the first part with its defaults; then ``bdsgd throughput --comm-sweep`` on the second
part, each learning policy warmed up on the first: for each ratio rho (the time a single
server's link needs for a whole iteration, n gradients in and n copies out, over the median
run-time) and each topology, throughput over sync's (above 1: cutting pays) and over the
optimum's. Printed: the optimum's gain over sync per ratio and topology, each policy's fraction
of the optimum, and the largest ratio at which the optimum still gains 2 % over sync.

    .venv/bin/python benchmarks/comm_sweep.py [--scenario emerging-straggler] [--workers 32] \\
        [--iterations 600] [--ratios 0.01,0.03,0.1,0.3,1,3,10] [--late finish] [--out DIR]
"""

from __future__ import annotations

import argparse

import pandas as pd
import yaml
from commands import bdsgd, output_folder  # sibling modules: benchmarks/ is sys.path[0]
from results_md import add_option, recorded

POLICIES = "sync,static,elfving,ecdf,bandit,ewma,persist,bdsgd,bdsgd-model,oracle"
PAYS = 1.02  # the optimum gains at least 2 % over sync


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default="emerging-straggler", help="the simulator's scenario")
    p.add_argument("--workers", type=int, default=32, help="n workers")
    p.add_argument("--iterations", type=int, default=600, help="iterations of the whole trace")
    p.add_argument("--ratios", default="0.01,0.03,0.1,0.3,1,3,10",
                   help="communication-to-compute ratios (throughput.comm_ratios)")
    p.add_argument("--shards", type=int, default=4, help="servers of the sharded topology")
    p.add_argument("--late", choices=("finish", "abandon"), default="finish",
                   help="network.late: what the cut workers do (a ring needs abandon)")
    p.add_argument("--policies", default=POLICIES, help="policies replayed (comma list)")
    p.add_argument("--seed", type=int, default=0, help="seed of the trace, model and policies")
    p.add_argument("--out", help="folder for the trace, model and tables (default: a new one)")
    add_option(p)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    out = output_folder(args.out, "comm_sweep_")
    config = out / "config.yaml"
    config.write_text(yaml.safe_dump({
        "experiment": "comm-sweep", "seed": args.seed,
        "traces": {"t": {"source": "simulate", "simulate": {
            "scenario": args.scenario, "workers": args.workers, "iterations": args.iterations}}},
        "throughput": {"comm_ratios": [float(r) for r in args.ratios.split(",")]},
        "network": {"shards": args.shards, "late": args.late}}))
    trace, train, test = (out / f"{part}.parquet" for part in ("trace", "train", "test"))
    bdsgd("traces", "simulate", "--config", config, "--name", "t", "--out", trace)
    bdsgd("traces", "split", trace, "--train", train, "--test", test)
    bdsgd("model", "train", train, "--config", config, "--out", out / "model.pt", "--quiet")
    bdsgd("throughput", test, "--policies", args.policies, "--model", out / "model.pt",
          "--history", train, "--config", config, "--json", out / "throughput.json",
          "--comm-sweep", out / "comm_sweep.csv")
    sweep = pd.read_csv(out / "comm_sweep.csv")
    print(f"{args.scenario}, {args.workers} workers, {args.iterations} iterations (replayed: "
          f"the second half); rule rate; sharded {args.shards} ways; late workers {args.late}")

    gain = sweep[sweep["policy"] == "oracle"].pivot(index="ratio", columns="topology",
                                                   values="relative_to_sync")
    print("\nthe optimum's throughput over sync's (above 1: cutting workers pays)")
    print(gain.to_string(float_format=lambda v: f"{v:.3f}"))
    for topology in gain.columns:
        pays = gain.index[gain[topology] >= PAYS]
        print(f"{topology}: the optimum gains >= {PAYS - 1:.0%} over sync up to ratio "
              f"{pays.max() if len(pays) else 'none'}")
    for topology, rows in sweep.groupby("topology", sort=False):
        table = rows.pivot(index="policy", columns="ratio", values="relative_to_oracle")
        print(f"\n{topology}: each policy's throughput over the optimum's, by ratio")
        print(table.to_string(float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
