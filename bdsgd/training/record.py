"""A training run's record: one metrics row per iteration (or per round of n applied gradients),
the test set evaluated along the way, W&B, the progress bar, and the outputs at the end.

Every mode writes the columns ``COLUMNS``:

    iteration, virtual_time_s, cutoff (workers whose gradients the row applied),
    iteration_time_s, lr, train_loss, test_accuracy, test_loss (every train.eval_every rows and
    at the end, NaN between), gradients (applied in the row), staleness (their mean: updates
    applied between a gradient's parameters and its own update; 0 in the cutoff mode).

Time to target is the virtual time of the first evaluation at or above the target accuracy, so
it is only as fine as the evaluations: once an evaluation comes within train.eval_near_target
of the target, the test set is evaluated after every row until one reaches it, which resolves
time to target to one iteration where it matters (between evaluations far from the target
nothing is missed). Under train.stop_at_target m the run stops after ceil((1 + m) k) rows, k the
row that reached the target (``Recorder.done``), instead of training all of the run's iterations.
"""

from __future__ import annotations

import logging
import math
import sys

import numpy as np
import pandas as pd
import torch
from torch import nn
from tqdm import tqdm

from bdsgd.errors import Stopped
from bdsgd.outputs import tracking
from bdsgd.outputs.io import write_json, write_with
from bdsgd.outputs.provenance import stamp
from bdsgd.sgd import evaluate
from bdsgd.training.run import RunSetup
from bdsgd.training.spec import RunSpec

logger = logging.getLogger(__name__)

COLUMNS = ("iteration", "virtual_time_s", "cutoff", "iteration_time_s", "lr", "train_loss",
           "test_accuracy", "test_loss", "gradients", "staleness")
INTEGER_COLUMNS = {"iteration": "int64", "cutoff": "int64", "gradients": "int64"}


def time_to_target(metrics: pd.DataFrame, target: float | None,
                   clock: str = "virtual_time_s") -> float | None:
    """The first time on ``clock`` at which the evaluated test accuracy reached ``target``."""
    if target is None:
        return None
    hit = metrics[clock][metrics["test_accuracy"] >= target]
    return float(hit.iloc[0]) if len(hit) else None


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


class Recorder:
    """A run's metrics rows and what happens at the end of each: the test set evaluated when the
    iteration passes a multiple of train.eval_every and at the last, W&B, a checkpoint when it
    passes a multiple of train.checkpoint_every, the progress bar, and a stop request (SIGTERM /
    SIGINT: checkpoint, then ``Stopped``)."""

    def __init__(self, spec: RunSpec, run: RunSetup, log: dict | None, stop: list[int]):
        cfg, policy, seed, tc = spec.cfg, spec.policy, spec.seed, run.tc
        self.run, self.tc, self.stop = run, tc, stop
        self.log = log if log is not None else {col: [] for col in COLUMNS}
        self.last = self.log["iteration"][-1] if self.log["iteration"] else 0
        task, rows = run.identity["task"], len(self.log["iteration"])
        history = [(self.log["iteration"][i], {col: self.log[col][i] for col in COLUMNS})
                   for i in range(rows)]
        self.wandb = (tracking.start(cfg, policy, f"{task}-{policy}-s{seed}", spec.out,
                                     "virtual_time_s", tracking.id_of(
                                         {"experiment": cfg.experiment, **run.identity}),
                                     history, task=task, trace=cfg.run_trace(), seed=seed)
                      if self.last < run.iterations else None)
        self.shown = next((a for a in reversed(self.log["test_accuracy"]) if not math.isnan(a)),
                          math.nan)
        reached = [it for it, a in zip(self.log["iteration"], self.log["test_accuracy"],
                                       strict=True) if a >= run.target]
        self.reached = reached[0] if reached else None  # the row that reached the target
        self.bar = tqdm(initial=self.last, total=run.iterations, file=sys.stderr,
                        desc=f"{task}/{policy}/s{seed}")

    @property
    def clock(self) -> float:
        """The virtual time of the last row (0 before the first)."""
        return self.log["virtual_time_s"][-1] if self.log["virtual_time_s"] else 0.0

    @property
    def end(self) -> int:
        """The row the run ends at: its last iteration, or under train.stop_at_target the
        margin after the row that reached the target."""
        margin = self.tc.stop_at_target
        if margin is None or self.reached is None:
            return self.run.iterations
        return min(self.run.iterations, math.ceil((1 + margin) * self.reached))

    @property
    def done(self) -> bool:
        return self.last >= self.end

    def record(self, model: nn.Module, row: dict, save) -> None:
        """Append ``row`` (every column but the test ones); ``save()`` writes the checkpoint."""
        it, every = row["iteration"], lambda k: it // k > self.last // k
        near = self.reached is None and self.shown >= self.run.target - self.tc.eval_near_target
        final = it >= self.end
        row["test_accuracy"] = row["test_loss"] = math.nan
        if every(self.tc.eval_every) or final or near:
            row["test_accuracy"], row["test_loss"] = evaluate(model, self.run.data, self.run.device)
            self.shown = row["test_accuracy"]
            if self.reached is None and self.shown >= self.run.target:
                self.reached = it
                final = it >= self.end
        for col in COLUMNS:
            self.log[col].append(row[col])
        tracking.log(self.wandb, row, it)
        if every(self.tc.checkpoint_every) or final or self.stop:
            save()
        self.bar.update(it - self.last)
        self.bar.set_postfix(acc=f"{self.shown:.3f}", vtime=f"{row['virtual_time_s']:.1f}s",
                             c=row["cutoff"], refresh=False)
        self.last = it
        self.stop_if_asked()

    def stop_if_asked(self) -> None:
        """On a stop request, close with its exit code and raise ``Stopped``; the checkpoint is
        the last row's. At the run's last row too: a job told to stop fails whatever this process
        writes (Snakemake removes its outputs), and the next job writes them from the checkpoint
        instead of training the run again."""
        if self.stop:
            self.close(exit_code=128 + self.stop[0])
            raise Stopped(self.stop[0], self.run.ckpt_path, self.last)

    def close(self, exit_code: int = 0) -> None:
        """Close the bar and the W&B run (a finished run's, exit code 0, with its summary)."""
        self.bar.close()
        if self.wandb is not None:
            tracking.finish(self.wandb, metrics_summary(metrics_frame(self.log), self.run.target)
                            if exit_code == 0 else None, exit_code)


