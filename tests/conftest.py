"""Shared fixtures: a tiny experiment config written to disk like a user's, and the session's
runs: the tiny DAG once locally, the real distributed jobs, and every figure of a hand-made
results folder drawn by `bdsgd figures`; for the long tests (make
test-long) also its stages once by hand and once on SLURM (where SLURM's daemons are installed).

The runs the selected tests read start in the background as soon as the tests are collected (on
three threads of this process that wait on their subprocesses, in this environment as it was then),
and the test modules that read them run last: meanwhile the other tests run. No test writes into a
run.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

# The session's runs and the tests share 2 cores with many processes: torch's idle OpenMP
# threads sleep instead of spinning on a core another process needs, and each process computes
# on one thread, its small tensors gaining nothing from a second that another process is using
# (set before torch loads; the runs and every command a test starts inherit both).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("OMP_NUM_THREADS", "1")

from tests.distributed_jobs import run_distributed_jobs
from tests.figure_results import render_results, results  # noqa: F401 (results: a fixture)
from tests.helpers import (
    run_dag,
    run_stages_by_hand,
    stop_subprocesses,
    tiny_config,
    tiny_dag_config,
)
from tests.slurm_cluster import run_on_slurm

# The session's runs, in the order they start: fixture name -> what it does, in a working
# directory of its own, with the tiny DAG's config file and the environment to run in.
RUNS = {"tiny_dag": run_dag, "slurm_runs": run_on_slurm, "distributed_jobs": run_distributed_jobs,
        "rendered": render_results, "stages_by_hand": run_stages_by_hand}
# The order they finish in on 2 cores (the hand-made figures ~60 s, the distributed jobs ~100 s,
# the DAG ~190 s, the stages by hand ~230 s: queued behind the first to finish, SLURM's two DAGs
# ~300 s): the modules that read them run in this order, so that none waits while a
# later-finishing run's readers could go.
FINISHED = ("rendered", "distributed_jobs", "tiny_dag", "stages_by_hand", "slurm_runs")


class Background:
    """The session's runs, each started once, three at a time, on background threads."""

    def __init__(self):
        self.root: Path | None = None
        self.pool: ThreadPoolExecutor | None = None
        self.environ: dict[str, str] = {}
        self.runs: dict[str, Future] = {}

    def config(self) -> tuple[Path, dict]:
        if self.root is None:
            self.root = Path(tempfile.mkdtemp(prefix="bdsgd-session-"))
            self.pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="bdsgd-session",
                                           initializer=_yield_to_the_tests)
            # the runs' environment: this one before any test changes it (monkeypatch.setenv)
            self.environ = dict(os.environ)
            (self.root / "tiny.yaml").write_text(yaml.safe_dump(tiny_dag_config()))
        return self.root / "tiny.yaml", tiny_dag_config()

    def start(self, name: str) -> Future:
        if name not in self.runs:
            config, _ = self.config()
            self.runs[name] = self.pool.submit(RUNS[name], self.root / name, config,
                                               self.environ)
        return self.runs[name]

    def result(self, name: str):
        """A finished run's working directory, config file and config, and what it returned;
        its failure, raised."""
        returned = self.start(name).result()
        config, cfg = self.config()
        return self.root / name, config, cfg, returned

    def close(self) -> None:
        """Stop what still runs (a session cut short) and remove every run's files."""
        if self.pool is not None:
            for run in self.runs.values():
                run.cancel()
            stop_subprocesses()
            self.pool.shutdown(wait=True)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


BACKGROUND = Background()


def _yield_to_the_tests() -> None:
    """Lower this background thread's priority, and so its subprocesses' (they inherit it): the
    runs take the CPU the tests leave, and slow no test down. Linux sets a thread's niceness
    alone; elsewhere it would be the whole process's: left as it is."""
    if sys.platform == "linux":
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)


def _reads_a_run(item: pytest.Item) -> bool:
    """Whether the test reads a session run and will run (not skipped by a plain condition)."""
    skipped = any(m.args[:1] == (True,) for m in item.iter_markers("skipif")) or any(
        item.iter_markers("skip"))
    return not skipped and bool(RUNS.keys() & set(getattr(item, "fixturenames", ())))


@pytest.hookimpl(trylast=True)  # after -k and -m deselect
def pytest_collection_modifyitems(session, config, items):
    """The long tests (marked long) only where -m names them (make test-long); then the
    modules whose tests read a session run go last: the runs go on meanwhile. Of those, in the
    order the runs they read finish (``FINISHED``)."""
    # not -m "not long" in addopts: a -m given on the command line (-m "not slow") replaces it
    if "long" not in config.option.markexpr:
        long = [item for item in items if item.get_closest_marker("long")]
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if not item.get_closest_marker("long")]
    order = list(FINISHED)
    late: dict[Path, int] = {}
    for item in items:
        if _reads_a_run(item):
            last = max(order.index(name) for name in RUNS.keys() & set(item.fixturenames))
            late[item.path] = max(late.get(item.path, 0), last)
    items[:] = [i for i in items if i.path not in late] + sorted(
        (i for i in items if i.path in late), key=lambda i: late[i.path])


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    needed = {name for item in session.items if _reads_a_run(item)
              for name in RUNS.keys() & set(item.fixturenames)}
    for name in RUNS:  # in RUNS' order: the DAG, that more tests read, first
        if name in needed:
            BACKGROUND.start(name)


def pytest_sessionstart(session):
    """SIGTERM (a CI job cancelled, a `kill`) stops the session as Ctrl-C does: its teardown
    stops the runs and the SLURM daemons they started."""
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def pytest_sessionfinish(session, exitstatus):
    BACKGROUND.close()


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(tiny_config()))
    return path


@pytest.fixture(scope="session")
def tiny_dag() -> tuple[Path, Path, dict]:
    """The tiny DAG (a simulated and an imported trace: helpers.tiny_dag_config), run once per
    session: (working directory, config file, config)."""
    return BACKGROUND.result("tiny_dag")[:3]


@pytest.fixture(scope="session")
def stages_by_hand() -> tuple[Path, Path, dict]:
    """The same DAG's stages run by hand (helpers.run_stages_by_hand) on the same config file,
    without Snakemake: (working directory, config file, config)."""
    return BACKGROUND.result("stages_by_hand")[:3]


@pytest.fixture(scope="session")
def slurm_runs() -> dict:
    """The same DAG on a single-node SLURM started for it, through each profile at once
    (slurm_cluster.run_on_slurm): what that returns."""
    return BACKGROUND.result("slurm_runs")[3]


@pytest.fixture(scope="session")
def rendered() -> tuple[Path, list[Path]]:
    """Every figure and table of the hand-made results folder (figure_results.render_results),
    drawn once per session: (the figure folder, the files written)."""
    workdir, _, _, written = BACKGROUND.result("rendered")
    return workdir / "figures", written


@pytest.fixture(scope="session")
def distributed_jobs() -> dict:
    """The real distributed jobs (distributed_jobs.run_distributed_jobs): what that returns."""
    return BACKGROUND.result("distributed_jobs")[3]
