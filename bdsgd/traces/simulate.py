r"""A generative cluster: run-time traces with known latent state, for experiments and tests.

n workers sit on K = ceil(n / m) nodes of m workers each (worker i on node k(i) = i // m). With
b = ``base_runtime_s``, worker i's run-time at iteration t = 0..T-1 is

    x_{t,i} = compute_{t,i} + comm_{t,i}

    compute_{t,i} = b_i L_t kappa^{C_{t,k(i)}} rho^{G_{t,i}} exp(eps_{t,i}) ell_{t,i}
                    + B_{t,i} D_{t,i}

with these parts:

- **Heterogeneous base speeds**: b_i = b exp(sigma_s z_i) h_i, z_i ~ N(0, 1), fixed for the run
  (``speed_sigma``).
- **Slow workers**: a uniformly chosen set H of workers (its size from ``slow_workers``: below 1
  a fraction of n, at least one worker; from 1 a count) is slower for the whole run by
  h_i ~ LogUniform(f_lo, f_hi) (``slow_factor_min``, ``slow_factor_max``); h_i = 1 outside H.
- **Per-iteration jitter**: eps_{t,i} ~ N(0, sigma_j^2) i.i.d. (``jitter_sigma``).
- **Node-level contention, persistent (Markov)**: C_{t,k} in {0, 1} is a two-state Markov chain per
  node, P(C_t = 1 | C_{t-1} = 0) = p_on (``contention_start``), P(C_t = 0 | C_{t-1} = 1) = p_off
  (``contention_stop``), started from its stationary law P(C_0 = 1) = pi = p_on / (p_on + p_off).
  A contended node slows all its workers by kappa (``contention_slowdown``); episodes last
  1 / p_off iterations on average, and a fraction pi of node-iterations is contended.
- **Heavy-tailed transient stalls**: B_{t,i} ~ Bernoulli(p_s) i.i.d. (``stall_prob``), and a
  stall adds D_{t,i} = min(s b U^{-1/alpha}, M b) seconds, U ~ U(0, 1): a Pareto(alpha,
  x_min = s b) length (``stall_alpha``, ``stall_scale`` = s) cut at M b (``stall_max`` = M; a
  real job would time out or restart the worker). Uncut, E[D] = s b alpha / (alpha - 1) for
  alpha > 1, and alpha <= 2 has infinite variance.
- **Stragglers that emerge mid-run**: a uniformly chosen set S of ``stragglers`` workers becomes
  slower by rho (``straggler_slowdown``) from iteration t_s = floor(``straggler_start`` T) on:
  G_{t,i} = 1[i in S and t >= t_s]. They stay slow.
- **Load shift across the whole cluster**: L_t = 1 before t_L = floor(``load_shift_at`` T) and
  ``load_shift_factor`` from then on (a step, e.g. another job arrives on the cluster).
- **Data-dependent run-times (variable sequence lengths)**: a worker's micro-batch holds B
  sequences (``seq_batch``) whose lengths are Pareto(alpha_l, l_min) cut at M l_min
  (``seq_alpha``, ``seq_max`` = M), i.i.d. over sequences, workers and iterations. Padded to its
  longest sequence, a micro-batch costs in proportion to that longest length, whose law F^B
  (F the length's CDF) is drawn in one step by inversion:
  ell_{t,i} = min((1 - U^{1/B})^{-1/alpha_l}, M) / l_med, U ~ U(0, 1), normalised by its median
  l_med = min((1 - 2^{-1/B})^{-1/alpha_l}, M) so that b_i stays a typical compute time. The slow
  micro-batch is a property of the data, not of the worker: ell has no memory and no worker
  effect. M = 1 (every sequence as long) makes ell = 1.
- **Communication**: comm_{t,i} = c g_{t,i}, g ~ Gamma(shape 4, scale 1/4) i.i.d. (mean 1, CoV
  1/2), c = ``comm_s``; 0 when c = 0.

A scenario (``SCENARIOS``) names a preset of the scenario-dependent parameters; a config value
overrides the preset. The presets are calibrated against the per-iteration CoV of 100 real
Alibaba PAI jobs (tests/data/alibaba_pai_coefficient_variation.csv): ``calm`` sits at a
typical calm real job, ``mixed`` follows the pooled real distribution from calm iterations to
straggler-dominated ones (tests/test_traces_simulate.py states the tolerances). Four scenarios
follow what real clusters show and the others miss; benchmarks/scenarios.py prints each beside
the real statistics it is calibrated against, and docs/decisions.md gives the numbers:

- ``iid-heavy``: no memory, no worker effect, a heavy tail (stalls in 15% of worker-iterations),
  against a held-out 32-worker production job with i.i.d. heavy-tailed run-times, known by its
  hindsight-best mean cutoff, its best fixed cutoff and its lag-1 autocorrelation.
- ``data-dependent``: variable sequence lengths, no worker effect; no such trace is at hand, so
  only its spread is set, at the upper quartile of the real jobs' median CoV.
- ``heterogeneous``: half the workers 2-7x slower for the whole run; its steady CoV lies among
  the real jobs of steady high CoV.
- ``calm-spikes``: calm with rare single-iteration stalls, against the real calm jobs whose
  spikes are isolated: the rate and height of the spikes.

None models the slow drift of the raw PAI jobs (their run-times' strong lag-1 autocorrelation).

The latent state (base speeds with the slow workers' factors, contention path, straggler set
and onset, load path, stall events) is returned as ``Truth``, whose ``predictive_draws`` gives
joint draws of x_t from the true dynamics given the true state up to t - 1: the forecast no
causal predictor can beat. The schedule (t_s, t_L, S) is part of that state, fixed at the start
of the run. Sequence lengths are fresh draws like the jitter: independent of the past, they are
no part of the state (a server that read the next batch's lengths could forecast better; none of
the policies does).

Everything is vectorised over workers and iterations; only the K-state Markov chain steps through
time (a loop of T cheap vector operations). 1,000 workers x 10,000 iterations take seconds
(benchmarks/bench_simulate.py).
"""

