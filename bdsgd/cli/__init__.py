"""The ``bdsgd`` command: thin. It parses flags and calls the modules that do the work.

Every subcommand writes its outputs atomically, prints the values it derived, and on bad input
prints one line ``bdsgd: error: FILE: FIELD: MESSAGE`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import sys

from bdsgd.cli import commands, flags
from bdsgd.cluster.clock import LATE
from bdsgd.config import CENSORING, EMISSIONS
from bdsgd.config.validate import TASKS
from bdsgd.entry import reader_left, run_entry_point
from bdsgd.ladder import TRAINED
from bdsgd.policies import RULES, SPECS, VARIANTS


def _policy_help() -> str:
    """The policies the registry knows, each with what it needs."""
    def needs(s) -> str:
        if s.needs_model:
            return " (needs --model)"
        if s.needs_truth:
            return " (simulated traces: reads the truth beside the trace)"
        return " (a reference: knows the run-times)" if s.needs_future else ""

    names = [name + needs(s) for name, s in SPECS.items()]
    return ("comma-separated policies: " + ", ".join(names) + ", static-<p>pct (p %% of n as "
            "backups), async (a reference: asynchronous SGD), explore-<policy> (around any causal "
            "one)")


def _traces(sub) -> None:
    """bdsgd traces: gather, import, simulate, split, describe, plot and censor traces."""
    traces = sub.add_parser("traces", help="gather, import, simulate, split and describe traces")
    tsub = traces.add_subparsers(dest="traces_command", required=True, metavar="ACTION")
    _trace_sources(tsub)
    _trace_tools(tsub)


def _trace_sources(tsub) -> None:
    """The actions that make a trace: import, simulate, gather."""
    p = tsub.add_parser("import", help="convert a public trace to a bdsgd Parquet trace")
    p.add_argument("--format", required=True, choices=["csv", "alibaba-pai"],
                   help="csv: one row per iteration and worker, the columns iteration, worker "
                        "(integer labels, any values: every worker in every iteration), runtime_s "
                        "(seconds; if censored, a lower bound) and optionally censored (true: cut "
                        "off, its run-time known only to exceed runtime_s), node (integer: the "
                        "machine the worker runs on), compute_s and comm_s (the parts of "
                        "runtime_s); no other column. alibaba-pai: a cluster-trace-gpu-v2020 "
                        "mini-batch-time job file (,worker,gpu,time,batch_time_norm)")
    p.add_argument("input", metavar="IN", help="file to import")
    p.add_argument("output", metavar="OUT.parquet", help="trace to write")
    p.set_defaults(func=commands.cmd_traces_import)

    p = tsub.add_parser("simulate", help="draw a trace from the generative cluster simulator")
    p.add_argument("--config", required=True, help="experiment config (YAML) holding the trace spec")
    p.add_argument("--name", help="which trace of the config (default: its only simulated one)")
    p.add_argument("--seed", type=flags.seed, help="seed (default: the config's seed)")
    p.add_argument("--out", required=True, help="trace to write (a .truth.npz of the simulator's "
                                                "latent state is written beside it)")
    p.set_defaults(func=commands.cmd_traces_simulate)

    p = tsub.add_parser("gather", help="time real workers under torch.distributed (torchrun or srun)")
    p.add_argument("--config", required=True, help="experiment config (YAML) holding the trace spec")
    p.add_argument("--name", help="which trace of the config (default: its only gathered one)")
    p.add_argument("--data-dir", help="data sets root (default: the config's train.data_dir)")
    p.add_argument("--workers", type=flags.positive_int, help="override the number of workers")
    p.add_argument("--iterations", type=flags.positive_int, help="override the number of iterations")
    p.add_argument("--out", required=True, help="trace to write")
    p.set_defaults(func=commands.cmd_traces_gather)



def _trace_tools(tsub) -> None:
    """The actions on a trace: describe, plot, split, censor."""
    p = tsub.add_parser("describe", help="summary statistics of a trace")
    p.add_argument("trace", metavar="TRACE", help="trace (Parquet)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=commands.cmd_traces_describe)

    p = tsub.add_parser("plot", help="run-time CDFs, iteration x worker heat map, CoV over time")
    p.add_argument("trace", metavar="TRACE", help="trace (Parquet)")
    p.add_argument("--name", help="prefix of the figure files (default: the trace file's stem)")
    p.add_argument("--out", required=True, help="folder for <name>_runtime_cdf, <name>_heatmap "
                                                "and <name>_cov, each as .png and .pdf")
    p.add_argument("--note", default=None, help="a line printed over every figure (the "
                   "experiment's figure_note, e.g. that it is smoke scale); default: none")
    p.set_defaults(func=commands.cmd_traces_plot)

    p = tsub.add_parser("split", help="cut a trace in time into a training and a test part")
    p.add_argument("trace", metavar="TRACE", help="trace (Parquet)")
    p.add_argument("--train-fraction", type=flags.fraction, default=0.5,
                   help="fraction of iterations in the first (training) part")
    p.add_argument("--train", required=True, help="first part, written as a trace")
    p.add_argument("--test", required=True, help="second part, written as a trace")
    p.set_defaults(func=commands.cmd_traces_split)

    p = tsub.add_parser("censor", help="the trace as a server with backup workers records it: "
                        "each iteration's slowest run-times censored at the cutoff")
    p.add_argument("trace", metavar="TRACE", help="trace (Parquet)")
    p.add_argument("--backups", type=flags.positive_float, required=True,
                   help="backup workers b (as policies.static_backups: from 1 a count, below 1 "
                        "a fraction of n): the cutoff is x_(n - b)")
    p.add_argument("--out", required=True, help="censored trace to write")
    p.set_defaults(func=commands.cmd_traces_censor)


def _model(sub) -> None:
    """bdsgd model: the run-time model: train, prior, evaluate, sample."""
    model = sub.add_parser("model", help="train, evaluate and sample the BDSGD run-time model")
    msub = model.add_subparsers(dest="model_command", required=True, metavar="ACTION")

    p = msub.add_parser("train", help="fit the run-time model to a trace by maximising the ELBO")
    p.add_argument("trace", metavar="TRACE", help="training trace (Parquet)")
    p.add_argument("--out", required=True, help="model checkpoint to write (MODEL.pt)")
    p.add_argument("--config", help="experiment config; its model: section sets the architecture")
    p.add_argument("--epochs", type=flags.positive_int, help="override model.epochs (default: the config's; "
                   "when null, as many passes as model.steps Adam steps take)")
    p.add_argument("--seed", type=flags.seed, help="seed (default: the config's seed, else 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--trace-name", help="the trace's name in W&B (default: the file's stem)")
    p.add_argument("--paper", action="store_true", help="train Teng & Wood's model, the one "
                   "bdsgd-paper reads: Gaussian emission, censored run-times imputed "
                   "(policies.PAPER_MODEL over the config's model:)")
    p.add_argument("--censoring", choices=CENSORING,
                   help="override model.censoring: how censored run-times are scored")
    p.add_argument("--emission", choices=EMISSIONS,
                   help="override model.emission: the run-times' family given the state")
    p.add_argument("--prior", metavar="PRIOR.pt", help="start from this prior over clusters "
                   "('bdsgd model prior'): every parameter but the workers' identities, then "
                   "model.steps on the trace (default: from the initial values)")
    p.set_defaults(func=commands.cmd_model_train)

    p = msub.add_parser("prior", help="fit the prior over clusters: the run-time model on draws "
                        "of every simulator scenario, for 'model train --prior'")
    p.add_argument("--out", required=True, help="prior checkpoint to write (PRIOR.pt)")
    p.add_argument("--config", help="experiment config; its model: section sets the architecture "
                   "and the prior_* draws and steps")
    p.add_argument("--seed", type=flags.seed, help="seed (default: the config's seed, else 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=commands.cmd_model_prior)

    p = msub.add_parser("evaluate", help="held-out likelihood, interval coverage and policy throughput")
    p.add_argument("model", metavar="MODEL", help="model checkpoint")
    p.add_argument("trace", metavar="TRACE", help="held-out trace (Parquet)")
    p.add_argument("--json", metavar="OUT", help="write the full evaluation here")
    p.add_argument("--predictions", metavar="OUT.parquet",
                   help="write every held-out one-step prediction of every order statistic here")
    p.add_argument("--config", help="experiment config; sets the policy parameters and comm_s")
    p.add_argument("--rule", choices=RULES, default=None,
                   help="decision rule of the bdsgd policy (default: the config's policies.rule)")
    p.add_argument("--seed", type=flags.seed, default=0, help="seed of the predictive draws")
    p.set_defaults(func=commands.cmd_model_evaluate)

    p = msub.add_parser("sample", help="generate a synthetic trace from a trained model")
    p.add_argument("model", metavar="MODEL", help="model checkpoint")
    p.add_argument("--iterations", type=flags.positive_int, required=True, help="iterations to generate")
    p.add_argument("--seed", type=flags.seed, default=0, help="seed")
    p.add_argument("--out", required=True, help="trace to write")
    p.set_defaults(func=commands.cmd_model_sample)


def _throughput(sub) -> None:
    """bdsgd throughput: the throughput replay."""
    p = sub.add_parser("throughput", help="replay a trace under cutoff policies; throughput table")
    p.add_argument("trace", metavar="TRACE", help="trace to replay (Parquet, no censored values)")
    p.add_argument("--policies", required=True, help=_policy_help())
    p.add_argument("--model", help="run-time model checkpoint (needed by bdsgd)")
    p.add_argument("--paper-model", help="the paper's run-time model (needed by bdsgd-paper: "
                   "'bdsgd model train --paper')")
    p.add_argument("--rule", choices=[*RULES, "both"], default=None,
                   help="decision rule of the predictive policies (default: the config's policies.rule); "
                        "'both' reports each policy under each rule")
    p.add_argument("--comm-s", type=flags.non_negative_float, default=None,
                   help="communication time added to every iteration under network.topology "
                        "constant (default: the config's throughput.comm_s, else 0)")
    p.add_argument("--config", help="experiment config; its policies: section sets their parameters")
    p.add_argument("--seed", type=flags.seed, default=None, help="seed of randomised policies")
    p.add_argument("--json", required=True, help="throughput table to write (JSON)")
    p.add_argument("--decisions", help="per-iteration decisions to write (Parquet)")
    p.add_argument("--comm-sweep", metavar="CSV",
                   help="also replay every cutoff policy on networks from negligible to dominant "
                        "communication (throughput.comm_ratios; single, sharded server and ring) "
                        "and write the table (CSV)")
    p.add_argument("--period-sweep", metavar="CSV",
                   help="also replay throughput.period_policies deciding every k-th iteration, "
                        "for each k of throughput.decide_every, beside the best fixed cutoff in "
                        "hindsight, and write the table (CSV)")
    p.add_argument("--history", metavar="TRACE",
                   help="the same run's earlier iterations (e.g. the training part): policies "
                        "that learn from observations see them first, instead of starting cold")
    p.add_argument("--threads", type=flags.positive_int, help="torch threads of the replay, recorded "
                   "beside its decision times (default: the config's resources.throughput_threads, else 1)")
    p.add_argument("--late", choices=LATE,
                   help="override network.late: whether the workers a cutoff leaves out drop "
                        "their gradient or finish it (and show the server their run-time)")
    p.add_argument("--draw", type=int, default=0, metavar="D",
                   help="the cluster draw replayed: a recorded trace's draw D > 0 is the half of "
                        "it that starts at the fraction frac(D x 0.618) and wraps round (a "
                        "simulated trace's draws are traces of their own: replayed whole); "
                        "default 0")
    p.set_defaults(func=commands.cmd_throughput)


def _ladder(sub) -> None:
    """bdsgd ladder: the ladder from the paper's BDSGD to the project's."""
    p = sub.add_parser("ladder", help="replay the ladder from Teng & Wood's BDSGD to the "
                       "project's, one change a rung (bdsgd/ladder.py)")
    p.add_argument("trace", metavar="TRACE", help="trace to replay (Parquet, no censored values)")
    p.add_argument("--history", required=True, metavar="TRACE",
                   help="the trace's earlier iterations (its training part), seen first")
    p.add_argument("--config", required=True, help="the throughput stage's config: policies:, "
                   "network:")
    p.add_argument("--paper-model", dest="paper", required=True, metavar="MODEL.pt",
                   help="the paper's run-time model: bdsgd model train --paper")
    for kind, how in TRAINED.items():
        p.add_argument(f"--{kind}-model", dest=kind, required=True, metavar="MODEL.pt",
                       help=f"a run-time model trained on the history: bdsgd model train {how}")
    p.add_argument("--model", dest="model", required=True, metavar="MODEL.pt",
                   help="the workflow's run-time model (from the prior where model.prior)")
    p.add_argument("--json", required=True, help="the rungs' throughput table to write (JSON)")
    p.add_argument("--decisions", required=True,
                   help="every rung's per-iteration decisions to write (Parquet)")
    p.set_defaults(func=commands.cmd_ladder)


def _train(sub) -> None:
    """bdsgd train: one convergence run."""
    p = sub.add_parser("train", help="one convergence run on the virtual cluster")
    p.add_argument("--config", required=True, help="experiment config (YAML)")
    p.add_argument("--task", required=True, choices=TASKS,
                   help="data set and network")
    p.add_argument("--policy", required=True,
                   help="cutoff policy (see 'bdsgd throughput --help'), or a training mode: async "
                        "(each gradient applied on arrival) or cyclic (workers push their "
                        "accumulated gradients in turn, skipped while they have none); "
                        "<policy>+<variant> trains a cutoff policy with the train: keys of its "
                        f"variant ({', '.join(VARIANTS)}), an ablation arm")
    p.add_argument("--seed", type=flags.seed, required=True, help="seed of data order, init and policy")
    p.add_argument("--trace", required=True, help="trace whose run-times drive the virtual clock")
    p.add_argument("--model", help="run-time model checkpoint (needed by bdsgd)")
    p.add_argument("--paper-model", help="the paper's run-time model (needed by bdsgd-paper: "
                   "'bdsgd model train --paper')")
    p.add_argument("--history", metavar="TRACE",
                   help="the trace's earlier iterations (e.g. its training part): policies that "
                        "learn from observations see them first, instead of starting cold")
    p.add_argument("--out", required=True, help="run directory (metrics.parquet, result.json, "
                                                "checkpoint.pt)")
    p.set_defaults(func=commands.cmd_train)


def _pilot(sub) -> None:
    """bdsgd pilot: the pilot of a task's recipe."""
    p = sub.add_parser("pilot", help="can the task's recipe reach its target? sync runs at the "
                       "recipe's learning rate times each of pilot.lr_factors; an error if the "
                       "recipe's own does not")
    p.add_argument("--config", required=True, help="experiment config (YAML)")
    p.add_argument("--task", required=True, choices=TASKS, help="data set and network")
    p.add_argument("--trace", required=True, help="trace whose run-times drive the virtual clock")
    p.add_argument("--history", metavar="TRACE",
                   help="the trace's earlier iterations (its training part), as 'bdsgd train'")
    p.add_argument("--out", required=True,
                   help="pilot directory (pilot.json, and a run folder lr<factor>/ per rate)")
    p.add_argument("--source", help="the config file an error names (default: --config; the "
                   "workflow passes the user's, of which --config is a slice)")
    p.set_defaults(func=commands.cmd_pilot)


