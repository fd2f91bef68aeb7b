"""Verdicts from paired intervals (``bdsgd.figures.verdicts``): level where two policies are drawn
alike, ahead and behind where they are clearly apart, "too few seeds" where the interval cannot
tell."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bdsgd.figures.verdicts import (
    UNDECIDED,
    format_table,
    paired_seeds,
    throughput_verdicts,
    time_verdicts,
    verdict,
    versus_answer,
)

SEEDS = 12
RNG = np.random.default_rng(0)
# one cluster draw per seed, shared by every policy: the pairing removes its spread
CLUSTER = RNG.lognormal(0.0, 0.5, SEEDS) * 10


def summary(**factors) -> pd.DataFrame:
    """Times to target per policy and seed: the seed's cluster time times the policy's factor,
    with 0.1 % noise of its own."""
    rows = [{"task": "digits", "trace": "t", "policy": p, "seed": s,
             "time_to_target_s": CLUSTER[s] * f * (1 + 0.001 * RNG.standard_normal())}
            for p, f in factors.items() for s in range(SEEDS)]
    return pd.DataFrame(rows)


def row(table: pd.DataFrame, policy: str, reference: str) -> pd.Series:
    return table.set_index(["policy", "reference"]).loc[(policy, reference)]


def test_alike_is_level_and_apart_is_ahead_or_behind():
    table = time_verdicts(summary(sync=1.0, static=1.0, bdsgd=0.8, ecdf=1.3))
    assert row(table, "static", "sync")["verdict"] == "level"
    assert row(table, "bdsgd", "sync")["verdict"] == "ahead"  # a shorter time is better
    assert row(table, "ecdf", "sync")["verdict"] == "behind"
    # the strongest simple baseline is static, the fastest of the simple ones
    assert set(table[table["policy"] == "bdsgd"]["reference"]) == {"sync", "static"}


def test_the_pairing_sees_a_gain_the_clusters_spread_hides():
    """A 5 % gain on clusters that vary 50 % from seed to seed: ahead, paired."""
    table = time_verdicts(summary(sync=1.0, bdsgd=0.95))
    ratio = row(table, "bdsgd", "sync")
    assert ratio["verdict"] == "ahead" and ratio["high"] < 0.96


def test_few_seeds_give_no_verdict_however_far_apart():
    few = summary(sync=1.0, bdsgd=0.5)
    few = few[few["seed"] < 3]  # three seeds: the min to max covers the median at 0.75
    assert row(time_verdicts(few), "bdsgd", "sync")["verdict"] == UNDECIDED


def test_a_seed_that_never_reached_the_target_is_infinitely_slow():
    times = pd.Series([1.0, 2.0, np.nan, 4.0, 5.0, 6.0, 7.0], name="a")
    ref = pd.Series([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, np.nan], name="b")
    median, low, high, coverage, pairs = paired_seeds(times, ref)
    assert pairs == 7 and median == 1.0 and low == 0.0 and high == np.inf
    both_missing = paired_seeds(pd.Series([np.nan, 1.0]), pd.Series([np.nan, 2.0]))
    assert both_missing[-1] == 1  # a seed where neither reached it says nothing


@pytest.mark.parametrize("low, high, better, expected", [
    (0.995, 1.008, "higher", "level"),
    (1.002, 1.006, "lower", "level"),  # excludes 1, but by less than LEVEL
    (1.02, 1.10, "higher", "ahead"),
    (1.02, 1.10, "lower", "behind"),
    (0.90, 0.98, "lower", "ahead"),
    (0.95, 1.05, "higher", UNDECIDED),
    (np.nan, np.nan, "higher", UNDECIDED),
])
def test_verdict_by_hand(low, high, better, expected):
    assert verdict(low, high, better) == expected


def test_an_interval_below_the_confidence_decides_nothing():
    assert verdict(1.5, 2.0, "higher", coverage=0.75) == UNDECIDED


def decisions(**cutoffs) -> pd.DataFrame:
    """One replay per policy of the same 400 iterations: durations drawn once, each policy's
    accepted gradients per iteration."""
    d = RNG.lognormal(0.0, 0.3, 400)
    return pd.concat([pd.DataFrame({"trace": "t", "policy": p, "iteration": np.arange(400),
                                    "cutoff": c * np.ones(400), "duration_s": d})
                      for p, c in cutoffs.items()], ignore_index=True)


def test_throughput_replays_pair_their_iterations():
    table = throughput_verdicts(decisions(sync=10, static=10, bdsgd=12, ecdf=9, oracle=13))
    assert row(table, "static", "sync")["verdict"] == "level"
    assert row(table, "bdsgd", "sync")["verdict"] == "ahead"
    assert row(table, "ecdf", "static")["verdict"] == "behind"
    assert "oracle" not in set(table["policy"])  # a reference that needs the future
    assert "400 iterations" in format_table(table)
    assert verdict(0.9, 1.1, "higher", pairs="iterations") == "too few iterations"


def test_a_question_of_its_own_states_its_pairs_and_the_table_prefers_it():
    from bdsgd.figures.answers import QUESTIONS, reviewers_table

    replays = decisions(sync=10, static=10, bdsgd=12, ecdf=9)
    answer = versus_answer(replays, [("bdsgd", "ecdf"), ("ecdf", "static"), ("bdsgd", "bandit")])
    assert answer.startswith("On t, bdsgd against ecdf: ahead (ratio 1.33")
    assert "ecdf against static: behind" in answer and "bandit" not in answer  # not replayed
    table = reviewers_table({"throughput": "the figure's", "empirical_cdf": answer})
    table = table.set_index("question")["answer"]
    assert table["empirical_cdf"] == answer and table["throughput"] == "the figure's"
    assert table["bandit"] == "the figure's" and QUESTIONS["bandit"][0] == "R3"


def test_mlperf_mean_drops_the_fastest_and_the_slowest():
    from bdsgd.stats import mlperf_mean

    assert mlperf_mean([5.0, 1.0, 3.0, 100.0]) == 4.0
    assert np.isnan(mlperf_mean([1.0, 2.0]))
    assert mlperf_mean([1.0, np.inf, np.inf]) == np.inf  # a kept run never reached the target


def test_the_why_answers_state_the_mechanism():
    """R1's "why": a BDSGD that alternates between waiting for the straggler and cutting it
    varies with every change; communication shrinks what even the optimum gains."""
    from bdsgd.figures import over_time, render

    c = np.tile([8, 7], 50)
    flipping = pd.DataFrame({"trace": "t", "policy": "bdsgd-paper", "iteration": np.arange(100),
                             "cutoff": c, "duration_s": np.where(c == 8, 7.0, 1.0)})
    steady = flipping.assign(policy="sync", cutoff=8, duration_s=7.0)
    static = flipping.assign(policy="static", cutoff=7,
                             duration_s=1.0 + 0.1 * RNG.standard_normal(100))
    answer = over_time.throughput_over_time_answer(pd.concat([
        flipping, steady, static, static.assign(policy="bdsgd")]))
    assert "bdsgd-paper changes its cutoff on 100% of iterations, and its iterations at c = 8 " \
           "last 7.0x as long as the rest" in answer
    # steadiness paired by iteration: alike is level, the flipping one behind static
    assert "bdsgd's against static's: level (ratio 1, 95% interval 1 to 1, 100 iterations)" \
        in answer
    assert "bdsgd-paper's against static's: behind" in answer
    sweep = pd.DataFrame([{"trace": "t", "topology": "ps", "policy": p, "ratio": r,
                           "relative_to_sync": gain, "sync_low": gain - 0.02,
                           "sync_high": gain + 0.02}
                          for r, gain in ((0.1, 2.0), (10.0, 1.01)) for p in ("oracle", "static")])
    answer = render.comm_sweep_answer(sweep)
    assert "falls (t, ps: 2.00x at rho = 0.1 to 1.01x at rho = 10)" in answer
    # at rho = 10 static's interval holds 1: the largest rho where it is ahead is 0.1
    assert "t, ps: static still ahead of sync at rho = 0.1 (2.00x, 95% interval 1.98 to 2.02)" \
        in answer


def draws(**factors) -> pd.DataFrame:
    """inputs.load_draws' rows: per cluster draw, each policy's gradients per second, the draw's
    own optimum times the policy's factor (0.1 % noise of its own)."""
    optimum = RNG.lognormal(0.0, 0.5, SEEDS) * 100
    return pd.DataFrame([{"trace": "t", "draw": d, "policy": p, "n_workers": 158,
                          "gradients_per_s": optimum[d] * f * (1 + 0.001 * RNG.standard_normal()),
                          "relative_to_oracle": f, "comm_to_compute": 0.7}
                         for p, f in factors.items() for d in range(SEEDS)])


