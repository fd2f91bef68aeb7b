"""Feeding ImageNet-style folders: images per second decoded (random resized crop to 224, flip,
normalise) in the run's own process against ``train.loader_workers`` loader processes.

A folder of real JPEGs (noise at ImageNet's typical 500 x 375, ``--images`` of them in two
classes) is read through the task's own reader (``bdsgd.tasks.load_task("imagenet")``), in
batches of ``--batch`` samples with each draw's augmentation seed (``WorkerStreams.seeds``), and
each loader count's batches are checked equal to the serial ones.

    .venv/bin/python benchmarks/bench_loader.py [--images 256] [--batch 64] [--workers 0,2,4]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=256, help="JPEGs in the folder")
    p.add_argument("--batch", type=int, default=64, help="samples per decoded batch")
    p.add_argument("--batches", type=int, default=4, help="batches timed per loader count")
    p.add_argument("--workers", default="0,2,4", help="loader process counts (0: in-process)")
    add_option(p)
    return p.parse_args()


def write_folder(root: Path, images: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, count in (("train", images), ("val", 2)):
        for k in range(count):
            folder = root / "imagenet" / split / f"class{k % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            pixels = rng.integers(0, 256, size=(375, 500, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / f"{k}.JPEG", quality=90)


def main() -> None:
    args = parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    import torch

    from bdsgd.tasks import WorkerStreams, load_task

    root = Path(tempfile.mkdtemp(prefix="bench_loader_"))
    write_folder(root, args.images)
    counts = [int(w) for w in args.workers.split(",")]
    print(f"{args.images} JPEGs of 500 x 375 in {root}; batches of {args.batch}, "
          f"{args.batches} timed per loader count (after one untimed)")
    serial, rates = None, {}
    for workers in counts:
        task = load_task("imagenet", root, workers)
        streams = WorkerStreams(len(task.train), 1, args.batch, seed=0)
        draws = [(streams.batch(t, np.array([0])), streams.seeds(t, np.array([0])))
                 for t in range(args.batches + 1)]
        task.batch(task.train, *draws[0])  # starts the loaders
        start = time.perf_counter()
        batches = [task.batch(task.train, *draw)[0] for draw in draws[1:]]
        rates[workers] = args.batch * args.batches / (time.perf_counter() - start)
        serial = batches if serial is None else serial
        same = all(torch.equal(a, b) for a, b in zip(serial, batches, strict=True))
        print(f"loader_workers {workers}: {rates[workers]:7.1f} images/s "
              f"({rates[workers] / rates[counts[0]]:.2f}x of {counts[0]}), "
              f"batches {'equal to' if same else 'DIFFERENT from'} the first count's")


if __name__ == "__main__":
    main()
