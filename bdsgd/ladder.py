"""The ladder: from Teng & Wood's BDSGD to the project's, one change a rung, replayed.

Each rung replays one policy on a trace's test part (``bdsgd.throughput.run_benchmark``, warmed
up on the training part) with the rung's run-time model and policy settings; a rung differs
from the one it is compared with (``RUNGS``' ``against``) by one change:

    paper        Teng & Wood's: Gaussian emission, censored run-times imputed from the
                 iteration's observed ones (in training and while serving), ratio rule, no
                 margin, the model alone, from the initial values, frozen (``bdsgd-paper``)
    gaussian     the paper's with the censored likelihood log P(x > tau) in place of imputation
    lognormal    the paper's with log-normal emission (still imputing)
    likelihood   log-normal and the censored likelihood
    rate         the rate rule argmax c - lambda E[x_(c)] in place of argmax c / E[x_(c)]
    margin       policies.min_gain
    averaging    the model averaged with the simple predictors (``bdsgd``, uncalibrated)
    calibration  the averaged forecast calibrated against the order statistics seen
                 (policies.calibrate)
    prior        the model trained from the prior over clusters (the workflow's model.pt)
    learning     learning while serving: ``bdsgd`` as the workflow runs it

``gaussian`` against ``likelihood`` is Gaussian against log-normal emission with everything
else equal (R3's question). The models: ``MODELS`` (what ``bdsgd model train`` makes each).
The figures pair each rung with the one it is compared with on the same iterations
(``bdsgd.figures.verdicts``).
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from bdsgd.config import Config
from bdsgd.outputs.io import write_json, write_with

FROZEN = {"online_every": 0}
PAPER_RULE = {"rule": "ratio", "min_gain": 0.0, **FROZEN}
# The models only the ladder reads, by kind (`bdsgd ladder --<kind>-model`, the workflow's
# ladder-<kind>.pt): how `bdsgd model train` makes each, on the trace alone (no prior). The
# ladder also reads the paper's model (--paper-model) and the workflow's own (--model).
TRAINED = {"gaussian": "--emission gaussian", "impute": "--censoring impute", "scratch": ""}
MODELS = ("paper", *TRAINED, "model")


@dataclasses.dataclass(frozen=True)
class Rung:
    """One rung: its change, the policy replayed, its model and policies: settings, and the rung
    it is compared with."""

    change: str
    policy: str
    model: str  # one of MODELS
    policies: dict
    against: str | None


RUNGS = {
    "paper": Rung("Teng & Wood's BDSGD", "bdsgd-paper", "paper", FROZEN, None),
    "gaussian": Rung("censored likelihood, Gaussian", "bdsgd-model", "gaussian", PAPER_RULE,
                     "paper"),
    "lognormal": Rung("log-normal, imputing", "bdsgd-model", "impute", PAPER_RULE, "paper"),
    "likelihood": Rung("+ censored likelihood", "bdsgd-model", "scratch", PAPER_RULE,
                       "lognormal"),
    "rate": Rung("+ rate rule", "bdsgd-model", "scratch", {"min_gain": 0.0, **FROZEN},
                 "likelihood"),
    "margin": Rung("+ margin", "bdsgd-model", "scratch", FROZEN, "rate"),
    "averaging": Rung("+ averaging", "bdsgd", "scratch", {"calibrate": False, **FROZEN},
                      "margin"),
    "calibration": Rung("+ calibration", "bdsgd", "scratch", FROZEN, "averaging"),
    "prior": Rung("+ prior", "bdsgd", "model", FROZEN, "calibration"),
    "learning": Rung("+ learning while serving", "bdsgd", "model", {}, "prior"),
}
# R3's Gaussian against log-normal emission, all else equal: (log-normal, Gaussian)
EMISSION = ("likelihood", "gaussian")


def run_ladder(cfg: Config, trace_path, history_path, models: dict[str, str], json_out,
               decisions_out) -> dict:
    """Replay every rung of ``RUNGS`` on ``trace_path`` (``models``: a path per one of
    ``MODELS``); write one row per rung (JSON: the rung's change, policy, compared rung, and the
    replay's throughput row) and every rung's decisions (Parquet, ``policy`` = the rung)."""
    import pandas as pd  # the CLI's parser reads MODELS: no pandas until a ladder runs

    from bdsgd.throughput import run_benchmark

    table, decisions = {}, []
    with tempfile.TemporaryDirectory(prefix="ladder_") as tmp:
        for order, (name, rung) in enumerate(RUNGS.items()):
            policies = dataclasses.replace(cfg.policies, **rung.policies)
            path = Path(tmp) / f"{name}.parquet"
            paper = rung.policy == "bdsgd-paper"
            result = run_benchmark(
                trace_path, [rung.policy], cfg=dataclasses.replace(cfg, policies=policies),
                history_path=history_path, decisions_out=path,
                **{"paper_model_path" if paper else "model_path": models[rung.model]})
            table[name] = {"order": order, "change": rung.change, "policy": rung.policy,
                           "against": rung.against, **result["policies"][rung.policy]}
            replay = pd.read_parquet(path)
            decisions.append(replay[replay["policy"] == rung.policy].assign(policy=name))
    out = {"rungs": table, "trace": result["trace"], "provenance": result["provenance"]}
    write_json(json_out, out)
    frame = pd.concat(decisions, ignore_index=True)
    write_with(decisions_out, lambda tmp: frame.to_parquet(tmp, index=False))
    return out
