"""Fit the run-time model to a trace by maximising the ELBO (Adam, truncated sequences).

The inference network filters on a censored view of each window (a random cutoff per
iteration, as a server would see), while the likelihood scores everything the trace holds: so it
learns to filter from the observations it gets in deployment. An epoch cuts the trace into
windows of ``chunk`` iterations that overlap by half, at a random phase, and takes Adam steps on
batches of ``batch_size`` of them (the filter restarts from z_0 at each window's start).
Everything random draws from one seeded generator, so a seed fixes the result; a checkpoint
``<out>.ckpt`` written every ``checkpoint_every`` epochs holds that generator's state too, so a
resumed run ends exactly where an uninterrupted one does. SIGTERM or SIGINT stop it at the end
of the epoch with a checkpoint (``Stopped``, as ``bdsgd train``); the same command resumes, and
says so. A damaged checkpoint is a one-line error naming it (delete it to start afresh).
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from bdsgd import tracking
from bdsgd.config import Config, ModelConfig
from bdsgd.errors import Stopped, UserError, stop_requests
from bdsgd.io import write_with
from bdsgd.provenance import stamp
from bdsgd.runtime_model.checkpoint import checkpoint, read_state
from bdsgd.runtime_model.filtering import impute
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.traces.io import require_cutoff
from bdsgd.traces.schema import Trace

logger = logging.getLogger(__name__)

NON_LEAF_GRAD = "The .grad attribute of a Tensor that is not a leaf Tensor"


def normalised(trace: Trace, censoring: str) -> tuple[torch.Tensor, torch.Tensor, float]:
    """(x~, censored, m): run-times over their median m (uncensored ones; all if none are)."""
    source = trace.file
    require_cutoff(trace)  # the model learns to pick cutoffs
    if trace.n_iterations < 2:
        raise UserError(source, "iteration", "training needs at least 2 iterations")
    uncensored = trace.runtimes[~trace.censored]
    if censoring == "impute" and trace.censored.all(axis=1).any():
        t = int(np.flatnonzero(trace.censored.all(axis=1))[0])
        raise UserError(source, f"iteration {trace.iterations[t]}",
                        "censoring 'impute' needs an uncensored run-time in every iteration")
    m = float(np.median(uncensored if uncensored.size else trace.runtimes))
    x = torch.as_tensor(trace.runtimes / m, dtype=torch.float32)
    return x, torch.as_tensor(trace.censored), m


def windows(T: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """Start indices of half-overlapping windows at a random phase, in random order."""
    stride = max(1, length // 2)
    phase = int(torch.randint(stride, (1,), generator=generator))
    starts = torch.arange(min(phase, T - length), T - length + 1, stride)
    return starts[torch.randperm(len(starts), generator=generator)]


def deployment_view(x: torch.Tensor, censored: torch.Tensor,
                    generator) -> tuple[torch.Tensor, torch.Tensor]:
    """What a server would see with a random cutoff c_t ~ U{ceil(n/2), ..., n} per iteration:
    run-times beyond the c_t-th smallest become censored at it (x (..., n), censored as tau)."""
    n = x.shape[-1]
    c = torch.randint((n + 1) // 2, n + 1, (*x.shape[:-1], 1), generator=generator)
    tau = torch.gather(x.sort(dim=-1).values, -1, c - 1)
    cut = x.argsort(dim=-1).argsort(dim=-1) >= c
    return torch.where(cut, tau, x), censored | cut


def elbo_term(model: RuntimeModel, cfg: ModelConfig):
    """``RuntimeModel.elbo``'s per-iteration term, through torch.compile if ``cfg.compile``:
    one iteration's filtering step and score (forward and backward) then run as a few fused
    kernels instead of ~300 small operations: on a CPU core 6x faster at n = 16 and 3x at 158
    after one compilation of ~30 s, no faster at 2,048 (benchmarks/bench_model.py). None: eager."""
    return torch.compile(model.elbo_term, dynamic=False) if cfg.compile else None


def run_epoch(model, optimizer, x, censored, cfg: ModelConfig, generator, term=None) -> float:
    """One pass; returns the mean negative ELBO per observation. ``term``: ``elbo_term``'s."""
    length = min(cfg.chunk, x.shape[0])
    offsets = torch.arange(length)
    starts = windows(x.shape[0], length, generator)
    losses = []
    for batch in starts.split(cfg.batch_size):
        rows = batch[:, None] + offsets  # (B, L)
        xb, cb = x[rows], censored[rows]
        seen = deployment_view(xb, cb, generator)
        if cfg.censoring == "impute":
            xb, cb = impute(xb, cb, generator), torch.zeros_like(cb)
            seen = impute(*seen, generator), torch.zeros_like(cb)
        with warnings.catch_warnings():
            # torch.compile's tracer reads .grad of the parameters' (non-leaf) functions it is
            # given, which warns; nothing is wrong
            warnings.filterwarnings("ignore", NON_LEAF_GRAD, UserWarning)
            loss = -model.elbo(xb, cb, generator, seen, term).sum() / xb.numel()
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        optimizer.step()
        losses.append(float(loss.detach()) * xb.numel())
    return sum(losses) / (len(starts) * length * x.shape[1])


def _fingerprint(trace: Trace, cfg: ModelConfig, seed: int) -> dict:
    """What a checkpoint must match to be resumed."""
    return {"config": dataclasses.asdict(cfg), "seed": seed, "shape": list(trace.runtimes.shape),
            "sum": float(trace.runtimes.sum())}


