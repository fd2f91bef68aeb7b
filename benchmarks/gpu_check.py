"""The paper-scale path on a lent GPU, in one short run: what the bill assumes, measured.

For a machine with a GPU and no internet (ten minutes at the defaults on one H100):

1. **Data.** Synthetic data sets in the real on-disk formats, read by the trainer's own readers
   (``bdsgd.tasks``): MNIST as idx files and CIFAR-10 as the python version's pickles
   (``bench_trainer.py``'s writers; the CIFAR md5 check bypassed for this process), ImageNet as
   an ImageFolder of JPEGs (``--imagenet-images`` of 256 x 256 per split).
2. **The bill's s.** ``bdsgd plan --measure``'s measurement (``bdsgd.plan.measure``) of every
   task on this device: seconds per sample over a chunk of the union batch and of one worker's
   batch alone (async, cyclic), beside the bill's assumptions (``SECONDS_PER_SAMPLE``,
   ``ALONE``).
3. **One paper-scale cell per task.** configs/paper.yaml's recipe for the task (its batch per
   worker, its chunks, its loader processes), sync on the simulator's emerging-straggler trace of
   ``--workers`` workers, for ``--iterations``: the training loop's steady seconds per
   iteration, the samples per second, the peak GPU memory and how busy the GPU was (nvidia-smi's
   utilisation, sampled every 0.2 s while the cell ran; "-" without nvidia-smi).

It prints one table, to paste into benchmarks/results.md (``--results`` writes it there).
``--tiny`` runs the same path at toy sizes, on a CPU too (tests/test_benchmarks.py).

    .venv/bin/python benchmarks/gpu_check.py [--tasks mnist cifar10 imagenet] [--workers 158] \\
        [--iterations 20] [--imagenet-images 2000] [--device cuda] [--tiny] [--out DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from bench_trainer import bypass_cifar_md5, run, synthetic_cifar10, synthetic_mnist
from results_md import add_option, recorded

from bdsgd.config import from_dict
from bdsgd.plan import ALONE, SECONDS_PER_SAMPLE, measure
from bdsgd.traces.io import write_trace
from bdsgd.traces.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("mnist", "cifar10", "imagenet")


def synthetic_imagenet(root: Path, images: int, side: int, seed: int = 0) -> None:
    """An ImageFolder of ``images`` JPEGs per split over 10 classes: each class a prototype
    texture plus noise (q 90, as ImageNet's are stored)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    prototypes = rng.integers(0, 256, (10, side, side, 3))
    for split in ("train", "val"):
        for i in range(images):
            cls = i % 10
            folder = root / "imagenet" / split / f"n{cls:08d}"
            folder.mkdir(parents=True, exist_ok=True)
            pixels = np.clip(prototypes[cls] + rng.normal(0, 40, prototypes[cls].shape), 0, 255)
            Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{i}.JPEG", quality=90)


class GpuBusy:
    """nvidia-smi's GPU utilisation sampled on a thread while the block runs: the mean, or None
    where there is no nvidia-smi."""

    def __init__(self, every_s: float = 0.2):
        self.every_s, self.samples, self.stop = every_s, [], threading.Event()
        self.smi = shutil.which("nvidia-smi")

    def _sample(self):
        while not self.stop.wait(self.every_s):
            out = subprocess.run([self.smi, "--query-gpu=utilization.gpu",
                                  "--format=csv,noheader,nounits", "-i", "0"],
                                 capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip():
                self.samples.append(float(out.stdout.split()[0]) / 100)

    def __enter__(self):
        if self.smi:
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        if self.smi:
            self.thread.join()

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.samples)) if self.samples else None


