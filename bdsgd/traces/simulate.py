r"""A generative cluster: run-time traces with known latent state, for experiments and tests.

n workers sit on K = ceil(n / m) nodes of m workers each (worker i on node k(i) = i // m). With
b = ``base_runtime_s``, worker i's run-time at iteration t = 0..T-1 is

    x_{t,i} = compute_{t,i} + comm_{t,i}

    compute_{t,i} = b_i L_t kappa^{C_{t,k(i)}} rho^{G_{t,i}} phi^{R_{t,i}} exp(eps_{t,i}) ell_{t,i}
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
- **Stragglers that emerge mid-run, and may come and go**: a uniformly chosen set S of
  ``stragglers`` workers is slower by rho (``straggler_slowdown``) from iteration
  t_s = floor(``straggler_start`` T) on: G_{t,i} = 0 for i not in S or t < t_s, G_{t_s,i} = 1 for
  i in S, and from there each G_{.,i} is a two-state Markov chain of its own,
  P(G_t = 0 | G_{t-1} = 1) = q_off (``straggler_off``), P(G_t = 1 | G_{t-1} = 0) = q_on
  (``straggler_on``). With q_off = 0 they stay slow. Otherwise an episode lasts 1 / q_off
  iterations on average, and a straggler is slow a fraction q_on / (q_on + q_off) of the time
  once its chain has forgotten its start (a worker whose throttling or noisy neighbour recurs).
- **A rack event**: nodes sit in racks of r nodes (``nodes_per_rack``; worker i in rack
  k(i) // r). One rack, chosen uniformly, is slower by phi (``rack_slowdown``) over the l =
  floor(``rack_length`` T) iterations from t_r = floor(``rack_start`` T) on: R_{t,i} = 1[i in
  that rack and t_r <= t < t_r + l] (a top-of-rack switch or a power event). phi = 1: none.
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
straggler-dominated ones (tests/traces/test_simulate.py states the tolerances). Four scenarios
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
Two more, with no real trace to calibrate them, ask whether a policy follows a worker effect
that changes: ``intermittent-straggler`` (two workers 3x slower in episodes that come and go)
and ``rack-event`` (one rack 2x slower for a stretch of the run).

The latent state (base speeds with the slow workers' factors, contention path, straggler set,
onset and path, load path, struck rack and its window, stall events) is returned as ``Truth``
(bdsgd.traces.truth saves it beside a trace), whose ``predictive_draws`` gives joint draws of
x_t from the true dynamics given the true state up to t - 1: the forecast no causal predictor
can beat. The schedule (t_s, t_L, S, the struck rack and its window) is part of that state,
fixed at the start of the run; C and G step from their true values at t - 1. Sequence lengths
are fresh draws like the jitter: independent of the past, they are no part of the state (a
server that read the next batch's lengths could forecast better; none of the policies does).

Everything is vectorised over workers and iterations; only the Markov chains (K nodes, |S|
stragglers) step through time (a loop of T cheap vector operations). 1,000 workers x 10,000
iterations take seconds (benchmarks/bench_simulate.py).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from bdsgd.config import SimulateConfig
from bdsgd.errors import UserError
from bdsgd.traces.schema import Trace

COMM_SHAPE = 4.0  # Gamma shape of communication times: CoV 1/sqrt(4) = 0.5

# Mechanisms switched off: slow workers, variable sequence lengths, stragglers that come and go
# (those of S stay slow), a rack event. A truth sidecar written before a mechanism existed had it
# off (bdsgd.traces.truth reads it so).
SWITCHED_OFF = {
    "slow_workers": 0, "slow_factor_min": 1.0, "slow_factor_max": 1.0,
    "seq_batch": 1, "seq_alpha": 2.0, "seq_max": 1.0,
    "straggler_on": 0.0, "straggler_off": 0.0,
    "nodes_per_rack": 2, "rack_start": 0.5, "rack_length": 0.0, "rack_slowdown": 1.0,
}

_CALM = {
    "speed_sigma": 0.04, "jitter_sigma": 0.05,
    "contention_start": 0.002, "contention_stop": 0.2, "contention_slowdown": 1.3,
    "stall_prob": 0.001, "stall_alpha": 2.5, "stall_scale": 0.2, "stall_max": 30.0,
    "stragglers": 0, "straggler_start": 0.5, "straggler_slowdown": 1.0,
    "load_shift_at": 0.5, "load_shift_factor": 1.0,
    "comm_s": 0.02,
    **SWITCHED_OFF,
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
    # mostly calm iterations, node contention episodes (~20 iterations, 9% of node-time, 1.7x),
    # heavy-tailed stalls (Pareto 1.2, cut at 30 b), the cluster 1.3x slower after 30%, and one
    # worker 7x slower over the last 20%.
    "mixed": {
        "speed_sigma": 0.03, "jitter_sigma": 0.04,
        "contention_start": 0.005, "contention_stop": 0.05, "contention_slowdown": 1.7,
        "stall_prob": 0.01, "stall_alpha": 1.2, "stall_scale": 0.5, "stall_max": 30.0,
        "stragglers": 1, "straggler_start": 0.8, "straggler_slowdown": 7.0,
        "load_shift_at": 0.3, "load_shift_factor": 1.3,
        "comm_s": 0.05,
        **SWITCHED_OFF,
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
    # Calm, with two workers 3x slower from 10% into the run in episodes of ~10 iterations
    # (1 / off) that come back after ~33 (1 / on): slow 23% of the time (on / (on + off)). Both
    # halves of a split hold episodes, so a model trained on the first can learn them.
    "intermittent-straggler": {**_CALM, "stragglers": 2, "straggler_start": 0.1,
                               "straggler_slowdown": 3.0, "straggler_on": 0.03,
                               "straggler_off": 0.1},
    # Calm, until one rack of two nodes (8 workers: a quarter of 32, half of 16) turns 2x slower
    # for 15% of the run from 60% on (a top-of-rack switch or power event): after a split at
    # half, unseen in training, and over well before the end.
    "rack-event": {**_CALM, "nodes_per_rack": 2, "rack_start": 0.6, "rack_length": 0.15,
                   "rack_slowdown": 2.0},
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
    straggler_path: np.ndarray  # (T, n) bool G_{t,i}
    load: np.ndarray  # (T,) L_t
    rack_struck: np.ndarray  # (n,) bool: i in the rack the event strikes
    rack_onset: int  # t_r
    rack_end: int  # t_r + l, cut at T
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
        return self.straggler_path[t]

    def scheduled(self, t: int) -> np.ndarray:
        """(n,) the factors known from the start of the run: L_t phi^{R_t}."""
        rack = self.rack_struck & (self.rack_onset <= t < self.rack_end)
        return self.load[t] * np.where(rack, self.params["rack_slowdown"], 1.0)

    def predictive_draws(self, t: int, n_samples: int, rng: np.random.Generator) -> np.ndarray:
        """(n_samples, n) joint draws of x_t from the true dynamics given the true state up to t-1.

        C_t is stepped from the true C_{t-1} (from the stationary law at t = 0), and so is G_t
        after the onset where stragglers come and go; the schedule is the true one; jitter,
        stalls and communication are fresh draws.
        """
        p = self.params
        u = rng.random((n_samples, self.contention.shape[1]))
        contended = (u < _stationary(p) if t == 0 else
                     _step(self.contention[t - 1], u, p["contention_start"], p["contention_stop"]))
        straggling = self.straggling(t)
        if p["straggler_off"] > 0 and t > self.straggler_onset:  # else G_t is the schedule's
            u = rng.random((n_samples, self.n_workers))
            straggling = self.straggler & _step(self.straggling(t - 1), u, p["straggler_on"],
                                                p["straggler_off"])
        scale = self.base_s * self.scheduled(t) * np.where(straggling, p["straggler_slowdown"], 1.0)
        return _draw_runtimes(rng, scale, contended[:, self.node], p)[0]


def _stationary(p: dict[str, Any]) -> float:
    on, off = p["contention_start"], p["contention_stop"]
    return on / (on + off) if on + off > 0 else 0.0


def _step(state: np.ndarray, u: np.ndarray, on: float, off: float) -> np.ndarray:
    """One step of two-state Markov chains: on leaves with prob ``off``, off turns on with ``on``."""
    return np.where(state, u >= off, u < on)


def _chain(first: np.ndarray, u: np.ndarray, on: float, off: float) -> np.ndarray:
    """The path of two-state Markov chains from state ``first``, a step per row of ``u``."""
    path = np.empty((len(u) + 1, *first.shape), dtype=bool)
    path[0] = first
    for t, row in enumerate(u):
        path[t + 1] = _step(path[t], row, on, off)
    return path


def _draw_runtimes(rng: np.random.Generator, scale: np.ndarray, contended: np.ndarray,
                   p: dict[str, Any]) -> tuple[np.ndarray, ...]:
    """Draw an (R, n) block of run-times given its slow-moving factors.

    scale: b_i L_t rho^{G_{t,i}} phi^{R_{t,i}}, broadcastable to (R, n); contended: (R, n) bool
    C_{t,k(i)}. Returns runtime, compute, comm, and the stall events (flat indices into the
    block, lengths).
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


