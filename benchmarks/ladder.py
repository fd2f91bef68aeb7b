"""From the paper's BDSGD to the project's, one change a rung: which change buys what.

A simulated trace (``--scenario``, ``--workers``), split in time; on its second part each rung's
policy replayed by ``bdsgd throughput``, warmed up on the first part, with the rung's model
trained on the first part:

    0  paper           Teng & Wood's: Gaussian emission, censored run-times imputed from the
                       iteration's observed ones (in training and while serving), ratio rule,
                       no margin, the model alone, from the initial values, frozen
    a  (diagnosis)     rung 0 with the censored likelihood in place of imputation
    1  + log-normal    log-normal emission (still imputing)
    2  + censoring     the censored likelihood log P(x > tau) in place of imputation
    3  + rate rule     argmax c - lambda E[x_(c)] in place of argmax c / E[x_(c)]
    4  + margin        policies.min_gain
    5  + averaging     the model averaged with the simple predictors (bdsgd)
    6  + prior         the model trained from the prior over clusters
    7  + learning      learning while serving (bdsgd as the workflow runs it)

Printed: each rung's throughput over the hindsight optimum, its mean cutoff and how often it
changes, and its paired ratio over the rung before with the verdict
(``bdsgd.figures.verdicts``, a batch-means interval over blocks of the same iterations).

    .venv/bin/python benchmarks/ladder.py [--scenario mixed] [--workers 8] [--iterations 400]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

from bdsgd.figures.verdicts import throughput_verdicts

ROOT = Path(__file__).resolve().parents[1]
FROZEN = {"online_every": 0}
PAPER_RULE = {"rule": "ratio", "min_gain": 0.0, **FROZEN}
# rung -> (change, policy, model, policies: settings)
RUNGS = {
    "0": ("paper", "bdsgd-paper", "paper", FROZEN),
    "a": ("0 with the censored likelihood", "bdsgd-model", "gaussian", PAPER_RULE),
    "1": ("+ log-normal", "bdsgd-model", "lognormal-impute", PAPER_RULE),
    "2": ("+ censored likelihood", "bdsgd-model", "lognormal", PAPER_RULE),
    "3": ("+ rate rule", "bdsgd-model", "lognormal", {"min_gain": 0.0, **FROZEN}),
    "4": ("+ margin", "bdsgd-model", "lognormal", FROZEN),
    "5": ("+ averaging", "bdsgd", "lognormal", FROZEN),
    "6": ("+ prior", "bdsgd", "prior", FROZEN),
    "7": ("+ learning while serving", "bdsgd", "prior", {}),
}
# model -> `bdsgd model train` flags and model: settings
MODELS = {"paper": (["--paper"], {}), "gaussian": ([], {"emission": "gaussian"}),
          "lognormal-impute": (["--censoring", "impute"], {}), "lognormal": ([], {}),
          "prior": (["--prior"], {})}


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


def bdsgd(*args) -> None:
    proc = subprocess.run([sys.executable, "-m", "bdsgd", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bdsgd {' '.join(map(str, args))} failed:\n{proc.stdout[-2000:]}\n"
                 f"{proc.stderr[-2000:]}")


def write_config(path: Path, base: dict, **sections) -> Path:
    """``base`` with each section's keys updated, written to ``path``."""
    cfg = json.loads(json.dumps(base))
    for name, keys in sections.items():
        cfg.setdefault(name, {}).update(keys)
    path.write_text(yaml.safe_dump(cfg))
    return path


def main() -> None:
    args = parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="ladder_"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"outputs in {out}", file=sys.stderr, flush=True)
    # the smoke profile's model and prior sizes (configs/smoke.yaml): minutes on a CPU
    model = {"epochs": 30, "prior_workers": args.workers, "prior_iterations": 100,
             "prior_draws": 1, "prior_steps": 30}
    base = {"experiment": "ladder", "seed": args.seed, "model": model,
            "traces": {"t": {"source": "simulate", "simulate": {
                "scenario": args.scenario, "workers": args.workers,
                "iterations": args.iterations, "straggler_start": args.straggler_start}}}}
    config = write_config(out / "config.yaml", base)
    trace, train, test = (out / f"{part}.parquet" for part in ("trace", "train", "test"))
    if not test.exists():  # a folder given again (--out) keeps its trace and models
        bdsgd("traces", "simulate", "--config", config, "--name", "t", "--out", trace)
        bdsgd("traces", "split", trace, "--train", train, "--test", test)
    clusters = out / "over-clusters.pt"
    if not clusters.exists():
        bdsgd("model", "prior", "--config", config, "--out", clusters, "--quiet")
    for name, (flags, keys) in MODELS.items():
        if not (out / f"{name}.pt").exists():
            flags = [f if f != "--prior" else f"--prior={clusters}" for f in flags]
            bdsgd("model", "train", train, "--config", write_config(out / f"{name}.yaml", base,
                                                                    model=keys),
                  "--out", out / f"{name}.pt", "--quiet", *flags)
    rows, decisions = [], []
    for rung, (change, policy, model, keys) in RUNGS.items():
        flag = "--paper-model" if policy == "bdsgd-paper" else "--model"
        bdsgd("throughput", test, "--policies", f"{policy},oracle", flag, out / f"{model}.pt",
              "--history", train, "--config", write_config(out / f"rung{rung}.yaml", base,
                                                           policies=keys),
              "--json", out / f"rung{rung}.json", "--decisions", out / f"rung{rung}.parquet")
        result = json.loads((out / f"rung{rung}.json").read_text())["policies"][policy]
        replay = pd.read_parquet(out / f"rung{rung}.parquet")
        replay = replay[replay["policy"] == policy].sort_values("iteration")
        decisions.append(replay.assign(policy=rung, trace="t"))
        rows.append({"rung": rung, "change": change, "over_optimum": result["relative_to_oracle"],
                     "mean_cutoff": result["mean_cutoff"],
                     "cutoff_changes": float(np.mean(np.diff(replay["cutoff"]) != 0))})
    table = pd.DataFrame(rows).set_index("rung")
    steps = list(zip(list(RUNGS)[1:], ["0", "0", *list(RUNGS)[2:-1]], strict=True))
    paired = throughput_verdicts(pd.concat(decisions), steps).set_index("policy")
    table["over_previous"] = paired["ratio"]
    table["interval"] = [f"{lo:.3f} to {hi:.3f}" if np.isfinite(lo) else ""
                         for lo, hi in zip(paired["low"].reindex(table.index),
                                           paired["high"].reindex(table.index), strict=True)]
    table["verdict"] = paired["verdict"]
    table["against"] = paired["reference"]
    print(f"{args.scenario}, {args.workers} workers, {args.iterations} iterations (replayed: the "
          f"second half), straggler from {args.straggler_start:.0%}; seed {args.seed}")
    print(table.astype(object).where(table.notna(), "").to_string(
        float_format=lambda v: f"{v:.3f}"))


if __name__ == "__main__":
    main()
