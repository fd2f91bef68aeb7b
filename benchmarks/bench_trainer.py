"""The convergence trainer at paper scale: wall-clock per iteration on CUDA against CPU, side by side.

A virtual cluster of 158 workers (the paper's size) with 32 samples each: every iteration is the
policy's decision plus one forward/backward over the accepted workers' union batch (up to 5,056
samples). The data sets are synthetic, written in the real on-disk formats into a temporary
folder and read by the trainer's own readers (``bdsgd.tasks``), each a fixed random
prototype image per class plus noise, so test accuracy rises:

- mnist:   60,000 / 10,000 28x28 images as idx files (torchvision's MNIST reader), LeNet;
- cifar10: 50,000 / 10,000 3x32x32 images as the python version's pickles (torchvision's CIFAR10
  reader), ResNet-20. torchvision checks these files against the official release's md5 sums,
  which synthetic files cannot match: this script BYPASSES THE MD5 CHECK (it checks only that
  the files exist, as tests/test_tasks.py's cifar_without_md5 fixture does).

The trace is the simulator's emerging-straggler scenario; the bdsgd policy's run-time model is
trained on its first half for a few epochs, and every policy replays the second half.

Per task, device and policy it prints seconds per iteration two ways: "wall", result.json's
wall-clock over the iterations (reading the data set, building and warming up the policy, one
test evaluation and writing the outputs included), and "loop", the training loop's steady state
(the trainer's sgd_step is wrapped to note when each call returns); then, from the loop's time,
accepted samples per second, the policy's decision time p50 (result.json) as a fraction of an
iteration, the final test accuracy, and how many warnings the run raised (on CUDA the trainer runs
in torch's deterministic "warn" mode); then the CPU / CUDA ratio of loop seconds per iteration.
Before the runs, per task, the parts of one iteration at c = n on the main device: gathering the
union batch from the CPU-resident data set, copying it to the device, and the SGD step under the
trainer's torch settings and without deterministic mode, next to gathering from a copy of the
data set kept on the device.
Each run's own output goes to <out>/runs/<task>/<device>/<policy>/train.log.

    .venv/bin/python benchmarks/bench_trainer.py [--tasks mnist cifar10] [--device cuda]
        [--workers 158] [--iterations 300] [--cpu-iterations 10] [--chunk 1024]
        [--policies sync static bdsgd] [--threads 16] [--lr 0.01] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pickle
import struct
import tempfile
import time
import warnings
from collections import Counter
from functools import partial
from pathlib import Path

import numpy as np
import torch
from bench_gradients import seconds  # a sibling script: benchmarks/ is sys.path[0]
from results_md import add_option, recorded

from bdsgd.config import from_dict
from bdsgd.devices import torch_settings
from bdsgd.runtime_model.train import train_model
from bdsgd.sgd import sgd_step
from bdsgd.tasks import WorkerStreams, load_task
from bdsgd.traces.io import write_trace
from bdsgd.traces.simulate import simulate
from bdsgd.training import run_spec, synchronous, train_run


def learnable_images(rng, prototypes: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n uint8 images: the prototype of a random class (one per class) plus Gaussian noise."""
    shape = prototypes.shape[1:]
    labels = rng.integers(0, len(prototypes), n)
    images = np.empty((n, *shape), dtype=np.uint8)
    for start in range(0, n, 10_000):  # in blocks: bounded memory for the noise
        block = slice(start, start + 10_000)
        noise = rng.normal(0, 60, (len(labels[block]), *shape))
        images[block] = np.clip(prototypes[labels[block]] + noise, 0, 255)
    return images, labels