def paper_config(args, data: Path, device: str) -> dict:
    """configs/paper.yaml's train: for this machine: its recipes, a simulated trace of
    ``--workers``, ``--iterations`` a run, the data written here, no W&B."""
    paper = yaml.safe_load((ROOT / "configs/paper.yaml").read_text())
    train = paper["train"]
    recipes = {t: {k: v for k, v in r.items() if k not in ("epochs", "eval_every")}
               for t, r in train.get("recipes", {}).items() if t in args.tasks}
    chunk = 8 if args.tiny else train["chunk_samples"]
    return {
        "experiment": "gpu-check", "seed": 0,
        "traces": {"t": {"source": "simulate", "simulate": {
            "scenario": "emerging-straggler", "workers": args.workers,
            "iterations": 4 * args.iterations, "workers_per_node": 4}}},
        "network": paper["network"],
        "train": {**{k: train[k] for k in ("batch_size", "momentum", "lr_scaling", "staleness_lr",
                                           "clock", "loader_workers") if k in train},
                  "trace": "t", "tasks": list(args.tasks), "data_dir": str(data),
                  "max_iterations": args.iterations, "eval_every": 10 * args.iterations,
                  "eval_near_target": 0.0, "checkpoint_every": 10 * args.iterations,
                  "target_accuracy": {t: 0.99 for t in args.tasks}, "device": device,
                  "threads": args.threads, "chunk_samples": chunk,
                  "loader_workers": 0 if args.tiny else train.get("loader_workers", 0),
                  "recipes": {t: {**r, "batch_size": 4} if args.tiny else r
                              for t, r in recipes.items()}},
        "wandb": {"mode": "disabled"},
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS),
                   help="tasks to measure and train")
    p.add_argument("--device", choices=["cuda", "cpu"],
                   default="cuda" if torch.cuda.is_available() else "cpu",
                   help="device to measure and train on")
    p.add_argument("--workers", type=int, default=158, help="workers of each paper-scale cell")
    p.add_argument("--iterations", type=int, default=20, help="iterations of each cell")
    p.add_argument("--imagenet-images", type=int, default=2000,
                   help="synthetic ImageNet JPEGs per split (256 x 256)")
    p.add_argument("--threads", type=int, default=8, help="torch threads (train.threads)")
    p.add_argument("--tiny", action="store_true",
                   help="toy sizes (4 workers, 3 iterations, batch 4, chunks of 8, 600 small "
                        "images a data set): the path end to end in seconds on a CPU")
    p.add_argument("--out", help="folder for the data and the runs (default: a temporary one)")
    add_option(p)
    args = p.parse_args()
    if args.tiny:
        args.workers, args.iterations, args.imagenet_images, args.threads = 4, 3, 20, 1
    with recorded(args.results, __file__):
        check(args)


def check(args) -> None:
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu_check_"))
    data = out / "data"
    started = time.perf_counter()
    images = 600 if args.tiny else None  # MNIST's and CIFAR-10's training images
    writers = {"mnist": lambda root: synthetic_mnist(root, images=images or 60_000),
               "cifar10": lambda root: synthetic_cifar10(root, images=images or 50_000),
               "imagenet": lambda root: synthetic_imagenet(root, args.imagenet_images,
                                                           64 if args.tiny else 256)}
    for task in args.tasks:
        writers[task](data)
    bypass_cifar_md5()
    cfg = from_dict(paper_config(args, data, args.device), "<gpu_check>")
    union, alone = measure(cfg, torch.device(args.device))

    trace, _ = simulate(cfg.trace("t").simulate, 0)
    paths = {part: out / f"{part}.parquet" for part in ("train", "test")}
    for path in paths.values():  # the replayed part, and the history a learning policy reads
        write_trace(trace, path)
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"{name}: {args.workers} workers, {args.iterations} iterations a cell "
          f"(data written in {time.perf_counter() - started:.0f} s, in {out})")
    print(f"{'task':<9}{'s/sample':>10}{'assumed':>10}{'alone':>10}{'x union':>9}"
          f"{'assumed':>9}{'batch':>7}{'s/iter':>9}{'samples/s':>11}{'GPU GB':>8}{'busy':>6}")
    for task in args.tasks:
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with GpuBusy() as busy:
            result, loop, _ = run(cfg, task, "sync", paths, out / "runs" / task, None)
        batch = cfg.for_task(task).training().batch_size
        memory = torch.cuda.max_memory_allocated() / 1e9 if args.device == "cuda" else None
        rate = result["summary"]["mean_cutoff"] * batch / loop
        print(f"{task:<9}{union[task]:>10.3g}{SECONDS_PER_SAMPLE[args.device][task]:>10.3g}"
              f"{alone[task]:>10.3g}{alone[task] / union[task]:>9.2f}{ALONE[args.device]:>9.3g}"
              f"{batch:>7}{loop:>9.3g}{rate:>11.4g}"
              f"{'-' if memory is None else f'{memory:.2f}':>8}"
              f"{'-' if busy.mean is None else f'{busy.mean:.0%}':>6}")
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
