"""The convergence trainer at paper scale: wall-clock per iteration on CUDA against CPU, side by side.

A virtual cluster of 158 workers (the paper's size) with 32 samples each: every iteration is one
forward/backward over the accepted workers' union batch (up to 5,056 samples) plus the policy's
decision. The data set is a synthetic MNIST written in the real idx format (60,000 / 10,000
28x28 images: a fixed random prototype per class plus noise, so accuracy rises), read by
torchvision's MNIST reader; the trace is the simulator's emerging-straggler scenario. Per device
and policy it prints seconds per iteration, accepted samples per second, the policy's decision
time as a fraction of the iteration, and the test accuracy reached; then the CUDA speed-up.
Seconds per iteration are the whole run's wall-clock (data loading and the one test evaluation
included) over its iterations.

    .venv/bin/python benchmarks/bench_trainer.py [--workers 158] [--iterations 200]
        [--cpu-iterations 10] [--chunk 128] [--lr 0.01] [--policies sync static bdsgd]
"""

from __future__ import annotations

import argparse
import json
import struct
import tempfile
from pathlib import Path

import numpy as np
import torch

from bdsgd.config import from_dict
from bdsgd.runtime_model.train import train_model
from bdsgd.traces.io import write_trace
from bdsgd.traces.simulate import simulate
from bdsgd.training.virtual import train_run


def write_idx(path: Path, array: np.ndarray) -> None:
    """LeCun's idx format: magic 0x0000 08 <ndim>, big-endian sizes, unsigned bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def synthetic_mnist(root: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    prototypes = rng.integers(0, 256, (10, 28, 28))
    for prefix, n in (("train", 60_000), ("t10k", 10_000)):
        labels = rng.integers(0, 10, n)
        noise = rng.normal(0, 60, (n, 28, 28))
        images = np.clip(prototypes[labels] + noise, 0, 255)
        write_idx(root / "MNIST" / "raw" / f"{prefix}-images-idx3-ubyte", images)
        write_idx(root / "MNIST" / "raw" / f"{prefix}-labels-idx1-ubyte", labels)


def config(args, data_dir: Path, device: str, iterations: int):
    return from_dict({
        "experiment": "bench-trainer", "seed": 0,
        "traces": {"t": {"source": "simulate", "simulate": {
            "scenario": "emerging-straggler", "workers": args.workers,
            "iterations": args.trace_iterations, "workers_per_node": 4}}},
        "model": {"epochs": args.model_epochs},
        "train": {"trace": "t", "tasks": ["mnist"], "data_dir": str(data_dir),
                  "batch_size": args.batch, "max_iterations": iterations,
                  "eval_every": iterations, "target_accuracy": {"mnist": 0.9},
                  "device": device, "threads": args.threads, "checkpoint_every": 10_000,
                  "chunk_samples": args.chunk, "learning_rate": args.lr},
        "wandb": {"mode": "disabled"},
    }, "<bench_trainer>")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=158, help="virtual workers")
    parser.add_argument("--batch", type=int, default=32, help="mini-batch per worker")
    parser.add_argument("--iterations", type=int, default=200, help="iterations per CUDA run")
    parser.add_argument("--cpu-iterations", type=int, default=10,
                        help="iterations per CPU run (0: skip CPU)")
    parser.add_argument("--trace-iterations", type=int, default=400,
                        help="simulated trace length; the model trains on its first half")
    parser.add_argument("--model-epochs", type=int, default=5, help="run-time model epochs")
    parser.add_argument("--threads", type=int, default=4, help="CPU threads (train.threads)")
    parser.add_argument("--lr", type=float, default=0.01,
                        help="learning rate at c = n (at 0.05, momentum 0.9, some runs on this "
                             "synthetic set collapse to chance: see benchmarks/README.md)")
    parser.add_argument("--chunk", type=int, default=128,
                        help="samples per forward/backward pass (train.chunk_samples)")
    parser.add_argument("--policies", nargs="+", default=["sync", "static", "bdsgd"],
                        help="cutoff policies to run")
    parser.add_argument("--out", default=None, help="folder for data and runs (default: temp)")
    args = parser.parse_args()
    devices = [(d, i) for d, i in (("cuda", args.iterations), ("cpu", args.cpu_iterations))
               if i > 0 and (d == "cpu" or torch.cuda.is_available())]
    work = Path(args.out or tempfile.mkdtemp(prefix="bench_trainer_"))
    synthetic_mnist(work / "data")
    cfg = config(args, work / "data", "cpu", 1)
    trace, _ = simulate(cfg.traces["t"].simulate, seed=0)
    train, test = trace.split(0.5)
    write_trace(train, work / "train.parquet")
    write_trace(test, work / "test.parquet")
    model = None
    if "bdsgd" in args.policies:
        model = train_model(train, cfg.model, seed=0, out=work / "model.pt", progress=False)
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"torch {torch.__version__}, {name}; {args.workers} workers x {args.batch} samples, "
          f"chunks of {args.chunk}, mnist (synthetic, idx format), LeNet; data in {work}")
    print(f"{'device':>6} {'policy':>8} {'iters':>6} {'s/iter':>8} {'samples/s':>10} "
          f"{'mean c':>7} {'decision/iter':>13} {'accuracy':>8}")
    per_iteration: dict[tuple[str, str], float] = {}
    for device, iterations in devices:
        run_cfg = config(args, work / "data", device, iterations)
        for policy in args.policies:
            out = work / "runs" / device / policy
            train_run(run_cfg, "mnist", policy, 0, work / "test.parquet", out,
                      model_path=model if policy == "bdsgd" else None,
                      history_path=work / "train.parquet")
            result = json.loads((out / "result.json").read_text())
            summary, wall = result["summary"], result["wallclock"]
            seconds = wall["seconds"] / iterations
            per_iteration[device, policy] = seconds
            samples = summary["mean_cutoff"] * args.batch / seconds
            print(f"{device:>6} {policy:>8} {iterations:6d} {seconds:8.4f} {samples:10.0f} "
                  f"{summary['mean_cutoff']:7.1f} {wall['decision_latency_p50_s'] / seconds:13.4f} "
                  f"{summary['final_accuracy']:8.4f}")
    for policy in args.policies:
        if ("cuda", policy) in per_iteration and ("cpu", policy) in per_iteration:
            ratio = per_iteration["cpu", policy] / per_iteration["cuda", policy]
            print(f"{policy}: CUDA {ratio:.1f}x faster per iteration than CPU "
                  f"({args.threads} threads)")


if __name__ == "__main__":
    main()