def staleness_summary(staleness: np.ndarray) -> dict:
    """result.json's summary of the applied gradients' staleness (async, cyclic)."""
    return {"mean_staleness": float(staleness.mean()), "max_staleness": int(staleness.max()),
            "staleness_p50": float(np.percentile(staleness, 50)),
            "staleness_p90": float(np.percentile(staleness, 90))}


def metrics_frame(log: dict) -> pd.DataFrame:
    """The metrics rows as metrics.parquet holds them."""
    return pd.DataFrame(log, columns=list(COLUMNS)).astype(INTEGER_COLUMNS)


def metrics_summary(metrics: pd.DataFrame, target: float) -> dict:
    """The summary keys read off the metrics rows (result.json's and the W&B run's)."""
    gradients, times = metrics["gradients"].to_numpy(), metrics["iteration_time_s"].to_numpy()
    return {
        "time_to_target_s": time_to_target(metrics, target),
        "final_accuracy": float(metrics["test_accuracy"].iloc[-1]),
        "final_test_loss": _finite(metrics["test_loss"].iloc[-1]),  # None once training diverged
        "gradients_per_s": float(gradients.sum() / times.sum()),
        "mean_cutoff": float(metrics["cutoff"].mean()), "iterations": int(len(metrics)),
        "gradients": int(gradients.sum()),
        "virtual_time_s": float(metrics["virtual_time_s"].iloc[-1]),
    }


def write_outputs(spec: RunSpec, run: RunSetup, log: dict, model: nn.Module, wallclock: dict,
                  extra: dict | None = None, clock: dict | None = None) -> dict:
    """The run's metrics.parquet, model.pt and result.json (``extra``: the mode's summary keys;
    ``clock``: the virtual cluster's, ``bdsgd.cluster.virtual.VirtualCluster.record``); removes
    the checkpoint. ``wallclock``: this process's timings, after the common note."""
    cfg, task, policy, seed, out_dir = spec.cfg, spec.task, spec.policy, spec.seed, spec.out
    T, n = run.trace.runtimes.shape
    metrics = metrics_frame(log)
    write_with(out_dir / "metrics.parquet", lambda tmp: metrics.to_parquet(tmp, index=False))
    write_with(out_dir / "model.pt", lambda tmp: torch.save(model.state_dict(), tmp))
    summary = {
        "task": task, "policy": policy, "seed": seed, "target_accuracy": run.target,
        **metrics_summary(metrics, run.target),
        "n_workers": n, "trace_iterations": T, "trace_cycles": run.iterations / T,
        "trace": cfg.run_trace(), **(extra or {}),
    }
    write_json(out_dir / "result.json", {
        **stamp(cfg, seed, task=task, policy=policy, trace=str(spec.trace),
                trace_meta=run.trace.meta),
        "history": None if run.history is None else {"path": str(spec.history),
                                                     "n_iterations": run.history.n_iterations},
        "summary": summary, "clock": clock, "wallclock": {
            "note": "wall-clock of this process; varies run to run, not part of compared tables",
            **wallclock}})
    run.ckpt_path.unlink()  # the run is complete: its outputs replace the checkpoint
    tta = summary["time_to_target_s"]
    logger.info(f"{task}/{policy}/s{seed}: final accuracy {summary['final_accuracy']:.4f}, "
          f"time to {run.target} {'never' if tta is None else f'{tta:.1f} s'}, "
          f"{summary['gradients_per_s']:.2f} gradients/s, mean cutoff {summary['mean_cutoff']:.2f} "
          f"-> {out_dir}")
    if "mean_staleness" in summary:  # a mode whose gradients are stale (async, cyclic)
        logger.info(f"{policy} staleness: mean {summary['mean_staleness']:.2f}, p90 "
                    f"{summary['staleness_p90']:.1f}, max {summary['max_staleness']}")
    return summary
