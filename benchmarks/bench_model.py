"""Speed of the run-time model on one core: decision latency and training time per epoch.

A decision is everything the parameter server does per iteration with a policy of the run-time
model (``LATENCY_POLICIES``): one filtering step on the censored observation (``observe``), S
joint predictive draws sorted into E[x_(c)] (``expected_order_stats``), and the decision rule;
averaged, also the simple predictors' updates and forecasts and the scores of their last ones.
The model's step of learning while serving (every ``policies.online_every`` iterations) and the
next decision's random numbers are timed apart (``idle ms``: their cost per iteration), as the
parameter server and a replay take them while the workers compute (``Policy.idle``).
Targets: p50 <= 1 ms at 158 workers and <= 10 ms at 2,048. Workers sit on nodes of 4 (the
node-shared jump regime). Each n is timed eager and with the filtering step and the draws
compiled (``policies.compile``; the time to build the policy, which compiles them, and its first
decision is printed apart). For scale, the same core's time for one mini-batch gradient of the
CIFAR-10 network (batch 32) is measured side by side. Training is timed per epoch eager and
compiled (``model.compile``: the median of epochs 2-4, and the first, which compiles).
``--profile``: where bdsgd's decision goes instead, with the defaults, part by part, and how many
torch calls each module makes in one eager decision.

    .venv/bin/python benchmarks/bench_model.py [--quick] [--profile]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
import time

import numpy as np
import torch
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]
from torch.overrides import TorchFunctionMode

from bdsgd.cluster.cutoff import observation
from bdsgd.config import from_dict
from bdsgd.entry import keep_freed_memory
from bdsgd.policies import averaging
from bdsgd.policies.build import compiles, make_policy
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.runtime_model.train import elbo_term, run_epoch
from bdsgd.tasks import NETWORKS

_CONFIG = from_dict({"experiment": "bench", "traces": {"t": {"source": "simulate"}},
                     "train": {"trace": "t", "tasks": ["digits"]}})
CFG, POLICIES = _CONFIG.model, _CONFIG.policies
# the model alone, and averaged with simple predictors (policies.averaging)
LATENCY_POLICIES = ("bdsgd-model", "bdsgd")


def decision_latency(policy: str, n: int, iterations: int,
                     compile: bool) -> tuple[np.ndarray, float, float]:
    """Seconds per decision of ``policy`` (observe + predict + decide, ``PredictivePolicy``)
    over a replay of random run-times, the seconds of building it and its first decision (a
    compiled predictor compiles when it is built), and the mean seconds per iteration of the
    work it defers to the server's wait."""
    torch.manual_seed(0)
    model = RuntimeModel(CFG, n, node=np.arange(n) // 4)
    built = time.perf_counter()
    chosen = make_policy(policy, n, dataclasses.replace(POLICIES, compile=compile), model=model)
    built = time.perf_counter() - built
    x = np.exp(np.random.default_rng(0).normal(0, 0.3, (iterations + 10, n)))
    c, times, idle = n, [], []
    for t, row in enumerate(x):
        obs = observation(t, row, c, 0.0)  # the harness's work, not the policy's
        start = time.perf_counter()
        chosen.observe(obs)
        c = chosen.choose()
        decided = time.perf_counter()
        chosen.idle()  # while the workers compute
        times.append(decided - start)
        idle.append(time.perf_counter() - decided)
    return np.array(times[10:]), built + times[0], float(np.mean(idle[10:]))  # the first few warm up


def gradient_time(repeats: int) -> float:
    net = NETWORKS["cifar10"](10)
    x, y = torch.randn(32, 3, 32, 32), torch.randint(10, (32,))
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        times.append(time.perf_counter() - start)
    return float(np.median(times[1:]))


def epoch_times(n: int, T: int, compile: bool) -> list[float]:
    """Seconds of four training epochs (a compiled first one includes the compilation; the
    later ones are the steady state)."""
    torch.manual_seed(0)
    cfg = dataclasses.replace(CFG, compile=compile)
    model = RuntimeModel(cfg, n, node=np.arange(n) // 4)
    x = np.exp(np.random.default_rng(0).normal(0, 0.3, (T, n)))
    x = torch.as_tensor(x, dtype=torch.float32)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    term, times = elbo_term(model, cfg), []
    for _ in range(4):
        start = time.perf_counter()
        run_epoch(model, opt, [(x, torch.zeros_like(x, dtype=torch.bool))], cfg,
                  torch.Generator(), term)
        times.append(time.perf_counter() - start)
    return times


class _Timed:
    """Seconds spent in each wrapped callable, by label."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)

    def wrap(self, owner, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - start

        setattr(owner, name, timed)


class _TorchCalls(TorchFunctionMode):
    """Python-level torch calls (functions, tensor methods, operators), by the bdsgd module
    that made them: each costs microseconds of dispatch, whatever its size."""

    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        frame = sys._getframe(1)
        while frame is not None and "/bdsgd/" not in frame.f_code.co_filename:
            frame = frame.f_back
        self.calls[frame.f_code.co_filename.split("/bdsgd/")[1] if frame else "other"] += 1
        return func(*args, **(kwargs or {}))


def profile(n: int, iterations: int) -> None:
    """bdsgd's decision at n workers with the defaults (learning while serving on; compiled
    where ``policies.compile`` auto compiles) split into its parts: the model's filtering step
    and draws, the sort of the draws, each simple predictor's update and forecast, the
    averaging's scores, and the rest (the decision rule, the bookkeeping); then the torch calls
    of one eager decision by module (a torch function mode cannot see into a compiled step)."""
    torch.manual_seed(0)
    chosen = make_policy("bdsgd", n, POLICIES, model=RuntimeModel(CFG, n, node=np.arange(n) // 4))
    compiled = compiles(POLICIES.compile, n)
    components = chosen.predictor.inner.components  # bdsgd's averaging, inside its calibration
    timed = _Timed()
    timed.wrap(components["model"], "step", "model: filtering step")
    timed.wrap(components["model"], "draws", "model: draws")
    timed.wrap(components["model"], "expected_order_stats", "model: forecast")
    for name, component in components.items():
        if name != "model":
            timed.wrap(component, "observe", f"{name}: update")
            timed.wrap(component, "expected_order_stats", f"{name}: forecast")
    timed.wrap(averaging, "log_score", "averaging: scores")
    x = np.exp(np.random.default_rng(0).normal(0, 0.3, (iterations + 10, n)))
    c, total = n, 0.0
    for t, row in enumerate(x):
        if t == 10:  # the first few warm up
            timed.seconds.clear()
            total = 0.0
        obs = observation(t, row, c, 0.0)
        start = time.perf_counter()
        chosen.observe(obs)
        c = chosen.choose()
        total += time.perf_counter() - start
        chosen.idle()
    parts = dict(timed.seconds)
    parts["model: sort and mean of the draws"] = (parts.pop("model: forecast")
                                                  - parts["model: draws"])
    parts["the rest (calibration, rule, bookkeeping)"] = total - sum(parts.values())
    print(f"bdsgd, n = {n}, {'compiled' if compiled else 'eager'}, one core: "
          f"{total / iterations * 1e3:.3f} ms a decision (mean)")
    for label, seconds in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"  {label:38s} {seconds / iterations * 1e3:7.3f} ms {seconds / total:6.1%}")
    if compiled:
        chosen = make_policy("bdsgd", n, dataclasses.replace(POLICIES, compile=False),
                             model=components["model"].model)
    with _TorchCalls() as calls:
        chosen.observe(observation(len(x), x[-1], c, 0.0))
        chosen.choose()
    print(f"  torch calls in one decision: {sum(calls.calls.values())}: " + ", ".join(
        f"{module} {count}" for module, count in calls.calls.most_common()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--profile", action="store_true",
                        help="only where bdsgd's decision goes, with the defaults, at 158 and "
                        "2,048 workers, and the torch calls of an eager one")
    add_option(parser)
    args = parser.parse_args()
    keep_freed_memory()  # as every bdsgd entry point does: the allocator decisions are served by
    with recorded(args.results, __file__):
        if args.profile:
            torch.set_num_threads(1)
            for n in (158, 2048):
                profile(n, 50 if args.quick else 300)
        else:
            bench(args)


def bench(args) -> None:
    torch.set_num_threads(1)
    iterations = 50 if args.quick else 300
    grad = gradient_time(3 if args.quick else 10)
    print(f"one core; S = {CFG.samples} draws; CIFAR-10 net gradient (batch 32): "
          f"{grad * 1e3:.1f} ms")
    print(f"{'policy':>14} {'n':>6} {'filter':>8} {'p50 ms':>8} {'mean ms':>8} {'p99 ms':>8} "
          f"{'target ms':>10} {'p50/target':>10} {'p50/gradient':>12} {'first s':>8} "
          f"{'idle ms':>8}")
    for policy in LATENCY_POLICIES:
        for n, target in ((16, None), (158, 1.0), (2048, 10.0)):
            for compile in (False, True):
                t, first, idle = decision_latency(policy, n, iterations, compile)
                p50, p99 = np.percentile(t * 1e3, [50, 99])
                ratio = f"{p50 / target:10.2f}" if target else f"{'-':>10}"
                print(f"{policy:>14} {n:6d} {'compiled' if compile else 'eager':>8} "
                      f"{p50:8.3f} {t.mean() * 1e3:8.3f} {p99:8.3f} {target or '-':>10} {ratio} "
                      f"{p50 / 1e3 / grad:12.4f} {first:8.1f} {idle * 1e3:8.3f}")
    T = 128 if args.quick else 512
    cfg = dataclasses.asdict(CFG)
    print(f"training, one epoch of T = {T} iterations (chunk {cfg['chunk']}, "
          f"batch {cfg['batch_size']}):")
    for n in (16, 158, 2048):
        eager = float(np.median(epoch_times(n, T, False)[1:]))
        first, *later = epoch_times(n, T, True)
        compiled = float(np.median(later))
        print(f"  n = {n:5d}: eager {eager:7.2f} s/epoch, compiled {compiled:7.2f} "
              f"({eager / compiled:.1f}x; the first epoch, compiling, {first:.0f} s)")


if __name__ == "__main__":
    main()
