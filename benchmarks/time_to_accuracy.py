"""Time to accuracy of every cutoff policy and training mode, on several clusters, by the DAG.

For each trace (a calm simulated cluster, one where a straggler emerges, one whose stragglers come
and go, a real Alibaba PAI job) this writes a config and runs the project's own Snakemake DAG for
its convergence runs: digits, every policy of the registry and both modes (async, cyclic),
``--seeds`` seeds, on the trace's test part with the training part as history (and as the
run-time model's training data).
bdsgd is also run with ``train.objective: progress`` (the cutoff that maximises the expected loss
decrease per second from the measured gradient noise scale) as ``bdsgd-progress``.

It prints, per trace and policy: the median virtual time to the target accuracy over seeds with
a distribution-free interval of order statistics (``bdsgd.stats.median_interval``: min
to max at five seeds, coverage 93.75 %; a seed that never reaches the target counts as
infinitely slow), how many seeds reached it, the mean final accuracy, gradients per
second and mean cutoff; and writes the table as CSV.

    .venv/bin/python benchmarks/time_to_accuracy.py [--seeds 5] [--workers 16] [--cores 2]
        [--out results/tta]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

from bdsgd.layout import ANY, Layout
from bdsgd.stats import median_interval

REPO = Path(__file__).resolve().parents[1]
POLICIES = ["sync", "static", "elfving", "ecdf", "bandit", "bdsgd", "explore-bdsgd", "oracle",
            "bayes", "async", "cyclic"]
# the rules call `bdsgd`: this interpreter's environment first on PATH
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def traces(workers: int) -> dict:
    sim = {"source": "simulate", "train_fraction": 0.5}
    return {
        "calm": {**sim, "simulate": {"scenario": "calm", "workers": workers, "iterations": 400}},
        "straggler": {**sim, "simulate": {"scenario": "emerging-straggler", "workers": workers,
                                          "iterations": 400}},
        "intermittent": {**sim, "simulate": {"scenario": "intermittent-straggler",
                                             "workers": workers, "iterations": 400}},
        "pai-job1": {"source": "import", "path": str(REPO / "tests/data/alibaba_pai_job_1_norm.csv"),
                     "format": "alibaba-pai"},
    }


def config(name: str, spec: dict, args) -> dict:
    policies = [p for p in args.policies if p != "bayes" or spec["source"] == "simulate"]
    suffix = f"-comm{args.comm_s:g}" if args.comm_s else ""
    return {
        "experiment": f"tta-{name}{suffix}", "seed": 0, "traces": {name: spec},
        "model": {"epochs": 30, "samples": 32, "prior_steps": args.prior_steps},
        "throughput": {"policies": ["sync"], "comm_s": args.comm_s},
        "train": {"trace": name, "tasks": ["digits"], "policies": policies,
                  "seeds": list(range(args.seeds)), "batch_size": 16, "learning_rate": 0.1,
                  "max_iterations": args.iterations, "eval_every": 5,
                  "target_accuracy": {"digits": args.target}},
        "wandb": {"mode": "disabled"},
    }


def run_dag(cfg: dict, out: Path, cores: int) -> Path:
    """The DAG's convergence runs of ``cfg`` (only those: no figures); results/<experiment>."""
    path = out / f"{cfg['experiment']}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    layout = Layout.of(cfg["experiment"])
    targets = [layout.run("result.json", cfg["train"]["trace"], "digits", p, s)
               for p in cfg["train"]["policies"] for s in cfg["train"]["seeds"]]
    with open(out / f"{cfg['experiment']}.log", "w") as log:
        subprocess.run([sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
                        "--configfile", str(path), "--cores", str(cores), "--rerun-incomplete",
                        "--keep-going", *targets], cwd=out, check=True, stdout=log, stderr=subprocess.STDOUT,
                       env=ENV)
    return out / layout.results


