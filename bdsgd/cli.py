"""The ``bdsgd`` command: thin. It parses flags and calls the modules that do the work.

Every subcommand writes its outputs atomically, prints the values it derived, and on bad input
prints one line ``bdsgd: error: FILE: FIELD: MESSAGE`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bdsgd import flags
from bdsgd.config import TASKS
from bdsgd.errors import UserError, reader_left, run_entry_point
from bdsgd.io import check_output
from bdsgd.policies import RULES, SPECS


def _policy_help() -> str:
    """The policies the registry knows, each with what it needs."""
    def needs(s) -> str:
        if s.needs_model:
            return " (needs --model)"
        if s.needs_truth:
            return " (simulated traces: reads the truth beside the trace)"
        return " (a reference: knows the run-times)" if s.needs_future else ""

    names = [name + needs(s) for name, s in SPECS.items()]
    return ("comma-separated policies: " + ", ".join(names) + ", async (a reference: asynchronous "
            "SGD), explore-<policy> (around any causal one)")


def _config_name(cfg, name: str | None, source: str | None = None) -> str:
    """The trace spec to use: the one named, or the only one (of that source) in the config."""
    if name is not None:
        spec = cfg.trace(name)
        if source is not None and spec.source != source:
            raise UserError(cfg.source, f"traces.{name}.source",
                            f"is {spec.source!r}; this command needs a {source!r} trace")
        return name
    names = [k for k, spec in cfg.traces.items() if source is None or spec.source == source]
    if len(names) != 1:
        raise UserError(cfg.source, "traces", f"config has {len(names)} {source or ''} traces "
                        f"{names}; pick one with --name")
    return names[0]


def cmd_traces_import(args):
    from bdsgd.traces.formats import import_trace
    from bdsgd.traces.io import write_trace

    check_output("OUT", args.output, inputs=(args.input,))
    trace = import_trace(args.input, args.format)
    write_trace(trace, args.output)
    print(f"imported {args.input} ({args.format}): {trace.n_iterations} iterations x "
          f"{trace.n_workers} workers -> {args.output}")


def cmd_traces_simulate(args):
    from bdsgd.provenance import stamp
    from bdsgd.stages import load_stage_config
    from bdsgd.traces.io import write_trace
    from bdsgd.traces.simulate import simulate, truth_path, write_truth

    check_output("--out", args.out, truth_path(args.out), inputs=(args.config,))
    cfg = load_stage_config(args.config, "simulate_trace")
    name = _config_name(cfg, args.name, "simulate")
    seed = cfg.seed if args.seed is None else args.seed
    trace, truth = simulate(cfg.trace(name).simulate, seed=seed)
    trace.meta["provenance"] = stamp(cfg, seed, trace=name)
    write_truth(truth, truth_path(args.out))
    write_trace(trace, args.out)
    print(f"simulated trace {name!r} (scenario {cfg.trace(name).simulate.scenario}, seed {seed}): "
          f"{trace.n_iterations} iterations x {trace.n_workers} workers -> {args.out}")


def cmd_traces_gather(args):
    from bdsgd.stages import load_stage_config
    from bdsgd.traces.gather import gather

    check_output("--out", args.out, inputs=(args.config,))
    cfg = load_stage_config(args.config, "gather_trace")
    name = _config_name(cfg, args.name, "gather")
    gcfg = cfg.trace(name).gather
    gather(gcfg, data_dir=args.data_dir or cfg.training().data_dir, seed=cfg.seed, out=args.out,
           workers=args.workers, iterations=args.iterations)


def cmd_traces_describe(args):
    from bdsgd.traces.describe import describe, format_description
    from bdsgd.traces.io import read_trace

    stats = describe(read_trace(args.trace))
    if args.json:
        print(json.dumps(stats, indent=2, sort_keys=True))
    else:
        print(format_description(stats))


def cmd_traces_plot(args):
    from bdsgd.traces.io import read_trace
    from bdsgd.traces.plots import draw_trace_figures

    check_output("--out", args.out, folder=True, inputs=(args.trace,))
    name = args.name or Path(args.trace).stem
    for path in draw_trace_figures(read_trace(args.trace), name, Path(args.out)):
        print(f"wrote {path}")


def cmd_traces_split(args):
    from bdsgd.traces.io import read_trace, write_split
    from bdsgd.traces.simulate import read_truth, truth_path

    sidecar = truth_path(args.trace)
    for flag, out in (("--train", args.train), ("--test", args.test)):
        check_output(flag, out, truth_path(out) if sidecar.exists() else None, inputs=(args.trace,))
    train, test = write_split(read_trace(args.trace), args.train_fraction, args.train, args.test,
                              read_truth(sidecar) if sidecar.exists() else None, args.trace)
    print(f"split {args.trace}: {train.n_iterations} iterations -> {args.train}, "
          f"{test.n_iterations} -> {args.test}")


def cmd_model_train(args):
    from dataclasses import replace

    from bdsgd.config import default_config
    from bdsgd.runtime_model.train import train_model
    from bdsgd.stages import load_stage_config
    from bdsgd.traces.io import read_trace

    check_output("--out", args.out, f"{args.out}.ckpt", inputs=(args.trace, args.config))
    trace = read_trace(args.trace)
    cfg = load_stage_config(args.config, "train_model") if args.config else default_config()
    mcfg = cfg.model if args.epochs is None else replace(cfg.model, epochs=args.epochs)
    seed = cfg.seed if args.seed is None else args.seed
    train_model(trace, mcfg, seed=seed, out=args.out, progress=not args.quiet, config=cfg,
                trace_name=args.trace_name or Path(args.trace).stem)


def cmd_model_evaluate(args):
    from bdsgd.config import default_config
    from bdsgd.evaluation import evaluate_model
    from bdsgd.io import write_json, write_with
    from bdsgd.provenance import stamp
    from bdsgd.runtime_model.checkpoint import load_model
    from bdsgd.stages import load_stage_config
    from bdsgd.traces.io import read_trace

    for flag, out in (("--json", args.json), ("--predictions", args.predictions)):
        check_output(flag, out, inputs=(args.model, args.trace, args.config))
    cfg = load_stage_config(args.config, "evaluate_model") if args.config else None
    rule = args.rule or (cfg or default_config()).policies.rule
    result, predictions = evaluate_model(load_model(args.model), read_trace(args.trace), rule=rule,
                                         seed=args.seed, cfg=cfg, model_path=args.model)
    if args.json:
        write_json(args.json, {**result, "provenance": stamp(cfg, args.seed, model=args.model,
                                                              trace=args.trace)})
    if args.predictions:
        write_with(args.predictions, lambda tmp: predictions.to_parquet(tmp, index=False))
    print(json.dumps({k: v for k, v in result.items() if not isinstance(v, (dict, list))}, indent=2))


def cmd_model_sample(args):
    from bdsgd.runtime_model.checkpoint import load_model
    from bdsgd.traces.io import write_trace

    check_output("--out", args.out, inputs=(args.model,))
    trace = load_model(args.model).sample_trace(args.iterations, seed=args.seed)
    write_trace(trace, args.out)
    print(f"sampled {trace.n_iterations} iterations x {trace.n_workers} workers -> {args.out}")


def cmd_throughput(args):
    from bdsgd.stages import load_stage_config
    from bdsgd.throughput import run_benchmark

    for flag, out in (("--json", args.json), ("--decisions", args.decisions),
                      ("--comm-sweep", args.comm_sweep)):
        check_output(flag, out, inputs=(args.trace, args.model, args.config, args.history))
    cfg = load_stage_config(args.config, "throughput") if args.config else None
    run_benchmark(trace_path=args.trace, policies=[p for p in args.policies.split(",") if p],
                  model_path=args.model, rule=args.rule, comm_s=args.comm_s, json_out=args.json,
                  decisions_out=args.decisions, cfg=cfg, seed=args.seed,
                  history_path=args.history, threads=args.threads, sweep_out=args.comm_sweep)


def cmd_train(args):
    from bdsgd.stages import load_stage_config
    from bdsgd.training import train_run

    check_output("--out", args.out, folder=True)
    cfg = load_stage_config(args.config, "train")
    train_run(cfg, task=args.task, policy=args.policy, seed=args.seed, trace_path=args.trace,
              out_dir=args.out, model_path=args.model, history_path=args.history)


def cmd_distributed(args):
    from bdsgd.distributed.launch import job_from_args, run

    run(job_from_args(args))


def cmd_figures(args):
    from bdsgd.figures.render import render_all

    check_output("--out", args.out, folder=True)
    render_all(Path(args.results_dir), Path(args.out))


def build_parser() -> argparse.ArgumentParser:
    parser = flags.Parser(
        prog="bdsgd", description="Straggler-aware synchronous distributed SGD experiments.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    # traces ...
    traces = sub.add_parser("traces", help="gather, import, simulate, split and describe traces")
    tsub = traces.add_subparsers(dest="traces_command", required=True, metavar="ACTION")

    p = tsub.add_parser("import", help="convert a public trace to a bdsgd Parquet trace")
    p.add_argument("--format", required=True, choices=["csv", "alibaba-pai"],
                   help="csv: long format 'iteration,worker,runtime_s[,censored]'; alibaba-pai: "
                        "cluster-trace-gpu-v2020 mini-batch-time job file")
    p.add_argument("input", metavar="IN", help="file to import")
    p.add_argument("output", metavar="OUT.parquet", help="trace to write")
    p.set_defaults(func=cmd_traces_import)

    p = tsub.add_parser("simulate", help="draw a trace from the generative cluster simulator")
    p.add_argument("--config", required=True, help="experiment config (YAML) holding the trace spec")
    p.add_argument("--name", help="which trace of the config (default: its only simulated one)")
    p.add_argument("--seed", type=flags.seed, help="seed (default: the config's seed)")
    p.add_argument("--out", required=True, help="trace to write (a .truth.npz of the simulator's "
                                                "latent state is written beside it)")
    p.set_defaults(func=cmd_traces_simulate)

    p = tsub.add_parser("gather", help="time real workers under torch.distributed (torchrun or srun)")
    p.add_argument("--config", required=True, help="experiment config (YAML) holding the trace spec")
    p.add_argument("--name", help="which trace of the config (default: its only gathered one)")
    p.add_argument("--data-dir", help="data sets root (default: the config's train.data_dir)")
    p.add_argument("--workers", type=flags.positive_int, help="override the number of workers")
    p.add_argument("--iterations", type=flags.positive_int, help="override the number of iterations")
    p.add_argument("--out", required=True, help="trace to write")
    p.set_defaults(func=cmd_traces_gather)

    p = tsub.add_parser("describe", help="summary statistics of a trace")
    p.add_argument("trace", metavar="TRACE", help="trace (Parquet)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_traces_describe)

    p = tsub.add_parser("plot", help="run-time CDFs, iteration x worker heat map, CoV over time")
    p.add_argument("trace", metavar="TRACE", help="trace (Parquet)")
    p.add_argument("--name", help="prefix of the figure files (default: the trace file's stem)")
    p.add_argument("--out", required=True, help="folder for <name>_runtime_cdf, <name>_heatmap "
                                                "and <name>_cov, each as .png and .pdf")
    p.set_defaults(func=cmd_traces_plot)

    p = tsub.add_parser("split", help="cut a trace in time into a training and a test part")
    p.add_argument("trace", metavar="TRACE", help="trace (Parquet)")
    p.add_argument("--train-fraction", type=flags.fraction, default=0.5,
                   help="fraction of iterations in the first (training) part")
    p.add_argument("--train", required=True, help="first part, written as a trace")
    p.add_argument("--test", required=True, help="second part, written as a trace")
    p.set_defaults(func=cmd_traces_split)

    # model ...
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
    p.set_defaults(func=cmd_model_train)

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
    p.set_defaults(func=cmd_model_evaluate)

    p = msub.add_parser("sample", help="generate a synthetic trace from a trained model")
    p.add_argument("model", metavar="MODEL", help="model checkpoint")
    p.add_argument("--iterations", type=flags.positive_int, required=True, help="iterations to generate")
    p.add_argument("--seed", type=flags.seed, default=0, help="seed")
    p.add_argument("--out", required=True, help="trace to write")
    p.set_defaults(func=cmd_model_sample)

    # throughput
    p = sub.add_parser("throughput", help="replay a trace under cutoff policies; throughput table")
    p.add_argument("trace", metavar="TRACE", help="trace to replay (Parquet, no censored values)")
    p.add_argument("--policies", required=True, help=_policy_help())
    p.add_argument("--model", help="run-time model checkpoint (needed by bdsgd)")
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
    p.add_argument("--history", metavar="TRACE",
                   help="the same run's earlier iterations (e.g. the training part): policies "
                        "that learn from observations see them first, instead of starting cold")
    p.add_argument("--threads", type=flags.positive_int, help="torch threads of the replay, recorded "
                   "beside its decision times (default: the config's resources.throughput_threads, else 1)")
    p.set_defaults(func=cmd_throughput)

    # train
    p = sub.add_parser("train", help="one convergence run on the virtual cluster")
    p.add_argument("--config", required=True, help="experiment config (YAML)")
    p.add_argument("--task", required=True, choices=TASKS,
                   help="data set and network")
    p.add_argument("--policy", required=True,
                   help="cutoff policy (see 'bdsgd throughput --help'), or a training mode: async "
                        "(each gradient applied on arrival) or cyclic (workers push their "
                        "accumulated gradients in turn, skipped while they have none)")
    p.add_argument("--seed", type=flags.seed, required=True, help="seed of data order, init and policy")
    p.add_argument("--trace", required=True, help="trace whose run-times drive the virtual clock")
    p.add_argument("--model", help="run-time model checkpoint (needed by bdsgd)")
    p.add_argument("--history", metavar="TRACE",
                   help="the trace's earlier iterations (e.g. its training part): policies that "
                        "learn from observations see them first, instead of starting cold")
    p.add_argument("--out", required=True, help="run directory (metrics.parquet, result.json, "
                                                "checkpoint.pt)")
    p.set_defaults(func=cmd_train)

    # distributed
    p = sub.add_parser("distributed", help="real training: a parameter server and N workers "
                                           "on torch.distributed, cutoffs from any causal policy")
    p.add_argument("--workers", type=flags.positive_int, required=True,
                   help="N worker processes (plus a server)")
    p.add_argument("--policy", required=True, help="cutoff policy (see 'bdsgd throughput --help')")
    p.add_argument("--iterations", type=flags.positive_int, required=True, help="iterations to train")
    p.add_argument("--task", default="digits", choices=TASKS, help="data set and network")
    p.add_argument("--config", help="experiment config: train: and policies: (default: defaults)")
    p.add_argument("--model", help="run-time model checkpoint (needed by bdsgd)")
    p.add_argument("--late", choices=["abandon", "finish"], default="abandon",
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
    p.add_argument("--extra-parameters", type=flags.non_negative_int, default=0,
                   help="zeros sent with every message (a bigger model's bytes)")
    p.add_argument("--delay-trace", metavar="TRACE",
                   help="run-times replayed inside the workers: worker w waits x[t mod T, w]")
    p.add_argument("--heartbeat-s", type=flags.positive_float, default=5.0,
                   help="a worker silent this long counts as dead")
    p.add_argument("--seed", type=flags.seed, default=0, help="seed of data order, init and policy")
    p.add_argument("--json", required=True,
                   help="result to write (JSON); the metrics and the recorded trace go beside it")
    p.set_defaults(func=cmd_distributed)

    # figures
    p = sub.add_parser("figures", help="every figure and summary.csv from stored results")
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="results/<experiment>")
    p.add_argument("--out", required=True, help="figure folder (figures/<experiment>)")
    p.set_defaults(func=cmd_figures)
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
