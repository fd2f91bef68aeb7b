"""Policy variants (<policy>+<variant>, bdsgd.policies.VARIANTS): the registry, the config's
check, and runs that train with the variant's train: keys under the variant's own name."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from bdsgd.config import from_dict
from bdsgd.errors import UserError
from bdsgd.policies import VARIANTS, spec, variant
from bdsgd.policies.build import Inputs, build_policy
from bdsgd.training import run_spec, train_run
from tests.helpers import bdsgd_in_process, make_cfg, metrics, summary, tiny_config, write

X = np.random.default_rng(0).lognormal(size=(12, 4)) + 1.0


def test_a_variant_names_its_policy_and_train_keys():
    assert variant("bdsgd+progress") == ("bdsgd", {"objective": "progress"})
    assert variant("explore-ecdf+lr-sqrt") == ("explore-ecdf", {"lr_scaling": "sqrt"})
    assert variant("static-5pct+lr-none") == ("static-5pct", {"lr_scaling": "none"})
    assert variant("bdsgd") == ("bdsgd", {}) and variant("async") == ("async", {})
    assert spec("bdsgd-paper+progress") == spec("bdsgd-paper")


@pytest.mark.parametrize("name, why", [
    ("bdsgd+fast", "unknown variant 'fast'"),
    ("nope+progress", "unknown policy 'nope'"),
    ("static+progress", "predictive policy's cutoff only"),  # static's cutoff has no objective
    ("sync+lr-none", "sync applies all n gradients"),  # c = n: lr_scaling's factor is 1
    ("async+lr-none", "unknown policy 'async'"),  # a training mode has no cutoff
])
def test_an_unknown_or_idle_variant_is_refused(name, why):
    with pytest.raises(ValueError, match=why):
        spec(name)


@pytest.mark.parametrize("name", ["bdsgd+fast", "sync+lr-none", "static+progress", "bdsgd+"])
def test_the_config_refuses_it_in_one_line_naming_the_field(name):
    train = {**tiny_config()["train"], "policies": ["sync", name]}
    with pytest.raises(UserError) as err:
        from_dict(tiny_config(train=train))
    assert err.value.field == "train.policies.1" and "\n" not in str(err.value)


def test_the_variant_overrides_the_tasks_recipe():
    cfg = make_cfg(lr_scaling="sqrt", recipes={"digits": {"lr_scaling": "linear"}})
    assert cfg.for_task("digits").train.lr_scaling == "linear"
    assert cfg.for_task("digits", VARIANTS["lr-none"]).train.lr_scaling == "none"
    assert cfg.for_task("digits", VARIANTS["lr-sqrt"]).train.objective == "throughput"


def test_a_run_of_static_lr_none_trains_at_a_constant_rate(tmp_path):
    """static keeps c = 3 of 4: linear scaling steps at 3/4 of the rate, lr-none at all of it,
    each under its own name."""
    cfg, trace = make_cfg(static_backups=1, max_iterations=6, eval_every=6), write(tmp_path, X)
    runs = {p: train_run(run_spec(cfg, "digits", p, 0, trace, tmp_path / p))
            for p in ("static", "static+lr-none")}
    lr = cfg.train.learning_rate
    np.testing.assert_allclose(metrics(runs["static"])["lr"], 0.75 * lr)
    np.testing.assert_allclose(metrics(runs["static+lr-none"])["lr"], lr)
    assert summary(runs["static+lr-none"])["policy"] == "static+lr-none"


def test_a_run_of_a_progress_variant_optimises_progress(tmp_path):
    cfg, trace = make_cfg(max_iterations=6, eval_every=6), write(tmp_path, X)
    plain = summary(train_run(run_spec(cfg, "digits", "ecdf", 0, trace, tmp_path / "plain")))
    arm = summary(train_run(run_spec(cfg, "digits", "ecdf+progress", 0, trace, tmp_path / "arm")))
    assert plain["objective"] == "throughput" and arm["objective"] == "progress"
    assert arm["policy"] == "ecdf+progress" and arm["gradient_noise_scale"] is not None


def test_a_run_refuses_an_unknown_variant_naming_the_flag(tmp_path):
    with pytest.raises(UserError) as err:
        train_run(run_spec(make_cfg(), "digits", "ecdf+fast", 0, write(tmp_path, X), tmp_path / "run"))
    assert err.value.file == "--policy" and "unknown variant 'fast'" in str(err.value)


def test_the_train_command_runs_a_variant_from_its_stage_config(tmp_path, capsys):
    """``bdsgd train`` reads its config as stage train (bdsgd.config.stages) with the variant's keys."""
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "experiment": "v", "traces": {"t": {"source": "simulate"}},
        "policies": {"static_backups": 1},
        "train": {"trace": "t", "tasks": ["digits"], "max_iterations": 4, "eval_every": 4,
                  "batch_size": 8, "learning_rate": 0.1}}))
    trace = write(tmp_path, X)
    run = ["train", "--config", config, "--task", "digits", "--seed", 0, "--trace", trace, "--out"]
    done = bdsgd_in_process(capsys, *run, tmp_path / "arm", "--policy", "static+lr-none")
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(metrics(tmp_path / "arm")["lr"], 0.1)
    bad = bdsgd_in_process(capsys, *run, tmp_path / "bad", "--policy", "static+fast")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert bad.stderr.startswith("bdsgd: error: --policy: static+fast: unknown variant 'fast'")


def test_a_variant_outside_a_convergence_run_is_refused():
    """A throughput replay reads no train: keys: the variant would be the plain policy. A run
    resolves the variant into its config once (run_spec) and builds the plain policy on it."""
    with pytest.raises(UserError, match="an arm of the convergence runs"):
        build_policy("ecdf+progress", make_cfg(), seed=0, n_workers=4, inputs=Inputs())
    run = run_spec(make_cfg(), "digits", "ecdf+progress", 0, "t.parquet", "out")
    assert (run.base, run.policy, run.cfg.training().objective) == ("ecdf", "ecdf+progress",
                                                                    "progress")
    assert build_policy(run.base, run.cfg, seed=0, n_workers=4,
                        training=run.cfg.training()).objective == "progress"
