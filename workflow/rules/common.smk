# Paths, wildcards, targets and each stage's own config, built from the validated config.
#
# Every path is bdsgd.layout's (PATHS: results/, logs/ and figures/<experiment>/), the one home
# that `bdsgd figures` reads the results back with too.
#
# A stage does not read the whole config: rule stage_config (config.smk) writes, per stage and
# instance, results/<experiment>/config/<rule>/<name>.yaml holding only the keys that stage's
# command reads, as bdsgd.config.stages.STAGE_READS declares them (config_slice below). The text is the
# rule's params, so Snakemake rewrites a file, and reruns what reads it, only when its slice
# changes: one more seed or trace, a new wandb.mode or train.learning_rate leaves the traces, the
# run-time models and the throughput replays alone. The command loads its file as its stage
# (`bdsgd.config.stages.load_stage_config(path, stage)`), on which reading a key the stage does not
# declare is an error, not the schema's default.
import os
import re
import shlex
import sys
from pathlib import Path

import yaml

from bdsgd.cluster.clock import LATE
from bdsgd.config import CENSORING, GatherConfig, from_dict
from bdsgd.ladder import TRAINED
from bdsgd.errors import UserError
from bdsgd.plan import SECONDS_PER_SAMPLE, bill_device
from bdsgd.plan.preflight import check, pilot_traces
from bdsgd.plan.regime import refuse_ties
from bdsgd.config.stages import STAGE_READS, slice_keys
from bdsgd.figures import DRAW_FIGURES as DRAW_FIGURE_TABLE, FIGURES as FIGURE_TABLE, figure_files
from bdsgd.layout import DRAW, Layout, drawn_from
from bdsgd.traces import TRACE_FIGURES
from bdsgd.policies import model_files, spec as policy_spec
from bdsgd.cluster.schedules import MODES

EXP = config["experiment"]
PATHS = Layout.of(EXP)
CFG = from_dict(config, CONFIG_FILE)  # typed: what bdsgd reads of it; errors name the user's file
TRAIN = config["train"]
TRAIN_TRACES = CFG.train_traces()
PILOT_TRACES = pilot_traces(CFG) if CFG.pilot.enabled else {}  # trace -> its pilot's trace
RES = config["resources"]
ABLATIONS = config["throughput"]["ablations"]
DIST = config["distributed"]["jobs"]
# The rules' conda environment (workflow/envs/bdsgd.yaml) installs bdsgd from this checkout in
# its post-deploy script, which Snakemake runs from a copy in .snakemake/conda/: the checkout's
# path reaches the script from here, as Snakemake's processes pass their environment on.
os.environ.update(BDSGD_PROJECT=workflow.basedir)
# The user's config file, which a job's error names where its own file is a slice of it (the pilot).
os.environ.update(BDSGD_CONFIG_SOURCE=CONFIG_FILE)
# The rules that read a config file of their own: every stage of bdsgd.config.stages.STAGE_READS.
STAGES = tuple(STAGE_READS)


# What the config says that can be checked against its traces, data and cluster, before the
# first job runs (a dry run checks nothing: onstart runs only when jobs will); a `strict:` config
# also refuses a cell that cannot separate the policies, as `bdsgd plan --strict` (bdsgd.plan.regime).
onstart:
    try:
        check(CFG)
        refuse_ties(CFG, SECONDS_PER_SAMPLE[bill_device(CFG, None)])
    except UserError as exc:
        sys.exit(f"bdsgd: error: {exc}")


# -------------------------------------------------------------------------- wildcards
def one_of(names):
    """A regex of exactly these names, for wildcard_constraints (the Snakefile's, and a rule's
    own), none: it matches nothing."""
    return "|".join(re.escape(str(name)) for name in names) or "(?!)"


# ----------------------------------------------------------------------------- traces
def traces_from(*sources):
    """Names of the traces of these sources (a regex alternation for wildcard_constraints); of
    simulated traces, their clusters drawn for other run seeds too (bdsgd.layout.cluster_draw:
    <trace>/draw<s>, made, split and modelled by the same rules)."""
    names = one_of(n for n, spec in config["traces"].items() if spec["source"] in sources)
    if "simulate" not in sources:
        return names
    return f"(?:{names})(?:{re.escape(DRAW)}[1-9][0-9]*)?"


def spec_of(trace):
    """The config of a trace, or of the trace a cluster was drawn from."""
    return config["traces"][drawn_from(trace)[0]]


