"""The run-time model as a ``Predictor`` (Teng & Wood 2018): bdsgd-model's whole forecast, and
the model's part of bdsgd's (``averaging``).

The model (``bdsgd.runtime_model``) filters the censored observations into a posterior over the
cluster's latent state and draws the next iteration's joint run-times; this adapter turns those
draws into E[x_(c)], which ``PredictivePolicy`` turns into a cutoff by the decision rule.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from bdsgd.cluster.cutoff import Observation
from bdsgd.policies.base import Predictor, draw_count
from bdsgd.policies.probe import Hypotheses
from bdsgd.runtime_model.filtering import impute
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.runtime_model.online import OnlineFit
from bdsgd.runtime_model.transition import TwoStateChain


class ModelPredictor(Predictor):
    """Online posterior predictive of the next iteration's run-times from censored observations.

    ``observe`` runs one filtering step on what the server saw (accepted run-times, and tau for
    the rest); ``expected_order_stats`` sorts S joint draws of x_{t+1} and averages them, with S
    at least ``samples`` (default: the model config's) and at least DRAW_BUDGET / n (``draw_count``).
    ``online`` (every, window, learning rate): the model goes on learning from what it observes
    (``OnlineFit``; every 0: it does not). ``compile`` puts the filtering step and the draws
    through torch.compile.
    """

    def __init__(self, model: RuntimeModel, samples: int | None = None, seed: int = 0,
                 online: tuple[int, int, float] = (0, 2, 0.0)):
        every, window, learning_rate = online
        # a model that learns while serving is this predictor's own: others read the same file
        self.model = (copy.deepcopy(model) if every else model).eval()
        self.online = (OnlineFit(self.model, every, window, learning_rate, seed) if every
                       else None)
        model = self.model
        self.step, self.forecast = model.step, model.forecast  # eager until ``compile``
        self.samples = draw_count(samples or model.config.samples, model.n_workers)
        self.generator = torch.Generator().manual_seed(seed)
        self.impute = model.config.censoring == "impute"
        with torch.inference_mode():
            self.state = model.initial_state(1)
            self._use(model.step_parameters())
        self.node_of = model.nodes.index.numpy()  # each worker's node
        self.noise = None  # this iteration's random numbers, once drawn
        self.ahead = None  # the next iteration's, drawn while the server waited
        self.cached: torch.Tensor | None = None  # the draws made of them
        self.sorted: np.ndarray | None = None  # each draw sorted, (S, n)
        self.expected: np.ndarray | None = None  # and their mean
        self.cut = np.zeros(model.n_workers, dtype=bool)  # censored at the last observation

    def _use(self, params) -> None:
        """Serve with ``params`` (``RuntimeModel.step_parameters``), and the episode chain the
        probe's hypotheses read, in numpy, once per parameters rather than once a decision."""
        self.params = params
        chain = self.model.transition.episode_chain(params.switch)
        self.chain = TwoStateChain(*(p.numpy() for p in chain))

    def compile(self) -> None:
        """The filtering step and the draws through torch.compile: a few fused kernels, where
        eager time at a few hundred workers is per-operation overhead. Each runs once here, on
        a throwaway observation and random numbers from a spare generator, so that the first
        decision does not compile; if that fails, the error propagates and both stay eager."""
        step = torch.compile(self.model.step, dynamic=False)
        forecast = torch.compile(self.model.forecast, dynamic=False)
        with torch.inference_mode():
            x = torch.ones(1, self.model.n_workers)
            step(self.state, x, x < 0, self.params)
            forecast(self.state, self.model.noise(self.samples, torch.Generator()), self.params)
        self.step, self.forecast = step, forecast

    @torch.inference_mode()
    def observe(self, obs: Observation) -> None:
        seen = torch.as_tensor(obs.runtimes, dtype=torch.float32)
        censored = seen.isnan()
        x = torch.where(censored, obs.cutoff_time, seen) / self.model.scale_s
        self.cut = censored.numpy()
        if self.impute:
            x, censored = impute(x, censored, self.generator), torch.zeros_like(censored)
        before, self.state = self.state, self.step(self.state, x[None], censored[None],
                                                   self.params)
        if self.online is not None:
            learnt = self.online.record(x[None], censored[None], before)
            if learnt is not None:
                self._use(learnt)
        self.noise = self.cached = self.sorted = self.expected = None

    def idle(self) -> None:
        """Learning while serving's step, taken early (``OnlineFit.idle``), and the next
        decision's random numbers: they do not depend on what the server will observe. Not under
        imputation, which draws from the same generator as it observes: which numbers each got
        would then depend on whether the server had time to call this."""
        if self.online is not None:
            self.online.idle()
        if self.ahead is None and not self.impute:
            with torch.inference_mode():
                self.ahead = self.model.noise(self.samples, self.generator)

    @torch.inference_mode()
    def draws(self) -> torch.Tensor:
        """S joint draws of x_{t+1} (S, n), in seconds (``RuntimeModel.forecast``); the same draws
        until the next observation, so a forecast and the averaging's score of it read one
        sample."""
        if self.cached is None:
            if self.ahead is None:
                self.ahead = self.model.noise(self.samples, self.generator)
            self.noise, self.ahead = self.ahead, None
            self.cached = self.forecast(self.state, self.noise, self.params)
        return self.cached

    def expected_order_stats(self) -> np.ndarray:
        """E[x_(c)], c = 1..n, in seconds: the mean of the sorted joint draws."""
        if self.expected is None:
            # numpy's vectorised sort is several times faster than torch.sort on one core
            self.sorted = np.sort(self.draws().numpy(), axis=-1)
            self.expected = self.sorted.mean(0, dtype=np.float64)
        return self.expected

    @torch.inference_mode()
    def hypotheses(self) -> Hypotheses | None:
        """How many of the nodes of the workers cut last are in an episode at t+1: each draw's
        episode indicators C_{t+1} there (its uniforms against P(C_{t+1} = 1), as ``forecast``
        drew them) count towards the hypothesis it belongs to. The count, not which nodes: the
        order statistics the rule reads depend on how many workers are slow, and a few hypotheses
        keep each one's forecast a mean over many draws. The draws alternate between the two
        halves; a hypothesis with fewer than two draws in either half is left out (too few to
        forecast from); None where fewer than two are left or none without an episode, and
        before any draw where the probabilities already say so."""
        # the cut workers' nodes, ascending: np.unique's result without its sort
        nodes = np.flatnonzero(np.bincount(self.node_of[self.cut],
                                           minlength=self.model.nodes.count))
        if not len(nodes):
            return None
        chain = self.chain
        p_on = chain.predict(self.state.p_c.numpy()[0])
        # a hypothesis is kept with two draws in each half: it needs about 4 / S of probability
        none = float(np.prod(1 - p_on[nodes], dtype=np.float64))
        if min(none, 1 - none) < 4 / self.samples:
            return None
        self.expected_order_stats()
        count = self.model.nodes.count
        on = self.noise.uniform[:, count:2 * count].numpy() < p_on
        values = len(nodes) + 1  # 0..k of the k nodes in an episode
        # each draw's (half, hypothesis) as one index, and every such group's sum at once
        group = np.arange(len(on)) % 2 * values + on[:, nodes].sum(-1)
        member = group[:, None] == np.arange(2 * values)
        counts = member.sum(0).reshape(2, values)
        kept = np.flatnonzero((counts >= 2).all(0))
        if len(kept) < 2 or kept[0] != 0:
            return None
        sums = (member.T.astype(np.float64) @ self.sorted).reshape(2, values, -1)
        return Hypotheses(counts[:, kept].sum(0) / counts[:, kept].sum(),
                          sums[:, kept] / counts[:, kept, None],
                          float(chain.stay - chain.start), float(chain.stationary()),
                          p_on[nodes].astype(np.float64))
