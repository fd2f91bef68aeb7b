"""The run-time model: shapes, training, checkpoints, online filtering, censoring, CLI."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from scipy.stats import exponnorm, norm

from bdsgd.cluster.cutoff import Observation, observation
from bdsgd.config import ModelConfig, SimulateConfig, default_config, from_dict
from bdsgd.errors import UserError
from bdsgd.evaluation import evaluate_model
from bdsgd.policies.build import make_policy
from bdsgd.policies.model_predictor import ModelPredictor
from bdsgd.runtime_model import train as train_module
from bdsgd.runtime_model.checkpoint import load_model
from bdsgd.runtime_model.filtering import impute, node_posterior, worker_update
from bdsgd.runtime_model.gaussian import Mixture
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.runtime_model.sampling import episode_levels, step_variances
from bdsgd.runtime_model.train import train_model
from bdsgd.runtime_model.transition import Nodes
from bdsgd.traces.io import read_trace, write_trace
from bdsgd.traces.schema import from_arrays
from bdsgd.traces.simulate import simulate
from tests.helpers import bdsgd_in_process

CFG = from_dict({"experiment": "t", "traces": {"t": {"source": "simulate"}},
                 "train": {"trace": "t", "tasks": ["digits"]}})
BASE = CFG.model


def tiny(**kw) -> ModelConfig:
    return dataclasses.replace(BASE, **{"latent_dim": 4, "worker_dim": 4, "hidden_dim": 16,
                                        "chunk": 16, "batch_size": 4, "epochs": 3,
                                        "samples": 32, **kw})


def cluster(T: int, n: int, seed: int, shift_at: int | None = None) -> np.ndarray:
    """Heterogeneous workers, node-correlated Markov contention, Pareto stalls, a load shift."""
    rng = np.random.default_rng(seed)
    node = np.arange(n) // 4
    contended = np.zeros(node.max() + 1, bool)
    x = np.empty((T, n))
    base = np.exp(rng.normal(0, 0.1, n))
    for t in range(T):
        flip = rng.random(contended.shape)
        contended = np.where(contended, flip > 0.1, flip < 0.05)
        x[t] = base * np.exp(rng.normal(0, 0.05, n)) * np.where(contended[node], 1.8, 1.0)
        x[t] += (rng.random(n) < 0.01) * 0.5 * (rng.pareto(1.5, n) + 1)
        if shift_at is not None and t >= shift_at:
            x[t] *= 2.0
    return x


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small model trained long enough to have learnt something (shared by several tests)."""
    out = tmp_path_factory.mktemp("m") / "model.pt"
    trace = from_arrays(cluster(120, 8, seed=1), meta={"source": "sim"})
    train_model(trace, tiny(epochs=12), seed=0, out=out, progress=False)
    return out


