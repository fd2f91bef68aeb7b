"""What ``bdsgd figures`` reads, all of it read and checked before any figure is drawn.

Each loader finds its files through ``bdsgd.layout`` (as the workflow lays them out) and returns
plain tables; a missing, damaged or incomplete file is one ``UserError`` naming it and the field
(a JSON key, a Parquet column, or ``-`` for the whole file), so a bad results folder stops the
command before it writes anything (``render.render_all`` loads everything first).
"""

from __future__ import annotations

import json
import numbers
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from bdsgd.cluster.clock import LATE
from bdsgd.config import CENSORING
from bdsgd.errors import UserError
from bdsgd.layout import ANY, DRAW, Layout, drawn_from
from bdsgd.traces.io import META_KEY, read_trace
from bdsgd.traces.schema import Trace

# A public contract: columns may be appended, never removed or reordered.
SUMMARY_COLUMNS = ["task", "policy", "seed", "time_to_target_s", "final_accuracy",
                   "gradients_per_s", "mean_cutoff", "iterations", "virtual_time_s",
                   "target_accuracy", "final_test_loss", "mean_staleness", "n_workers", "trace"]
THROUGHPUT_COLUMNS = ["trace", "policy", "rule", "gradients_per_s", "relative_to_oracle",
                      "mean_cutoff", "cutoff_std", "iteration_rate_cv", "cutoff_cv",
                      "idle_fraction", "wasted_fraction"]
COMM_SWEEP_COLUMNS = ["trace", "ratio", "topology", "policy", "gradients_per_s",
                      "relative_to_oracle", "relative_to_sync", "mean_cutoff", "sync_low",
                      "sync_high"]
# Metrics columns that older runs do not have: read as NaN (unavailable) there.
OPTIONAL_METRICS = ("gradients", "staleness")
# What the figures draw from each kind of table.
METRICS = ("iteration", "virtual_time_s", "cutoff", "train_loss", "test_accuracy")
DECISIONS = ("policy", "iteration", "cutoff", "duration_s")
ABLATED = ("forecast_s", "realised_s")  # and, of an ablation's decisions
PERIOD_SWEEP_COLUMNS = ["trace", "period", "policy", "gradients_per_s", "relative_to_oracle",
                        "mean_cutoff", "fixed_ratio", "fixed_low", "fixed_high"]
# Per policy and trace: the decision latencies (wall-clock, kept out of the tables), the
# iteration they are measured against (seconds where the replay's cluster had seconds:
# ``bdsgd.cluster.compute``) and the workers.
OVERHEAD_COLUMNS = ["trace", "policy", "decision_ms_p50", "decision_ms_p99", "mean_iteration_s",
                    "n_workers", "in_seconds"]
PREDICTIONS = ("order", "iteration", "predicted_mean", "lo90", "hi90", "realised")
DISTRIBUTED_METRICS = ("iteration", "wall_time_s", "cutoff")
DISTRIBUTED_REPLAY = ("iteration", "virtual_s", "replay_cutoff", "replay_s")


def need(paths: list[Path], results_dir: Path, what: str) -> list[Path]:
    if not paths:
        raise UserError(str(results_dir), what, f"no {what} results found under {results_dir}")
    return sorted(paths)


def read_json(path: Path, key: str) -> dict:
    """The object under ``key`` of a JSON file (itself an object)."""
    if not path.is_file():
        raise UserError(str(path), "-", "file missing")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(str(path), "-", f"damaged: not valid JSON ({exc})") from None
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, dict):
        raise UserError(str(path), key, "missing, or not an object")
    return value