from __future__ import annotations

import dataclasses
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bdsgd.config import SimulateConfig
from bdsgd.errors import UserError
from bdsgd.io import write_with
from bdsgd.traces.schema import Trace

COMM_SHAPE = 4.0  # Gamma shape of communication times: CoV 1/sqrt(4) = 0.5

# The slow-worker and sequence-length mechanisms switched off.
_UNIFORM_SPEED = {"slow_workers": 0, "slow_factor_min": 1.0, "slow_factor_max": 1.0}
_FIXED_LENGTHS = {"seq_batch": 1, "seq_alpha": 2.0, "seq_max": 1.0}

_CALM = {
    "speed_sigma": 0.04,
    "jitter_sigma": 0.05,
    "contention_start": 0.002,
    "contention_stop": 0.2,
    "contention_slowdown": 1.3,
    "stall_prob": 0.001,
    "stall_alpha": 2.5,
    "stall_scale": 0.2,
    "stall_max": 30.0,
    "stragglers": 0,
    "straggler_start": 0.5,
    "straggler_slowdown": 1.0,
    "load_shift_at": 0.5,
    "load_shift_factor": 1.0,
    "comm_s": 0.02,
    **_UNIFORM_SPEED,
    **_FIXED_LENGTHS,
}

SCENARIOS: dict[str, dict[str, Any]] = {
    # A healthy dedicated cluster: small spread, rare short hiccups.
    "calm": _CALM,
    # Calm, until two workers turn 2.5x slower 40% into the run (a failing disk, a thermal
    # throttle, a noisy neighbour that stays).
    "emerging-straggler": {**_CALM, "stragglers": 2, "straggler_start": 0.4,
                           "straggler_slowdown": 2.5},
    # Nodes are contended 1/6 of the time (p_on / (p_on + p_off)), in episodes of ~10 iterations
    # that double the run-time of every worker on the node.
    "node-contention": {**_CALM, "contention_start": 0.02, "contention_stop": 0.1,
                        "contention_slowdown": 2.0},
    # Halfway through, the whole cluster gets 1.5x slower.
    "load-shift": {**_CALM, "load_shift_at": 0.5, "load_shift_factor": 1.5},
    # Everything at once, at strengths calibrated so that the per-iteration CoV at n = 16
    # follows the 100 real PAI jobs' pooled distribution (docs/decisions.md has the fit):
    # mostly calm iterations, node contention episodes (~20
    # iterations, 9% of node-time, 1.7x), heavy-tailed stalls (Pareto 1.2, cut at 30 b), the
    # cluster 1.3x slower after 30%, and one worker 7x slower over the last 20%.
    "mixed": {
        "speed_sigma": 0.03,
        "jitter_sigma": 0.04,
        "contention_start": 0.005,
        "contention_stop": 0.05,
        "contention_slowdown": 1.7,
        "stall_prob": 0.01,
        "stall_alpha": 1.2,
        "stall_scale": 0.5,
        "stall_max": 30.0,
        "stragglers": 1,
        "straggler_start": 0.8,
        "straggler_slowdown": 7.0,
        "load_shift_at": 0.3,
        "load_shift_factor": 1.3,
        "comm_s": 0.05,
        **_UNIFORM_SPEED,
        **_FIXED_LENGTHS,
    },
    # Run-times with no memory and no worker effect, heavy-tailed: lognormal jitter (0.1) and a
    # Pareto(1.5) stall in 15% of worker-iterations (at least 0.4 b). At n = 32 it matches a
    # held-out 32-worker production job with i.i.d. heavy-tailed run-times in its hindsight-best
    # mean cutoff, its best fixed cutoff and its lag-1 autocorrelation (docs/decisions.md).
    "iid-heavy": {**_CALM, "speed_sigma": 0.0, "jitter_sigma": 0.1, "contention_start": 0.0,
                  "stall_prob": 0.15, "stall_alpha": 1.5, "stall_scale": 0.4},
    # Variable sequence lengths: micro-batches of 8 sequences padded to the longest, lengths
    # Pareto(2) up to 8x the shortest; equal worker speeds. No variable-length trace is at
    # hand: its median per-iteration CoV at n = 10 is set at the real PAI jobs' upper quartile
    # of median CoV (docs/decisions.md).
    "data-dependent": {**_CALM, "speed_sigma": 0.0, "contention_start": 0.0, "jitter_sigma": 0.03,
                       "seq_batch": 8, "seq_alpha": 2.0, "seq_max": 8.0},
    # Calm, with half the workers 2-7x slower for the whole run (a real heterogeneous job has
    # half of them 3.5-7x slower); no stalls: real jobs of steady high CoV have no spikes.
    "heterogeneous": {**_CALM, "stall_prob": 0.0, "slow_workers": 0.5, "slow_factor_min": 2.0,
                      "slow_factor_max": 7.0},
    # Calm, with a stall of at least 0.5 b (Pareto 1.5, cut at 10 b) in 0.03% of
    # worker-iterations: the rate and height of the spikes of the real calm PAI jobs whose spikes
    # are isolated (docs/decisions.md).
    "calm-spikes": {**_CALM, "stall_prob": 0.0003, "stall_alpha": 1.5, "stall_scale": 0.5,
                    "stall_max": 10.0},
}


