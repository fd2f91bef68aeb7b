"""A real distributed run beside its virtual replay: does the virtual clock reproduce real time?

A ``bdsgd distributed`` job records, per iteration t, the cutoff c_t it applied, its server's
wall time and every worker's run-time x_t,w, measured by the server from sending the parameters
to the gradient's arrival (so communication is in it; a worker the cutoff cut is censored at the
cutoff time, a lower bound). Its server also puts the same x_t,w through the virtual clock, with
the job's late mode and no communication of its own (result.replay.parquet):

    real_t      = w_t - w_t-1, w_t the server's wall time after iteration t (evaluation excluded)
    virtual_t   = tau_t, the c_t-th arrival of the recorded run-times (the job's own cutoffs)
    c'_t, own_t = a fresh policy's cutoff and duration, replayed on the recorded run-times; where
                  c'_t > c_t it waits for a censored run-time, a lower bound

The gap between real_t and virtual_t is what the clock leaves out: the server's own work per
iteration (the policy's decision, averaging and applying the gradients, sending the parameters
one worker after another). Agreement: R = sum_t virtual_t / sum_t real_t; the per-iteration error
e_t = virtual_t / real_t - 1 by the median and the 90th percentile of |e_t|; and the share of
iterations with c'_t = c_t.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bdsgd.figures.inputs import DistributedJob
from bdsgd.plotting import save_figure

VIRTUAL_STYLE = {"color": "black", "ls": "--"}  # the virtual clock on the job's cutoffs
OWN_STYLE = {"color": "black", "ls": ":"}  # the virtual clock under the replayed policy
OWN = "virtual clock, policy replayed"


def replay_job(job: DistributedJob) -> pd.DataFrame:
    """Per iteration: iteration, cutoff c_t, real_s, virtual_s, replay_cutoff c'_t and replay_s
    own_t (the module's formulas)."""
    metrics = job.metrics.sort_values("iteration")
    replay = job.replay.sort_values("iteration")
    return pd.DataFrame({"iteration": metrics["iteration"].to_numpy(),
                         "cutoff": metrics["cutoff"].to_numpy(),
                         "real_s": np.diff(metrics["wall_time_s"].to_numpy(), prepend=0.0),
                         **{k: replay[k].to_numpy() for k in
                            ("virtual_s", "replay_cutoff", "replay_s")}})


def agreement(replay: pd.DataFrame) -> dict[str, float]:
    """total_ratio R, the median and 90th percentile of |e_t|, and same_cutoff, the share of
    iterations with c'_t = c_t (the module's formulas)."""
    error = np.abs(replay["virtual_s"] / replay["real_s"] - 1)
    return {"total_ratio": float(replay["virtual_s"].sum() / replay["real_s"].sum()),
            "median_error": float(np.median(error)), "p90_error": float(np.quantile(error, 0.9)),
            "same_cutoff": float((replay["replay_cutoff"] == replay["cutoff"]).mean())}


def distributed_replay_answer(replays: dict[str, pd.DataFrame]) -> str:
    """The measured answer, job by job (``replays``: name -> ``replay_job``'s table)."""
    if not replays:
        return ("No distributed job ran in this experiment: there is no real run to set the "
                "virtual clock against.")
    found = {name: agreement(replay) for name, replay in replays.items()}

    def each(key: str, percent: bool) -> str:
        return ", ".join(f"{100 * a[key]:.0f} % ({name})" if percent else f"{a[key]:.2f} ({name})"
                         for name, a in found.items())

    return (f"On the recorded run-times and cutoffs, the virtual clock's total time is "
            f"{each('total_ratio', False)} of the real run's; per iteration it is off by "
            f"{each('median_error', True)} at the median and {each('p90_error', True)} at the "
            f"90th percentile. Replayed on the virtual clock, the policy chose the real run's "
            f"cutoff in {each('same_cutoff', True)} of the iterations.")


def distributed_replay(jobs: list[DistributedJob], path: Path,
                       style: Callable[[str], dict]) -> list[Path]:
    """One row per job: iteration time, cutoff and cumulative time against the iteration, the
    real run in its policy's ``style``, the virtual clock black (dashed: on the job's cutoffs;
    dotted: the replayed policy's own). Without jobs, a figure that says so (the figure is always
    written: the workflow lists it)."""
    if not jobs:
        fig, ax = plt.subplots(figsize=(7, 2))
        ax.axis("off")
        ax.text(0.5, 0.5, distributed_replay_answer({}), ha="center", va="center", wrap=True)
        return save_figure(fig, path)
    fig, axes = plt.subplots(len(jobs), 3, figsize=(14, 3.4 * len(jobs)), squeeze=False)
    for (ax_time, ax_cut, ax_total), job in zip(axes, jobs, strict=True):
        replay, unit, n = replay_job(job), job.trace.meta.get("time_unit", "s"), job.trace.n_workers
        found, real = agreement(replay), {"label": "real run", **style(job.policy)}
        it = replay["iteration"] - replay["iteration"].iloc[0]  # counted from 0, as elsewhere
        ax_time.plot(it, replay["real_s"], **real)
        ax_time.plot(it, replay["virtual_s"], label="virtual clock", **VIRTUAL_STYLE)
        ax_time.set(xlabel="iteration, from 0", ylabel=f"iteration time ({unit})", ylim=(0, None),
                    title=f"{job.name}: {job.policy}, {n} workers, late {job.late}")
        ax_cut.step(it, replay["cutoff"], where="mid", **real)
        ax_cut.step(it, replay["replay_cutoff"], where="mid", label=OWN, **OWN_STYLE)
        ax_cut.set(xlabel="iteration, from 0", ylabel="cutoff c (gradients applied)", ylim=(0.5, n + 0.5),
                   yticks=range(1, n + 1), title=f"cutoff per iteration: the same in "
                                                 f"{100 * found['same_cutoff']:.0f} %")
        ax_total.plot(it, replay["real_s"].cumsum(), **real)
        ax_total.plot(it, replay["virtual_s"].cumsum(), label="virtual clock", **VIRTUAL_STYLE)
        ax_total.plot(it, replay["replay_s"].cumsum(), label=OWN, **OWN_STYLE)
        ax_total.set(xlabel="iteration, from 0", ylabel=f"cumulative time ({unit})", ylim=(0, None),
                     title=f"virtual / real = {found['total_ratio']:.2f}, median |error| "
                           f"{100 * found['median_error']:.0f} %")
        for ax in (ax_time, ax_cut, ax_total):
            ax.legend(fontsize=8)
    return save_figure(fig, path)
