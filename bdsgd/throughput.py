"""The throughput stage: every policy replayed over a trace, against the hindsight optimum.

At iteration t the policy picks c_t before seeing anything of it; the iteration ends at D_t(c_t)
on the virtual cluster (``bdsgd.cluster.virtual.for_replay``: the trace's run-times in seconds,
the network moving network.task's gradient, the config's late workers); the policy then observes
the accepted workers' run-times and, for the rest, only the cutoff time (censored). The loop is
the server's (``bdsgd.cluster.server``).

Throughput = sum_t c_t / sum_t D_t(c_t), per second. ``run_benchmark`` (``bdsgd throughput``)
replays every policy and writes the table, relative to the exact hindsight optimum, and the
per-iteration decisions. The ``async`` row is the asynchronous schedule's
(``bdsgd.cluster.schedules.async_reference``), the one the async trainer runs. The replay runs on
``threads`` torch threads (``resources.throughput_threads``, the rule's Snakemake threads, unless
``--threads`` says otherwise), and the table records the count beside the decision latencies it
measured under it (torch on every core of a shared machine slows a model's decision).

``comm_sweep`` replays the policies again on networks from negligible to dominant
communication, for a single server, a sharded one and a ring: the ratio rho of the time a
single server's link needs for a whole iteration (n gradients in, n copies out) to the trace's
median run-time m sets G / B = rho m / (2 n) (``bdsgd.cluster.virtual.swept``); every topology
moves the same bytes on the same links, with the config's latency.

``period_sweep`` replays throughput.period_policies again deciding only every k-th iteration
(policies.decide_every, each k of throughput.decide_every), beside the best fixed cutoff in
hindsight: does deciding less often, or never, do as well?

Each policy's row also says how steady and how busy its replay was: the coefficient of
variation of its per-iteration throughput c_t / duration_t and of c_t, and the fractions of the
workers' time n sum_t duration_t spent idle and computing dropped gradients (``bdsgd.cluster.clock``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bdsgd.cluster.compute import Compute
from bdsgd.cluster.cutoff import hindsight_optimum, throughput
from bdsgd.cluster.schedules import ASYNC
from bdsgd.cluster.server import Replay
from bdsgd.cluster.virtual import VirtualCluster, for_replay, require_server, swept
from bdsgd.config import default_config
from bdsgd.errors import UserError
from bdsgd.layout import explored
from bdsgd.policies import RULES, is_known, spec
from bdsgd.policies.base import Policy
from bdsgd.policies.build import build_policy, load_inputs
from bdsgd.stats import block_ratio_interval
from bdsgd.traces.io import read_history, require_complete, require_cutoff
from bdsgd.traces.schema import Trace

logger = logging.getLogger(__name__)


def _row(run: Replay, oracle_rate: float, rule: str | None, threads: int) -> dict:
    """A policy's row; its mean iteration in seconds (``Replay.seconds_per_unit``)."""
    ms = run.decision_ns / 1e6
    c, rate = run.cutoffs, run.cutoffs / run.durations  # rate: c_t / duration_t
    return {
        "gradients_per_s": run.gradients_per_s,
        "relative_to_oracle": run.gradients_per_s / oracle_rate,
        "mean_cutoff": float(c.mean()), "cutoff_std": float(c.std()),
        "cutoff_p10": float(np.percentile(c, 10)), "cutoff_p90": float(np.percentile(c, 90)),
        "mean_iteration_s": float(run.durations.mean() * run.seconds_per_unit),
        "iteration_rate_cv": float(rate.std() / rate.mean()), "cutoff_cv": float(c.std() / c.mean()),
        "idle_fraction": run.idle_fraction, "wasted_fraction": run.wasted_fraction,
        "decision_ms_p50": float(np.percentile(ms, 50)),
        "decision_ms_p99": float(np.percentile(ms, 99)),
        "threads": threads,  # torch's, under which decision_ms_* were measured
        "rule": rule,
    }