def gather_workers(trace):
    """A gathered trace's worker processes (its gather: block may be left out: the defaults)."""
    return GatherConfig(**config["traces"][trace].get("gather", {})).workers


def simulated(trace):
    return spec_of(trace)["source"] == "simulate"


# ---------------------------------------------------------------------------- policies
# What a policy needs comes from the policy registry (bdsgd.policies.spec) and nowhere else.
# async and cyclic are training modes, not cutoff policies: they need nothing.
def policy_needs(policies, need):
    return any(getattr(policy_spec(p), need) for p in policies if p not in MODES)


def model_input(trace, policies, file="model.pt"):
    """The run-time model of the trace (model.pt), or the paper's (paper.pt), if the policies
    read it (bdsgd.policies.model_files)."""
    return [PATHS.model(trace, file)] if file in model_files(policies) else []


def model_flags(input):
    """The run-time model flags of a rule whose inputs model and paper_model are model_input's."""
    return " ".join([*(f"--model {m}" for m in input.model),
                     *(f"--paper-model {m}" for m in input.paper_model)])


def prior_input():
    """The prior over clusters a trace's model starts from, where model.prior is on."""
    return [PATHS.prior()] if CFG.model.prior else []


def prior_flag(input):
    """bdsgd model train's --prior, of a rule whose input prior is prior_input's."""
    return " ".join(f"--prior {p}" for p in input.prior)


def truth_input(trace, policies):
    """The simulator's truth beside the test part, for the policies that read it (bayes)."""
    if simulated(trace) and policy_needs(policies, "needs_truth"):
        return [PATHS.truth(trace, "test")]
    return []


DRAWN = f"{{trace}}{DRAW}{{draw}}"  # a throughput draw's folder (rule throughput_draw)


def drawn(wc):
    """The trace a throughput draw replays: a simulated trace's cluster drawn for it, a recorded
    trace itself (started elsewhere: bdsgd throughput --draw)."""
    return CFG.cluster_of(wc.trace, int(wc.draw))


def draw_targets():
    """Every trace's replays on its cluster draws 1 .. throughput.draws - 1 (draw 0: throughput)."""
    return [PATHS.throughput(DRAWN.format(trace=trace, draw=draw)) for trace in config["traces"]
            for draw in range(1, config["throughput"]["draws"])]


def throughput_policies():
    return ",".join(config["throughput"]["policies"])


# --------------------------------------------------------------------- stage configs
def trace_spec(trace):
    """What makes a trace: its source and that source's settings (train_fraction is not here:
    only split_trace reads it, as a param)."""
    spec = config["traces"][trace]
    keys = {"simulate": ["simulate"], "gather": ["gather"], "import": ["path", "format"]}
    return {"source": spec["source"],
            **{k: spec[k] for k in keys[spec["source"]] if k in spec}}


def train_of(task, trace):
    """train: as one convergence run of `task` on `trace` sees it: its task's and trace's alone
    (trace, tasks, target_accuracy, recipes; the lists of policies and seeds are no stage's read: a run
    gets its task, policy and seed on the command line, so a new one reruns no other)."""
    targets, recipes = TRAIN["target_accuracy"], TRAIN["recipes"]
    return {**TRAIN, "trace": trace, "tasks": [task],
            # no target for the task: an empty table, so the run fails as with the whole config
            "target_accuracy": {task: targets[task]} if task in targets else {},
            "recipes": {task: recipes[task]} if task in recipes else {}}


RUN_CONFIG = "{task}@{trace}"  # the name of a convergence run's config file (stage train)


def config_slice(stage, name):
    """The config file of stage `stage` (a rule) run for `name` (a trace; <task>@<trace> for
    train and pilot, RUN_CONFIG; a job for distributed, whose policy reads the first train trace's model):
    exactly what bdsgd.config.stages.STAGE_READS declares its command reads, less
    the flags its rule passes instead (STAGE_FLAGS), and of each section the instance's part (the
    trace it makes or replays, trace_spec; of train, its task's, train_of).

    The stages that log to W&B read wandb:, so a new wandb: setting reruns them: their W&B runs
    are part of what they make.
    """
    if stage not in STAGES:
        raise ValueError(f"no config file for stage {stage!r}; stages: {STAGES}")
    if stage == "train_prior":  # reads no trace (the simulator's scenarios are its data): its
        task, trace = None, min(config["traces"])  # file holds one, as every config does
    elif stage in ("train", "pilot"):
        task, trace = name.split("@")
    elif stage == "distributed":
        task, trace = DIST[name]["task"], TRAIN_TRACES[0]
    else:
        task, trace = None, name
    whole = {**config, "experiment": EXP, "traces": {trace: trace_spec(trace)},
             "train": TRAIN if task is None else train_of(task, trace)}
    out = {}
    for key in slice_keys(stage):
        section, _, sub = key.partition(".")
        if not sub:
            out[section] = whole[section]
        elif sub in whole[section]:
            out.setdefault(section, {})[sub] = whole[section][sub]
    return yaml.safe_dump(out, sort_keys=True)