def write_idx(path: Path, array: np.ndarray) -> None:
    """LeCun's idx format: magic 0x0000 08 <ndim>, big-endian sizes, unsigned bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def synthetic_mnist(root: Path, seed: int = 0, images: int = 60_000) -> None:
    """The idx files of ``images`` training images and a sixth as many test images."""
    rng = np.random.default_rng(seed)
    prototypes = rng.integers(0, 256, (10, 28, 28))  # shared by the training and test images
    for prefix, n in (("train", images), ("t10k", images // 6)):
        images, labels = learnable_images(rng, prototypes, n)
        write_idx(root / "MNIST" / "raw" / f"{prefix}-images-idx3-ubyte", images)
        write_idx(root / "MNIST" / "raw" / f"{prefix}-labels-idx1-ubyte", labels)


def synthetic_cifar10(root: Path, seed: int = 0, images: int = 50_000) -> None:
    """The python version's pickles: 5 training batches and a test batch of ``images`` / 5
    images each, each row the R, G and B planes of a 32x32 image, and batches.meta."""
    rng = np.random.default_rng(seed)
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True, exist_ok=True)
    prototypes = rng.integers(0, 256, (10, 3 * 32 * 32))  # shared by every batch
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        pixels, labels = learnable_images(rng, prototypes, images // 5)
        batch = {"batch_label": name, "labels": labels.tolist(), "data": pixels,
                 "filenames": [f"{name}_{i}.png" for i in range(len(labels))]}
        (base / name).write_bytes(pickle.dumps(batch))
    meta = {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                            "horse", "ship", "truck"], "num_cases_per_batch": images // 5}
    (base / "batches.meta").write_bytes(pickle.dumps(meta))


def bypass_cifar_md5() -> None:
    """torchvision md5-checks the CIFAR-10 pickles against the official release; synthetic files
    cannot match, so check only that they exist (for this process)."""
    import torchvision.datasets.cifar as cifar

    cifar.check_integrity = lambda fpath, md5=None: os.path.isfile(fpath)


WRITERS = {"mnist": synthetic_mnist, "cifar10": synthetic_cifar10}


def config(args, data_dir: Path, device: str, iterations: int):
    return from_dict({
        "experiment": "bench-trainer", "seed": 0,
        "traces": {"t": {"source": "simulate", "simulate": {
            "scenario": "emerging-straggler", "workers": args.workers,
            "iterations": args.trace_iterations, "workers_per_node": 4}}},
        "model": {"epochs": args.model_epochs},
        "train": {"trace": "t", "tasks": args.tasks, "data_dir": str(data_dir),
                  "batch_size": args.batch, "max_iterations": iterations,
                  "eval_every": iterations, "target_accuracy": {"mnist": 0.9, "cifar10": 0.9},
                  "device": device, "threads": args.threads, "checkpoint_every": 100_000,
                  "chunk_samples": args.chunk, "learning_rate": args.lr},
        "wandb": {"mode": "disabled"},
    }, "<bench_trainer>")


def iteration_parts(args, task, device: torch.device) -> dict[str, float]:
    """Seconds of the parts of one iteration at c = n (every worker accepted)."""
    streams = WorkerStreams(len(task.train), args.workers, args.batch, seed=0)
    indices = streams.batch(0, np.arange(args.workers))
    x, y = task.batch(task.train, indices)
    torch.manual_seed(0)
    model = task.make_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: every step times the same
    x_dev, y_dev = x.to(device), y.to(device)
    timed = partial(seconds, min_total=0.3)
    parts = {"gather": timed(partial(task.batch, task.train, indices), torch.device("cpu")),
             "copy": timed(partial(x.to, device), device)}
    step = partial(sgd_step, model, optimizer, x_dev, y_dev, args.chunk, device)
    with torch_settings(args.threads, device), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # counted in the runs
        parts["step"] = timed(step, device)
    with torch_settings(args.threads, device):
        torch.set_deterministic_debug_mode("default")
        parts["step, not deterministic"] = timed(step, device)
    images, _ = task.train.tensors
    resident, resident_indices = images.to(device), torch.as_tensor(indices, device=device)
    parts["gather on device"] = timed(partial(resident.__getitem__, resident_indices), device)
    return parts


def timed_sgd_step(stamps: list[float]):
    """The trainer's sgd_step, noting the time each call returns (it ends with the loss's
    .item(), so the device has finished): the training loop's steady-state seconds per
    iteration, without the run's set-up (reading the data set, building and warming up the
    policy) and final evaluation."""
    def step(*args, **kwargs):
        loss = sgd_step(*args, **kwargs)
        stamps.append(time.perf_counter())
        return loss

    return step


def run(cfg, task: str, policy: str, paths: dict, out: Path, model_path):
    """One train_run, its own output to out/train.log: its result.json, the loop's seconds per
    iteration (from the second iteration's end to the last's) and its warnings."""
    out.mkdir(parents=True, exist_ok=True)
    stamps: list[float] = []
    synchronous.sgd_step = timed_sgd_step(stamps)  # train_run calls the module's sgd_step
    try:
        with (open(out / "train.log", "w") as log, contextlib.redirect_stdout(log),
              contextlib.redirect_stderr(log), warnings.catch_warnings(record=True) as caught):
            warnings.simplefilter("always")
            train_run(run_spec(cfg, task, policy, 0, paths["test"], out, model_path=model_path,
                      history_path=paths["train"]))
    finally:
        synchronous.sgd_step = sgd_step
    loop = (stamps[-1] - stamps[1]) / (len(stamps) - 2) if len(stamps) > 2 else float("nan")
    counts = Counter(f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught)
    return json.loads((out / "result.json").read_text()), loop, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", choices=sorted(WRITERS), default=["mnist", "cifar10"],
                        help="synthetic data sets to train on")
    parser.add_argument("--device", choices=["cuda", "cpu"],
                        default="cuda" if torch.cuda.is_available() else "cpu",
                        help="main device (train.device); CPU runs follow for comparison")
    parser.add_argument("--workers", type=int, default=158, help="virtual workers")
    parser.add_argument("--batch", type=int, default=32, help="mini-batch per worker")
    parser.add_argument("--iterations", type=int, default=300,
                        help="iterations per run on the main device")
    parser.add_argument("--cpu-iterations", type=int, default=10,
                        help="iterations per CPU comparison run (0: none; none when --device cpu)")
    parser.add_argument("--trace-iterations", type=int, default=400,
                        help="simulated trace length; the run-time model trains on its first half")
    parser.add_argument("--model-epochs", type=int, default=5,
                        help="epochs of the bdsgd policy's run-time model")
    parser.add_argument("--threads", type=int, default=min(16, os.cpu_count() or 1),
                        help="CPU threads (train.threads)")
    parser.add_argument("--lr", type=float, default=0.01,
                        help="learning rate at c = n (at 0.05, momentum 0.9, some runs on the "
                             "synthetic MNIST collapsed to chance: see docs/decisions.md)")
    parser.add_argument("--chunk", type=int, default=1024,
                        help="samples per forward/backward pass (train.chunk_samples; "
                             "configs/paper.yaml's 1,024)")
    parser.add_argument("--policies", nargs="+", default=["sync", "static", "bdsgd"],
                        help="cutoff policies to run")
    parser.add_argument("--out", default=None, help="folder for data and runs (default: temp)")
    add_option(parser)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    devices = [(args.device, args.iterations)]
    if args.device != "cpu" and args.cpu_iterations > 0:
        devices.append(("cpu", args.cpu_iterations))
    main_device = torch.device(args.device)
    torch.set_num_threads(args.threads)

    work = Path(args.out or tempfile.mkdtemp(prefix="bench_trainer_"))
    data_dir = work / "data"
    name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"torch {torch.__version__}, {name}, {args.threads} CPU threads; {args.workers} workers "
          f"x {args.batch} samples, chunks of {args.chunk}, lr {args.lr}; data and runs in {work}",
          flush=True)
    for task in args.tasks:
        tic = time.perf_counter()
        WRITERS[task](data_dir)
        written = time.perf_counter() - tic
        if task == "cifar10":
            bypass_cifar_md5()
        tic = time.perf_counter()
        load_task(task, data_dir)
        print(f"{task}: synthetic data written in {written:.1f} s, read by the trainer's reader "
              f"in {time.perf_counter() - tic:.1f} s" + (" (md5 check BYPASSED: synthetic files)"
                                                   if task == "cifar10" else ""), flush=True)

    cfg = config(args, data_dir, "cpu", 1)
    trace, _ = simulate(cfg.traces["t"].simulate, seed=0)
    train, test = trace.split(0.5)
    paths = {"train": work / "train.parquet", "test": work / "test.parquet"}
    write_trace(train, paths["train"])
    write_trace(test, paths["test"])
    model = None
    if "bdsgd" in args.policies:
        tic = time.perf_counter()
        with open(work / "model.log", "w") as log, contextlib.redirect_stdout(log):
            model = train_model(train, cfg.model, seed=0, out=work / "model.pt", progress=False)
        print(f"bdsgd run-time model: {args.model_epochs} epochs on {train.n_iterations} "
              f"iterations x {train.n_workers} workers in {time.perf_counter() - tic:.1f} s",
              flush=True)

    print(f"\none iteration at c = n = {args.workers} ({args.workers * args.batch} samples) on "
          f"{main_device}, ms (gather: the union batch from the CPU-resident data set; copy: to "
          f"the device; step: forward/backward/update under the trainer's torch settings)")
    print(f"{'task':>8} {'gather':>8} {'copy':>8} {'step':>8} {'step, not determ.':>17} "
          f"{'gather on device':>16} {'(gather+copy)/all':>17}")
    for task in args.tasks:
        parts = iteration_parts(args, load_task(task, data_dir), main_device)
        moving = parts["gather"] + parts["copy"]
        print(f"{task:>8} {parts['gather'] * 1e3:8.2f} {parts['copy'] * 1e3:8.2f} "
              f"{parts['step'] * 1e3:8.2f} {parts['step, not deterministic'] * 1e3:17.2f} "
              f"{parts['gather on device'] * 1e3:16.2f} {moving / (moving + parts['step']):17.3f}",
              flush=True)

    print(f"\n{'task':>8} {'device':>6} {'policy':>8} {'iters':>6} {'wall s/it':>9} "
          f"{'loop s/it':>9} {'samples/s':>10} {'mean c':>7} {'decide ms':>9} {'decide/it':>9} "
          f"{'accuracy':>8} {'warnings':>8}", flush=True)
    loops: dict[tuple[str, str, str], float] = {}
    all_warnings: dict[str, list[str]] = {}
    for task in args.tasks:
        for device, iterations in devices:
            if device == "cuda":  # CUDA's start-up (context, cuDNN) outside the timed runs
                run(config(args, data_dir, device, 3), task, "sync", paths,
                    work / "runs" / task / "warm-up", None)
            cfg = config(args, data_dir, device, iterations)
            for policy in args.policies:
                out = work / "runs" / task / device / policy
                result, loop, counts = run(cfg, task, policy, paths, out,
                                           model if policy == "bdsgd" else None)
                loops[task, device, policy] = loop
                summary, wall = result["summary"], result["wallclock"]
                decide = wall["decision_latency_p50_s"]
                print(f"{task:>8} {device:>6} {policy:>8} {iterations:6d} "
                      f"{wall['seconds'] / iterations:9.4f} {loop:9.4f} "
                      f"{summary['mean_cutoff'] * args.batch / loop:10.0f} "
                      f"{summary['mean_cutoff']:7.1f} {decide * 1e3:9.3f} {decide / loop:9.4f} "
                      f"{summary['final_accuracy']:8.4f} {sum(counts.values()):8d}", flush=True)
                for message, count in counts.items():
                    all_warnings.setdefault(message, []).append(f"{task}/{device}/{policy} x{count}")

    if len(devices) > 1:
        print(f"\nCPU ({args.threads} threads) / {args.device}, loop seconds per iteration")
        for task in args.tasks:
            for policy in args.policies:
                cpu, fast = loops[task, "cpu", policy], loops[task, args.device, policy]
                print(f"{task:>8} {policy:>8}: {cpu:8.4f} / {fast:8.4f} s = {cpu / fast:6.1f}x")
    print("\nwarnings raised in the runs:" if all_warnings else "\nno warnings raised in the runs")
    for message, where in all_warnings.items():
        print(f"  {message[:300]}\n    in {', '.join(where)}")


if __name__ == "__main__":
    main()
