# Paths, targets and each stage's own config, built from the validated config.
#
# A stage does not read the whole config: rule stage_config writes, per stage and instance,
# results/<experiment>/config/<rule>/<name>.yaml holding only the keys that stage's command
# reads (config_slice below). The text is the rule's params, so Snakemake rewrites a file, and
# reruns what reads it, only when its slice changes: one more seed or trace, a new wandb.mode or
# train.learning_rate leaves the traces, the run-time models and the throughput replays alone.
# `bdsgd.config.load_config` fills every key a slice leaves out with the schema's default, and
# the stage never reads those.
import os
from pathlib import Path

import yaml

from bdsgd.config import GatherConfig
from bdsgd.figures import FIGURES as FIGURE_TABLE, figure_files
from bdsgd.traces import TRACE_FIGURES
from bdsgd.policies import MODES, spec as policy_spec

EXP = config["experiment"]
RESULTS = f"results/{EXP}"
LOGS = f"logs/{EXP}"
FIG_DIR = f"figures/{EXP}"
CONFIG_FILE = f"{RESULTS}/config.yaml"  # the whole resolved config, for the record only
TRAIN = config["train"]
RES = config["resources"]
DIST = config["distributed"]["jobs"]
# The rules' conda environment (workflow/envs/bdsgd.yaml) installs bdsgd from this checkout in
# its post-deploy script, which Snakemake runs from a copy in .snakemake/conda/: the checkout's
# path reaches the script from here, as Snakemake's processes pass their environment on.
os.environ.update(BDSGD_PROJECT=workflow.basedir)


# ----------------------------------------------------------------------------- traces
def traces_from(*sources):
    """Names of the traces of these sources (a regex alternation for wildcard_constraints)."""
    names = [n for n, spec in config["traces"].items() if spec["source"] in sources]
    return "|".join(names) if names else "(?!)"


def gather_workers(trace):
    """A gathered trace's worker processes (its gather: block may be left out: the defaults)."""
    return GatherConfig(**config["traces"][trace].get("gather", {})).workers


def simulated(trace):
    return config["traces"][trace]["source"] == "simulate"


# ---------------------------------------------------------------------------- policies
# What a policy needs comes from the policy registry (bdsgd.policies.spec) and nowhere else.
# async and cyclic are training modes, not cutoff policies: they need nothing.
def policy_needs(policies, need):
    return any(getattr(policy_spec(p), need) for p in policies if p not in MODES)


def model_input(trace, policies):
    return [f"{RESULTS}/models/{trace}/model.pt"] if policy_needs(policies, "needs_model") else []


def truth_input(trace, policies):
    """The simulator's truth beside the test part, for the policies that read it (bayes)."""
    if simulated(trace) and policy_needs(policies, "needs_truth"):
        return [f"{RESULTS}/traces/{trace}/test.truth.npz"]
    return []


def throughput_policies():
    return ",".join(config["throughput"]["policies"])


# --------------------------------------------------------------------- stage configs
# The rules that read a config file of their own (config_slice says what each holds).
STAGES = ("simulate_trace", "gather_trace", "train_model", "evaluate_model", "throughput", "train",
          "distributed")


def stage_config(stage, name):
    """The config file of one stage instance (rule stage_config writes it)."""
    return f"{RESULTS}/config/{stage}/{name}.yaml"


def trace_spec(trace):
    """What makes a trace: its source and that source's settings (train_fraction is not here:
    only split_trace reads it, as a param)."""
    spec = config["traces"][trace]
    keys = {"simulate": ["simulate"], "gather": ["gather"], "import": ["path", "format"]}
    return {"source": spec["source"],
            **{k: spec[k] for k in keys[spec["source"]] if k in spec}}


def train_spec(task):
    """What one convergence run of `task` reads of train: (not tasks, policies or seeds: a run
    gets its task, policy and seed on the command line, so a new one reruns no other)."""
    unread = ("tasks", "policies", "seeds", "target_accuracy")
    targets = TRAIN["target_accuracy"]
    return {**{k: v for k, v in TRAIN.items() if k not in unread}, "tasks": [task],
            # no target for the task: an empty table, so the run fails as with the whole config
            "target_accuracy": {task: targets[task]} if task in targets else {}}


