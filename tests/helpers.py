"""What the test modules share: paths, the tiny config, the commands as a user runs them, the
virtual cluster's small runs, and test doubles. Test modules import from here (or use
conftest.py's fixtures), never from one another."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bdsgd.cluster.cutoff import Observation
from bdsgd.policies.base import Predictor

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests/data"


# ----------------------------------------------------------------------------- configs
def tiny_config(**overrides) -> dict:
    """The smallest config that exercises every stage (seconds, not minutes)."""
    cfg = {
        "experiment": "tiny",
        "seed": 0,
        "traces": {"sim": {"source": "simulate",
                           "simulate": {"workers": 6, "iterations": 120, "workers_per_node": 3}}},
        "model": {"epochs": 2, "samples": 16, "chunk": 16, "hidden_dim": 16, "prior": True,
                  "prior_workers": 4, "prior_iterations": 24, "prior_draws": 1, "prior_steps": 2},
        "policies": {"online_window": 4},  # learning while serving, at a quarter of its cost
        "throughput": {"policies": ["sync", "static", "elfving", "ecdf", "bandit", "bdsgd",
                                    "oracle", "oracle-myopic"],
                       # the sweeps' machinery, not their curves
                       "comm_ratios": [1.0], "decide_every": [1, 10], "period_policies": ["elfving"],
                       "draws": 2},  # the throughput study's machinery: a second draw
        "train": {"trace": "sim", "tasks": ["digits"], "policies": ["sync", "bdsgd"],
                  "seeds": [0], "batch_size": 8, "max_iterations": 30, "eval_every": 10,
                  "target_accuracy": {"digits": 0.5}},
    }
    cfg.update(overrides)
    return cfg


def tiny_dag_config() -> dict:
    """The session's tiny DAG (conftest.py: tiny_dag): the tiny config plus an imported trace."""
    cfg = tiny_config()
    cfg["traces"]["pai"] = {"source": "import", "format": "alibaba-pai",
                            "path": str(DATA / "alibaba_pai_job_1_norm.csv")}
    return cfg


# ---------------------------------------------------------------------------- commands
_RUNNING: set[subprocess.Popen] = set()
_STOPPED = threading.Event()