def _straggler_path(rng: np.random.Generator, straggler: np.ndarray, onset: int, T: int,
                    p: dict[str, Any]) -> np.ndarray:
    """G: (T, n) bool. S is slow from t_s on; where stragglers come and go (straggler_off > 0),
    each then steps as its own chain. Only then are numbers drawn, so that the other scenarios'
    draws stay as they are."""
    path = np.zeros((T, len(straggler)), dtype=bool)
    path[onset:, straggler] = True
    if p["straggler_off"] > 0 and onset < T:
        u = rng.random((T - onset - 1, straggler.sum()))
        path[onset:, straggler] = _chain(path[onset, straggler], u, p["straggler_on"],
                                         p["straggler_off"])
    return path


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
    contention = _chain(u[0] < _stationary(p), u[1:], p["contention_start"], p["contention_stop"])

    straggler = np.zeros(n, dtype=bool)
    straggler[rng.choice(n, size=p["stragglers"], replace=False)] = True
    # Slow workers (none draw nothing: the other scenarios' draws stay as they are).
    h = _slow_count(p)
    base[rng.choice(n, size=h, replace=False)] *= np.exp(
        rng.uniform(np.log(p["slow_factor_min"]), np.log(p["slow_factor_max"]), size=h))
    onset = int(p["straggler_start"] * T)
    straggling = _straggler_path(rng, straggler, onset, T, p)
    load = np.where(np.arange(T) >= int(p["load_shift_at"] * T), p["load_shift_factor"], 1.0)
    # The rack event strikes a rack chosen uniformly (none, and nothing drawn, without an event).
    rack = node // p["nodes_per_rack"]
    struck = (rack == rng.integers(rack[-1] + 1) if p["rack_slowdown"] != 1
              else np.zeros(n, dtype=bool))
    rack_onset = int(p["rack_start"] * T)
    rack_end = min(T, rack_onset + int(p["rack_length"] * T))

    scale = base * load[:, None]
    scale[straggling] *= p["straggler_slowdown"]
    scale[rack_onset:rack_end, struck] *= p["rack_slowdown"]
    runtime, compute, comm, stalled, stall = _draw_runtimes(rng, scale, contention[:, node], p)

    meta = {"source": "simulate", "time_unit": "s", "scenario": p["scenario"], "params": p,
            "seed": int(seed), "n_workers": n,
            "cluster": f"simulated: {n} workers on {K} nodes of up to {m} "
                       f"(scenario {p['scenario']})"}
    # Positive and finite by construction (products of positive factors plus non-negative
    # terms), so the trace is built directly rather than through the long-table validator.
    trace = Trace(runtimes=runtime, censored=np.zeros((T, n), dtype=bool),
                  iterations=np.arange(T, dtype=np.int64), workers=np.arange(n, dtype=np.int64),
                  meta=meta, node=node.astype(np.int64), compute_s=compute, comm_s=comm)
    truth = Truth(params=p, seed=int(seed), node=node, base_s=base, contention=contention,
                  straggler=straggler, straggler_onset=onset, straggler_path=straggling,
                  load=load, rack_struck=struck, rack_onset=rack_onset, rack_end=rack_end,
                  stall_t=stalled // n, stall_worker=stalled % n, stall_s=stall)
    return trace, truth