def _describe(trace: Trace, path: str, cluster: VirtualCluster, oracle_rate: float) -> dict:
    x = trace.runtimes
    return {
        "path": str(path), "n_iterations": trace.n_iterations, "n_workers": trace.n_workers,
        "time_unit": trace.meta.get("time_unit", "s"), "source": trace.meta.get("source"),
        "starts_at": trace.meta.get("rotated", 0),  # a recorded trace's draw (draw_block)
        "runtime_mean": float(x.mean()), "runtime_median": float(np.median(x)),
        "runtime_cv": float(x.std() / x.mean()),
        "straggler_ratio_mean": float((x.max(axis=1) / np.median(x, axis=1)).mean()),
        "comm_s": float(cluster.network.comm(trace.n_workers)[-1]),  # comm(n), seconds
        **cluster.record(x), "oracle_gradients_per_s": oracle_rate,
    }


def run_benchmark(trace_path, policies: list[str], model_path=None, rule: str | None = None,
                  comm_s: float | None = None, json_out=None, decisions_out=None, cfg=None,
                  seed: int | None = None, history_path=None, threads: int | None = None,
                  sweep_out=None, paper_model_path=None, late: str | None = None,
                  period_out=None, draw: int = 0) -> dict:
    """Replay ``trace_path`` under every policy; write the table (JSON), the decisions (Parquet),
    given ``sweep_out`` the communication sweep (CSV, ``comm_sweep``) and given ``period_out``
    the re-decision period sweep (CSV, ``period_sweep``).

    ``rule`` None takes the config's; "both" adds rows ``<policy>/ratio`` and ``<policy>/rate``
    for each predictive policy, the plain name being the config's rule. ``history_path``: the
    iterations of the same run before the replayed ones (the training part), which every policy
    that learns from observations sees first (``warm_up``); without it they all start cold.
    ``threads``: torch's CPU threads for the replay, the process's restored after (None: the
    config's ``resources.throughput_threads``). ``comm_s`` and ``late`` (what the workers a
    cutoff leaves out do) None: the config's. ``draw``: the cluster draw replayed
    (``traces.schema.draw_block``): a recorded trace's draw d > 0 is the half of it that starts
    elsewhere in it; a simulated trace's draws are files of their own, replayed whole.
    """
    from bdsgd.outputs.io import write_json, write_with
    from bdsgd.outputs.provenance import stamp
    from bdsgd.traces.io import read_trace
    from bdsgd.traces.schema import draw_block

    resolved = cfg if cfg is not None else default_config()
    _check_request(policies, rule, threads, draw)
    default_rule = resolved.policies.rule if rule in (None, "both") else rule
    seed = resolved.seed if seed is None else seed
    threads = resolved.resources.throughput_threads if threads is None else threads
    trace_path = str(trace_path)
    trace = draw_block(read_trace(trace_path), draw)
    require_complete(trace, trace_path)
    require_cutoff(trace, trace_path)
    cluster = for_replay(resolved, trace, comm_s, late)
    if ASYNC in policies:
        require_server(cluster.network, "the async reference", resolved.source)
    replays = Replays(resolved, trace, cluster, seed,
                      load_inputs([p for p in policies if p != ASYNC], trace_path, model_path,
                                  paper_model_path),
                      read_history(history_path, trace, trace_path))

    from bdsgd.devices import torch_threads  # torch: only when a replay runs

    with torch_threads(threads):
        table = replays.table(policies, rule, default_rule, threads)
        if sweep_out:
            sweep = comm_sweep(trace, resolved, cluster, [p for p in policies if p != ASYNC],
                               default_rule, lambda name, r, on: replays.replayed(name, r, on)[0])
        if period_out:
            periodic = [p for p in resolved.throughput.period_policies
                        if p in policies and spec(p).predictive]
            periods = period_sweep(trace, resolved.throughput.decide_every, periodic, cluster,
                                   lambda name, k: replays.at_period(name, k, default_rule),
                                   replays.run("oracle-fixed", None)[0])

    result = {"policies": table, "default_rule": default_rule, "threads": threads,
              "trace": _describe(trace, trace_path, cluster, replays.oracle_rate),
              "history": None if replays.history is None else {
                  "path": str(history_path), "n_iterations": replays.history.n_iterations},
              "provenance": stamp(cfg, seed, policies_config=dataclasses.asdict(resolved.policies))}
    if json_out:
        write_json(json_out, result)
    if decisions_out:
        decisions = _decisions(table, replays.runs, trace, policies, default_rule, rule)
        write_with(decisions_out, lambda tmp: pq.write_table(decisions, tmp))
    if sweep_out:
        write_with(sweep_out, lambda tmp: sweep.to_csv(tmp, index=False, float_format="%.6g"))
    if period_out:
        write_with(period_out, lambda tmp: periods.to_csv(tmp, index=False, float_format="%.6g"))
    logger.info(format_table(result))
    return result


