"""The regime before the bill (``bdsgd plan``): can each cell of a config separate the policies?

A cell is a trace of the convergence runs and a task: the config's network moving the task's
gradient, the trace's run-times scaled to the task's gradient time as a run scales them
(``bdsgd.cluster.virtual``). On the trace's run-times (no training, no model: seconds a cell) it
replays the hindsight optimum, sync and the best fixed cutoff, and states the regime, the
communication at c = n over the median gradient time.

The optimum bounds every policy from above (late workers that finish only lower what a cut
gains), so a cell whose optimum gains less than ``SEPARATES`` over sync cannot separate the
policies: BDSGD, Chen et al.'s backup workers, sync and async would tie there whatever is
trained. A cell on the simulator's calm scenario, or on a trace the config declares a control
(``traces.<name>.control``: a real job without stragglers), is a control, where no policy should
gain; a straggler cell is ``INFORMATIVE`` when the optimum gains at least 3 %.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from bdsgd.cluster.compute import Compute
from bdsgd.cluster.virtual import build, network
from bdsgd.config import Config
from bdsgd.errors import UserError

SEPARATES = 1.01  # the optimum's throughput over sync's below which policies tie
INFORMATIVE = 1.03  # ... at or above which a straggler cell separates them clearly
CONTROLS = ("calm",)  # simulator scenarios where no policy should gain over sync
ITERATIONS = 2000  # of a simulated trace: its scenario's shape (fractions of the run) kept


@dataclass(frozen=True)
class Cell:
    """One trace x task: its regime and what the hindsight optimum gains there."""

    trace: str
    task: str
    n_workers: int
    gradient_s: float
    comm_to_compute: float
    over_sync: float  # the optimum's throughput over sync's
    over_fixed: float  # ... over the best fixed cutoff's (Chen et al.'s, tuned in hindsight)
    fixed_cutoff: int
    control: bool

    @property
    def verdict(self) -> str:
        if self.control:
            return "control"
        if self.over_sync < SEPARATES:
            return "cannot separate"
        return "informative" if self.over_sync >= INFORMATIVE else "weak"


def trace_of(cfg: Config, name: str):
    """The run-times a cell of trace ``name`` is judged on: a simulated trace drawn again at
    ``ITERATIONS`` at most, an imported one read; None for one that is yet to be gathered."""
    spec = cfg.trace(name)
    if spec.source == "simulate":
        from bdsgd.traces.simulate import simulate

        sim = dataclasses.replace(spec.simulate, iterations=min(spec.simulate.iterations, ITERATIONS))
        return simulate(sim, cfg.seed)[0]
    if spec.source == "import":
        from bdsgd.traces.formats import import_trace

        return import_trace(spec.path, spec.format)
    return None


def cell(cfg: Config, trace_name: str, trace, task: str, seconds_per_sample: float) -> Cell:
    """The cell of ``trace`` (loaded) and ``task``; its gradient time is the recipe's
    train.gradient_s, else ``seconds_per_sample`` x its batch."""
    from bdsgd.tasks import task_gradient_bytes  # torch: a gradient's size

    run = cfg.for_task(task).training()
    net = network(cfg, task_gradient_bytes(task))
    g = run.gradient_s if run.gradient_s is not None else seconds_per_sample * run.batch_size
    compute = None if run.clock == "recorded" else Compute.scaled(trace.runtimes, g, "plan")
    cluster = build(cfg, trace, net, compute, key="train.clock")
    x = trace.runtimes
    _, best = cluster.optimum(x)
    fixed_c, fixed = cluster.fixed_optimum(x)
    spec = cfg.trace(trace_name)
    return Cell(trace_name, task, trace.n_workers, g if compute is not None else float(np.median(x)),
                cluster.comm_to_compute(x), best / cluster.sync_rate(x), best / fixed, fixed_c,
                spec.control or (spec.source == "simulate" and spec.simulate.scenario in CONTROLS))


def cells(cfg: Config, seconds_per_sample: dict[str, float]) -> list[Cell]:
    """Every trace of the convergence runs x task (a trace yet to be gathered left out)."""
    out = []
    for name in cfg.train_traces():
        trace = trace_of(cfg, name)
        if trace is not None:
            out += [cell(cfg, name, trace, task, seconds_per_sample[task])
                    for task in cfg.training().tasks]
    return out


def record(found: list[Cell]) -> list[dict]:
    """The cells as the plan's JSON holds them, each with its verdict."""
    return [{**dataclasses.asdict(c), "verdict": c.verdict} for c in found]


def require_separating(source: str, rows: list[dict]) -> None:
    """``bdsgd plan --strict``: a config (file ``source``) with a cell that cannot separate the
    policies is its error, naming the cells (``rows``: ``record``'s)."""
    bad = [c for c in rows if c["verdict"] == "cannot separate"]
    if bad:
        raise UserError(source, "network", "cannot separate the policies (the hindsight "
                        f"optimum within {SEPARATES - 1:.0%} of sync) in " + ", ".join(
                            f"{c['trace']} x {c['task']} (communication "
                            f"{c['comm_to_compute']:.3g} x compute, +{c['over_sync'] - 1:.1%})"
                            for c in bad)
                        + ": make compute dominate (fabric, shards, batch) or drop the cells")


def refuse_ties(cfg: Config, seconds_per_sample: dict[str, float]) -> None:
    """A config that is ``strict`` with a cell that cannot separate the policies is its error
    (the workflow's onstart); the cells judged at ``seconds_per_sample``."""
    if cfg.strict:
        require_separating(cfg.source, record(cells(cfg, seconds_per_sample)))


def format_cells(rows: list[dict]) -> str:
    """``record``'s rows as a table."""
    lines = [f"{'trace':<18}{'task':<10}{'n':>5}{'g s':>9}{'comm/comp':>11}{'opt/sync':>10}"
             f"{'opt/fixed':>11}{'fixed c':>9}  verdict"]
    for c in rows:
        lines.append(f"{c['trace']:<18}{c['task']:<10}{c['n_workers']:>5}{c['gradient_s']:>9.3g}"
                     f"{c['comm_to_compute']:>11.3g}{c['over_sync']:>10.3f}"
                     f"{c['over_fixed']:>11.3f}{c['fixed_cutoff']:>9}  {c['verdict']}")
    return "\n".join(lines)