# ------------------------------------------------------------------------------ runs
def cluster(wc):
    """The trace, or the cluster drawn from it for the run's seed, that a run replays."""
    return CFG.cluster_of(wc.trace, int(wc.seed))


def pilot_input(wc):
    """The pilot a convergence run waits for: its task's on its trace's cluster size."""
    return [PATHS.pilot(PILOT_TRACES[wc.trace], wc.task)] if wc.trace in PILOT_TRACES else []


def run_targets():
    """Every run of every trace, task, policy and seed; a policy that reads the simulator's
    truth (bayes) on the simulated traces only."""
    return [
        PATHS.run("result.json", trace, task, policy, seed)
        for trace in TRAIN_TRACES
        for task in TRAIN["tasks"]
        for policy in TRAIN["policies"]
        if simulated(trace) or not policy_needs([policy], "needs_truth")
        for seed in TRAIN["seeds"]
    ]


# --------------------------------------------------------------------------- figures
# The figure list is bdsgd.figures.FIGURES (what `bdsgd figures` draws) and
# bdsgd.traces.TRACE_FIGURES (what `bdsgd traces plot` draws per trace): name -> (file, caption
# in workflow/report/, category).
# `snakemake --report` shows the categories sorted by name: numbered, they follow the DAG's stages,
# the summary tables last. A category not listed here stops the workflow at parse time.
REPORT_CATEGORIES = ("Reviewer questions", "Traces", "Run-time model", "Policies", "Convergence",
                     "Tables")


def report_category(category):
    return f"{REPORT_CATEGORIES.index(category) + 1}. {category}"


def report_outputs(table, path, subcategory):
    """Every file a job writes for a figure table (name -> (file, caption, category)), at
    path(file). The listed file is a report entry; a figure's other formats (its PDF, as
    <name>_pdf) are plain outputs beside it (bdsgd.plotting saves every figure in each)."""
    outputs = {}
    for name, (file, caption, category) in table.items():
        outputs[name] = report(path(file), caption=f"../report/{caption}",
                               category=report_category(category), subcategory=subcategory(category))
        for other in figure_files(file)[1:]:
            outputs[f"{name}_{other.rpartition('.')[2]}"] = path(other)
    return outputs


def figure_outputs():
    """Beside the per-trace figures (a subcategory each), a figure of every trace is under
    "all traces"."""
    return report_outputs(FIGURE_TABLE, PATHS.figure,
                          lambda category: "all traces" if category == "Traces" else None)


def draw_figure_outputs():
    return report_outputs(DRAW_FIGURE_TABLE, PATHS.figure, lambda category: None)


def note_flag():
    """The trace figures' --note: the config's figure_note, quoted for the shell (none: no flag)."""
    note = config.get("figure_note")
    return f"--note {shlex.quote(note)}" if note else ""


def trace_figure_outputs():
    return report_outputs(TRACE_FIGURES, PATHS.trace_figure, lambda category: "{trace}")


def ablation_outputs():
    """The replay ablations' tables and decisions (throughput.ablations), every trace's, the
    ladder's (bdsgd.ladder) among them."""
    arms = [f"censored-{mode}" for mode in CENSORING] + [f"late-{late}" for late in LATE] + [
        "ladder"]
    return [PATHS.throughput(trace, f"{arm}.{ext}") for trace in ABLATIONS["traces"]
            for arm in arms for ext in ("json", "parquet")]


def figure_targets():
    tables = [PATHS.figure(out) for table in (FIGURE_TABLE, DRAW_FIGURE_TABLE)
              for file, _, _ in table.values() for out in figure_files(file)]
    per_trace = [PATHS.trace_figure(out) for trace in config["traces"]
                 for file, _, _ in TRACE_FIGURES.values()
                 for out in figure_files(file.format(trace=trace))]
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
    evaluations = [PATHS.model(t, "evaluation.json") for t in config["traces"]]
    distributed = [PATHS.distributed(job) for job in DIST]
    return figure_targets() + evaluations + distributed + [PATHS.config()]
