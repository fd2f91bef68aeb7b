"""What a cutoff policy is, and what it may see.

Before iteration t a policy picks c_t in 1..n: the parameter server will wait for the first c_t
gradients and discard the rest. Afterwards it sees only what a parameter server sees: the
run-times of the c_t workers that made the cutoff, and, for the others, only that they ran
longer than the cutoff time tau_t = x_t,(c_t) (censored): ``bdsgd.cluster.cutoff.Observation``. The server
loop (``bdsgd.cluster.server``) builds it; no policy ever receives a censored value.

A predictive policy is a ``Predictor`` of next iteration's expected order statistics
E[x_(1)] <= ... <= E[x_(n)] combined with a decision rule (``ratio`` or ``rate``), so that
predictors and rules combine freely.
"""

from __future__ import annotations

import numpy as np

from bdsgd.cluster.cutoff import Observation
from bdsgd.cluster.network import durations
from bdsgd.policies import RULES
from bdsgd.policies.probe import Hypotheses, horizon, probe_value
from bdsgd.policies.progress import OBJECTIVES, GradientNoise, worth

# Worker-draws per decision a Monte Carlo predictor affords at least, S = max(samples,
# DRAW_BUDGET / n): a small cluster gets more draws where they are cheap. E[x_(n)] of a heavy tail
# is noisy with few draws, and the argmax over noisy E[x_(c)] favours the cutoffs whose noise
# flatters them (docs/decisions.md, "Draws per decision").
DRAW_BUDGET = 8192


