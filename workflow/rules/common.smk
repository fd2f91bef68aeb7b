# Paths and targets, built from the validated config. Every stage reads the resolved config
# that `resolved_config` writes, so each result records exactly what produced it.
from pathlib import Path

import yaml

EXP = config["experiment"]
RESULTS = f"results/{EXP}"
LOGS = f"logs/{EXP}"
FIGURES = f"figures/{EXP}"
CONFIG_FILE = f"{RESULTS}/config.yaml"
TRAIN = config["train"]


def traces_from(source):
    """Names of the traces gathered from `source` (a regex alternation for wildcard_constraints)."""
    names = [n for n, spec in config["traces"].items() if spec["source"] == source]
    return "|".join(names) if names else "(?!)"


def truth_input(trace):
    simulated = config["traces"][trace]["source"] == "simulate"
    return [f"{RESULTS}/traces/{trace}/trace.truth.npz"] if simulated else []


def throughput_policies():
    return ",".join(config["throughput"]["policies"])


def needs_model(policies):
    return any(p == "bdsgd" or p.endswith("-bdsgd") for p in policies)


def model_input(trace, policies):
    return [f"{RESULTS}/models/{trace}/model.pt"] if needs_model(policies) else []


def run_dir(task, policy, seed):
    return f"{RESULTS}/runs/{task}/{policy}/seed{seed}"


def run_targets():
    return [
        f"{run_dir(task, policy, seed)}/result.json"
        for task in TRAIN["tasks"]
        for policy in TRAIN["policies"]
        for seed in TRAIN["seeds"]
    ]


def figure_targets():
    names = ["time_to_accuracy.png", "cutoff_over_time.png", "throughput.png",
             "runtime_distributions.png", "model_predictions.png", "summary.csv",
             "throughput_summary.csv"]
    per_trace = [f"{FIGURES}/traces/{trace}_{kind}.png" for trace in config["traces"]
                 for kind in ("runtime_cdf", "heatmap", "cov")]
    return [f"{FIGURES}/{name}" for name in names] + per_trace


def all_targets():
    return figure_targets() + [f"{RESULTS}/models/{t}/evaluation.json" for t in config["traces"]]
