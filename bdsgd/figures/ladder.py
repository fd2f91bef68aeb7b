"""The ladder from Teng & Wood's BDSGD to the project's (``bdsgd ladder``): each rung's throughput
over the hindsight optimum, and what its one change buys against the rung it follows, paired on
the same iterations (``bdsgd.figures.verdicts``). Drawn from stored results only.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from bdsgd.figures.common import marker, policy_colour
from bdsgd.figures.verdicts import phrases, throughput_verdicts, versus_answer
from bdsgd.plotting import save_figure

COLUMNS = ["trace", "order", "rung", "change", "policy", "against", "relative_to_oracle",
           "mean_cutoff", "cutoff_changes", "ratio", "low", "high", "verdict"]
EMISSION = ("likelihood", "gaussian")  # log-normal against Gaussian, all else equal (R3)
LEARNING = ("learning", "prior")  # learning while serving against the same model frozen (R1)
NOT_MEASURED = "Not measured: no ladder was replayed (throughput.ablations.traces)."


def ladder_table(ladders: list[tuple[str, dict, pd.DataFrame]]) -> pd.DataFrame:
    """ladder.csv: a row per trace and rung (``inputs.load_ladders``), in the rungs' order, with
    the paired ratio of its throughput over the rung it is compared with, and the verdict."""
    rows = []
    for trace, rungs, decisions in ladders:
        decisions = decisions.assign(trace=trace)
        pairs = [(name, r["against"]) for name, r in rungs.items() if r["against"]]
        paired = throughput_verdicts(decisions, pairs).set_index("policy")
        for name, r in rungs.items():
            cutoffs = decisions[decisions["policy"] == name].sort_values("iteration")["cutoff"]
            row = {"trace": trace, "order": r["order"], "rung": name, "change": r["change"],
                   "policy": r["policy"], "against": r["against"] or "",
                   "relative_to_oracle": r["relative_to_oracle"], "mean_cutoff": r["mean_cutoff"],
                   "cutoff_changes": float(np.mean(np.diff(cutoffs) != 0)) if len(cutoffs) > 1
                   else 0.0}
            if name in paired.index:
                row.update(paired.loc[name, ["ratio", "low", "high", "verdict"]].to_dict())
            rows.append(row)
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.sort_values(["trace", "order"]).reset_index(drop=True)


def ladder(table: pd.DataFrame, path: Path) -> list[Path]:
    """Per trace, each rung's throughput over the optimum (a dot in its policy's colour), its
    change below it and its verdict against the rung it follows above it."""
    traces = sorted(table["trace"].unique())
    fig, axes = plt.subplots(max(1, len(traces)), 1, figsize=(11, 3.8 * max(1, len(traces))),
                             squeeze=False, layout="constrained")
    if not traces:
        axes[0, 0].set_axis_off()
        axes[0, 0].text(0.5, 0.5, NOT_MEASURED, ha="center", va="center")
    for ax, trace in zip(axes[:, 0], traces, strict=False):
        sub = table[table["trace"] == trace]
        for i, r in enumerate(sub.itertuples()):
            ax.plot(i, r.relative_to_oracle, ls="none", marker=marker(r.policy), ms=8,
                    color=policy_colour(r.policy), mec="k", mew=0.5)
            said = f"{r.relative_to_oracle:.3f}" + (
                f"\n{r.verdict}\nx{r.ratio:.3g} vs\n{r.against}" if r.against else "")
            ax.annotate(said, (i, r.relative_to_oracle), xytext=(0, 6),
                        textcoords="offset points", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(sub)), [f"{r.rung}\n{r.change}".replace(", ", ",\n")
                                         for r in sub.itertuples()], fontsize=7)
        ax.set(ylim=(0, 1.45), ylabel="throughput / hindsight optimum",
               title=f"{trace}: from Teng & Wood's BDSGD (left) to the project's (right), one "
                     "change a rung\nabove each: its throughput over the optimum, and its verdict "
                     "against the rung it follows (paired, 95% batch-means interval)")
        ax.axhline(1.0, color="k", lw=0.8)
    return save_figure(fig, path)


def ladder_answer(table: pd.DataFrame) -> str:
    """Per trace: the paper's BDSGD's and the project's throughput over the optimum, and each
    rung against the one it follows."""
    if table.empty:
        return NOT_MEASURED
    parts = []
    for trace, sub in table.groupby("trace"):
        first, last = sub.iloc[0], sub.iloc[-1]
        compared = sub[sub["against"] != ""]
        compared = compared.assign(policy=compared["rung"] + " (" + compared["change"] + ")",
                                   reference=compared["against"], pairs="paired iterations")
        parts.append(f"On {trace}, Teng & Wood's BDSGD reaches {first.relative_to_oracle:.3f} of "
                     f"the hindsight optimum and the project's {last.relative_to_oracle:.3f}. "
                     + phrases(compared))
    return " ".join(parts)


def emission_answer(ladders: list[tuple[str, dict, pd.DataFrame]]) -> str:
    """R3's Gaussian for positive run-times: log-normal against Gaussian emission with the
    censored likelihood, the paper's rule and no margin alike (rungs ``EMISSION``), paired."""
    return _versus(ladders, EMISSION, "Log-normal emission (rung likelihood) against Gaussian "
                   "(rung gaussian), everything else alike: ")


def drift_answer(ladders: list[tuple[str, dict, pd.DataFrame]]) -> str:
    """R1's load at test time unlike training's: the model learning while it serves against the
    same model frozen (rungs ``LEARNING``), paired, on each ladder trace (a load-shift trace's
    test part runs at a load its training part never saw)."""
    return _versus(ladders, LEARNING, "Learning while serving (rung learning) against the same "
                   "model frozen (rung prior): ")


def _versus(ladders, pair: tuple[str, str], said: str) -> str:
    """``said`` and, per trace, the two rungs of ``pair`` compared on the same iterations."""
    if not ladders:
        return NOT_MEASURED
    decisions = pd.concat([d.assign(trace=trace) for trace, _, d in ladders], ignore_index=True)
    return said + versus_answer(decisions, [pair])