@pytest.mark.parametrize("n", [10, 64])
def test_shapes_for_several_n(n):
    torch.manual_seed(0)
    model = RuntimeModel(tiny(), n)
    x = torch.rand(3, 5, n) + 0.5
    assert model.elbo(x, torch.zeros_like(x, dtype=torch.bool)).shape == (3,)
    mix = model.predictive(model.initial_state(1), 7)
    assert mix.sample().shape == (7, n)
    pred = ModelPredictor(model, samples=16)
    before = pred.expected_order_stats()  # from the prior, before any observation
    pred.observe(observation(0, np.linspace(1, 2, n), n // 2, 0.0))
    e = pred.expected_order_stats()
    assert before.shape == e.shape == (n,)
    assert (e > 0).all() and (np.diff(e) >= 0).all()


def test_training_increases_elbo_and_is_deterministic(tmp_path):
    trace = from_arrays(cluster(40, 6, seed=0), meta={"source": "sim"})
    a = train_model(trace, tiny(epochs=6), seed=3, out=tmp_path / "a.pt", progress=False)
    b = train_model(trace, tiny(epochs=6), seed=3, out=tmp_path / "b.pt", progress=False)
    losses = torch.load(a, weights_only=True)["losses"]
    assert losses[-1] < losses[0]
    sa, sb = load_model(a).state_dict(), load_model(b).state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    c = train_model(trace, tiny(epochs=6), seed=4, out=tmp_path / "c.pt", progress=False)
    assert not torch.equal(load_model(c).embedding, load_model(a).embedding)


def in_epoch(monkeypatch, k: int, act) -> None:
    """``act()`` as the fit's k-th epoch starts (``train_module.run_epoch`` patched)."""
    real, calls = train_module.run_epoch, []

    def epoch(*args):
        calls.append(1)
        if len(calls) == k:
            act()
        return real(*args)

    monkeypatch.setattr(train_module, "run_epoch", epoch)


def crash() -> None:
    raise KeyboardInterrupt


def test_a_stop_at_the_last_epoch_leaves_the_model_to_the_next_job(tmp_path, monkeypatch):
    """SIGTERM heard in the last epoch: the fit stops with a checkpoint of its end and writes no
    model (the job fails whatever it writes); the same call writes the uninterrupted model."""
    import os
    import signal

    from bdsgd.errors import Stopped

    trace = from_arrays(cluster(40, 6, seed=0), meta={"source": "sim"})
    cfg = tiny(epochs=3, checkpoint_every=2)
    whole = train_model(trace, cfg, seed=1, out=tmp_path / "whole.pt", progress=False)
    # heard by bdsgd's handler, recorded
    in_epoch(monkeypatch, 3, lambda: os.kill(os.getpid(), signal.SIGTERM))
    out = tmp_path / "warned.pt"
    with pytest.raises(Stopped, match="after epoch 3"):
        train_model(trace, cfg, seed=1, out=out, progress=False)
    assert not out.exists() and (tmp_path / "warned.pt.ckpt").exists()
    monkeypatch.setattr(train_module, "run_epoch", lambda *args: pytest.fail("trained again"))
    train_model(trace, cfg, seed=1, out=out, progress=False)
    a, b = torch.load(whole, weights_only=True), torch.load(out, weights_only=True)
    assert a["losses"] == b["losses"] and not (tmp_path / "warned.pt.ckpt").exists()


def test_resume_from_checkpoint_equals_uninterrupted(tmp_path, monkeypatch):
    trace = from_arrays(cluster(40, 6, seed=0), meta={"source": "sim"})
    cfg = tiny(epochs=5, checkpoint_every=2)
    whole = train_model(trace, cfg, seed=1, out=tmp_path / "whole.pt", progress=False)
    in_epoch(monkeypatch, 4, crash)
    out = tmp_path / "resumed.pt"
    with pytest.raises(KeyboardInterrupt):
        train_model(trace, cfg, seed=1, out=out, progress=False)
    assert not out.exists() and (tmp_path / "resumed.pt.ckpt").exists()
    crashed = torch.load(tmp_path / "resumed.pt.ckpt", weights_only=True)
    monkeypatch.undo()
    train_model(trace, cfg, seed=1, out=out, progress=False)
    assert not (tmp_path / "resumed.pt.ckpt").exists()
    a, b = torch.load(whole, weights_only=True), torch.load(out, weights_only=True)
    assert a["losses"] == b["losses"]
    assert all(torch.equal(a["state_dict"][k], b["state_dict"][k]) for k in a["state_dict"])
    with pytest.raises(UserError, match="fingerprint"):  # a stale checkpoint is not resumed
        torch.save({"fingerprint": {}}, f"{out}.ckpt")
        train_model(trace, cfg, seed=1, out=out, progress=False)
    crashed["model"]["transition.retired_parameter"] = torch.zeros(1)  # another code version
    torch.save(crashed, f"{out}.ckpt")
    with pytest.raises(UserError, match="another model version"):
        train_model(trace, cfg, seed=1, out=out, progress=False)


def test_predictor_follows_a_load_shift(trained):
    model = load_model(trained)
    x = cluster(60, 8, seed=5, shift_at=30)
    pred = ModelPredictor(model, seed=0)
    for t in range(30):
        pred.observe(observation(t, x[t], 6, 0.0))  # censored, as in deployment
    before = pred.expected_order_stats()
    for t in range(30, 60):
        pred.observe(observation(t, x[t], 6, 0.0))
    after = pred.expected_order_stats()
    assert np.median(after / before) > 1.5


def test_impute_draws_from_the_same_iterations_uncensored():
    x = torch.tensor([[1.0, 2.0, 9.0, 9.0], [3.0, 9.0, 9.0, 9.0]])
    censored = x == 9.0
    filled = impute(x, censored, torch.Generator().manual_seed(0))
    assert torch.equal(filled[~censored], x[~censored])
    assert set(filled[0, 2:].tolist()) <= {1.0, 2.0} and filled[1, 1:].tolist() == [3.0] * 3


@pytest.mark.long  # two models trained to convergence: make test-long (CI runs it)
def test_censoring_bias_likelihood_beats_imputation(tmp_path):
    """Truth known: i.i.d. log-normal run-times, the slowest 40 % censored in training. The
    likelihood model's predicted censored tail (top order statistics) is closer to the truth."""
    rng = np.random.default_rng(0)
    n, c = 10, 6
    x = np.exp(rng.normal(0, 0.3, (120, n)))
    trace = from_arrays(x, meta={"source": "censored"}).cut_at(c)  # what a server keeping c learns
    truth = np.sort(np.exp(rng.normal(0, 0.3, (20000, n))), axis=1).mean(0)[c:]
    error = {}
    for mode in ("likelihood", "impute"):
        out = train_model(trace, tiny(epochs=8, censoring=mode), seed=0,
                          out=tmp_path / f"{mode}.pt", progress=False)
        pred = ModelPredictor(load_model(out), samples=256, seed=0)
        for t in range(20):
            pred.observe(observation(t, x[t], c, 0.0))
        error[mode] = np.abs(pred.expected_order_stats()[c:] - truth).mean()
    assert error["likelihood"] < error["impute"]


def test_sample_trace_is_a_valid_trace(trained):
    trace = load_model(trained).sample_trace(12, seed=2)
    assert trace.runtimes.shape == (12, 8) and trace.complete
    assert (trace.runtimes > 0).all() and trace.meta["source"] == "model-sample"
    again = load_model(trained).sample_trace(12, seed=2)
    assert np.array_equal(trace.runtimes, again.runtimes)


def test_evaluate_reports_every_metric(trained):
    result, predictions = evaluate_model(load_model(trained),
                                         from_arrays(cluster(30, 8, seed=9)), rule="ratio")
    assert len(predictions) == 30 * 8
    assert (predictions["lo90"] <= predictions["hi90"]).all()
    mae = (predictions["predicted_mean"] - predictions["realised"]).abs().mean()
    assert mae == pytest.approx(result["order_stat_mae_s"], rel=1e-5)
    for key in ("heldout_loglik_per_obs", "coverage_50", "coverage_90", "order_stat_mae_s",
                "order_stat_rel_error", "throughput_relative_to_oracle"):
        assert np.isfinite(result[key]), key
    assert 0 <= result["coverage_50"] <= result["coverage_90"] <= 1
    assert 0 < result["throughput_relative_to_oracle"] <= 1 + 1e-9
    with pytest.raises(UserError, match="workers"):
        evaluate_model(load_model(trained), from_arrays(cluster(5, 4, seed=9)))


def test_load_model_rejects_bad_files(tmp_path, trained):
    with pytest.raises(UserError, match="not found"):
        load_model(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(UserError, match="junk.pt"):
        load_model(tmp_path / "junk.pt")
    torch.save({"format": "something else"}, tmp_path / "other.pt")
    with pytest.raises(UserError, match="format"):
        load_model(tmp_path / "other.pt")
    ckpt = torch.load(trained, weights_only=True)
    ckpt["n_workers"] = 3  # embedding no longer fits
    torch.save(ckpt, tmp_path / "bad.pt")
    with pytest.raises(UserError, match="incompatible"):
        load_model(tmp_path / "bad.pt")
    ckpt = torch.load(trained, weights_only=True)
    ckpt["config"]["no_such_key"] = 1  # a config this version does not know
    torch.save(ckpt, tmp_path / "unknown.pt")
    with pytest.raises(UserError, match="incompatible"):
        load_model(tmp_path / "unknown.pt")


def test_a_model_from_before_a_model_key_loads_at_its_default(tmp_path, trained):
    """A checkpoint whose config lacks a model: key added since reads it at the schema's
    default (how that model was trained); its own values stay."""
    ckpt = torch.load(trained, weights_only=True)
    del ckpt["config"]["prior_precision"]
    torch.save(ckpt, tmp_path / "older.pt")
    older, model = load_model(tmp_path / "older.pt"), load_model(trained)
    assert older.config == model.config and older.config.prior_precision == 0
    assert older.config.hidden_dim != default_config().model.hidden_dim  # the model's own


def test_cli_train_evaluate_sample(tmp_path, capsys):
    """The model commands in this process (tests/cli/test_cli.py starts each program once)."""
    write_trace(from_arrays(cluster(24, 4, seed=0), meta={"source": "sim"}), tmp_path / "t.parquet")
    write_trace(from_arrays(cluster(12, 4, seed=1), meta={"source": "sim"}), tmp_path / "h.parquet")
    run = bdsgd_in_process(capsys, "model", "train", tmp_path / "t.parquet", "--out",
                           tmp_path / "m.pt", "--epochs", 2, "--quiet", "--seed", 1)
    assert run.returncode == 0, run.stderr
    assert "n=4 workers" in run.stdout and "final ELBO" in run.stdout
    run = bdsgd_in_process(capsys, "model", "evaluate", tmp_path / "m.pt", tmp_path / "h.parquet",
                           "--json", tmp_path / "e.json")
    assert run.returncode == 0, run.stderr
    assert "throughput_relative_to_oracle" in (tmp_path / "e.json").read_text()
    run = bdsgd_in_process(capsys, "model", "sample", tmp_path / "m.pt", "--iterations", 5,
                           "--out", tmp_path / "s.parquet")
    assert run.returncode == 0, run.stderr
    assert read_trace(tmp_path / "s.parquet").runtimes.shape == (5, 4)


def test_observation_with_all_but_one_censored_is_handled(trained):
    pred = ModelPredictor(load_model(trained), samples=8)
    seen = np.full(8, np.nan)
    seen[3] = 1.0
    pred.observe(Observation(t=0, cutoff=1, runtimes=seen, cutoff_time=1.0))
    assert np.isfinite(pred.expected_order_stats()).all()


def regime_weights(p_j, p_r, p_stall, p_short):
    """P(component) of the nine, regime-major (stay, jump, reset) x (normal, long stall, short
    stall)."""
    regime = torch.tensor([(1 - p_j) * (1 - p_r), p_j * (1 - p_r), p_r])
    return (regime[:, None] * torch.tensor([1 - p_stall - p_short, p_stall, p_short])).flatten()


def with_episodes(w9: torch.Tensor, log_p_c: torch.Tensor, nodes: Nodes) -> torch.Tensor:
    """The eighteen components' log weights per worker: episode off, then on, times ``w9``."""
    return torch.cat([w9.log()[:, None] + nodes.spread(c) for c in log_p_c])


@pytest.mark.parametrize("censored", [False, True])
@pytest.mark.parametrize("v", [-0.3, 0.1, 0.9])
def test_worker_update_matches_numerical_integration(v, censored):
    """The assumed-density update of u (episode x regime x emitter part mixture, observed or
    censored at v) has the mean and variance of the exact posterior, log p(v) its normaliser,
    P(C = 1) the episode's posterior and P(B = 1) the short stall's: all checked against
    integration over a fine grid of u. A
    short stall is its Gaussian plus an exponential length (rate 2.5), scipy's exponnorm."""
    mu, p_j, p_c, rate = 0.05, 0.05, 0.3, 2.5
    # offsets: long stall 0.7, short stall 0.2, episode 0.4
    c = torch.tensor([0.0, 0.7, 0.2] * 3 + [0.4, 1.1, 0.6] * 3)
    p = torch.tensor([0.01] * 3 + [0.3] * 3 + [2.0] * 3).repeat(2)  # u's prior variance by regime
    r = torch.tensor([0.04, 0.2, 0.04] * 3 + [0.06, 0.22, 0.06] * 3)  # emitter (+ episode) var.
    log_p_c = torch.tensor([[1 - p_c], [p_c]]).log()
    log_w = with_episodes(regime_weights(p_j, 0.04, 0.1, 0.15), log_p_c, Nodes(None, 1))
    mix = Mixture((mu + c)[:, None], (p + r)[:, None], log_w, p[:, None], torch.tensor([mu]),
                  torch.tensor(rate), log_p_c)
    flag = torch.tensor([censored])
    log_w_j = torch.tensor([1 - p_j, p_j]).log()
    mean, var, logp, post_c, post_b = worker_update(mix, torch.tensor([v]), flag, Nodes(None, 1),
                                                    log_w_j)

    u = np.linspace(-12, 12, 400_001)
    prior = [np.exp(-0.5 * (u - mu) ** 2 / pk) / np.sqrt(2 * np.pi * pk) for pk in p.numpy()]
    lik = []  # P(V > v | u) or p(v | u) in component k
    for k, (ck, rk) in enumerate(zip(c.numpy(), r.numpy(), strict=True)):
        sd = np.sqrt(rk)
        law = exponnorm(1 / (rate * sd), loc=u + ck, scale=sd) if k % 3 == 2 else norm(u + ck, sd)
        lik.append(law.sf(v) if censored else law.pdf(v))
    terms = [wk * pk * lk for wk, pk, lk in zip(log_w.exp()[:, 0].numpy(), prior, lik, strict=True)]
    post = sum(terms)
    z = np.trapezoid(post, u)
    m = np.trapezoid(u * post, u) / z
    assert float(mean) == pytest.approx(m, abs=1e-4)
    assert float(var) == pytest.approx(np.trapezoid((u - m) ** 2 * post, u) / z, rel=1e-3)
    assert float(logp) == pytest.approx(np.log(z), abs=1e-4)
    assert float(post_c) == pytest.approx(np.trapezoid(sum(terms[9:]), u) / z, abs=1e-5)
    assert float(post_b) == pytest.approx(np.trapezoid(sum(terms[2::3]), u) / z, abs=1e-5)


def test_node_posterior_matches_enumeration():
    """With the episode C and the jump J shared by a node's workers, the component posteriors,
    the normaliser and P(C = 1 | node) equal those of brute-force enumeration over (C, J) and
    every worker's component."""
    p_j, p_r, p_stall, p_short = 0.1, 0.05, 0.2, 0.1
    node = np.array([0, 0, 1, 0, 1])  # two nodes, of three workers and two
    nodes = Nodes(node, 5)
    p_c = torch.tensor([0.3, 0.6])  # P(C = 1) of each node
    log_p_c = torch.stack([1 - p_c, p_c]).log()
    loglik = torch.randn(18, 5, generator=torch.Generator().manual_seed(0))  # log p(v_w | comp)
    w = regime_weights(p_j, p_r, p_stall, p_short)
    log_w_j = torch.tensor([1 - p_j, p_j]).log()
    r, log_norm, post_c = node_posterior(with_episodes(w, log_p_c, nodes) + loglik, nodes,
                                         log_w_j, log_p_c)

    # P(comp | J) within an episode state: stay needs J = 0, jump J = 1, reset goes with either
    given = {0: torch.cat([w[:3] / (1 - p_j), torch.zeros(3), w[6:]]),
             1: torch.cat([torch.zeros(3), w[3:6] / p_j, w[6:]])}
    expected, expected_c, total = torch.zeros(18, 5), torch.zeros(2), 0.0
    for k in (0, 1):
        members = np.flatnonzero(node == k)
        z_node = z_on = 0.0
        for C, prior_c in ((0, 1 - p_c[k]), (1, p_c[k])):
            for J, prior_j in ((0, 1 - p_j), (1, p_j)):
                comp = torch.zeros(18)
                comp[9 * C:9 * C + 9] = given[J]
                lik = comp[:, None] * loglik[:, members].exp()  # (18, workers of node k)
                z = prior_c * prior_j * lik.sum(0).prod()
                z_node, z_on = z_node + z, z_on + C * z
                # P(C, J, comp_w | v) = z * lik[comp, w] / sum_comp lik[:, w]
                expected[:, members] += z * lik / lik.sum(0)
        expected[:, members] /= z_node
        expected_c[k] = z_on / z_node
        total += math.log(z_node)
    assert r.numpy() == pytest.approx(expected.numpy(), abs=1e-5)
    assert float(log_norm) == pytest.approx(total, abs=1e-4)
    assert post_c.numpy() == pytest.approx(expected_c.numpy(), abs=1e-5)
    # singleton nodes: the plain per-worker mixture posterior
    alone = Nodes(None, 5)
    log_p_c = nodes.spread(log_p_c)
    joint = with_episodes(w, log_p_c, alone) + loglik
    r1, norm1, _ = node_posterior(joint, alone, log_w_j, log_p_c)
    assert r1.numpy() == pytest.approx(joint.softmax(0).numpy(), abs=1e-6)
    assert float(norm1) == pytest.approx(float(joint.logsumexp(0).sum()), abs=1e-4)


def test_both_two_state_chains_predict_and_start_stationary():
    """C's chain (on with p_on, off with p_off >= 5 %) and B's (on with pi_s, on again with
    kappa) share one TwoStateChain: a step from each state gives its transition probability, and
    the stationary law, where the filter starts, is the limit of the transition matrix's powers."""
    model = RuntimeModel(tiny(), 4, node=np.array([0, 0, 1, 1]))
    with torch.no_grad():
        model.transition.switch_logit.copy_(torch.tensor([0.5, -1.0]))
        model.emitter.short_logit.fill_(-1.0)
        model.emitter.short_stay_logit.fill_(0.8)
        params, state = model.step_parameters(), model.initial_state(1)
    p_off = 0.05 + 0.95 / (1 + math.exp(1.0))
    p_on = p_off / (1 + math.exp(-0.5))
    pi_s, kappa = 1 / (1 + math.exp(1.0)), 1 / (1 + math.exp(-0.8))
    chains = ((model.transition.episode_chain(params.switch), p_on, 1 - p_off, state.p_c),
              (model.transition.stall_chain(params.stall.probs), pi_s, kappa, state.p_b))
    for chain, start, stay, initial in chains:
        assert float(chain.predict(torch.tensor(0.0))) == pytest.approx(start, rel=1e-6)
        assert float(chain.predict(torch.tensor(1.0))) == pytest.approx(stay, rel=1e-6)
        matrix = torch.tensor([[1 - start, start], [1 - stay, stay]], dtype=torch.float64)
        limit = float(torch.linalg.matrix_power(matrix, 1000)[0, 1])
        assert float(chain.stationary()) == pytest.approx(limit, rel=1e-5)
        assert initial.numpy() == pytest.approx(np.full(initial.shape, limit), rel=1e-5)


def test_predictor_draws_follow_the_predictive_mixture(trained):
    """ModelPredictor.draws (indicators, one Gaussian, a stall indexed) and Mixture.sample (all 18
    components) draw from the same distribution: at each of Mixture.sample's quantiles, the
    share of ModelPredictor.draws above it agrees within Monte Carlo error (5 sd). Quantiles
    themselves are no test near 0.99, where the stalls' mass begins and the density is flat
    enough that they move by 0.05 between seeds of the same sampler."""
    model = load_model(trained)
    draws = 100_000
    pred = ModelPredictor(model, samples=draws, seed=1)
    x = cluster(10, 8, seed=3)
    for t in range(10):
        pred.observe(observation(t, x[t], 6, 0.0))
    fast = np.log(pred.draws().numpy() / model.scale_s)
    with torch.inference_mode():  # the predictor's state is an inference tensor
        slow = model.predictive(pred.state, draws, torch.Generator().manual_seed(2)).sample(
            torch.Generator().manual_seed(3)).numpy()
    for q in (0.1, 0.5, 0.9, 0.99, 0.999):
        above = (fast > np.quantile(slow, q, axis=0)).mean(0)
        assert above == pytest.approx(np.full(8, 1 - q), abs=5 * np.sqrt(2 * q * (1 - q) / draws))


def test_a_zero_uniform_draws_no_giant_stall(trained, monkeypatch):
    """torch.rand returns exactly 0 once in 2^24 (about once in 2,000 decisions at n = 16):
    every uniform the draws use may be 0 without a draw of 10^2-10^4 x. -log of a zero (clamped)
    short-stall uniform made one, moved E[x_(n)] by up to a second, and cut a worker for
    nothing in a quarter of the calm clusters."""
    model = load_model(trained)
    pred = ModelPredictor(model, samples=64, seed=0)
    x = cluster(10, 8, seed=3)
    for t in range(10):
        pred.observe(observation(t, x[t], 8, 0.0))
    rand = torch.rand

    def with_a_zero(*args, **kwargs):
        u = rand(*args, **kwargs)
        u.view(-1)[0] = 0.0
        return u

    monkeypatch.setattr(torch, "rand", with_a_zero)
    draws = pred.draws().numpy()
    assert np.isfinite(draws).all()
    # draw 0 of worker 0 is a short stall (its part's uniform is 0) of length -log(1 - 0) = 0
    assert draws[0, 0] < 10 * np.median(draws)


def test_bayes_takes_as_many_draws_per_decision_as_bdsgd():
    """The ceiling's Monte Carlo error is no larger than the model's: the gap between bayes and
    bdsgd is the model's own error. Small clusters get more draws than ``samples``."""
    for n in (8, 16, 2048):
        truth = simulate(SimulateConfig(workers=n, iterations=2), seed=0)[1]
        bayes = make_policy("bayes", n, CFG.policies, truth=truth).predictor
        bdsgd = ModelPredictor(RuntimeModel(tiny(), n), samples=CFG.policies.bayes_samples)
        assert bayes.samples == bdsgd.samples == max(CFG.policies.bayes_samples, 8192 // n)
        assert bayes.expected_order_stats().shape == bdsgd.expected_order_stats().shape == (n,)


def test_a_straggler_cut_off_stays_slow_in_the_forecast(trained):
    """A worker that turns 3x slow is seen twice, then cut off (censored) for 38 iterations: its
    forecast stays slow (the random walk does not pull it back to the others). Not all of the 3x:
    the trained cluster's episodes slowed workers 1.8x, and the part of the slowdown an episode
    explains may have ended while the worker was cut off (a censored run-time cannot tell)."""
    model = load_model(trained)
    pred = ModelPredictor(model, samples=2000, seed=0)
    x = np.exp(np.random.default_rng(4).normal(0, 0.05, (60, 8)))
    x[20:, 0] *= 3.0
    for t in range(60):
        pred.observe(observation(t, x[t], 8 if t <= 21 else 7, 0.0))
    draws = np.median(pred.draws().numpy(), axis=0) / model.scale_s
    assert draws[0] > 1.6 * np.median(draws[1:])


def test_a_change_larger_than_training_ever_had_is_followed(trained):
    """The trained cluster never had a worker 7x slower. Seen that slow for 5 iterations, the
    forecast follows it (the reset regime), rather than explaining every one away as a stall."""
    model = load_model(trained)
    pred = ModelPredictor(model, samples=2000, seed=0)
    x = np.exp(np.random.default_rng(5).normal(0, 0.05, (25, 8)))
    x[20:, 0] *= 7.0
    for t in range(25):
        pred.observe(observation(t, x[t], 8, 0.0))
    draws = np.median(pred.draws().numpy(), axis=0)
    assert draws[0] > 4.0 * np.median(draws[1:])


def test_jumps_are_shared_by_a_node(trained):
    """With a node column, a node's workers jump together (J per node); without, alone."""
    model = load_model(trained)
    for node, both in ((np.arange(8) // 4, 0.2), (None, 0.2**2)):
        m = RuntimeModel(model.config, 8, model.scale_s, node=node)
        m.load_state_dict(model.state_dict())
        with torch.no_grad():
            m.transition.jump_logit.fill_(math.log(0.2 / 0.8))
        params = m.step_parameters()
        jump = torch.rand((20_000, m.nodes.count), generator=torch.Generator().manual_seed(0))
        steps = step_variances(m.nodes, params, jump)
        jumped = steps == params.step[1]
        assert float(jumped.float().mean()) == pytest.approx(0.2, abs=0.01)
        assert float((jumped[:, 0] & jumped[:, 1]).float().mean()) == pytest.approx(both, abs=0.01)
        sampled = m.sample_trace(3, seed=0).node  # a sampled trace keeps the nodes
        assert sampled is None if node is None else np.array_equal(sampled, node)


def test_a_node_slowing_down_at_once_is_a_jump_not_four_stalls(trained):
    """Four workers of one node turn 2x slower in the same iteration. Per worker, a stall (3 %)
    explains it better than a jump (2 %, and wide); for the node, one jump beats four stalls
    (3 %^4), so only the node-aware model forecasts the four as slow after that iteration."""
    model = load_model(trained)
    x = np.exp(np.random.default_rng(5).normal(0, 0.05, (21, 8)))
    x[20, :4] *= 2.0
    ratio = {}
    for name, node in (("node", np.arange(8) // 4), ("alone", None)):
        m = RuntimeModel(model.config, 8, model.scale_s, node=node)
        m.load_state_dict(model.state_dict())
        with torch.no_grad():
            m.transition.jump_logit.fill_(math.log(0.02 / 0.98))
            m.transition.log_q_j.fill_(math.log(0.25))
            m.emitter.stall_logit.fill_(math.log(0.03 / 0.97))
            m.emitter.stall_shift.fill_(0.0)  # delta = softplus(0) = log 2
            m.emitter.stall_log_scale.fill_(math.log(0.3))
        pred = ModelPredictor(m, samples=4000, seed=0)
        for t in range(21):
            pred.observe(observation(t, x[t], 8, 0.0))
        median = np.median(pred.draws().numpy(), axis=0)
        ratio[name] = median[:4].mean() / median[4:].mean()
    assert ratio["node"] > 1.7 and ratio["alone"] < 1.3, ratio


def test_a_short_stall_goes_on_as_often_as_kappa_says(trained):
    """One worker runs 1.6x slower for one iteration, a short stall for the filter. The forecast
    of the next iteration keeps it slow when short stalls go on (kappa = 0.9, an Alibaba trace's
    repeated values) and does not when they never do (kappa ~ 0, the simulator's stalls)."""
    x = np.exp(np.random.default_rng(5).normal(0, 0.05, (21, 8)))
    x[20, 0] *= 1.6
    ratio = {}
    for kappa in (0.9, 1e-4):
        m = load_model(trained)
        with torch.no_grad():
            m.transition.jump_logit.fill_(math.log(1e-4))
            m.emitter.stall_logit.fill_(-12.0)  # no long stalls
            m.emitter.short_logit.fill_(math.log(0.03 / 0.97))
            m.emitter.short_shift.fill_(math.log(math.expm1(0.4)))  # delta_s = 0.4
            m.emitter.short_log_rate.fill_(math.log(10.0))
            m.emitter.short_stay_logit.fill_(math.log(kappa / (1 - kappa)))
        pred = ModelPredictor(m, samples=4000, seed=0)
        for t in range(21):
            pred.observe(observation(t, x[t] * m.scale_s, 8, 0.0))
        assert float(pred.state.p_b[0, 0]) > 0.9  # the filter reads a stall, not a new level
        median = np.median(pred.draws().numpy(), axis=0)
        ratio[kappa] = median[0] / np.median(median[1:])
    assert ratio[0.9] > 1.4 and ratio[1e-4] < 1.15, ratio


@pytest.mark.long  # torch.compile's first compilation, ~20 s cold: make test-long (CI runs it)
def test_compiled_filter_forecasts_as_the_eager_one(trained):
    """policies.compile: the filtering step and the draws through torch.compile give the eager
    forecast (to float rounding: the draws' random numbers are the same seed's), also with
    deterministic algorithms enforced as the trainer does."""
    model = load_model(trained)
    x = cluster(12, 8, seed=6)
    before = torch.get_deterministic_debug_mode()
    torch.set_deterministic_debug_mode("error")
    try:
        forecasts = []
        for compile in (False, True):
            pred = ModelPredictor(model, samples=64, seed=0)
            if compile:
                pred.compile()
            for t in range(12):
                pred.observe(observation(t, x[t], 6, 0.0))
            forecasts.append(pred.expected_order_stats())
    finally:
        torch.set_deterministic_debug_mode(before)
    np.testing.assert_allclose(forecasts[1], forecasts[0], rtol=1e-4)


def test_an_episode_is_shared_by_a_node_and_ends_for_its_cut_off_workers_too(trained):
    """A node's four workers 1.5x slower for three iterations: the node's episode is on, the
    other node's off, and the node's workers are forecast slow. Then two of them are back at the
    others' pace and two are cut off: their node-mates end the episode for them too, where a
    level jump of their own would have kept them slow (x > tau says little of a slow worker)."""
    model = load_model(trained)
    m = RuntimeModel(model.config, 8, model.scale_s, node=np.arange(8) // 4)
    m.load_state_dict(model.state_dict())
    with torch.no_grad():  # frequent, short episodes of a 1.5x slowdown; jumps rare
        m.transition.jump_logit.fill_(math.log(1e-3))
        m.transition.switch_logit.copy_(torch.tensor([0.02 / 0.3, 0.25 / 0.95]).logit())
        m.transition.episode_shift.fill_(math.log(math.expm1(math.log(1.5))))
        m.transition.episode_log_var.fill_(math.log(1e-3))
    pred = ModelPredictor(m, samples=4000, seed=0)
    x = np.exp(np.random.default_rng(6).normal(0, 0.03, (24, 8))) * m.scale_s
    x[20:23, :4] *= 1.5
    for t in range(23):
        pred.observe(observation(t, x[t], 8, 0.0))
    assert pred.state.p_c[0, 0] > 0.9 > 0.1 > pred.state.p_c[0, 1]
    slow = np.median(pred.draws().numpy(), axis=0)
    assert slow[:4].mean() > 1.3 * slow[4:].mean()
    seen = x[23].copy()  # workers 0 and 1 cut off when the other six are in
    seen[:2] = np.nan
    pred.observe(Observation(t=23, cutoff=6, runtimes=seen, cutoff_time=float(x[23, 2:].max())))
    assert pred.state.p_c[0, 0] < 0.1
    after = np.median(pred.draws().numpy(), axis=0)
    assert after[:2].mean() < 1.1 * after[2:].mean()


def test_an_episode_slows_a_nodes_workers_by_one_size(trained):
    """An episode's size delta_c + eps, eps ~ N(0, s_c^2), is one per node: node-mates' draws
    share it, other nodes' do not; without a node column every worker is its own node. Drawn
    per worker it spread a contended node's forecasts apart (the gap between its two slowest
    made cutting the slowest look worth it)."""
    model = load_model(trained)
    for node in (np.arange(8) // 4, None):
        m = RuntimeModel(model.config, 8, model.scale_s, node=node)
        m.load_state_dict(model.state_dict())
        with torch.no_grad():
            m.transition.episode_log_var.fill_(math.log(0.04))
            params = m.step_parameters()
            eps = torch.randn((20_000, m.nodes.count), generator=torch.Generator().manual_seed(0))
            levels = m.nodes.spread(episode_levels(params, eps)).numpy()
        assert levels.mean(0) == pytest.approx(float(params.episode[0]), abs=0.01)
        assert levels.std(0) == pytest.approx(0.2, abs=0.01)
        mates = np.corrcoef(levels[:, 0], levels[:, 1])[0, 1]
        assert mates == pytest.approx(0.0 if node is None else 1.0, abs=0.03)
        assert np.corrcoef(levels[:, 0], levels[:, 4])[0, 1] == pytest.approx(0.0, abs=0.03)
        state = m.initial_state(1)  # every node in an episode
        state = dataclasses.replace(state, p_c=torch.ones_like(state.p_c))
        with torch.no_grad():
            v = m.draws(state, m.noise(20_000, torch.Generator().manual_seed(1))).numpy()
        gap = np.corrcoef(v[:, 0], v[:, 1])[0, 1] - np.corrcoef(v[:, 0], v[:, 4])[0, 1]
        assert gap > 0.3 if node is not None else abs(gap) < 0.05


@pytest.mark.long  # torch.compile's first compilation, ~60 s cold: make test-long (CI runs it)
@pytest.mark.filterwarnings(f"ignore:{train_module.NON_LEAF_GRAD}:UserWarning")
def test_compiled_training_step_matches_the_eager_one():
    """model.compile: the ELBO through the torch.compile'd ``elbo_term`` has the eager value and
    gradient (to float rounding), censored observations included."""
    torch.manual_seed(0)
    cfg = tiny(compile=True)
    model = RuntimeModel(cfg, 6, node=np.arange(6) // 3)
    x = torch.as_tensor(cluster(5, 6, seed=4), dtype=torch.float32)[None].repeat(2, 1, 1)
    censored = x > x.median(-1, keepdim=True).values * 1.05
    results = []
    for term in (None, train_module.elbo_term(model, cfg)):
        model.zero_grad()
        value = model.elbo(x, censored, torch.Generator().manual_seed(1), term=term).sum()
        value.backward()
        results.append((float(value.detach()), [p.grad.clone() for p in model.parameters()]))
    assert results[1][0] == pytest.approx(results[0][0], rel=1e-5)
    for compiled, eager in zip(results[1][1], results[0][1], strict=True):
        torch.testing.assert_close(compiled, eager, rtol=1e-3, atol=1e-5)


def test_without_epochs_a_short_trace_gets_its_steps_in_more_passes(monkeypatch, tmp_path):
    """epochs null: the passes that make model.steps Adam steps. A 170-iteration trace in
    windows of 64 (stride 32: 4 windows, 2 batches of 2) needs 300 passes for 600 steps."""
    cfg = dataclasses.replace(BASE, epochs=None, steps=600, chunk=64, batch_size=2)
    assert train_module.planned_epochs(cfg, [170]) == 300
    assert train_module.planned_epochs(dataclasses.replace(cfg, epochs=7), [170]) == 7
    # several sequences (the prior's draws) share the steps' windows: 2 x 4 windows, 4 batches
    assert train_module.planned_epochs(cfg, [170, 170]) == 150
    assert train_module.planned_epochs(cfg, [170], steps=60) == 30
    steps = []
    real = torch.optim.Adam.step
    monkeypatch.setattr(torch.optim.Adam, "step", lambda self, *a, **k: (steps.append(1),
                                                                          real(self, *a, **k))[1])
    trace = from_arrays(np.random.default_rng(0).lognormal(0.0, 0.3, (40, 3)))
    small = tiny(epochs=None, steps=9, chunk=16, batch_size=2)
    train_module.train_model(trace, small, seed=0, out=tmp_path / "m.pt", progress=False)
    # 40 iterations: windows at stride 8 from a random phase, 3 or 4 of them, 2 steps a pass;
    # ceil(9 / 2) = 5 passes
    assert 8 <= len(steps) <= 10