def test_draws_pair_their_clusters():
    from bdsgd.figures.verdicts import draw_verdicts

    table = draw_verdicts(draws(sync=0.5, static=0.5, bdsgd=0.9, ecdf=0.45, oracle=1.0))
    assert row(table, "static", "sync")["verdict"] == "level"
    assert row(table, "bdsgd", "sync")["verdict"] == "ahead"  # a higher throughput is better
    assert row(table, "ecdf", "static")["verdict"] == "behind"
    assert row(table, "bdsgd", "sync")["pairs"] == f"{SEEDS} draws"
    assert "oracle" not in set(table["policy"])
    two = draw_verdicts(draws(sync=0.5, bdsgd=0.9).query("draw < 2"))
    assert row(two, "bdsgd", "sync")["verdict"] == "too few draws"


def test_the_studys_answer_states_both_bdsgds_and_their_verdicts():
    from bdsgd.figures.draws import draw_summary, draws_answer, policy_order
    from bdsgd.figures.verdicts import draw_verdicts

    rows = draws(sync=0.5, static=0.6, bdsgd=0.9, **{"bdsgd-paper": 0.7})
    summary = draw_summary(rows)
    assert policy_order(summary) == ["bdsgd", "bdsgd-paper", "static", "sync"]
    answer = draws_answer(summary, draw_verdicts(rows))
    assert answer.startswith(f"On t ({SEEDS} draws): bdsgd 0.900 of the optimum")
    assert "bdsgd-paper 0.700 of the optimum" in answer
    assert "bdsgd against bdsgd-paper: ahead" in answer
    assert answer.endswith("Over the traces, bdsgd against bdsgd-paper: ahead on 1; against "
                           "static: ahead on 1; against sync: ahead on 1.")