def run_stoppable(args: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(args, capture_output=True, text=True)`` in a process group of its own,
    which a timeout or ``stop_subprocesses`` (the session's end) kills whole: Snakemake's jobs
    too, not only Snakemake. A group, not a session: Linux schedules each session as a group of
    its own (autogroup) with an equal share of the CPU, whatever the niceness of the background
    runs that start one (conftest.py: _yield_to_the_tests)."""
    if _STOPPED.is_set():
        raise RuntimeError("the test session is over: no more subprocesses")
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          process_group=0, **kwargs) as proc:
        _RUNNING.add(proc)
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            _kill_group(proc)
            raise
        finally:
            _RUNNING.discard(proc)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def stop_subprocesses() -> None:
    """Kill every ``run_stoppable`` process group still running, and start no more."""
    _STOPPED.set()
    for proc in list(_RUNNING):
        _kill_group(proc)


def wandb_offline_env(home: Path) -> dict[str, str]:
    """W&B offline with every file under ``home``, no console output, and no server within
    reach (an offline run that tried the network would find nothing there); unset WANDB_MODE
    besides, so the config's mode decides."""
    return {**dict.fromkeys(("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR",
                             "WANDB_DATA_DIR"), str(home)),
            "WANDB_SILENT": "true", "WANDB_BASE_URL": "http://127.0.0.1:9"}


def run_cli(*args: str, check: bool = True, cwd: Path | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m bdsgd ARGS`` as a user would, in ``env`` (default: this process's
    environment), stopped with the session (``run_stoppable``); fail the test with its output
    if asked."""
    env = dict(os.environ if env is None else env,
               PYTHONWARNINGS="error::DeprecationWarning:bdsgd")
    proc = run_stoppable([sys.executable, "-m", "bdsgd", *map(str, args)], timeout=600,
                         cwd=cwd or REPO, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"bdsgd {' '.join(map(str, args))} exited {proc.returncode}:\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def bdsgd_in_process(capsys, *args) -> subprocess.CompletedProcess:
    """``bdsgd ARGS`` in this process (``bdsgd.cli.main``, what the console script calls): its
    exit status and what it printed, as ``run_cli`` gives them. For the commands whose process
    is not the point: tests/cli/test_cli.py starts each program once."""
    from bdsgd.cli import main

    capsys.readouterr()  # what came before is not the command's
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["bdsgd", *map(str, args)], code, out, err)


SNAKEMAKE = str(Path(sys.executable).with_name("snakemake"))


def snakemake(*args: str, cwd: Path = REPO, timeout: int = 1200,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Snakemake, its jobs finding this environment's bdsgd; in ``env`` (default: this
    process's environment)."""
    env = dict(os.environ if env is None else env)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return run_stoppable([SNAKEMAKE, *args], cwd=cwd, env=env, timeout=timeout)


def run_dag(workdir: Path, config: Path, env: dict[str, str] | None = None,
            targets: Sequence[str] = ()) -> None:
    """The DAG of ``config`` (or its ``targets``) in ``workdir``, on this machine's 2 cores."""
    workdir.mkdir(parents=True, exist_ok=True)
    proc = snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                     "--configfile", str(config), "--cores", "2", *targets, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


# ------------------------------------------------------------- the virtual cluster's runs
N_WORKERS, T_ROWS = 6, 12
STALENESS = ("mean_staleness", "max_staleness", "staleness_p50", "staleness_p90")


def make_cfg(wandb_mode="disabled", static_backups=2, comm_s=0.05, network=None, **train):
    from bdsgd.config import from_dict

    base = {"trace": "t", "tasks": ["digits"], "max_iterations": 30, "eval_every": 5,
            "batch_size": 8, "learning_rate": 0.1, "checkpoint_every": 10}
    return from_dict({"experiment": "test", "traces": {"t": {"source": "simulate"}},
                      "policies": {"static_backups": static_backups},
                      "throughput": {"comm_s": comm_s}, "network": network or {},
                      "train": {**base, **train}, "wandb": {"mode": wandb_mode}})


def write(tmp_path: Path, runtimes: np.ndarray, name: str = "trace") -> Path:
    """``runtimes`` as the trace file ``tmp_path/<name>.parquet``."""
    from bdsgd.traces.io import write_trace
    from bdsgd.traces.schema import from_arrays

    return write_trace(from_arrays(runtimes), tmp_path / f"{name}.parquet")


def metrics(run: Path) -> pd.DataFrame:
    return pd.read_parquet(run / "metrics.parquet")


def summary(run: Path) -> dict:
    return json.loads((run / "result.json").read_text())["summary"]


def crash_at_call(monkeypatch, module, name: str, k: int) -> None:
    """Make the k-th call of ``module.name`` raise, as a killed job would stop."""
    function, calls = getattr(module, name), []

    def crashing(*args):
        calls.append(1)
        if len(calls) == k:
            raise KeyboardInterrupt
        return function(*args)

    monkeypatch.setattr(module, name, crashing)


def crash_at_iteration(monkeypatch, k: int) -> None:
    """Make the k-th SGD step of the cutoff mode raise."""
    import bdsgd.training.synchronous as synchronous

    crash_at_call(monkeypatch, synchronous, "sgd_step", k)


def interrupted_then_resumed(monkeypatch, run, out: Path) -> Path:
    """``run(out)`` with the crash the caller installed: it dies leaving a checkpoint and no
    metrics; run again without the crash, it completes: the resumed run's folder."""
    with pytest.raises(KeyboardInterrupt):
        run(out)
    assert (out / "checkpoint.pt").exists()
    assert not (out / "metrics.parquet").exists()
    monkeypatch.undo()
    resumed = run(out)
    assert not (resumed / "checkpoint.pt").exists()  # a complete run leaves no checkpoint
    return resumed


# -------------------------------------------------------------------------- test doubles
class LastIteration(Predictor):
    """Test double of the run-time model's predictor: last iteration's order statistics, with
    the censored workers put at the cutoff time."""

    def __init__(self):
        self.expected = None

    def observe(self, obs):
        self.expected = np.sort(np.where(obs.accepted, obs.runtimes, obs.cutoff_time))

    def expected_order_stats(self):
        return self.expected


class Fixed(Predictor):
    """Test double of a predictor whose forecast of E[x_(1..n)] changes only when a test sets
    ``expected``; it counts the observations it was shown."""

    def __init__(self, expected: np.ndarray):
        self.expected = np.sort(expected)
        self.seen = 0

    def expected_order_stats(self):
        return self.expected

    def observe(self, obs):
        self.seen += 1


def cut_observation(runtimes: np.ndarray, cutoff: int, t: int = 0) -> Observation:
    """What a server sees when it stops at the c-th fastest: the rest are NaN, cut at tau."""
    tau = np.sort(runtimes)[cutoff - 1]
    seen = np.where(runtimes <= tau, runtimes, np.nan)
    return Observation(t, cutoff, seen, float(tau))


class Regimes:
    """Test double of the simulator's Truth: blocks of 10 fast iterations (two quick workers,
    two slow) and 10 slow ones (all slow), with 5% noise."""

    def __init__(self, n=4):
        self.n = self.n_workers = n

    def predictive_draws(self, t, n_samples, rng):
        if (t // 10) % 2:
            return rng.uniform(10.0, 10.5, (n_samples, self.n))
        base = np.where(np.arange(self.n) < self.n // 2, 1.0, 3.0)
        return base * rng.uniform(0.95, 1.05, (n_samples, self.n))


# ---------------------------------------------------------------- the DAG, stage by stage
def run_stages_by_hand(workdir: Path, config: Path, env: dict[str, str] | None = None) -> None:
    """Every stage of the DAG of ``config`` (one that holds a train: section and the traces it
    names), run by hand in ``workdir`` in the DAG's order: the commands its rules run, with the
    files its layout names and the threads Snakemake gives each job (OMP_NUM_THREADS=1: every
    rule's threads at the schema's defaults), each reading ``config`` itself (no stage config
    files: no Snakemake at all), in ``env`` (default: this process's environment). The commands
    run one after another in one Python process (``STAGES``: bdsgd's ``main`` as the console
    script calls it), which imports torch once, not once a stage: a stage that left state behind
    for the next would show in the tables. Fails on the first command that fails."""
    import yaml

    from bdsgd.config import from_dict, trace_names
    from bdsgd.layout import DRAW, Layout, cluster_draw
    from bdsgd.plan.preflight import pilot_traces
    from bdsgd.policies import model_files

    cfg = yaml.safe_load(config.read_text())
    paths = Layout.of(cfg["experiment"])
    env = dict(os.environ if env is None else env, OMP_NUM_THREADS="1",
               PYTHONWARNINGS="error::DeprecationWarning:bdsgd")

    def model_flags(cluster, policies):
        """The run-time models of ``cluster`` that ``policies`` read, as flags."""
        flag = {"model.pt": "--model", "paper.pt": "--paper-model"}
        return [a for file in model_files(policies) for a in (flag[file], paths.model(cluster, file))]

    commands: list[tuple[list[str], str | None]] = []  # (arguments, the file stdout goes to)
    made: set[str] = set()  # the models and drawn clusters the commands make

    def train_models(cluster, policies, *always: str):
        """Train ``cluster``'s run-time models that ``policies`` read (and ``always``'s), those
        not trained yet."""
        for file in sorted({*always, *model_files(policies)}):
            if paths.model(cluster, file) in made:
                continue
            made.add(paths.model(cluster, file))
            prior = [] if file == "paper.pt" else ["--prior", paths.prior()]
            bdsgd("model", "train", paths.trace(cluster, "train"), "--config", config, "--out",
                  paths.model(cluster, file), "--quiet", "--trace-name", cluster,
                  *(["--paper"] if file == "paper.pt" else []), *prior)

    def bdsgd(*args, stdout: str | None = None) -> None:
        commands.append(([str(a) for a in args], stdout))

    def drawn(trace, seed):
        """The cluster of ``trace`` for run seed or draw ``seed`` (a recorded trace: itself),
        simulated and split where not made yet."""
        if cfg["traces"][trace]["source"] != "simulate":
            return trace
        cluster = cluster_draw(trace, seed)
        if cluster != trace and paths.trace(cluster) not in made:
            made.add(paths.trace(cluster))
            bdsgd("traces", "simulate", "--config", config, "--name", trace, "--seed",
                  cfg.get("seed", 0) + seed, "--out", paths.trace(cluster))
            bdsgd("traces", "split", paths.trace(cluster), "--train-fraction",
                  cfg["traces"][trace].get("train_fraction", 0.5), "--train",
                  paths.trace(cluster, "train"), "--test", paths.trace(cluster, "test"))
        return cluster

    workdir.mkdir(parents=True, exist_ok=True)
    bdsgd("model", "prior", "--config", config, "--out", paths.prior(), "--quiet")
    throughput = cfg["throughput"]["policies"]
    for name, trace in cfg["traces"].items():
        if trace["source"] == "simulate":
            bdsgd("traces", "simulate", "--config", config, "--name", name,
                  "--out", paths.trace(name))
        else:
            bdsgd("traces", "import", "--format", trace["format"], trace["path"],
                  paths.trace(name))
        bdsgd("traces", "split", paths.trace(name), "--train-fraction",
              trace.get("train_fraction", 0.5), "--train", paths.trace(name, "train"),
              "--test", paths.trace(name, "test"))
        bdsgd("traces", "describe", "--json", paths.trace(name), stdout=paths.describe(name))
        train_models(name, throughput, "model.pt")  # model.pt: evaluated whoever reads it
        bdsgd("model", "evaluate", paths.model(name), paths.trace(name, "test"),
              "--config", config, "--json", paths.model(name, "evaluation.json"),
              "--predictions", paths.model(name, "predictions.parquet"))
        bdsgd("throughput", paths.trace(name, "test"), "--policies", ",".join(throughput),
              *model_flags(name, throughput), "--rule", "both", "--history", paths.trace(name, "train"),
              "--config", config, "--json", paths.throughput(name),
              "--decisions", paths.throughput(name, "decisions.parquet"),
              "--comm-sweep", paths.throughput(name, "comm_sweep.csv"),
              "--period-sweep", paths.throughput(name, "period_sweep.csv"))
    for name in cfg["traces"]:  # the throughput study's further cluster draws
        for draw in range(1, cfg["throughput"].get("draws", 1)):
            cluster = drawn(name, draw)
            train_models(cluster, throughput)
            bdsgd("throughput", paths.trace(cluster, "test"), "--policies", ",".join(throughput),
                  *model_flags(cluster, throughput), "--history", paths.trace(cluster, "train"),
                  "--config", config, "--draw", draw,
                  "--json", paths.throughput(f"{name}{DRAW}{draw}"))
    train = cfg["train"]
    traces = trace_names(train["trace"])
    pilots = set(pilot_traces(from_dict(cfg)).values())
    for trace in traces:
        for task in train["tasks"] if trace in pilots else ():  # before the runs, as the DAG
            bdsgd("pilot", "--config", config, "--task", task, "--trace", paths.trace(trace, "test"),
                  "--history", paths.trace(trace, "train"),
                  "--out", Path(paths.pilot(trace, task)).parent)
        for seed in train["seeds"]:
            cluster = drawn(trace, seed)
            train_models(cluster, train["policies"])
            for task in train["tasks"]:
                for policy in train["policies"]:
                    bdsgd("train", "--config", config, "--task", task, "--policy", policy,
                          "--seed", seed, "--trace", paths.trace(cluster, "test"),
                          "--history", paths.trace(cluster, "train"),
                          *model_flags(cluster, [policy]),
                          "--out", paths.run_dir(trace, task, policy, seed))
    bdsgd("figures", paths.results, "--out", paths.figures)
    bdsgd("figures", paths.results, "--out", paths.figures, "--draws")
    proc = run_stoppable([sys.executable, "-c", STAGES, json.dumps(commands)], cwd=workdir,
                         env=env, timeout=1200)
    if proc.returncode != 0:
        raise AssertionError(f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


# The stages by hand's process: each command as `bdsgd ARGS [> FILE]` runs it, in order, until
# one fails (its arguments and status on stderr).
STAGES = """
import contextlib, json, pathlib, sys
from bdsgd.cli import main
for args, stdout in json.loads(sys.argv[1]):
    out = pathlib.Path(stdout) if stdout else None
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") if out else contextlib.nullcontext(sys.stdout) as f:
        with contextlib.redirect_stdout(f):
            code = main(args)
    if code:
        sys.exit(f"bdsgd {' '.join(args)} exited {code}")
"""


def job_stats(out: str) -> dict[str, int]:
    """Snakemake's "Job stats" table: rule -> jobs."""
    table = out[out.index("Job stats:"):].splitlines()[3:]
    rows = [line.split() for line in table[:next(i for i, r in enumerate(table) if r.startswith("total"))]]
    return {rule: int(count) for rule, count in rows}


def result_tables(root: Path, experiment: str) -> dict[str, Path]:
    """Every result and summary table (CSV, Parquet) of a DAG's run in ``root``, by path under
    it, but a distributed job's: it measures wall time."""
    files = [p for d in (f"results/{experiment}", f"figures/{experiment}")
             for p in (root / d).rglob("*")
             if p.suffix in (".csv", ".parquet") and "distributed" not in p.parts]
    return {str(p.relative_to(root)): p for p in files}


def stamp_free(path: Path) -> bytes:
    """A table's bytes; of a Parquet file that bdsgd stamps (a trace: its provenance holds the
    git commit, which a commit landing between two runs changes, and the config), its data and
    the rest of its metadata, in Arrow's stream format."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = path.read_bytes()
    if path.suffix != ".parquet":
        return raw
    table = pq.read_table(path)
    metadata = dict(table.schema.metadata or {})
    if b"bdsgd" not in metadata:
        return raw
    meta = json.loads(metadata[b"bdsgd"])
    meta.pop("provenance", None)
    metadata[b"bdsgd"] = json.dumps(meta, sort_keys=True).encode()
    table = table.replace_schema_metadata(metadata)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()
