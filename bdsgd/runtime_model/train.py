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

from bdsgd.config import Config, ModelConfig
from bdsgd.entry import stop_requests
from bdsgd.errors import Stopped, UserError
from bdsgd.outputs import tracking
from bdsgd.outputs.io import write_with
from bdsgd.outputs.provenance import stamp
from bdsgd.runtime_model.checkpoint import checkpoint, read_state
from bdsgd.runtime_model.filtering import impute
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.runtime_model.prior import generic_workers, prior_traces, start_from_prior
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
    kernels instead of ~300 small operations, after one compilation: it pays where the cluster
    is small or mid-sized (benchmarks/bench_model.py). None: eager."""
    return torch.compile(model.elbo_term, dynamic=False) if cfg.compile else None


def prior_penalty(model: RuntimeModel, precision: float, observations: int):
    """-log p(theta) per observation, up to a constant, of a Gaussian prior N(theta_0,
    1 / ``precision``) on each parameter but the workers' identities, theta_0 their values now
    (the prior over clusters, just loaded), spread over the trace's ``observations``
    worker-iterations as the ELBO is: a function of no arguments, added to each step's loss.

    With it, training is MAP under that prior: a parameter the trace identifies moves where its
    likelihood pulls, one it says little about stays near theta_0. Adam alone would move both
    alike, since it scales every parameter's step to the same size."""
    origin = {name: p.detach().clone() for name, p in model.named_parameters()
              if name != "embedding" and p.requires_grad}
    scale = precision / (2 * observations)

    def penalty() -> torch.Tensor:
        params = dict(model.named_parameters())
        return scale * sum(((params[name] - value) ** 2).sum() for name, value in origin.items())

    return penalty


def run_epoch(model, optimizer, data: list[tuple[torch.Tensor, torch.Tensor]],
              cfg: ModelConfig, generator, term=None, penalty=None) -> float:
    """One pass over every sequence of ``data`` ((x, censored) pairs of one n); returns the mean
    negative ELBO per observation. ``term``: ``elbo_term``'s; ``penalty``: ``prior_penalty``'s,
    added to each step's loss (not to what is returned)."""
    length = min(cfg.chunk, *(x.shape[0] for x, _ in data))
    offsets = torch.arange(length)
    # (sequence, start) of every window, in random order across the sequences
    starts = torch.cat([torch.stack([torch.full((len(w),), i), w], 1) for i, w in
                        enumerate(windows(x.shape[0], length, generator) for x, _ in data)])
    if len(data) > 1:  # one sequence's windows come shuffled already
        starts = starts[torch.randperm(len(starts), generator=generator)]
    losses = []
    for batch in starts.split(cfg.batch_size):
        rows = batch[:, 1:] + offsets  # (B, L)
        xb = torch.stack([data[i][0][r] for i, r in zip(batch[:, 0].tolist(), rows, strict=True)])
        cb = torch.stack([data[i][1][r] for i, r in zip(batch[:, 0].tolist(), rows, strict=True)])
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
        (loss if penalty is None else loss + penalty()).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 10.0)
        optimizer.step()
        losses.append(float(loss.detach()) * xb.numel())
    return sum(losses) / (len(starts) * length * data[0][0].shape[1])


def _fingerprint(traces: list[Trace], cfg: ModelConfig, seed: int, prior: dict | None) -> dict:
    """What a checkpoint must match to be resumed."""
    return {"config": dataclasses.asdict(cfg), "seed": seed, "prior": prior,
            "shapes": [list(t.runtimes.shape) for t in traces],
            "sums": [float(t.runtimes.sum()) for t in traces]}