def resolve(cfg: SimulateConfig) -> dict[str, Any]:
    """Every parameter of the run: the config's values, the scenario's where the config has None."""
    if cfg.scenario not in SCENARIOS:
        raise UserError("config", "simulate.scenario",
                        f"unknown scenario {cfg.scenario!r}; choose from {sorted(SCENARIOS)}")
    preset = SCENARIOS[cfg.scenario]
    params = {k: (preset[k] if v is None else v) for k, v in dataclasses.asdict(cfg).items()}
    if params["stragglers"] > params["workers"]:
        raise UserError("config", "simulate.stragglers",
                        f"{params['stragglers']} stragglers among {params['workers']} workers "
                        f"(scenario {cfg.scenario!r}); set simulate.stragglers <= workers")
    slow = params["slow_workers"]
    if slow >= 1 and (slow != int(slow) or slow > params["workers"]):
        raise UserError("config", "simulate.slow_workers",
                        f"{slow} slow workers among {params['workers']} (scenario "
                        f"{cfg.scenario!r}); set a whole number <= workers, or a fraction below 1")
    if params["slow_factor_min"] > params["slow_factor_max"]:
        raise UserError("config", "simulate.slow_factor_min",
                        f"{params['slow_factor_min']} > slow_factor_max "
                        f"{params['slow_factor_max']} (scenario {cfg.scenario!r})")
    return params