def run_progress(cfg: dict, results: Path, out: Path) -> None:
    """bdsgd under train.objective: progress, beside the DAG's runs (same trace, model, history)."""
    cfg = {**cfg, "train": {**cfg["train"], "objective": "progress"}}
    path = out / f"{cfg['experiment']}-progress.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    layout, trace = Layout(str(results)), cfg["train"]["trace"]
    for seed in cfg["train"]["seeds"]:
        run = Path(layout.run_dir(trace, "digits", "bdsgd-progress", seed))
        if (run / "result.json").exists():
            continue
        subprocess.run([sys.executable, "-m", "bdsgd", "train", "--config", str(path),
                        "--task", "digits", "--policy", "bdsgd", "--seed", str(seed),
                        "--trace", layout.trace(trace, "test"),
                        "--history", layout.trace(trace, "train"),
                        "--model", layout.model(trace), "--out", str(run)],
                       check=True, stdout=subprocess.DEVNULL, env=ENV)


def table(results: Path, trace: str, label: str) -> pd.DataFrame:
    """A row per policy of ``trace``'s runs, named ``label`` in the table."""
    rows, layout = [], Layout(str(results))
    found = layout.find(layout.run("result.json", trace, "digits", ANY, ANY))
    for policy, paths in itertools.groupby(found, key=lambda p: p.parent.parent.name):
        runs = [json.loads(p.read_text())["summary"] for p in paths]
        tta = np.array([np.inf if r["time_to_target_s"] is None else r["time_to_target_s"]
                        for r in runs])
        median, low, high, coverage = median_interval(tta)
        rows.append({"trace": label, "policy": policy, "seeds": len(runs),
                     "reached": int(np.isfinite(tta).sum()), "median_time_to_target_s": median,
                     "low": low, "high": high, "coverage": coverage,
                     "final_accuracy": np.mean([r["final_accuracy"] for r in runs]),
                     "gradients_per_s": np.mean([r["gradients_per_s"] for r in runs]),
                     "mean_cutoff": np.mean([r["mean_cutoff"] for r in runs])})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds per policy and trace")
    parser.add_argument("--workers", type=int, default=16, help="workers of the simulated traces")
    parser.add_argument("--iterations", type=int, default=150,
                        help="synchronous iterations per run (the budget of gradients: x n)")
    parser.add_argument("--target", type=float, default=0.93, help="target test accuracy")
    parser.add_argument("--cores", type=int, default=2, help="Snakemake --cores")
    parser.add_argument("--comm-s", type=float, default=0.0,
                        help="communication time per iteration (cutoff policies), per gradient "
                             "(async) and per push (cyclic); with 0, cyclic's free pushes make it "
                             "asynchronous SGD")
    parser.add_argument("--policies", nargs="+", default=POLICIES, help="policies and modes to run")
    parser.add_argument("--no-progress", dest="progress", action="store_false",
                        help="skip bdsgd under train.objective: progress")
    parser.add_argument("--traces", nargs="+", default=["calm", "straggler", "pai-job1"],
                        help="which of the traces to run")
    parser.add_argument("--out", default="results/tta", help="working folder (resumable)")
    parser.add_argument("--prior-steps", type=int, default=200,
                        help="Adam steps of the prior over clusters each trace's DAG fits")
    add_option(parser)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    frames = []
    for name in args.traces:
        cfg = config(name, traces(args.workers)[name], args)
        results = run_dag(cfg, out, args.cores)
        if args.progress and "bdsgd" in cfg["train"]["policies"]:
            run_progress(cfg, results, out)
        frames.append(table(results, name, cfg["experiment"].removeprefix("tta-")))
        print(f"{name}: done", flush=True)
    df = pd.concat(frames, ignore_index=True)
    suffix = f"-comm{args.comm_s:g}" if args.comm_s else ""
    df.to_csv(out / f"time_to_accuracy{suffix}.csv", index=False, float_format="%.4g")
    fmt = {"median_time_to_target_s": "{:.1f}", "low": "{:.1f}", "high": "{:.1f}",
           "coverage": "{:.4f}",
           "final_accuracy": "{:.3f}", "gradients_per_s": "{:.2f}", "mean_cutoff": "{:.2f}"}
    with recorded(args.results, __file__):
        print(df.to_string(index=False, formatters={k: v.format for k, v in fmt.items()}))


if __name__ == "__main__":
    main()