def _distributed(sub) -> None:
    """bdsgd distributed: real training on torch.distributed."""
    p = sub.add_parser("distributed", help="real training: a parameter server and N workers "
                                           "on torch.distributed, cutoffs from any causal policy")
    p.add_argument("--workers", type=flags.positive_int, required=True,
                   help="N worker processes (plus a server)")
    p.add_argument("--policy", required=True, help="cutoff policy (see 'bdsgd throughput --help')")
    p.add_argument("--iterations", type=flags.positive_int, required=True, help="iterations to train")
    p.add_argument("--task", default="digits", choices=TASKS, help="data set and network")
    p.add_argument("--config", help="experiment config: train: and policies: (default: defaults)")
    p.add_argument("--model", help="run-time model checkpoint (needed by bdsgd)")
    p.add_argument("--paper-model", help="the paper's run-time model (needed by bdsgd-paper: "
                   "'bdsgd model train --paper')")
    p.add_argument("--late", choices=LATE, default="abandon",
                   help="what a worker that missed the cutoff does: drop its work when new "
                        "parameters arrive, or finish it (the server records its run-time)")
    p.add_argument("--inject-straggler", metavar="WORKER:FACTOR",
                   type=flags.worker_pair("FACTOR", flags.positive_float),
                   help="worker WORKER (0-based) takes FACTOR times as long")
    p.add_argument("--kill-worker", metavar="WORKER:ITERATION",
                   type=flags.worker_pair("ITERATION", flags.non_negative_int),
                   help="worker WORKER SIGKILLs itself when iteration ITERATION starts")
    p.add_argument("--delay-s", type=flags.non_negative_float, default=0.0,
                   help="seconds added to every gradient (stands in for a bigger model)")
    p.add_argument("--extra-parameters", type=flags.non_negative_int, default=0, metavar="N",
                   help="zeros sent with every message (a bigger model's bytes)")
    p.add_argument("--delay-trace", metavar="TRACE",
                   help="run-times replayed inside the workers: worker w waits x[t mod T, w]")
    p.add_argument("--heartbeat-s", type=flags.positive_float, default=5.0,
                   help="a worker silent this long counts as dead")
    p.add_argument("--seed", type=flags.seed, default=0, help="seed of data order, init and policy")
    p.add_argument("--json", required=True,
                   help="result to write (JSON); the metrics, the recorded trace and the virtual "
                        "clock's replay of it go beside it")
    p.set_defaults(func=commands.cmd_distributed)