def _check_request(policies: list[str], rule: str | None, threads: int | None, draw: int) -> None:
    """The flags of a replay that no file is needed to check: a one-line UserError each."""
    unknown = [p for p in policies if p != ASYNC and not is_known(p)]
    if not policies or unknown:
        raise UserError("--policies", unknown[0] if unknown else "-",
                        "unknown policy" if unknown else "no policy given")
    if rule not in (None, "both", *RULES):
        raise UserError("--rule", rule, f"choose from {RULES} or 'both'")
    if threads is not None and threads < 1:
        raise UserError("--threads", str(threads), "must be at least 1")
    if draw < 0:
        raise UserError("--draw", str(draw), "must be 0 or more")


class Replays:
    """The replays of one trace on one virtual cluster, each policy and rule replayed once
    (``run``) and kept for the decisions table, or again on another cluster or config
    (``replayed``: the sweeps)."""

    def __init__(self, cfg, trace: Trace, cluster: VirtualCluster, seed: int, inputs, history):
        self.cfg, self.trace, self.cluster, self.seed = cfg, trace, cluster, seed
        self.inputs, self.history = inputs, history
        self.oracle_rate = cluster.optimum(trace.runtimes)[1]
        self.runs: dict[tuple[str, str | None], tuple[Replay, Policy]] = {}

    def replayed(self, name: str, rule: str | None, on: VirtualCluster,
                 cfg=None) -> tuple[Replay, Policy]:
        """``name`` under ``rule`` replayed on ``on`` (with ``cfg``, else the replay's config)."""
        policy = build_policy(name, cfg or self.cfg, seed=self.seed,
                              n_workers=self.trace.n_workers, trace=self.trace, inputs=self.inputs,
                              history=self.history, comm=on.timing, rule=rule)
        return on.replay(self.trace.runtimes, policy), policy

    def run(self, name: str, rule: str | None) -> tuple[Replay, Policy]:
        """``name`` under ``rule`` on the replay's cluster, replayed once."""
        if (name, rule) not in self.runs:
            self.runs[name, rule] = self.replayed(name, rule, self.cluster)
        return self.runs[name, rule]

    def at_period(self, name: str, k: int, default_rule: str) -> Replay:
        """``name`` under the default rule, deciding every k iterations."""
        pcfg, r = self.cfg.policies, rule_of(name, default_rule)
        if k == pcfg.decide_every:
            return self.run(name, r)[0]
        every = dataclasses.replace(self.cfg, policies=dataclasses.replace(pcfg, decide_every=k))
        return self.replayed(name, r, self.cluster, every)[0]

    def row(self, name: str, rule: str | None, threads: int) -> dict:
        """A policy's row of the table; explore-<p>'s with what exploring cost against p; a
        policy that probes, the share of iterations it waited for every worker to learn from."""
        result, policy = self.run(name, rule)
        out = _row(result, self.oracle_rate, rule, threads)
        if policy.probed is not None:
            out["probed_fraction"] = policy.probed / self.trace.n_iterations
        if explored(name) is not None:
            inner, _ = self.run(explored(name), rule)
            out["explored_fraction"] = policy.explored / self.trace.n_iterations
            out["explore_cost"] = 1 - result.gradients_per_s / inner.gradients_per_s
        return out

    def table(self, policies: list[str], rule: str | None, default_rule: str,
              threads: int) -> dict[str, dict]:
        """Every policy's row; with ``rule`` "both", a predictive policy's under each rule too
        (<policy>/<rule>), its plain row the default rule's; async the reference's."""
        table: dict[str, dict] = {}
        for name in policies:
            if name == ASYNC:
                table[name] = {**self.cluster.async_reference(self.trace.runtimes),
                               "mean_cutoff": 1.0,
                               "cutoff_std": 0.0, "decision_ms_p50": 0.0, "decision_ms_p99": 0.0,
                               "threads": threads, "rule": None,
                               "note": "reference: applies every gradient, one at a time, "
                                       "ignoring staleness; its relative_to_oracle may exceed 1"}
                table[name]["relative_to_oracle"] = (table[name]["gradients_per_s"]
                                                     / self.oracle_rate)
            elif not spec(name).predictive or spec(name).paper:  # no rule to choose
                table[name] = self.row(name, rule_of(name, default_rule), threads)
            elif rule == "both":
                for r in RULES:
                    table[f"{name}/{r}"] = self.row(name, r, threads)
                table[name] = dict(table[f"{name}/{default_rule}"])
            else:
                table[name] = self.row(name, default_rule, threads)
        return table