def planned_epochs(cfg: ModelConfig, n_iterations: int) -> int:
    """model.epochs, or when it is null the passes that make model.steps Adam steps: each pass
    takes the trace's half-overlapping windows of ``chunk`` iterations (``windows``; a random
    phase can drop one) in batches of ``batch_size``."""
    if cfg.epochs is not None:
        return cfg.epochs
    length = min(cfg.chunk, n_iterations)
    per_pass = -(-((n_iterations - length) // max(1, length // 2) + 1) // cfg.batch_size)
    return -(-cfg.steps // per_pass)


def _resume(ckpt_path: Path, fingerprint: dict, model, optimizer, generator) -> tuple[int, list]:
    """Restore an interrupted fit from its checkpoint: (epochs done, their losses)."""
    afresh = "delete it to start afresh"
    state = read_state(ckpt_path, afresh)
    if state.get("fingerprint") != fingerprint:
        raise UserError(str(ckpt_path), "fingerprint", "checkpoint of a different trace, "
                        f"config or seed; {afresh}")
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        why = str(exc).strip().splitlines()[-1].strip()
        raise UserError(str(ckpt_path), "model", f"checkpoint of another model version "
                        f"({why}); {afresh}") from None
    try:
        generator.set_state(state["generator"])
        start, losses = int(state["epoch"]), [float(v) for v in state["losses"]]
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        field = exc.args[0] if isinstance(exc, KeyError) else "generator"
        raise UserError(str(ckpt_path), str(field), f"damaged checkpoint; {afresh}") from None
    logger.info(f"resuming from {ckpt_path} at epoch {start}")
    return start, losses


def train_model(trace: Trace, cfg: ModelConfig, seed: int, out, progress: bool = True,
                config: Config | None = None, trace_name: str = "trace") -> Path:
    """Train on ``trace``; write the model to ``out`` (atomically) and return its path.
    ``config``: the experiment's, stamped into the model and, with its wandb: section, where the
    W&B run goes (``trace_name`` names the trace there). SIGTERM and SIGINT, heard from the
    start, stop it after the epoch under way with a checkpoint (``Stopped``)."""
    with stop_requests() as stop:
        return _fit(trace, cfg, seed, Path(out), progress, config, trace_name, stop)


def _fit(trace: Trace, cfg: ModelConfig, seed: int, out: Path, progress: bool,
         config: Config | None, trace_name: str, stop: list[int]) -> Path:
    ckpt_path = Path(f"{out}.ckpt")
    epochs = planned_epochs(cfg, trace.n_iterations)
    if epochs < 1:  # nothing trained: no model to write
        raise UserError(getattr(config, "source", "<model config>"), "model.epochs/model.steps",
                        f"{cfg.epochs} epochs, {cfg.steps} steps: training needs at least 1")
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    x, censored, m = normalised(trace, cfg.censoring)
    model = RuntimeModel(cfg, trace.n_workers, m, trace.meta.get("time_unit", "s"), trace.node)
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.learning_rate)
    fingerprint = _fingerprint(trace, cfg, seed)
    start, losses = 0, []
    if ckpt_path.exists():
        start, losses = _resume(ckpt_path, fingerprint, model, optimizer, generator)

    n_params = sum(p.numel() for p in model.parameters())
    logger.info(f"training run-time model: n={trace.n_workers} workers, T={trace.n_iterations} "
          f"iterations, {int(trace.censored.sum())} censored, median {m:.4g} "
          f"{model.time_unit}, {n_params} parameters, emission {cfg.emission}, "
          f"censoring {cfg.censoring}, seed {seed}")
    term = elbo_term(model, cfg)
    wandb = None if config is None else tracking.start(
        dataclasses.replace(config, model=cfg), "model", f"model-{trace_name}-s{seed}", out.parent,
        "epoch", trace=trace_name, seed=seed)
    bar = tqdm(range(start, epochs), disable=not progress, desc="ELBO", unit="epoch",
               initial=start, total=epochs)
    for epoch in bar:
        losses.append(run_epoch(model, optimizer, x, censored, cfg, generator, term))
        bar.set_postfix(elbo=f"{-losses[-1]:.4f}")
        tracking.log(wandb, {"epoch": epoch + 1, "elbo": -losses[-1]}, epoch + 1)
        if ((epoch + 1) % cfg.checkpoint_every == 0 or stop) and epoch + 1 < epochs:
            state = {"fingerprint": fingerprint, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "generator": generator.get_state(),
                     "epoch": epoch + 1, "losses": losses}
            write_with(ckpt_path, lambda tmp, state=state: torch.save(state, tmp))
        if stop and epoch + 1 < epochs:
            bar.close()
            tracking.finish(wandb, None, 128 + stop[0])
            raise Stopped(stop[0], ckpt_path, epoch + 1, unit="epoch")

    payload = checkpoint(model, losses=losses, provenance=stamp(config, seed, trace_meta={
        k: v for k, v in trace.meta.items() if isinstance(v, (str, int, float))}))
    write_with(out, lambda tmp: torch.save(payload, tmp))
    ckpt_path.unlink(missing_ok=True)
    tracking.finish(wandb, {"final_elbo": -losses[-1], "epochs": epochs,
                            "parameters": n_params})
    logger.info(f"final ELBO per observation {-losses[-1]:.4f} (first epoch {-losses[0]:.4f}) "
                f"-> {out}")
    return out