def _plan(sub) -> None:
    """bdsgd plan: the bill of a config."""
    p = sub.add_parser("plan", help="every job a config makes, its requests and its estimated "
                                    "GPU-hours, before you submit")
    p.add_argument("--config", required=True, help="experiment config (the one you will submit)")
    p.add_argument("--measure", action="store_true",
                   help="time each task's network on this machine, on the runs' device (--device) "
                        "instead of the documented seconds per sample")
    p.add_argument("--device", choices=["cpu", "cuda"],
                   help="the device the runs will train on (default: train.device; auto: cuda "
                        "where resources.train_gpus > 0)")
    p.add_argument("--json", help="also write the plan (JSON)")
    p.add_argument("--strict", action="store_true",
                   help="refuse (exit 2) a config with a trace x task cell whose hindsight "
                        "optimum is within 1%% of sync (no policy can be told apart there), or "
                        "whose tasks' data folders are missing under train.data_dir")
    p.set_defaults(func=commands.cmd_plan)


def _figures(sub) -> None:
    """bdsgd figures: the figures from stored results."""
    p = sub.add_parser("figures", help="every figure and summary.csv from stored results")
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="results/<experiment>")
    p.add_argument("--out", required=True, help="figure folder (figures/<experiment>)")
    p.add_argument("--draws", action="store_true",
                   help="draw only the throughput study over cluster draws (throughput.draws), "
                        "which reads the throughput replays alone")
    p.set_defaults(func=commands.cmd_figures)


# Each subcommand adds its parser (and its actions') to the command's, in the order --help lists them.
SUBCOMMANDS = (_traces, _model, _throughput, _ladder, _train, _pilot, _distributed, _plan, _figures)


def build_parser() -> argparse.ArgumentParser:
    parser = flags.Parser(
        prog="bdsgd", description="Straggler-aware synchronous distributed SGD experiments.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except flags.FlagError as exc:  # its one line is on stderr
        return exc.code
    try:
        code = run_entry_point(lambda: args.func(args))
        sys.stdout.flush()
    except BrokenPipeError:
        reader_left()
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
