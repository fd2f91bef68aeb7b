"""The SGD primitives every trainer shares: a gradient accumulated in chunks, taken off the
model and applied, one update on a union batch (and the same update taken in two groups, whose
norms estimate the gradient noise scale), and the test-set evaluation.

The virtual trainers (``bdsgd.training``) and the parameter server (``bdsgd.distributed``) both
step through these, so "one update" means the same arithmetic on a real and a virtual cluster.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bdsgd.config import TrainConfig
from bdsgd.tasks import Task

EVAL_BATCH = 256
# train.lr_scaling: the learning rate's factor s given the accepted fraction c / n
LR_SCALING = {"linear": lambda f: f, "sqrt": np.sqrt, "none": np.ones_like}
# train.staleness_lr (async, cyclic): the share of the synchronous step's rate a gradient gets,
# given its staleness tau (updates applied between its pull and its push) among n workers.
# inverse: Zhang et al. 2016's staleness-aware rate lr / sigma, sigma = tau + 1 their staleness
# (1 for a gradient applied to the parameters it was computed on). With n equally fast workers
# out of step every gradient is n - 1 updates stale, so a round of n updates moves the parameters
# lr x (the mean of n gradients): one synchronous step. none: lr / n whatever tau.
STALENESS_LR = {"none": lambda tau, n: np.full(np.shape(tau), 1.0 / n),
                "inverse": lambda tau, n: 1.0 / (np.asarray(tau, dtype=float) + 1.0)}


def lr_factor(schedule: str, warmup: int, seen: int, step: int, total: int) -> float:
    """The learning-rate schedule, in samples applied (train.lr_schedule, train.warmup_samples):
    a step that applies ``step`` samples after ``seen`` of a run's ``total`` is taken at the
    learning rate times

        min(1, (seen + step) / warmup)        a linear warm-up (Goyal et al. 2017); 1 without
      x 0.5 (1 + cos(pi seen / total))        cosine decay (Loshchilov & Hutter 2017); 1 constant

    Counting samples rather than iterations moves the schedule by what a step applies: a cut to
    c of n workers advances it by c b, not n b, and async's one gradient by b."""
    warm = min(1.0, (seen + step) / warmup) if warmup > 0 else 1.0
    if schedule == "constant":
        return warm
    return warm * 0.5 * (1.0 + math.cos(math.pi * min(seen / total, 1.0)))


def rate_at_n(tc: TrainConfig, n: int) -> float:
    """The learning rate of a step that applies all n workers' gradients: train.learning_rate,
    or with train.lr_batch the rate per lr_batch samples scaled to the step's n b (Goyal et al.
    2017's 0.1 k n / 256), so that one recipe suits a cluster of any size."""
    if tc.lr_batch is None:
        return tc.learning_rate
    return tc.learning_rate * n * tc.batch_size / tc.lr_batch


def iterations_at_n(tc: TrainConfig, n: int, train_samples: int) -> int:
    """A run's iterations on n workers: train.max_iterations, or with train.epochs the
    iterations that apply epochs x ``train_samples`` samples at c = n, ceil(epochs N / (n b)), so
    that one recipe trains as many samples on a 10-worker job as on 158 workers."""
    if tc.epochs is None:
        return tc.max_iterations
    return math.ceil(tc.epochs * train_samples / (n * tc.batch_size))


def step_lr(tc: TrainConfig, c: int, n: int, seen: int, total: int) -> float:
    """The learning rate of a synchronous step that applies c of n workers' gradients after
    ``seen`` of the run's ``total`` samples: ``rate_at_n`` times train.lr_scaling's factor of
    c / n (``LR_SCALING``) times the schedule's (``lr_factor``)."""
    return rate_at_n(tc, n) * float(LR_SCALING[tc.lr_scaling](c / n)) * lr_factor(
        tc.lr_schedule, tc.warmup_samples, seen, c * tc.batch_size, total)


def backward(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int,
             device: torch.device) -> torch.Tensor:
    """Accumulate the gradient of the mean loss over (x, y) into .grad, in chunks; the loss."""
    total = torch.zeros((), device=device)
    for xs, ys in zip(x.split(chunk), y.split(chunk), strict=True):
        xs, ys = xs.to(device, non_blocking=True), ys.to(device, non_blocking=True)
        loss = F.cross_entropy(model(xs), ys, reduction="sum") / len(y)
        loss.backward()
        total += loss.detach()
    return total


def time_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk: int,
                  device: torch.device, repeats: int = 5) -> float:
    """Seconds one worker's gradient takes on ``device``: the median of ``repeats`` timed
    forward and backward passes over its batch (x, y), after one untimed (allocation, kernel
    selection). The model's parameters are untouched and its .grad cleared."""
    def once() -> float:
        start = time.perf_counter()
        backward(model, x, y, chunk, device)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter() - start

    model.train()
    times = [once() for _ in range(repeats + 1)][1:]
    model.zero_grad(set_to_none=True)
    return float(np.median(times))


def take_gradient(model: nn.Module) -> list:
    """The model's accumulated .grad tensors, detached from it (the model's are cleared)."""
    grads = [p.grad for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


def apply_gradient(model: nn.Module, optimizer: torch.optim.Optimizer, grads: list) -> None:
    """One optimiser step on the given gradient."""
    for p, g in zip(model.parameters(), grads, strict=True):
        p.grad = g
    optimizer.step()
    model.zero_grad(set_to_none=True)


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, device: torch.device) -> tuple[float, float]:
    """Test accuracy and mean cross-entropy over the whole test set."""
    model.eval()
    n = len(task.test)
    correct, loss = 0, 0.0
    for start in range(0, n, EVAL_BATCH):
        x, y = task.batch(task.test, np.arange(start, min(start + EVAL_BATCH, n)))
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        logits = model(x)
        loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
    model.train()
    return correct / n, loss / n


def sgd_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
             y: torch.Tensor, chunk: int, device: torch.device) -> float:
    """One update on the mean loss over the union batch (x, y); returns that loss.

    Gradients of chunks of at most ``chunk`` samples accumulate to the gradient of the mean.
    """
    optimizer.zero_grad(set_to_none=True)
    total = backward(model, x, y, chunk, device)
    optimizer.step()
    return total.item()


def noise_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor,
               y: torch.Tensor, split: int, chunk: int, device: torch.device) -> tuple[float, tuple]:
    """``sgd_step`` with the gradient taken in two groups, the first ``split`` samples (group A)
    and the rest (B): the update is on their weighted mean, the same gradient, and the squared
    norms give the noise scale's estimator (``bdsgd.policies.progress``): (loss, (small_sq,
    big_sq, b_small, b_big)), small_sq the mean of |G_A|^2 and |G_B|^2, 1/b_small the mean of
    1/b_A and 1/b_B, big_sq = |G|^2 over all b_big samples."""
    b_big, groups = len(y), []
    optimizer.zero_grad(set_to_none=True)
    for xs, ys in ((x[:split], y[:split]), (x[split:], y[split:])):
        loss = backward(model, xs, ys, chunk, device)
        groups.append((len(ys) / b_big, loss, take_gradient(model)))
    (wa, la, ga), (wb, lb, gb) = groups
    mean = [wa * a + wb * b for a, b in zip(ga, gb, strict=True)]
    apply_gradient(model, optimizer, mean)

    def sq(grads):
        return sum(float((g * g).sum()) for g in grads)

    b_small = 2.0 / (1.0 / split + 1.0 / (b_big - split))
    return (wa * la + wb * lb).item(), (0.5 * (sq(ga) + sq(gb)), sq(mean), b_small, float(b_big))
