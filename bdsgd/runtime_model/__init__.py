"""The BDSGD run-time model: a deep generative dynamical model of every worker's run-time.

After Teng & Wood (2018), "Bayesian Distributed Stochastic Gradient Descent", NeurIPS, whose
model is a deep Markov model (Krishnan, Shalit & Sontag (2017), "Structured Inference Networks
for Nonlinear State Space Models", AAAI) of the workers' run-times. One module per factor, as in
Pyro's deep Markov model example (examples/dmm.py): ``transition`` p(z_t | z_{t-1}), ``emitter``
p(x_t | z_t), ``inference`` q(g_t | x_{1:t}), ``filtering`` the rest of q(z_t | x_{1:t}),
``sampling`` the generative next step, ``model`` the composition and its objective,
``checkpoint`` the model on disk, ``train`` the fit. A factor sees only its own parameters; the
functions of ``filtering`` and ``sampling`` take the factors they call and ``parameters``'
StepParameters (what a step reads of the parameters, computed once), never the composite
``model.RuntimeModel``, which sits on top and composes them: no module imports one above it.

Run-times are divided by the training trace's median m (kept in the checkpoint), so the model is
unit-free: x~_{t,w} = x_{t,w} / m for iteration t and worker w = 1..n. The emitter is Gaussian in
v = log x~ (``lognormal``, the default) or in v = x~ (``gaussian``, the paper's).

Generative model. The latent state z_t = (g_t, u_t, C_t, B_t) has a cluster part g_t in R^d
(load shared by all workers, its dynamics), a worker part u_t in R^n (each worker's own level: a
slow node, a straggler) with its regime (a jump indicator J_{t,k} per node, a reset indicator
R_{t,w} per worker), an episode C_{t,k} in {0, 1} per node k (a node's workers slowed together
for a while: contention, a noisy neighbour) and a short stall B_{t,w} in {0, 1} per worker::

    g_t     ~ N(A g_{t-1} + b, diag q_g)                                       (transition)
    u_{t,w} ~ N(rho u_{t-1,w} + (1 - rho) mean_w' u_{t-1,w'}, q),
              q = q_r if R_{t,w}, else q_j if J_{t,k(w)}, else q_u;
              J_{t,k} ~ Bernoulli(p_j), R_{t,w} ~ Bernoulli(p_r)
    P(C_{t,k} = 1 | C_{t-1,k}) = p_on if C_{t-1,k} = 0, 1 - p_off if 1
    P(B_{t,w} = 1 | B_{t-1,w}) = pi_s if B_{t-1,w} = 0, kappa if 1
    v_{t,w} | z_t ~ (1 - B_{t,w}) [(1 - pi) N(m_{t,w}, s^2)                    (emitter)
                                   + pi N(m_{t,w} + delta, s^2 + s_stall^2)]   (long stall)
                    + B_{t,w} [N(m_{t,w} + delta_s, s^2) + Exp(lambda)],        (short stall)
    m_{t,w} = f(g_t, e_w) + u_{t,w} + C_{t,k(w)} (delta_c + eps_{t,k(w)}),
    eps_{t,k} ~ N(0, s_c^2),  s = s(g_t, e_w)

independently over w given z_t. u is a random walk with occasional jumps, each worker pulled
slowly (rho near 1, learnt) towards the workers' mean level: a contention episode or a load the
training trace never had is followed in one iteration (the jump); a shift of the whole cluster is
kept (the mean moves with it). The pull also keeps a worker that turned slow from staying slow
for ever in the forecast while it is cut off: its censored run-times say little once it is
believed slow. An episode is the transient kind of a node's slowdown: it ends with probability
p_off (at least 5 %) per iteration, and a node-mate seen at its usual pace ends it for the
node's workers that were cut off too, where u alone would bring their level back only through
the slow pull and cut them off for nothing meanwhile. C and J are shared by a node's workers
(the trace's ``node`` column; without one, or with ``model.node_jumps: false``, every worker is
its own node): a node whose workers slow down together is one event of probability p_j (or
p_on), not one per worker, so independent jumps do not inflate the forecast's slowest order
statistics, and a node's slowdown is told from its workers' transient stalls after one
iteration. For the same reason an episode's size eps is the node's: drawn per worker, it spread
a contended node's forecasts apart, and the gap it opened between the two slowest made cutting
the slowest look worth it when it was not. The filter's likelihood approximates eps as
independent per worker (each worker's variance + C s_c^2; shared, it would couple a node's
18-component mixtures); for a node of one worker the two are the same. e_w is worker w's
identity embedding.

Inference (amortised, filtering online). The cluster part is a learnt recursion, as in dmm.py::

    h_t = GRU(h_{t-1}, mean_w phi(log x~_{t,w}, c_{t,w}, e_w))              (inference)
    q(g_t) = N(mu^g_t, diag sigma^g_t^2) = Combiner(A mu^g_{t-1} + b, h_t)

with c = 1 for a worker cut off at tau. The worker part, C and B are filtered exactly given g
(``filtering``: assumed-density filtering of u, two-state forward filters of C and B).

Objective. The worker part is integrated out (Rao-Blackwellised), so per iteration the model
scores the one-step predictive of u together with q(g_t):
    L = sum_t E_{q(g_t)}[log p(x_t | g_t, x_{1:t-1})] + E_q[log p(g_t | g_{t-1})] + H[q(g_t)],
p(x_t | g_t, x_{1:t-1}) the worker mixtures' joint marginal (``node_posterior``'s normaliser)
and the last two terms analytic. A censored worker contributes log P(x > tau | ...) (``censoring:
likelihood``, unbiased), or, as the paper did, is replaced by an uncensored run-time of the same
iteration drawn at random (``censoring: impute``, biased low: the uncensored ones are short).

Where it differs. From Teng & Wood: their DMM emits each worker's run-time from a Gaussian and
imputes censored run-times; here the emitter is log-normal with two stall parts (a heavy right
tail), a node's workers share episodes and jumps, the worker part is filtered exactly
(assumed-density filtering) given g, and censored run-times enter through their likelihood.
From Krishnan et al.: their inference network amortises the whole latent state; here only the
cluster part g is amortised, and the worker part is filtered exactly, so it behaves the same in
states that training never visited.
"""