def read_parquet(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    """A Parquet table with at least one row and ``columns`` among its columns."""
    if not path.is_file():
        raise UserError(str(path), "-", "file missing")
    try:
        frame = pq.read_table(path).to_pandas()
    except (pa.ArrowException, OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(str(path), "-", f"damaged: not a Parquet table ({reason})") from None
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise UserError(str(path), missing[0], f"column missing (have {list(frame.columns)})")
    if frame.empty:
        raise UserError(str(path), "-", "no rows")
    return frame


def replayed_step(iterations: pd.Series) -> pd.Series:
    """Each row's iteration counted from 0 within the replayed (test) part: the rank of its
    iteration id among the part's (a recorded trace's ids start where the training part ends,
    and a sampled one's skip), so that every figure counts the replayed iterations alike."""
    return (iterations.rank(method="dense") - 1).astype(int)


def virtual_time_unit(path: Path) -> str:
    """The unit of a run's virtual time (result.json's clock and trace_meta): seconds under
    train.clock scaled (the trace's run-times times seconds per unit), the trace's own unit
    under recorded (its run-times read as they are: seconds only for a trace in seconds)."""
    data = json.loads(path.read_text())  # read and checked by _summary already
    clock = data.get("clock") if isinstance(data.get("clock"), dict) else {}
    meta = data.get("trace_meta") if isinstance(data.get("trace_meta"), dict) else {}
    if clock.get("clock", "recorded") == "scaled":
        return "s"
    return str(meta.get("time_unit", "s"))


def _config(results_dir: Path) -> dict:
    """The experiment's config as the workflow records it (results/<experiment>/config.yaml);
    empty where there is none."""
    path = Path(Layout(str(results_dir)).config())
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UserError(str(path), "-", f"damaged: not valid YAML ({exc})") from None
    return data if isinstance(data, dict) else {}


def load_note(results_dir: Path) -> str | None:
    """The experiment's figure_note (results/<experiment>/config.yaml, the whole config as the
    workflow records it): the line printed over every figure; None without one."""
    path, data = Path(Layout(str(results_dir)).config()), _config(results_dir)
    note = data.get("figure_note")
    if note is not None and not isinstance(note, str):
        raise UserError(str(path), "figure_note", f"not a string: {note!r}")
    return note or None


def _summary(path: Path) -> dict:
    """A run's result.json summary, its identifying fields and target checked."""
    summary = read_json(path, "summary")
    for key, kind in (("task", str), ("policy", str), ("seed", numbers.Integral),
                      ("target_accuracy", numbers.Real)):
        value = summary.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UserError(str(path), f"summary.{key}", f"missing or not a {kind.__name__}: "
                            f"{value!r}")
    return summary


def load_runs(results_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary: one row per run, metrics: every row of every run, with task, trace, policy,
    seed and its virtual time's unit, ``time_unit``). A run whose result names no trace has
    trace ""."""
    rows, metrics = [], []
    layout = Layout(str(results_dir))
    runs = layout.find(layout.run("result.json", ANY, ANY, ANY, ANY))
    for result in need(runs, results_dir, "runs"):
        summary = {"trace": "", **_summary(result)}
        rows.append({k: summary.get(k) for k in SUMMARY_COLUMNS})
        run = read_parquet(result.with_name("metrics.parquet"), METRICS)  # beside it (Layout.run)
        for column in OPTIONAL_METRICS:
            if column not in run:
                run[column] = np.nan
        metrics.append(run.assign(**{k: summary[k] for k in ("task", "trace", "policy", "seed")},
                                  time_unit=virtual_time_unit(result)))
    summary = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    summary = summary.sort_values(["task", "trace", "policy", "seed"]).reset_index(drop=True)
    return summary, pd.concat(metrics, ignore_index=True)


def load_throughput(results_dir: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per trace x policy x rule, per-iteration decisions of every trace, with the
    iteration counted from 0 in ``step``: each throughput.json needs its decisions.parquet
    beside it)."""
    rows, decisions = [], []
    layout = Layout(str(results_dir))
    for path in need(layout.find(layout.throughput(ANY)), results_dir, "throughput"):
        trace = path.parent.name
        for name, entry in read_json(path, "policies").items():
            if not isinstance(entry, dict):
                raise UserError(str(path), f"policies.{name}", "not an object")
            rows.append({"trace": trace, "policy": name.split("/")[0],
                         "rule": entry.get("rule") or "", **{
                             k: entry.get(k) for k in THROUGHPUT_COLUMNS[3:]}})
        dec = Path(layout.throughput(trace, "decisions.parquet"))
        frame = read_parquet(dec, DECISIONS)
        decisions.append(frame.assign(trace=trace, step=replayed_step(frame["iteration"])))
    # With --rule both, a predictive policy appears under its default rule (plain name) and as
    # <policy>/<rule> for each rule: keep one row per (trace, policy, rule).
    table = pd.DataFrame(rows, columns=THROUGHPUT_COLUMNS).drop_duplicates(["trace", "policy", "rule"])
    table = table.sort_values(["trace", "policy", "rule"]).reset_index(drop=True)
    return table, pd.concat(decisions, ignore_index=True)


DRAW_COLUMNS = ["trace", "draw", "policy", "gradients_per_s", "relative_to_oracle", "n_workers",
                "comm_to_compute"]


def load_draws(results_dir: Path) -> pd.DataFrame:
    """Every policy's replay (its default rule) on every cluster draw of every trace: draw 0,
    throughput/<trace>/throughput.json; draw d, throughput/<trace>/draw<d>/throughput.json (the
    throughput study, throughput.draws). DRAW_COLUMNS, one row per trace x draw x policy."""
    layout, rows = Layout(str(results_dir)), []
    first = need(layout.find(layout.throughput(ANY)), results_dir, "throughput")
    for path in first + layout.find(layout.throughput(f"{ANY}{DRAW}{ANY}")):
        trace, draw = drawn_from(layout.replayed(path))
        about = read_json(path, "trace")
        for name, entry in read_json(path, "policies").items():
            if "/" in name:  # the same replay under its other rule (--rule both)
                continue
            for key in DRAW_COLUMNS[3:5]:
                if not isinstance(entry.get(key), numbers.Real):
                    raise UserError(str(path), f"policies.{name}.{key}",
                                    f"missing or not a number: {entry.get(key)!r}")
            rows.append({"trace": trace, "draw": draw, "policy": name,
                         **{k: entry[k] for k in DRAW_COLUMNS[3:5]},
                         "n_workers": about.get("n_workers"),
                         "comm_to_compute": about.get("comm_to_compute")})
    return pd.DataFrame(rows, columns=DRAW_COLUMNS).sort_values(
        ["trace", "draw", "policy"]).reset_index(drop=True)


def _sweeps(results_dir: Path, file: str, columns: list[str]) -> pd.DataFrame:
    """Every trace's table ``file`` beside its throughput.json, with ``columns`` (the first:
    trace, which it gets)."""
    layout, frames = Layout(str(results_dir)), []
    for path in need(layout.find(layout.throughput(ANY)), results_dir, "throughput"):
        csv = path.with_name(file)  # beside throughput.json (Layout.throughput)
        if not csv.is_file():
            raise UserError(str(csv), "-", "file missing")
        try:
            frame = pd.read_csv(csv)
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
            raise UserError(str(csv), "-", f"damaged: not a CSV table ({exc})") from None
        missing = [c for c in columns[1:] if c not in frame.columns]
        if missing:
            raise UserError(str(csv), missing[0], f"column missing (have {list(frame.columns)})")
        if frame.empty:
            raise UserError(str(csv), "-", "no rows")
        frames.append(frame.assign(trace=path.parent.name)[columns])
    return pd.concat(frames, ignore_index=True)


def load_comm_sweep(results_dir: Path) -> pd.DataFrame:
    """Every trace's communication sweep (``bdsgd.throughput.comm_sweep``), one row per ratio x
    topology x policy, with its trace."""
    return _sweeps(results_dir, "comm_sweep.csv", COMM_SWEEP_COLUMNS)


def load_period_sweep(results_dir: Path) -> pd.DataFrame:
    """Every trace's re-decision period sweep (``bdsgd.throughput.period_sweep``), one row per
    period x policy, with its trace."""
    return _sweeps(results_dir, "period_sweep.csv", PERIOD_SWEEP_COLUMNS)


def load_overhead(results_dir: Path) -> pd.DataFrame:
    """Per trace and policy of every throughput.json (default rule; async, which decides
    nothing, left out): OVERHEAD_COLUMNS."""
    rows, layout = [], Layout(str(results_dir))
    for path in need(layout.find(layout.throughput(ANY)), results_dir, "throughput"):
        trace = read_json(path, "trace")
        if not isinstance(trace.get("n_workers"), numbers.Real):
            raise UserError(str(path), "trace.n_workers", f"missing or not a number: "
                            f"{trace.get('n_workers')!r}")
        if not isinstance(trace.get("in_seconds"), bool):
            raise UserError(str(path), "trace.in_seconds", f"missing or not true/false: "
                            f"{trace.get('in_seconds')!r}")
        for name, entry in read_json(path, "policies").items():
            if "/" in name or name == "async":
                continue
            for key in OVERHEAD_COLUMNS[2:5]:
                if not isinstance(entry.get(key), numbers.Real):
                    raise UserError(str(path), f"policies.{name}.{key}",
                                    f"missing or not a number: {entry.get(key)!r}")
            rows.append({"trace": path.parent.name, "policy": name,
                         **{k: entry[k] for k in OVERHEAD_COLUMNS[2:5]},
                         "n_workers": trace["n_workers"], "in_seconds": trace["in_seconds"]})
    return pd.DataFrame(rows, columns=OVERHEAD_COLUMNS)


def load_replay_ablations(results_dir: Path) -> list[tuple[str, str, str, dict, pd.DataFrame]]:
    """Every replay ablation arm (throughput.ablations) found: (trace, ablation, arm, its
    policies table, its decisions), censoring's arms (``CENSORING``) then the data ablation's
    (``LATE``); none where no trace ran them."""
    layout, arms = Layout(str(results_dir)), []
    for ablation, prefix, names in (("censoring", "censored", CENSORING), ("data", "late", LATE)):
        for name in names:
            for path in layout.find(layout.throughput(ANY, f"{prefix}-{name}.json")):
                decisions = read_parquet(path.with_suffix(".parquet"), DECISIONS + ABLATED)
                arms.append((path.parent.name, ablation, name, read_json(path, "policies"),
                             decisions))
    return arms


def load_ladders(results_dir: Path) -> list[tuple[str, dict, pd.DataFrame]]:
    """Every ladder found (``bdsgd ladder``, on throughput.ablations' traces): (trace, its rungs'
    table, every rung's decisions); none where no trace ran one."""
    layout = Layout(str(results_dir))
    return [(path.parent.name, read_json(path, "rungs"),
             read_parquet(path.with_suffix(".parquet"), DECISIONS))
            for path in layout.find(layout.throughput(ANY, "ladder.json"))]


def load_traces(results_dir: Path) -> dict[str, np.ndarray]:
    """Every trace's run-times, by the trace's name."""
    layout = Layout(str(results_dir))
    return {path.parent.name: read_parquet(path, ("runtime_s",))["runtime_s"].to_numpy()
            for path in need(layout.find(layout.trace(ANY)), results_dir, "traces")}


def time_unit(results_dir: Path, trace: str) -> str:
    """The run-time unit of a trace, from its test part's metadata ("s" when it has none)."""
    test = Path(Layout(str(results_dir)).trace(trace, "test"))
    if not test.is_file():
        return "s"
    try:
        raw = (pq.read_schema(test).metadata or {}).get(META_KEY)
        meta = json.loads(raw) if raw else {}
    except (pa.ArrowException, OSError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(str(test), "-", f"damaged: not a Parquet trace ({reason})") from None
    return str(meta.get("time_unit", "s")) if isinstance(meta, dict) else "s"


def load_predictions(results_dir: Path) -> list[tuple[str, pd.DataFrame, str]]:
    """(trace, its model's held-out predictions with the iteration counted from 0 in ``step``,
    the trace's time unit) for every model."""
    layout = Layout(str(results_dir))
    paths = need(layout.find(layout.model(ANY, "predictions.parquet")), results_dir,
                 "model predictions")
    frames = [(path, read_parquet(path, PREDICTIONS)) for path in paths]
    return [(path.parent.name, frame.assign(step=replayed_step(frame["iteration"])),
             time_unit(results_dir, path.parent.name)) for path, frame in frames]


@dataclass(frozen=True)
class DistributedJob:
    """A real ``bdsgd distributed`` job as its server recorded it."""

    name: str
    policy: str
    late: str  # distributed.late: what the workers it did not wait for did
    metrics: pd.DataFrame  # DISTRIBUTED_METRICS, one row per iteration
    trace: Trace  # the run-times it recorded (censored where the cutoff cut a worker)
    # the virtual clock on that trace, DISTRIBUTED_REPLAY per iteration: with the job's cutoffs,
    # and a fresh policy's own run (bdsgd.distributed.ps.ParameterServer._replay)
    replay: pd.DataFrame


def load_distributed(results_dir: Path) -> list[DistributedJob]:
    """Every distributed job (``Layout.distributed``): its result.json's job (policy, late
    mode, workers), metrics, trace and replay, as many iterations in each and the cutoffs in
    1..n. None at all is no error: a results folder without distributed jobs."""
    layout, jobs = Layout(str(results_dir)), []
    for path in layout.find(layout.distributed(ANY)):
        job = read_json(path, "job")
        workers = job.get("workers")
        for key, ok in (("policy", isinstance(job.get("policy"), str)),
                        ("late", isinstance(job.get("late"), str)),
                        ("workers", type(workers) is int and workers > 0)):
            if not ok:
                raise UserError(str(path), f"job.{key}", f"missing or invalid: {job.get(key)!r}")
        metrics = read_parquet(path.with_name("result.metrics.parquet"), DISTRIBUTED_METRICS)
        trace_path = path.with_name("result.trace.parquet")
        trace = read_trace(trace_path)
        if trace.runtimes.shape != (len(metrics), workers):
            raise UserError(str(trace_path), "-", f"{trace.n_iterations} iterations of "
                            f"{trace.n_workers} workers; the job ran {len(metrics)} of {workers}")
        checks = {"cutoff": (metrics["cutoff"].between(1, workers).all(), f"outside 1..{workers}"),
                  "wall_time_s": ((np.diff(metrics["wall_time_s"], prepend=0.0) > 0).all(),
                                  "not increasing from 0")}
        for column, (ok, message) in checks.items():
            if not ok:
                raise UserError(str(path.with_name("result.metrics.parquet")), column, message)
        replay_path = path.with_name("result.replay.parquet")
        replay = read_parquet(replay_path, DISTRIBUTED_REPLAY)
        if len(replay) != len(metrics) or not replay["replay_cutoff"].between(1, workers).all():
            raise UserError(str(replay_path), "replay_cutoff", f"not {len(metrics)} iterations "
                            f"of cutoffs in 1..{workers}, as the job ran")
        jobs.append(DistributedJob(path.parent.name, job["policy"], job["late"], metrics, trace,
                                   replay))
    return jobs