def config_slice(stage, name):
    """The keys that stage `stage` (a rule name) reads when it runs for `name` (a trace, or a
    task for train), that is, what the bdsgd command it calls reads:

      simulate_trace, gather_trace  experiment, seed, the trace's spec
      train_model                   ... and model:, wandb:
      evaluate_model                experiment, the trace, policies:, throughput.comm_s
      throughput                    ... and seed (of the randomised policies)
      train                         experiment, the trace it replays, policies:, throughput.comm_s,
                                    train: (see train_spec), wandb:
      distributed                   experiment, train.trace, policies:, train: of its job's task,
                                    wandb:

    The stages that log to W&B read wandb:, so a new wandb: setting reruns them: their W&B runs
    are part of what they make.
    """
    if stage not in STAGES:
        raise ValueError(f"no config file for stage {stage!r}; stages: {STAGES}")
    trace = TRAIN["trace"] if stage in ("train", "distributed") else name
    out = {"experiment": EXP, "traces": {trace: trace_spec(trace)}}
    if stage in ("simulate_trace", "gather_trace", "train_model", "throughput"):
        out["seed"] = config["seed"]
    if stage == "train_model":
        out["model"] = config["model"]
    if stage in ("train_model", "train", "distributed"):
        out["wandb"] = config["wandb"]
    if stage in ("evaluate_model", "throughput", "train"):
        out["policies"] = config["policies"]
        out["throughput"] = {"comm_s": config["throughput"]["comm_s"]}
    if stage == "train":
        out["train"] = train_spec(name)
    if stage == "distributed":
        out["policies"] = config["policies"]
        out["train"] = train_spec(DIST[name]["task"])
    return yaml.safe_dump(out, sort_keys=True)


# ------------------------------------------------------------------------------ runs
def run_dir(task, policy, seed):
    return f"{RESULTS}/runs/{task}/{policy}/seed{seed}"


def run_targets():
    return [
        f"{run_dir(task, policy, seed)}/result.json"
        for task in TRAIN["tasks"]
        for policy in TRAIN["policies"]
        for seed in TRAIN["seeds"]
    ]


# --------------------------------------------------------------------------- figures
# The figure list is bdsgd.figures.FIGURES (what `bdsgd figures` draws) and
# bdsgd.traces.TRACE_FIGURES (what `bdsgd traces plot` draws per trace): name -> (file, caption
# in workflow/report/, category).
# `snakemake --report` shows the categories sorted by name: numbered, they follow the DAG's stages,
# the summary tables last. A category not listed here stops the workflow at parse time.
REPORT_CATEGORIES = ("Traces", "Run-time model", "Policies", "Convergence", "Tables")


def report_category(category):
    return f"{REPORT_CATEGORIES.index(category) + 1}. {category}"


def figure_outputs():
    """Every file the figures job writes. The listed file is a report entry; a figure's other
    formats (its PDF, as <name>_pdf) are plain outputs beside it. Beside the per-trace figures
    (a subcategory each), a figure of every trace is under "all traces"."""
    outputs = {}
    for name, (file, caption, category) in FIGURE_TABLE.items():
        outputs[name] = report(f"{FIG_DIR}/{file}", caption=f"../report/{caption}",
                               category=report_category(category),
                               subcategory="all traces" if category == "Traces" else None)
        for other in figure_files(file)[1:]:
            outputs[f"{name}_{other.rpartition('.')[2]}"] = f"{FIG_DIR}/{other}"
    return outputs


def trace_figure_outputs():
    return {
        name: report(f"{FIG_DIR}/traces/{file}", caption=f"../report/{caption}",
                     category=report_category(category), subcategory="{trace}")
        for name, (file, caption, category) in TRACE_FIGURES.items()
    }


def figure_targets():
    tables = [f"{FIG_DIR}/{out}" for file, _, _ in FIGURE_TABLE.values()
              for out in figure_files(file)]
    per_trace = [f"{FIG_DIR}/traces/{file.format(trace=trace)}" for trace in config["traces"]
                 for file, _, _ in TRACE_FIGURES.values()]
    return tables + per_trace


# ------------------------------------------------------------------------ distributed
def distributed_flags(job):
    """The command-line flags of one distributed job (the config file holds the rest)."""
    spec = DIST[job]
    flags = [f"--{key.replace('_', '-')} {spec[key]}" for key in
             ("workers", "policy", "iterations", "task", "late", "delay_s", "heartbeat_s", "seed")]
    if spec.get("inject_straggler"):
        flags.append(f"--inject-straggler {spec['inject_straggler']}")
    return " ".join(flags)


def all_targets():
    evaluations = [f"{RESULTS}/models/{t}/evaluation.json" for t in config["traces"]]
    distributed = [f"{RESULTS}/distributed/{job}/result.json" for job in DIST]
    return figure_targets() + evaluations + distributed + [CONFIG_FILE]
