"""The probe: wait for a cut worker when what its run-time would teach is worth the wait.

A worker the server cut is censored at the cutoff time tau: it ran longer than tau, which a
worker still in its slow episode and one already back to its usual pace both do when tau is
below both. So a cut worker's episode never ends in the forecast's belief but by the chain's own
decay, and a myopic rule goes on cutting a worker that has recovered (one that the belief holds
at probability p of still being slow, each iteration, until p is low enough). Waiting for every
worker (c = n) shows its run-time, and the belief then knows the state.

Value and cost, both in the rate rule's score c - lambda D(c) (``base.scores``): an iteration's
gradients less what its seconds cost at the throughput lambda the policy achieves. It is linear in
the forecast, so its expectation over states is its value at their mixture, as the long-run
throughput (a ratio of expectations) wants; the ratio rule's c / D(c) is not. The predictor
states what such a wait reveals as hypotheses: the values s of the cut workers' latent state
with their probabilities w_s, and the forecast m_s = E[x_(1..n) | s] under each
(``Hypotheses``). Deciding with the state known is worth, per iteration,

    VOI = sum_s w_s max_c score(m_s)(c) - max_c score(sum_s w_s m_s)(c)   >= 0,

the expected value of perfect information about s (Howard 1966). The state a wait reveals stays
informative for the iterations after it, fading as the chain forgets: the belief's distance
from the chain's stationary law pi shrinks by lambda = P(stay) - P(start) each iteration. And it
is worth something only while the rule, without it, would go on cutting: unobserved, each cut
node's P(episode) decays as pi + lambda^j (p - pi), and once P(no cut node in an episode) is high
enough that the rule waits for every worker anyway, it learns the state then for free. So the
wait is worth VOI x (lambda + ... + lambda^k*), k* the iterations the rule would still cut
(``horizon``). It costs score(m)(c*) - score(m)(n) now. The policy waits for every worker when
the worth exceeds the cost.

Each m_s is a mean over a few Monte Carlo draws, and the max over noisy forecasts favours the
cutoffs whose noise flatters them, which would count noise as information. So the first term is
cross-fitted: the draws come in two independent halves; one half's forecast under s chooses the
cutoff, the other half's scores it, and the other way round. The second is the decision made on
all the draws at once; noise raises it, so the VOI errs low: a probe needs a clear case.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

# iterations ahead a wait's worth is counted over, at most: beyond them it errs low
HORIZON = 200


class Hypotheses(NamedTuple):
    """What waiting for every worker would reveal: how many of the cut workers' nodes are in an
    episode, each count's probability ``weights`` (G,), the first (0) none of them, and the
    forecast E[x_(1..n)] given each from two independent halves of the draws ``expected``
    (2, G, n); the episode chain's ``lam`` and ``stationary`` P(episode) pi, and each cut node's
    P(episode) ``p_on`` (k,) at the iteration decided."""

    weights: np.ndarray
    expected: np.ndarray
    lam: float
    stationary: float
    p_on: np.ndarray

    def mixed(self, rest: np.ndarray, share: float) -> Hypotheses:
        """The hypotheses of a forecast that is this one at weight ``share`` and ``rest``
        (n,) (the other forecasts, already weighted) beside it (``Averaged``)."""
        return self._replace(expected=share * self.expected + rest)


def probe_value(hypotheses: Hypotheses, score: Callable[[np.ndarray], np.ndarray]) -> float:
    """VOI above, per iteration: ``score`` maps forecasts (..., n) to every cutoff's score
    (..., n), linear in the forecast."""
    w, expected = hypotheses.weights, hypotheses.expected
    each = score(expected)  # (2, G, n): each half's scores under each state
    pick = each.argmax(-1)[..., None]
    # each half's choice under each state, scored by the other half
    known = np.take_along_axis(each[::-1], pick, -1)[..., 0].mean(0)
    return float(w @ known - score((w @ expected).mean(0)).max())


def horizon(hypotheses: Hypotheses, score: Callable[[np.ndarray], np.ndarray], c: int) -> float:
    """lambda + ... + lambda^k* above: k* the iterations (at most ``HORIZON``) that the rule,
    left unobserved, would still prefer cutoff ``c`` to waiting for every worker. ``score`` as
    ``probe_value``'s."""
    each = score(hypotheses.expected.mean(0))  # (G, n)
    gain = each[:, c - 1] - each[:, -1]  # what cutting gains over waiting, under each count
    w = hypotheses.weights
    some = w[1:] @ gain[1:] / w[1:].sum()  # under an episode on some cut node
    decay = max(hypotheses.lam, 0.0) ** np.arange(1, HORIZON + 1)  # an alternating chain: 0
    p, pi = hypotheses.p_on, hypotheses.stationary
    none = np.prod(1 - (pi + decay[:, None] * (p - pi)), axis=1)  # (HORIZON,)
    cutting = (1 - none) * some + none * gain[0] > 0
    k = HORIZON if cutting.all() else int(np.argmin(cutting))
    return float(decay[:k].sum())