SWEEP_TOPOLOGIES = ("ps", "sharded", "ring")


def comm_sweep(trace: Trace, cfg, cluster: VirtualCluster, policies: list[str], rule: str,
               replayed: Callable[[str, str | None, VirtualCluster], Replay]) -> pd.DataFrame:
    """Every cutoff policy (under ``rule``) and the hindsight optimum, for each ratio of
    throughput.comm_ratios and each topology of ``SWEEP_TOPOLOGIES`` (a ring with ``cluster``'s
    late workers finishing is left out: it cannot run): one row each (ratio, topology, policy,
    gradients_per_s, relative_to_oracle, relative_to_sync, mean_cutoff, and sync_low, sync_high:
    the interval of relative_to_sync, paired by iteration with sync's replay on the same network,
    ``stats.block_ratio_interval``; the optimum's NaN), rates in the trace's units.
    ``replayed(name, rule, cluster)`` replays one policy on a cluster."""
    n, m = trace.n_workers, float(np.median(trace.runtimes))
    sorted_x, rows = np.sort(trace.runtimes, axis=1), []
    topologies = [t for t in SWEEP_TOPOLOGIES if not (t == "ring" and cluster.late == "finish")]
    for ratio in cfg.throughput.comm_ratios:
        for topology in topologies:
            net = swept(cfg, topology, ratio, m, n)
            on = dataclasses.replace(cluster, network=net, compute=Compute())
            best, oracle = hindsight_optimum(sorted_x, net)
            sync = throughput(sorted_x, np.full(len(sorted_x), n), net)
            runs = {name: replayed(name, rule_of(name, rule), on)
                    for name in dict.fromkeys(["sync", *policies]) if name != "oracle"}
            rows.append({"ratio": ratio, "topology": topology, "policy": "oracle",
                         "gradients_per_s": oracle, "relative_to_oracle": 1.0,
                         "relative_to_sync": oracle / sync, "mean_cutoff": float(best.mean()),
                         "sync_low": np.nan, "sync_high": np.nan})
            for name in policies:
                if name == "oracle":
                    continue
                run = runs[name]
                low, high = block_ratio_interval(run.cutoffs, run.durations, runs["sync"].cutoffs,
                                                 runs["sync"].durations)
                rows.append({"ratio": ratio, "topology": topology, "policy": name,
                             "gradients_per_s": run.gradients_per_s,
                             "relative_to_oracle": run.gradients_per_s / oracle,
                             "relative_to_sync": run.gradients_per_s / sync,
                             "mean_cutoff": float(run.cutoffs.mean()), "sync_low": low,
                             "sync_high": high})
    return pd.DataFrame(rows)