def _slow_count(p: dict[str, Any]) -> int:
    """|H|: ``slow_workers`` below 1 is a fraction of n (at least one worker), else a count."""
    slow, n = p["slow_workers"], p["workers"]
    return int(slow) if slow >= 1 or slow == 0 else max(1, round(slow * n))


@dataclass(frozen=True)
class Truth:
    """The simulator's latent state and parameters: everything but the i.i.d. noise."""

    params: dict[str, Any]
    seed: int
    node: np.ndarray  # (n,) node of each worker
    base_s: np.ndarray  # (n,) b_i
    contention: np.ndarray  # (T, K) bool C_{t,k}
    straggler: np.ndarray  # (n,) bool: i in S
    straggler_onset: int  # t_s
    load: np.ndarray  # (T,) L_t
    stall_t: np.ndarray  # (E,) iteration of each stall event
    stall_worker: np.ndarray  # (E,) worker of each stall event
    stall_s: np.ndarray  # (E,) its length D

    @property
    def n_workers(self) -> int:
        return len(self.node)

    @property
    def n_iterations(self) -> int:
        return len(self.load)

    def straggling(self, t: int) -> np.ndarray:
        """G_t: which workers are stragglers at iteration t."""
        return self.straggler & (t >= self.straggler_onset)

    def predictive_draws(self, t: int, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        """(n_samples, n) joint draws of x_t from the true dynamics given the true state up to t-1.

        C_t is stepped from the true C_{t-1} (from the stationary law at t = 0); G_t and L_t are
        the true schedule; jitter, stalls and communication are fresh draws.
        """
        p = self.params
        K = self.contention.shape[1]
        u = rng.random((n_samples, K))
        if t == 0:
            contended = u < _stationary(p)
        else:
            prev = self.contention[t - 1]
            contended = np.where(prev, u >= p["contention_stop"], u < p["contention_start"])
        scale = (self.base_s * self.load[t]
                 * np.where(self.straggling(t), p["straggler_slowdown"], 1.0))
        return _draw_runtimes(rng, scale, contended[:, self.node], p)[0]


def _stationary(p: dict[str, Any]) -> float:
    on, off = p["contention_start"], p["contention_stop"]
    return on / (on + off) if on + off > 0 else 0.0


def _draw_runtimes(rng: np.random.Generator, scale: np.ndarray, contended: np.ndarray,
                   p: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """Draw an (R, n) block of run-times given its slow-moving factors.

    scale: b_i L_t rho^{G_{t,i}}, broadcastable to (R, n); contended: (R, n) bool C_{t,k(i)}.
    Returns runtime, compute, comm, and the stall events (flat indices into the block, lengths).
    """
    shape = contended.shape
    compute = rng.standard_normal(shape)
    compute *= p["jitter_sigma"]
    np.exp(compute, out=compute)
    compute *= scale
    compute[contended] *= p["contention_slowdown"]
    stalled = np.flatnonzero(rng.random(shape) < p["stall_prob"])
    x_min = p["stall_scale"] * p["base_runtime_s"]
    stall = x_min * rng.random(len(stalled)) ** (-1.0 / p["stall_alpha"])
    np.minimum(stall, p["stall_max"] * p["base_runtime_s"], out=stall)
    comm = rng.gamma(COMM_SHAPE, p["comm_s"] / COMM_SHAPE, size=shape)
    # Drawn last and only when lengths vary, so that the other scenarios' draws stay as they are.
    if p["seq_max"] > 1:
        compute *= _length_factor(rng, shape, p)
    compute.ravel()[stalled] += stall
    return compute + comm, compute, comm, stalled, stall


def _length_factor(rng: np.random.Generator, shape: tuple[int, ...],
                   p: dict[str, Any]) -> np.ndarray:
    """ell: the longest of B Pareto sequence lengths, cut at M and over its median."""
    inv_alpha, inv_batch = 1.0 / p["seq_alpha"], 1.0 / p["seq_batch"]
    # 1 - U^{1/B} as -expm1(log(U) / B): exact where U^{1/B} rounds to 1.
    tail = -np.expm1(np.log(rng.random(shape)) * inv_batch)
    longest = np.minimum(tail ** -inv_alpha, p["seq_max"])
    median = min((-np.expm1(np.log(0.5) * inv_batch)) ** -inv_alpha, p["seq_max"])
    return longest / median


def simulate(cfg: SimulateConfig, seed: int) -> tuple[Trace, Truth]:
    """Draw a (iterations x workers) trace from the generative cluster, and its latent state."""
    p = resolve(cfg)
    n, T, m = p["workers"], p["iterations"], p["workers_per_node"]
    rng = np.random.default_rng(seed)

    node = np.arange(n) // m
    K = int(node[-1]) + 1
    base = p["base_runtime_s"] * np.exp(p["speed_sigma"] * rng.standard_normal(n))

    # Node contention: a two-state Markov chain per node, stepped through time.
    u = rng.random((T, K))
    contention = np.empty((T, K), dtype=bool)
    contention[0] = u[0] < _stationary(p)
    for t in range(1, T):
        contention[t] = np.where(contention[t - 1], u[t] >= p["contention_stop"],
                                 u[t] < p["contention_start"])

    straggler = np.zeros(n, dtype=bool)
    straggler[rng.choice(n, size=p["stragglers"], replace=False)] = True
    # Slow workers (none draw nothing: the other scenarios' draws stay as they are).
    h = _slow_count(p)
    base[rng.choice(n, size=h, replace=False)] *= np.exp(
        rng.uniform(np.log(p["slow_factor_min"]), np.log(p["slow_factor_max"]), size=h))
    onset = int(p["straggler_start"] * T)
    load = np.where(np.arange(T) >= int(p["load_shift_at"] * T), p["load_shift_factor"], 1.0)

    scale = base * load[:, None]
    scale[onset:, straggler] *= p["straggler_slowdown"]
    runtime, compute, comm, stalled, stall = _draw_runtimes(rng, scale, contention[:, node], p)

    meta = {
        "source": "simulate",
        "time_unit": "s",
        "scenario": p["scenario"],
        "params": p,
        "seed": int(seed),
        "cluster": f"simulated: {n} workers on {K} nodes of up to {m} "
                   f"(scenario {p['scenario']})",
        "n_workers": n,
    }
    # Positive and finite by construction (products of positive factors plus non-negative
    # terms), so the trace is built directly rather than through the long-table validator.
    trace = Trace(runtimes=runtime, censored=np.zeros((T, n), dtype=bool),
                  iterations=np.arange(T, dtype=np.int64), workers=np.arange(n, dtype=np.int64),
                  meta=meta, node=node.astype(np.int64), compute_s=compute, comm_s=comm)
    truth = Truth(params=p, seed=int(seed), node=node, base_s=base, contention=contention,
                  straggler=straggler, straggler_onset=onset, load=load,
                  stall_t=stalled // n, stall_worker=stalled % n, stall_s=stall)
    return trace, truth


# ------------------------------------------------------------------------- truth sidecar file
_ARRAYS = ("node", "base_s", "contention", "straggler", "load", "stall_t", "stall_worker",
           "stall_s")


def truth_path(trace_path: str | Path) -> Path:
    """The latent-state sidecar of a simulated trace: ``<stem>.truth.npz`` beside it."""
    path = Path(trace_path)
    return path.with_name(f"{path.stem}.truth.npz")


def write_truth(truth: Truth, path: str | Path) -> Path:
    arrays = {name: getattr(truth, name) for name in _ARRAYS}
    header = json.dumps({"params": truth.params, "seed": truth.seed,
                         "straggler_onset": truth.straggler_onset})

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a name
            np.savez_compressed(f, header=np.array(header), **arrays)

    return write_with(path, write)


def read_truth(path: str | Path) -> Truth:
    """Load a truth sidecar; a missing or damaged file is a one-line UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(str(path), "-", "simulator truth file not found ('bdsgd traces "
                        "simulate' writes it beside the trace)")
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(str(data["header"]))
            arrays = {name: data[name] for name in _ARRAYS}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(str(path), "-", f"not a simulator truth file ({reason})") from None
    # a sidecar written before a mechanism existed had it switched off
    params = {**_UNIFORM_SPEED, **_FIXED_LENGTHS, **header["params"]}
    return Truth(params=params, seed=header["seed"],
                 straggler_onset=header["straggler_onset"], **arrays)
