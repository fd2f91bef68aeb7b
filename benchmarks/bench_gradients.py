"""Union-batch gradient vs a per-worker loop, side by side.

The virtual cluster averages c accepted workers' mini-batch gradients with forward/backward
passes over the union of their mini-batches (exact: equal batch sizes, GroupNorm networks),
in chunks of at most train.chunk_samples samples (``bdsgd.training.synchronous.sgd_step``). This
prints the time of one SGD step three ways for n = 4, 16, 64 accepted workers, on the digits MLP
(real digits data) and on the CIFAR-10 CNN with random 32x32 tensors:

- loop:    one forward/backward per worker (what a per-worker simulation would do),
- union:   one forward/backward over all c*B samples,
- chunked: the union in chunks of --chunk samples (the trainer's default),

with the speed-up of each over the loop and the largest gradient difference from the loop.

    .venv/bin/python benchmarks/bench_gradients.py [--threads 1] [--batch 32] [--chunk 128]
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch
import torch.nn.functional as F
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

from bdsgd.sgd import sgd_step
from bdsgd.tasks import NETWORKS, load_task


def loop_step(model, optimizer, x, y, c, device):
    optimizer.zero_grad(set_to_none=True)
    for xw, yw in zip(x.chunk(c), y.chunk(c), strict=True):
        (F.cross_entropy(model(xw.to(device)), yw.to(device)) / c).backward()
    optimizer.step()


def seconds(step, device: torch.device, min_total=0.5, repeats=3) -> float:
    """Best of ``repeats`` timings of step(), each over enough calls to last ``min_total`` s
    (waiting for ``device`` to finish, on CUDA)."""
    def timed(calls: int) -> float:
        start = time.perf_counter()
        for _ in range(calls):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    timed(1)  # warm-up
    calls = 1
    while timed(calls) < min_total / repeats:
        calls *= 2
    return min(timed(calls) / calls for _ in range(repeats))


def grads(model) -> torch.Tensor:
    return torch.cat([p.grad.ravel() for p in model.parameters()])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (train.threads)")
    parser.add_argument("--batch", type=int, default=32, help="mini-batch per worker")
    parser.add_argument("--chunk", type=int, default=128, help="train.chunk_samples")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add_option(parser)
    args = parser.parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    digits = load_task("digits", "unused")
    print(f"threads {args.threads}, batch {args.batch} per worker, chunk {args.chunk}, "
          f"device {device}; one SGD step, ms")
    print(f"{'network':<12} {'n':>3} {'loop':>9} {'union':>9} {'chunked':>9} "
          f"{'union speed-up':>14} {'chunked speed-up':>16} {'max |diff|':>10}")
    for name in ("digits-mlp", "cifar10-resnet20"):
        for c in (4, 16, 64):
            torch.manual_seed(0)
            size = c * args.batch
            if name == "digits-mlp":
                model = digits.make_model()
                x, y = digits.batch(digits.train, torch.randint(0, len(digits.train), (size,)))
            else:
                model = NETWORKS["cifar10"](10)
                x, y = torch.randn(size, 3, 32, 32), torch.randint(0, 10, (size,))
            model = model.to(device)
            # lr 0: the model stays put, so every variant times the same computation.
            opt = torch.optim.SGD(model.parameters(), lr=0.0)
            loop = seconds(partial(loop_step, model, opt, x, y, c, device), x.device)
            reference = grads(model)
            times, diffs = [], []
            for chunk in (size, args.chunk):
                times.append(seconds(partial(sgd_step, model, opt, x, y, chunk, device), x.device))
                diffs.append((grads(model) - reference).abs().max().item())
            print(f"{name:<12} {c:>3} {loop * 1e3:>9.2f} {times[0] * 1e3:>9.2f} "
                  f"{times[1] * 1e3:>9.2f} {loop / times[0]:>13.2f}x {loop / times[1]:>15.2f}x "
                  f"{max(diffs):>10.1e}")


if __name__ == "__main__":
    main()