def period_sweep(trace: Trace, periods, policies: list[str], cluster: VirtualCluster,
                 at_period: Callable[[str, int], Replay], fixed: Replay) -> pd.DataFrame:
    """Each predictive policy of ``policies`` deciding every k iterations, for each k of
    ``periods``, and the best fixed cutoff in hindsight (``fixed``, oracle-fixed's replay, the
    same at every k): one row each (period, policy, gradients_per_s, relative_to_oracle,
    mean_cutoff, and fixed_ratio, fixed_low, fixed_high: its throughput over the fixed cutoff's
    with the interval paired by iteration, ``stats.block_ratio_interval``). ``at_period(name,
    k)`` replays one policy on ``cluster``."""
    _, oracle = cluster.optimum(trace.runtimes)
    rows = []
    for k in periods:
        for name, run in {"oracle-fixed": fixed, **{p: at_period(p, k) for p in policies}}.items():
            low, high = block_ratio_interval(run.cutoffs, run.durations, fixed.cutoffs,
                                             fixed.durations)
            rows.append({"period": k, "policy": name, "gradients_per_s": run.gradients_per_s,
                         "relative_to_oracle": run.gradients_per_s / oracle,
                         "mean_cutoff": float(run.cutoffs.mean()),
                         "fixed_ratio": run.gradients_per_s / fixed.gradients_per_s,
                         "fixed_low": low, "fixed_high": high})
    return pd.DataFrame(rows)


def rule_of(name: str, rule: str) -> str | None:
    """The decision rule policy ``name`` replays under when ``rule`` is asked: none for a policy
    without one, the paper's own (ratio) for bdsgd-paper."""
    if not spec(name).predictive:
        return None
    return "ratio" if spec(name).paper else rule


def _decisions(table: dict, runs: dict, trace: Trace, policies: list[str], default_rule: str,
               rule: str | None) -> pa.Table:
    """Long table (policy, iteration, cutoff, duration_s, cutoff_time_s, forecast_s, realised_s),
    one row per decision: forecast_s is what a predictive policy expected x_(c_t) to be when it
    chose (NaN for the others), realised_s the trace row's x_(c_t)."""
    replays = []
    for name in table:
        if name == ASYNC:
            continue
        base, _, r = name.partition("/")
        r = r or rule_of(base, default_rule)
        result, _ = runs[base, r]
        replays.append((name, result))
    T = trace.n_iterations
    return pa.table({
        "policy": pa.array([name for name, _ in replays for _ in range(T)], pa.string()),
        "iteration": pa.array(np.tile(trace.iterations, len(replays)), pa.int64()),
        "cutoff": pa.array(np.concatenate([r.cutoffs for _, r in replays]), pa.int64()),
        "duration_s": pa.array(np.concatenate([r.durations for _, r in replays]), pa.float64()),
        "cutoff_time_s": pa.array(np.concatenate([r.cutoff_times for _, r in replays]),
                                  pa.float64()),
        "forecast_s": pa.array(np.concatenate([r.forecast_s for _, r in replays]), pa.float64()),
        "realised_s": pa.array(np.concatenate([r.realised_s for _, r in replays]), pa.float64()),
    })


def format_table(result: dict) -> str:
    """The throughput table as text, best first."""
    rows = sorted(result["policies"].items(), key=lambda kv: -kv[1]["gradients_per_s"])
    t = result["trace"]
    lines = [f"{t['path']}: {t['n_iterations']} iterations x {t['n_workers']} workers, "
             f"comm {t['comm_s']:g} s, oracle {t['oracle_gradients_per_s']:.4g} gradients/s, "
             f"torch threads {result['threads']}",
             f"{'policy':<24}{'grad/s':>12}{'/oracle':>9}{'mean c':>9}{'std c':>8}"
             f"{'ms p50':>9}{'ms p99':>9}"]
    for name, r in rows:
        lines.append(f"{name:<24}{r['gradients_per_s']:>12.4g}{r['relative_to_oracle']:>9.3f}"
                     f"{r['mean_cutoff']:>9.2f}{r.get('cutoff_std', 0.0):>8.2f}"
                     f"{r['decision_ms_p50']:>9.3f}{r['decision_ms_p99']:>9.3f}")
    if ASYNC in result["policies"]:
        a = result["policies"][ASYNC]
        lines.append(f"async: mean staleness {a['mean_staleness']:.2f} updates; {a['note']}")
    return "\n".join(lines)