def draw_count(samples: int, n_workers: int) -> int:
    """S = max(samples, ceil(DRAW_BUDGET / n)): joint draws per decision for n workers."""
    return max(samples, -(-DRAW_BUDGET // n_workers))


class Policy:
    """Every cutoff policy: ``choose`` and ``observe``, and the optional hooks, which do nothing
    unless a policy has what they ask for."""

    name: str

    def choose(self) -> int:
        """The cutoff c in 1..n for the next iteration."""
        raise NotImplementedError

    def observe(self, obs: Observation) -> None:
        """Learn from what the server saw at the iteration just finished."""
        raise NotImplementedError

    def idle(self) -> None:
        """Work deferred to a moment when the server waits for gradients (learning while
        serving's step, ``OnlineFit.idle``)."""

    def forecast(self, c: int) -> float:
        """E[x_(c)] as the policy expected it at its last choice; NaN: it forecasts nothing."""
        return np.nan

    @property
    def measures_noise(self) -> bool:
        """Whether it learns the gradient noise scale (train.objective progress), so that the
        trainer measures each iteration's gradient statistics for ``observe_gradients``."""
        return False

    @property
    def noise_scale(self) -> float | None:
        """Its gradient noise scale estimate in samples, if it keeps one."""
        return None

    @property
    def probed(self) -> int | None:
        """The iterations it waited for every worker to learn the cut workers' state
        (``PredictivePolicy``'s probe); None: it does not probe."""
        return None

    def observe_gradients(self, small_sq: float, big_sq: float, b_small: float,
                          b_big: float) -> None:
        """One iteration's gradient norms, where it ``measures_noise``."""


class Wrapper(Policy):
    """A policy around another (``explore-``, ``decide_every``): every hook forwarded to it."""

    def __init__(self, inner: Policy):
        self.inner = inner

    def observe(self, obs: Observation) -> None:
        self.inner.observe(obs)

    def idle(self) -> None:
        self.inner.idle()

    def forecast(self, c: int) -> float:
        return self.inner.forecast(c)

    @property
    def measures_noise(self) -> bool:
        return self.inner.measures_noise

    @property
    def noise_scale(self) -> float | None:
        return self.inner.noise_scale

    @property
    def probed(self) -> int | None:
        return self.inner.probed

    def observe_gradients(self, small_sq: float, big_sq: float, b_small: float,
                          b_big: float) -> None:
        self.inner.observe_gradients(small_sq, big_sq, b_small, b_big)


class Predictor:
    """A forecast of the next iteration's order statistics from censored observations."""

    def expected_order_stats(self) -> np.ndarray | None:
        """E[x_(c)] for c = 1..n (sorted), or None before there is anything to predict from."""
        raise NotImplementedError

    def observe(self, obs: Observation) -> None:
        """Update on an iteration's censored observation."""
        raise NotImplementedError

    def idle(self) -> None:
        """Work deferred to when the server waits (``Policy.idle``)."""

    def hypotheses(self) -> Hypotheses | None:
        """What waiting for every worker would reveal about the workers cut last
        (``bdsgd.policies.probe``); None: nothing this predictor would learn from it."""
        return None


def decide(expected: np.ndarray, rule: str, rate: float | None, comm=0.0, min_gain: float = 0.0,
           worth: np.ndarray | None = None, lag: float = 0.0) -> int:
    """The cutoff the rule picks: ``best`` of ``scores``."""
    return best(scores(expected, rule, rate, comm, min_gain, worth, lag))


def best(score: np.ndarray) -> int:
    """The cutoff of the highest score, the smallest of those tied: argmax_c."""
    return int(np.argmax(score)) + 1


def scores(expected: np.ndarray, rule: str, rate: float | None, comm=0.0, min_gain: float = 0.0,
           worth: np.ndarray | None = None, lag: float = 0.0) -> np.ndarray:
    """Each cutoff's score (..., n) under predicted order statistics (..., n), whose argmax the
    rule picks (``decide``). ``comm`` is the cluster's network
    (``bdsgd.cluster.network.durations``): D(c), when an iteration that waits for c gradients
    ends, is taken at the forecast arrivals E[x_(1..n)], so the communication a cut saves follows
    how spread out the forecast arrivals are.

    ``ratio`` (the paper's): c* = argmax_c c / D(c).
    ``rate`` (renewal-reward): c* = argmax_c c - lambda_hat D(c), with lambda_hat the
    throughput achieved so far; long-run throughput is a ratio of expectations, which this rule
    maximises when decisions do not change the cluster's future. Before any iteration has
    finished (``rate`` is None) it falls back to ``ratio``.

    ``min_gain`` delta charges each discarded gradient 1 + delta instead of 1 (c counts as
    c - delta (n - c)): a cutoff below n must save (1 + delta) / lambda_hat seconds per gradient
    it discards. Both rules are otherwise myopic and take the forecast at its word, and a learnt
    forecast's errors do not cancel here: the argmax picks the cutoffs whose gain it overstates
    (the optimiser's curse), and a cut worker is censored, so the forecast learns least about
    the workers it cut (a worker believed slow stays cut after it recovered: the probe's case,
    ``PredictivePolicy``).

    ``worth`` (n,) puts what cutoff c is worth in place of c itself (the progress objective,
    ``bdsgd.policies.progress``): counted = worth - delta (worth(n) - worth), and lambda_hat is
    then worth per second. None: c, the throughput objective.

    ``lag`` kappa charges each cut worker the seconds its late start adds to a later iteration
    (``PredictivePolicy``: where cut workers finish their gradient): D(c) counts as
    D(c) + kappa (n - c).
    """
    n = np.shape(expected)[-1]
    if worth is None:
        c = np.arange(1, n + 1)
        counted = c - min_gain * (n - c)
    else:
        worth = np.asarray(worth, dtype=float)
        if worth.shape != (n,):
            raise ValueError(f"worth must have shape ({n},), got {worth.shape}")
        counted = worth - min_gain * (worth[-1] - worth)
    cost = durations(comm, expected) + lag * (n - np.arange(1, n + 1))
    if rule == "rate" and rate is not None:
        score = counted - rate * cost
    elif rule in ("rate", "ratio"):
        score = counted / cost
    else:
        raise ValueError(f"unknown decision rule {rule!r}")
    return score



class PredictivePolicy(Policy):
    """A ``Predictor`` plus a decision rule: c = decide(E[x_(1..n)], rule, lambda_hat,
    min_gain, worth).

    lambda_hat = sum c / sum duration over the iterations this policy chose the cutoff of, each
    weighted by 2^(-age / halflife): the throughput it achieved recently, as the server measures
    it. Recent, because the cluster drifts and the rule wants the rate it can get now (a plain
    average over a long run never follows a load shift). Its own, because a warm-up history
    (iterations observed without a ``choose()``, gathered under another policy, usually sync)
    says what that policy achieved: it informs the predictor, not lambda_hat. Before the predictor
    has anything to go on it waits for every worker (sync), which also shows it every run-time
    once.

    ``objective`` "throughput" counts a cutoff c as c gradients; "progress" as worth(c), the
    expected loss decrease of a step over c workers' batches of ``batch`` samples at the
    learning rate that ``lr_scaling`` (train.lr_scaling) gives c, from the
    gradient noise scale that ``observe_gradients`` estimates (``bdsgd.policies.progress``; the
    same halflife). lambda_hat is then worth per second.

    ``charge_lag``: kappa = sum delay / sum cuts, each weighted as lambda_hat's, where an
    iteration's delay is its cutoff time beyond the accepted workers' own run-times (the late
    starts of workers cut before, ``bdsgd.cluster.clock``) and its cuts the workers the iteration
    before cut; ``decide`` charges each cut worker kappa.

    ``probe``: where the rule would cut, wait for every worker instead when learning the cut
    workers' state is worth more than the wait costs (``bdsgd.policies.probe``; ``probes``
    counts those waits). A predictor without ``hypotheses`` never probes.
    """

    def __init__(self, name: str, predictor: Predictor, rule: str, comm: float | np.ndarray,
                 n_workers: int,
                 halflife: float = 100.0, min_gain: float = 0.0, objective: str = "throughput",
                 batch: int = 1, lr_scaling: str = "linear", charge_lag: bool = False,
                 probe: bool = False):
        if rule not in RULES:
            raise ValueError(f"unknown decision rule {rule!r}; choose from {RULES}")
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVES}")
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        self.name, self.predictor, self.rule = name, predictor, rule
        self.comm, self.n, self.min_gain = comm, n_workers, min_gain
        self.objective, self.batch, self.lr_scaling = objective, batch, lr_scaling
        self.noise = GradientNoise(halflife) if objective == "progress" else None
        self.decay = 0.5 ** (1.0 / halflife)
        self.gradients, self.seconds = 0.0, 0.0  # exponentially weighted sums (of worth)
        self.chosen = False  # whether the iteration being observed was this policy's choice
        self.expected: np.ndarray | None = None  # E[x_(c)], c = 1..n, at the last choice
        self.charge_lag = charge_lag
        self.lag_s, self.cuts = 0.0, 0.0  # exponentially weighted: late starts' delay, cuts
        self.cut: int | None = None  # workers the previous iteration cut
        self.probe, self.probes = probe, 0

    @property
    def rate(self) -> float | None:
        return self.gradients / self.seconds if self.seconds > 0 else None

    @property
    def probed(self) -> int | None:
        return self.probes if self.probe else None

    @property
    def measures_noise(self) -> bool:
        return self.noise is not None

    @property
    def noise_scale(self) -> float | None:
        """The current B_noise estimate in samples (None under "throughput" or before one)."""
        return None if self.noise is None else self.noise.scale

    def worth(self, c: np.ndarray) -> np.ndarray | None:
        """worth(c) under "progress"; None under "throughput" (c itself)."""
        if self.noise is None:
            return None
        return worth(c, self.n, self.batch, self.noise.scale, self.lr_scaling)

    def choose(self) -> int:
        self.chosen = True
        self.expected = expected = self.predictor.expected_order_stats()
        if expected is None:
            return self.n
        c = best(self.scores(expected))
        if c < self.n and self.probe and self.worth_probing(expected, c):
            self.probes += 1
            return self.n
        return c

    def worth_probing(self, expected: np.ndarray, c: int) -> bool:
        """Whether waiting for every worker in place of cutoff ``c`` under forecast ``expected``
        buys more in the decisions after it than it costs (``bdsgd.policies.probe``), in the
        rate rule's score at lambda_hat (before there is one: the throughput c promises)."""
        hyp = self.predictor.hypotheses()
        if hyp is None:
            return False
        rate = self.rate
        if rate is None:
            rate = float(self.scores_by(expected, "ratio", None)[c - 1])

        def score(forecast: np.ndarray) -> np.ndarray:
            return self.scores_by(forecast, "rate", rate)

        now = score(expected)
        return horizon(hyp, score, c) * probe_value(hyp, score) > now[c - 1] - now[-1]

    def scores(self, expected: np.ndarray) -> np.ndarray:
        """Every cutoff's score under forecast ``expected``: this policy's rule at its
        lambda_hat."""
        return self.scores_by(expected, self.rule, self.rate)

    def scores_by(self, expected: np.ndarray, rule: str, rate: float | None) -> np.ndarray:
        """Every cutoff's score under forecast ``expected`` by ``rule`` at ``rate``
        (``scores``), with this policy's network, margin, worth and lag."""
        return scores(expected, rule, rate, self.comm, self.min_gain,
                      self.worth(np.arange(1, self.n + 1)), self.lag)

    def forecast(self, c: int) -> float:
        """E[x_(c)] as the predictor expected it at the last choice (NaN before it had anything
        to go on): kept from ``choose``, so that asking draws nothing more."""
        return np.nan if self.expected is None else float(self.expected[c - 1])

    @property
    def lag(self) -> float:
        """kappa, the seconds a cut worker's late start has added to the next iteration's cutoff
        time, per cut worker, recently (0 until a cut was seen, or where not charged)."""
        return self.lag_s / self.cuts if self.charge_lag and self.cuts > 0 else 0.0

    def observe(self, obs: Observation) -> None:
        if self.chosen:
            gained = self.worth(np.array([obs.cutoff]))
            self.gradients = self.decay * self.gradients + (
                obs.cutoff if gained is None else float(gained[0]))
            self.seconds = self.decay * self.seconds + obs.duration
        if self.charge_lag and self.cut is not None:
            # the accepted workers' own run-times bound when the cutoff would have come with
            # no late start: what is beyond it, the previous cuts' late starts added
            delay = max(obs.cutoff_time - float(np.max(obs.runtimes[obs.accepted])), 0.0)
            self.lag_s = self.decay * self.lag_s + delay
            self.cuts = self.decay * self.cuts + self.cut
        self.cut = self.n - obs.cutoff
        self.chosen = False
        self.predictor.observe(obs)

    def idle(self) -> None:
        self.predictor.idle()

    def observe_gradients(self, small_sq: float, big_sq: float, b_small: float,
                          b_big: float) -> None:
        """One iteration's gradient norms for the noise scale (``GradientNoise.observe``); a
        no-op under "throughput"."""
        if self.noise is not None:
            self.noise.observe(small_sq, big_sq, b_small, b_big)
