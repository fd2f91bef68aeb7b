"""Verdicts: each policy against its references, paired, in one word from an interval.

A comparison is paired: the policy and its reference on the same seeds (a convergence run's seed
fixes the cluster draw and the initialisation) or on the same iterations (one throughput
replay). Its measure is the policy's value over the reference's, r:

- time to target over seeds: r_s = T_s / T_ref,s per seed (a seed that never reached the
  target is infinitely slow; a seed where neither did is dropped), the median of the r_s with
  the distribution-free interval of order statistics (``stats.median_interval``) and its
  coverage;
- throughput of one replay: sum c / sum d over the reference's on the same iterations, with
  the batch-means interval over blocks of iterations (``stats.block_ratio_interval``);
- throughput over cluster draws (throughput.draws): r_d = R_d / R_ref,d per draw, the median
  of the r_d with the interval of order statistics, as over seeds.

The verdict reads the interval [lo, hi] of r, "better" being a shorter time or a higher
throughput:

    level           lo and hi both within LEVEL of 1: no difference worth stating
    ahead, behind   the interval excludes 1, on the better or the worse side
    too few seeds   neither, or the interval covers less than CONFIDENCE (of one replay:
                    too few iterations)

Every answer that compares policies says these words and no ranking of its own.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bdsgd.layout import policy_parts
from bdsgd.stats import block_ratio_interval, median_interval

LEVEL = 0.01  # a ratio within 1 % of 1 is level (docs/decisions.md)
CONFIDENCE = 0.95  # the coverage an interval needs for any verdict but "too few seeds"
UNDECIDED = "too few seeds"
# The references every policy is compared with: sync, Chen et al.'s backup workers, the paper's
# BDSGD, and the strongest of the simple baselines (per trace, by the measure compared).
REFERENCES = ("sync", "static", "bdsgd-paper")
BDSGDS = ("bdsgd", "bdsgd-paper")  # ours and Teng & Wood's, which every answer states
SIMPLE = ("static", "elfving", "ecdf", "bandit", "ewma", "persist")
COLUMNS = ["measure", "task", "trace", "policy", "reference", "ratio", "low", "high", "coverage",
           "pairs", "verdict"]


def verdict(low: float, high: float, better: str, coverage: float = 1.0,
            pairs: str = "seeds") -> str:
    """The verdict word of the interval [low, high] of a ratio (``better``: "lower" or
    "higher"; ``pairs``: what was paired), as the module docstring says."""
    undecided = UNDECIDED.replace("seeds", pairs)
    if np.isnan(low) or np.isnan(high) or coverage < CONFIDENCE:
        return undecided
    if low >= 1 - LEVEL and high <= 1 + LEVEL:
        return "level"
    if low > 1 or high < 1:
        return "ahead" if (low > 1) == (better == "higher") else "behind"
    return undecided


def paired_seeds(times: pd.Series, reference: pd.Series) -> tuple[float, float, float, float, int]:
    """(median ratio, low, high, coverage, pairs) of two policies' times to target indexed by
    seed: the seeds both ran, infinitely slow where a seed never reached the target, dropped
    where neither did."""
    both = pd.concat([times, reference], axis=1, join="inner").astype(float).fillna(np.inf)
    both = both[np.isfinite(both).any(axis=1)]
    a, b = both.iloc[:, 0].to_numpy(), both.iloc[:, 1].to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(np.isinf(a), np.inf, np.where(np.isinf(b), 0.0, a / b))
    median, low, high, coverage = median_interval(ratios, CONFIDENCE)
    return median, low, high, coverage, len(ratios)


def _strongest(values: pd.Series, better: str) -> str | None:
    """The simple baseline with the best value (``values`` indexed by policy), if any ran."""
    simple = values[values.index.isin(SIMPLE)].dropna()
    if simple.empty:
        return None
    return simple.idxmin() if better == "lower" else simple.idxmax()


def _pairs(policies, strongest: str | None):
    """(policy, reference) for every compared policy and each of its references present; an
    ablation arm <policy>+<variant> against its policy too."""
    references = [r for r in (*REFERENCES, strongest) if r in policies]
    compared = [p for p in policies if not p.startswith(("oracle", "bayes"))]
    return [(p, r) for p in compared
            for r in dict.fromkeys([*references, policy_parts(p)[0]])
            if p != r and r in policies]


def time_verdicts(summary: pd.DataFrame) -> pd.DataFrame:
    """Per task and trace, each policy's time to target against its references, paired by
    seed (``paired_seeds``)."""
    rows = []
    for (task, trace), runs in summary.groupby(["task", "trace"]):
        times = {p: r.set_index("seed")["time_to_target_s"] for p, r in runs.groupby("policy")}
        medians = pd.Series({p: t.astype(float).fillna(np.inf).median() for p, t in times.items()})
        for policy, ref in _pairs(list(times), _strongest(medians, "lower")):
            ratio, low, high, coverage, pairs = paired_seeds(times[policy], times[ref])
            rows.append({"measure": "time to target", "task": task, "trace": trace,
                         "policy": policy, "reference": ref, "ratio": ratio, "low": low,
                         "high": high, "coverage": coverage,
                         "pairs": f"{pairs} seed{'s' if pairs != 1 else ''}",
                         "verdict": verdict(low, high, "lower", coverage)})
    return pd.DataFrame(rows, columns=COLUMNS)


def throughput_verdicts(decisions: pd.DataFrame, pairs=None) -> pd.DataFrame:
    """Per trace, each cutoff policy's replayed throughput (its default rule) against its
    references' on the same iterations (``stats.block_ratio_interval``); ``pairs``: only these
    (policy, reference), where both were replayed."""
    rows = []
    plain = decisions[~decisions["policy"].str.contains("/")]
    for trace, sub in plain.groupby("trace"):
        replays = {p: r.sort_values("iteration") for p, r in sub.groupby("policy")}
        rates = pd.Series({p: r["cutoff"].sum() / r["duration_s"].sum() for p, r in replays.items()})
        chosen = _pairs(list(replays), _strongest(rates, "higher")) if pairs is None else [
            (p, r) for p, r in pairs if p in replays and r in replays]
        for policy, ref in chosen:
            own, other = replays[policy], replays[ref]
            low, high = block_ratio_interval(own["cutoff"], own["duration_s"],
                                             other["cutoff"], other["duration_s"])
            rows.append({"measure": "throughput", "task": "", "trace": trace, "policy": policy,
                         "reference": ref, "ratio": rates[policy] / rates[ref], "low": low,
                         "high": high, "coverage": CONFIDENCE,
                         "pairs": f"{len(own)} iterations",
                         "verdict": verdict(low, high, "higher", pairs="iterations")})
    return pd.DataFrame(rows, columns=COLUMNS)


def draw_verdicts(draws: pd.DataFrame) -> pd.DataFrame:
    """Per trace, each policy's throughput against its references', paired by cluster draw
    (``inputs.load_draws``' rows): the median of the per-draw ratios with its interval."""
    rows = []
    for trace, sub in draws.groupby("trace"):
        rates = sub.pivot(index="draw", columns="policy", values="gradients_per_s")
        for policy, ref in _pairs(list(rates.columns), _strongest(rates.median(), "higher")):
            ratios = (rates[policy] / rates[ref]).dropna()
            ratio, low, high, coverage = median_interval(ratios, CONFIDENCE)
            rows.append({"measure": "throughput over draws", "task": "", "trace": trace,
                         "policy": policy, "reference": ref, "ratio": ratio, "low": low,
                         "high": high, "coverage": coverage,
                         "pairs": f"{len(ratios)} draw{'s' if len(ratios) != 1 else ''}",
                         "verdict": verdict(low, high, "higher", coverage, pairs="draws")})
    return pd.DataFrame(rows, columns=COLUMNS)


def versus_answer(decisions: pd.DataFrame, pairs) -> str:
    """Per trace, the throughput of each (policy, reference) of ``pairs`` compared, a sentence."""
    table = throughput_verdicts(decisions, pairs)
    return " ".join(f"On {trace}, {phrases(rows)}" for trace, rows in table.groupby("trace"))


def verdict_table(summary: pd.DataFrame, decisions: pd.DataFrame) -> pd.DataFrame:
    """verdicts.csv: every paired comparison of the convergence runs and the throughput replays."""
    return pd.concat([time_verdicts(summary), throughput_verdicts(decisions)], ignore_index=True)


def phrases(rows: pd.DataFrame) -> str:
    """Comparisons as an answer states them, one sentence ('' for none)."""
    return "; ".join(phrase(r) for r in rows.itertuples()) + "." if len(rows) else ""


def phrase(row) -> str:
    """One comparison as an answer states it: '<policy> against <reference>: <verdict> (ratio
    r, interval lo to hi, pairs)'."""
    return (f"{row.policy} against {row.reference}: {row.verdict} (ratio {row.ratio:.3g}, "
            f"{CONFIDENCE:.0%} interval {row.low:.3g} to {row.high:.3g}, {row.pairs})")


def read_table(path) -> pd.DataFrame:
    """verdicts.csv as written (its empty task cells kept empty)."""
    return pd.read_csv(path).fillna({"task": ""})


def format_table(verdicts: pd.DataFrame) -> str:
    """The verdict table as the finished workflow prints it."""
    if verdicts.empty:
        return "no paired comparisons"
    shown = verdicts.assign(where=(verdicts["task"] + " " + verdicts["trace"]).str.strip())
    return shown[["measure", "where", "policy", "reference", "ratio", "low", "high", "pairs",
                  "verdict"]].to_string(index=False, float_format=lambda v: f"{v:.3g}")