def planned_epochs(cfg: ModelConfig, lengths: list[int], steps: int | None = None) -> int:
    """model.epochs, or when it is null the passes that make ``steps`` (model.steps) Adam steps:
    each pass takes the sequences' half-overlapping windows of ``chunk`` iterations
    (``windows``; a random phase can drop one) in batches of ``batch_size``."""
    if cfg.epochs is not None:
        return cfg.epochs
    length = min(cfg.chunk, *lengths)
    per_pass = -(-sum((T - length) // max(1, length // 2) + 1 for T in lengths) // cfg.batch_size)
    return -(-(steps or cfg.steps) // per_pass)


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
                config: Config | None = None, trace_name: str = "trace",
                prior: str | Path | None = None) -> Path:
    """Train on ``trace``; write the model to ``out`` (atomically) and return its path.
    ``prior``: a prior over clusters (``train_prior``'s model) to start from, every parameter
    but the workers' identities; None: from the initial values. ``config``: the experiment's,
    stamped into the model and, with its wandb: section, where the W&B run goes (``trace_name``
    names the trace there). SIGTERM and SIGINT, heard from the start, stop it after the epoch
    under way with a checkpoint (``Stopped``)."""
    with stop_requests() as stop:
        x, censored, m = normalised(trace, cfg.censoring)
        torch.manual_seed(seed)  # the initial values
        model = RuntimeModel(cfg, trace.n_workers, m, trace.meta.get("time_unit", "s"),
                             trace.node)
        origin = None if prior is None else start_from_prior(model, prior)
        penalty = (prior_penalty(model, cfg.prior_precision, x.numel())
                   if origin is not None and cfg.prior_precision > 0 else None)
        logger.info(f"training run-time model: n={trace.n_workers} workers, "
                    f"T={trace.n_iterations} iterations, {int(trace.censored.sum())} censored, "
                    f"median {m:.4g} {model.time_unit}, emission {cfg.emission}, censoring "
                    f"{cfg.censoring}, seed {seed}, {f'prior {prior}' if prior else 'no prior'}")
        return _fit(model, [(x, censored)], [trace], cfg.steps, seed, Path(out), progress,
                    config, trace_name, stop, origin, penalty)


def train_prior(cfg: ModelConfig, seed: int, out, progress: bool = True,
                config: Config | None = None) -> Path:
    """Fit the prior over clusters (``prior``'s module docstring) and write it to ``out``."""
    with stop_requests() as stop:
        # the prior's length is prior_steps, its batches prior_batch_size
        cfg = dataclasses.replace(cfg, epochs=None, batch_size=cfg.prior_batch_size)
        traces = prior_traces(cfg, seed)
        torch.manual_seed(seed)  # the initial values
        model = RuntimeModel(cfg, cfg.prior_workers, 1.0, "normalised", traces[0].node)
        generic_workers(model)
        data = [normalised(t, cfg.censoring)[:2] for t in traces]
        logger.info(f"training the prior over clusters: {len(traces)} draws "
                    f"({', '.join(sorted({t.meta['scenario'] for t in traces}))}) of "
                    f"{cfg.prior_workers} workers x {cfg.prior_iterations} iterations, "
                    f"seed {seed}")
        return _fit(model, data, traces, cfg.prior_steps, seed, Path(out), progress, config,
                    "prior", stop, None)


def _fit(model: RuntimeModel, data: list, traces: list[Trace], steps: int, seed: int, out: Path,
         progress: bool, config: Config | None, trace_name: str, stop: list[int],
         prior: dict | None, penalty=None) -> Path:
    cfg = model.config
    ckpt_path = Path(f"{out}.ckpt")
    epochs = planned_epochs(cfg, [x.shape[0] for x, _ in data], steps)
    if epochs < 1:  # nothing trained: no model to write
        raise UserError(getattr(config, "source", "<model config>"), "model.epochs/model.steps",
                        f"{cfg.epochs} epochs, {cfg.steps} steps: training needs at least 1")
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad],
                                 lr=cfg.learning_rate)
    fingerprint = _fingerprint(traces, cfg, seed, prior)
    start, losses = 0, []
    if ckpt_path.exists():
        start, losses = _resume(ckpt_path, fingerprint, model, optimizer, generator)

    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    logger.info(f"{n_params} parameters, {epochs} epochs")
    term = elbo_term(model, cfg)
    wandb = None if config is None else tracking.start(
        dataclasses.replace(config, model=cfg), "model", f"model-{trace_name}-s{seed}", out.parent,
        "epoch", trace=trace_name, seed=seed)
    bar = tqdm(range(start, epochs), disable=not progress, desc="ELBO", unit="epoch",
               initial=start, total=epochs)
    for epoch in bar:
        losses.append(run_epoch(model, optimizer, data, cfg, generator, term, penalty))
        bar.set_postfix(elbo=f"{-losses[-1]:.4f}")
        tracking.log(wandb, {"epoch": epoch + 1, "elbo": -losses[-1]}, epoch + 1)
        # a stop request at the last epoch stops too: the job told to stop fails whatever this
        # process writes, and the next one writes the model from the checkpoint
        if (epoch + 1) % cfg.checkpoint_every == 0 and epoch + 1 < epochs or stop:
            state = {"fingerprint": fingerprint, "model": model.state_dict(),
                     "optimizer": optimizer.state_dict(), "generator": generator.get_state(),
                     "epoch": epoch + 1, "losses": losses}
            write_with(ckpt_path, lambda tmp, state=state: torch.save(state, tmp))
        if stop:
            bar.close()
            tracking.finish(wandb, None, 128 + stop[0])
            raise Stopped(stop[0], ckpt_path, epoch + 1, unit="epoch")

    meta = {k: v for k, v in traces[0].meta.items() if isinstance(v, (str, int, float))}
    payload = checkpoint(model, losses=losses, prior=prior,
                         provenance=stamp(config, seed, trace_meta=meta))
    write_with(out, lambda tmp: torch.save(payload, tmp))
    ckpt_path.unlink(missing_ok=True)
    tracking.finish(wandb, {"final_elbo": -losses[-1], "epochs": epochs,
                            "parameters": n_params})
    logger.info(f"final ELBO per observation {-losses[-1]:.4f} (first epoch {-losses[0]:.4f}) "
                f"-> {out}")
    return out
