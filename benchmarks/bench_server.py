"""What a parameter server's own work costs on this machine: summing a gradient and the SGD
step with momentum, for models of 10 k to 11 M parameters, one torch thread (the virtual
cluster's ``network.aggregate_gbyte_s`` and ``network.update_gbyte_s``).

    .venv/bin/python benchmarks/bench_server.py [--sizes 1e4,1e6,4e6,1.1e7] [--repeats 20]
"""

from __future__ import annotations

import argparse
import time

import torch
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

BYTES = 4  # float32


def seconds(step, repeats: int) -> float:
    """The median of ``repeats`` timed calls of ``step`` after three untimed ones."""
    for _ in range(3):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1e4,1e6,4e6,1.1e7", help="model sizes in parameters")
    p.add_argument("--repeats", type=int, default=20, help="timed repetitions per size")
    add_option(p)
    args = p.parse_args()
    with recorded(args.results, __file__):
        bench(args)


def bench(args) -> None:
    torch.set_num_threads(1)
    print(f"{'parameters':>12}{'sum ms':>10}{'sum GB/s':>10}{'step ms':>10}{'step GB/s':>11}")
    for size in (int(float(s)) for s in args.sizes.split(",")):
        total, grad = torch.zeros(size), torch.randn(size)
        param = torch.nn.Parameter(torch.randn(size))
        param.grad = torch.randn(size)
        optimizer = torch.optim.SGD([param], lr=0.1, momentum=0.9)
        add = seconds(lambda total=total, grad=grad: total.add_(grad), args.repeats)
        step = seconds(optimizer.step, args.repeats)
        gb = size * BYTES / 1e9
        print(f"{size:>12}{add * 1e3:>10.3f}{gb / add:>10.2f}{step * 1e3:>10.3f}{gb / step:>11.2f}")


if __name__ == "__main__":
    main()
