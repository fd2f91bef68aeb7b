"""The prior over clusters (bdsgd/runtime_model/prior.py): fitted to draws of every simulator
scenario with generic workers, it starts a model of any size; ``bdsgd model prior`` and
``bdsgd model train --prior`` run it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import yaml

from bdsgd.cli import main
from bdsgd.runtime_model.checkpoint import load_model
from bdsgd.runtime_model.model import RuntimeModel
from bdsgd.runtime_model.prior import prior_traces, start_from_prior
from bdsgd.traces.io import write_trace
from bdsgd.traces.schema import from_arrays
from bdsgd.traces.simulate import SCENARIOS
from tests.helpers import bdsgd_in_process, tiny_config

MODEL = {"latent_dim": 4, "worker_dim": 4, "hidden_dim": 16, "chunk": 8, "samples": 16, "epochs": 2,
         "prior_workers": 4, "prior_iterations": 20, "prior_draws": 1, "prior_steps": 2}


@pytest.fixture(scope="module")
def prior(tmp_path_factory) -> tuple:
    """(the prior, its config file), by ``bdsgd model prior``."""
    folder = tmp_path_factory.mktemp("prior")
    config = folder / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config(model=MODEL)))
    out = folder / "prior.pt"
    assert main(["model", "prior", "--config", str(config), "--out", str(out), "--quiet"]) == 0
    return out, config


def test_the_prior_draws_every_scenario_at_its_size():
    from bdsgd.config import default_config

    cfg = dataclasses.replace(default_config().model, prior_workers=6, prior_iterations=12,
                              prior_draws=2)
    traces = prior_traces(cfg, seed=3)
    assert sorted({t.meta["scenario"] for t in traces}) == sorted(SCENARIOS)
    assert len(traces) == 2 * len(SCENARIOS)
    assert all(t.runtimes.shape == (12, 6) for t in traces)
    # each draw its own cluster
    assert len({float(t.runtimes.sum()) for t in traces}) == len(traces)


def test_the_prior_has_generic_workers(prior):
    model = load_model(prior[0])
    assert model.n_workers == MODEL["prior_workers"]
    assert torch.equal(model.embedding, torch.zeros_like(model.embedding))


def test_a_model_of_another_size_starts_from_the_prior(prior):
    """Every parameter but the identities is the prior's; the identities start generic."""
    source = load_model(prior[0])
    model = RuntimeModel(source.config, 7, 2.0)
    named = start_from_prior(model, prior[0])
    assert named["path"] == str(prior[0]) and len(named["sha256"]) == 64
    theirs = source.state_dict()
    for name, value in model.state_dict().items():
        if name == "embedding":
            assert value.shape == (7, source.config.worker_dim) and not value.any()
        else:
            assert torch.equal(value, theirs[name]), name


def test_a_prior_of_another_architecture_is_one_line_naming_it(prior, tmp_path, capsys):
    trace = write_trace(from_arrays(np.random.default_rng(0).lognormal(size=(30, 3))),
                        tmp_path / "t.parquet")
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_config(model={**MODEL, "hidden_dim": 8})))
    out = tmp_path / "m.pt"
    run = bdsgd_in_process(capsys, "model", "train", trace, "--config", config, "--out", out,
                           "--prior", prior[0], "--quiet")
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert str(prior[0]) in run.stderr and "config.hidden_dim" in run.stderr
    assert not out.exists()


def test_model_train_from_the_prior(prior, tmp_path, capsys):
    """A trace of 5 workers (the prior's draws had 4): trained from the prior, named in the
    checkpoint; the prior is an input the output may not overwrite."""
    trace = write_trace(from_arrays(np.random.default_rng(1).lognormal(size=(30, 5))),
                        tmp_path / "t.parquet")
    out = tmp_path / "m.pt"
    run = bdsgd_in_process(capsys, "model", "train", trace, "--config", prior[1], "--out", out,
                           "--prior", prior[0], "--quiet")
    assert run.returncode == 0, run.stderr
    assert torch.load(out, weights_only=True)["prior"]["path"] == str(prior[0])
    assert load_model(out).n_workers == 5
    run = bdsgd_in_process(capsys, "model", "train", trace, "--config", prior[1],
                           "--out", prior[0], "--prior", prior[0], "--quiet")
    assert run.returncode == 2 and "--out" in run.stderr


def test_a_prior_precision_holds_the_fit_near_the_prior(prior, tmp_path):
    """model.prior_precision: training is MAP under N(prior, 1 / precision). A strong prior
    keeps the shared parameters near the prior's values where the plain fine-tuning moves them,
    and the workers' identities (no prior on them) are still learnt; the penalty is zero at
    the start and grows with the distance."""
    from bdsgd.runtime_model.train import prior_penalty, train_model

    source = load_model(prior[0])
    trace = from_arrays(np.random.default_rng(2).lognormal(0.0, 0.4, size=(40, 5)))
    moved = {}
    for precision in (0.0, 1e6):
        cfg = dataclasses.replace(source.config, epochs=3, prior_precision=precision)
        out = train_model(trace, cfg, 0, tmp_path / f"m{precision}.pt", progress=False,
                          prior=prior[0])
        model, theirs = load_model(out), source.state_dict()
        moved[precision] = sum(float((p - theirs[name]).abs().sum())
                               for name, p in model.state_dict().items() if name != "embedding")
        assert model.embedding.abs().sum() > 0  # the identities learn either way
    # Adam's steps are lr-sized even at the penalty's minimum: a strong prior leaves that jitter
    assert moved[1e6] < 0.3 * moved[0.0], moved

    model = RuntimeModel(source.config, 5)
    start_from_prior(model, prior[0])
    penalty = prior_penalty(model, 4.0, observations=200)
    assert penalty().item() == 0.0
    with torch.no_grad():
        model.transition.rho_logit.add_(1.0)  # one unit away: 4 / (2 * 200) per observation
        model.embedding.add_(1.0)  # no prior on the identities
    assert penalty().item() == pytest.approx(4.0 / 400)
