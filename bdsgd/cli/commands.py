"""What each ``bdsgd`` subcommand does once its flags are parsed (``bdsgd.cli``): check its
outputs, load its config as its stage, and call the one module that does the work. Every
module is imported inside its command, so that ``bdsgd --help`` and a quick command import
neither torch nor the rest.
"""

from __future__ import annotations

import json
from pathlib import Path

from bdsgd.errors import UserError
from bdsgd.outputs.io import check_output


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
    from bdsgd.config.stages import load_stage_config
    from bdsgd.outputs.provenance import stamp
    from bdsgd.traces.io import write_trace
    from bdsgd.traces.simulate import simulate
    from bdsgd.traces.truth import truth_path, write_truth

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
    from bdsgd.config.stages import load_stage_config
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
    for path in draw_trace_figures(read_trace(args.trace), name, Path(args.out), args.note):
        print(f"wrote {path}")


def cmd_traces_split(args):
    from bdsgd.traces.io import read_trace, write_split
    from bdsgd.traces.truth import read_truth, truth_path

    sidecar = truth_path(args.trace)
    for flag, out in (("--train", args.train), ("--test", args.test)):
        check_output(flag, out, truth_path(out) if sidecar.exists() else None, inputs=(args.trace,))
    train, test = write_split(read_trace(args.trace), args.train_fraction, args.train, args.test,
                              read_truth(sidecar) if sidecar.exists() else None, args.trace)
    print(f"split {args.trace}: {train.n_iterations} iterations -> {args.train}, "
          f"{test.n_iterations} -> {args.test}")


def cmd_traces_censor(args):
    from bdsgd.policies.baselines import Static
    from bdsgd.traces.io import read_trace, write_trace

    check_output("--out", args.out, inputs=(args.trace,))
    trace = read_trace(args.trace)
    trace = trace.cut_at(Static(trace.n_workers, args.backups).c)
    write_trace(trace, args.out)
    print(f"censored {args.trace}: {int(trace.censored.sum())} of {trace.censored.size} "
          f"run-times -> {args.out}")


def cmd_model_train(args):
    from dataclasses import replace

    from bdsgd.config import default_config
    from bdsgd.config.stages import load_stage_config
    from bdsgd.policies import PAPER_MODEL
    from bdsgd.runtime_model.train import train_model
    from bdsgd.traces.io import read_trace

    check_output("--out", args.out, f"{args.out}.ckpt",
                 inputs=(args.trace, args.config, args.prior))
    trace = read_trace(args.trace)
    cfg = load_stage_config(args.config, "train_model") if args.config else default_config()
    mcfg = cfg.model if args.epochs is None else replace(cfg.model, epochs=args.epochs)
    if args.paper:  # Teng & Wood's model (bdsgd-paper's)
        mcfg = replace(mcfg, **PAPER_MODEL)
    if args.censoring:
        mcfg = replace(mcfg, censoring=args.censoring)
    if args.emission:
        mcfg = replace(mcfg, emission=args.emission)
    seed = cfg.seed if args.seed is None else args.seed
    train_model(trace, mcfg, seed=seed, out=args.out, progress=not args.quiet, config=cfg,
                trace_name=args.trace_name or Path(args.trace).stem, prior=args.prior)


def cmd_model_prior(args):
    from bdsgd.config import default_config
    from bdsgd.config.stages import load_stage_config
    from bdsgd.runtime_model.train import train_prior

    check_output("--out", args.out, f"{args.out}.ckpt", inputs=(args.config,))
    cfg = load_stage_config(args.config, "train_prior") if args.config else default_config()
    train_prior(cfg.model, seed=cfg.seed if args.seed is None else args.seed, out=args.out,
                progress=not args.quiet, config=cfg)


def cmd_model_evaluate(args):
    from bdsgd.config import default_config
    from bdsgd.config.stages import load_stage_config
    from bdsgd.evaluation import evaluate_model
    from bdsgd.outputs.io import write_json, write_with
    from bdsgd.outputs.provenance import stamp
    from bdsgd.runtime_model.checkpoint import load_model
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
    from bdsgd.config.stages import load_stage_config
    from bdsgd.throughput import run_benchmark

    for flag, out in (("--json", args.json), ("--decisions", args.decisions),
                      ("--comm-sweep", args.comm_sweep), ("--period-sweep", args.period_sweep)):
        check_output(flag, out, inputs=(args.trace, args.model, args.paper_model, args.config,
                                        args.history))
    cfg = load_stage_config(args.config, "throughput") if args.config else None
    run_benchmark(trace_path=args.trace, policies=[p for p in args.policies.split(",") if p],
                  model_path=args.model, paper_model_path=args.paper_model, rule=args.rule,
                  comm_s=args.comm_s, json_out=args.json,
                  decisions_out=args.decisions, cfg=cfg, seed=args.seed,
                  history_path=args.history, threads=args.threads, sweep_out=args.comm_sweep,
                  late=args.late, period_out=args.period_sweep, draw=args.draw)


def cmd_ladder(args):
    from bdsgd.config.stages import load_stage_config
    from bdsgd.ladder import MODELS, run_ladder

    models = {key: getattr(args, key) for key in MODELS}
    for flag, out in (("--json", args.json), ("--decisions", args.decisions)):
        check_output(flag, out, inputs=(args.trace, args.history, args.config, *models.values()))
    run_ladder(load_stage_config(args.config, "throughput"), args.trace, args.history, models,
               args.json, args.decisions)


def cmd_train(args):
    from bdsgd.training import run_spec, train_run

    check_output("--out", args.out, folder=True)
    train_run(run_spec(args.config, args.task, args.policy, args.seed, args.trace, args.out,
                       model_path=args.model, history_path=args.history,
                       paper_model_path=args.paper_model))


def cmd_pilot(args):
    import dataclasses

    from bdsgd.config.stages import load_stage_config
    from bdsgd.training.pilot import run_pilot

    check_output("--out", args.out, folder=True)
    cfg = load_stage_config(args.config, "pilot", args.task)
    if args.source:
        cfg = dataclasses.replace(cfg, source=args.source)
    run_pilot(cfg, args.task, args.trace, args.history, args.out)


def cmd_distributed(args):
    from bdsgd.distributed.launch import job_from_args, run

    run(job_from_args(args))


def cmd_figures(args):
    from bdsgd.figures.draws import render_draws
    from bdsgd.figures.render import render_all

    check_output("--out", args.out, folder=True)
    (render_draws if args.draws else render_all)(Path(args.results_dir), Path(args.out))


def cmd_plan(args):
    from bdsgd.config import load_config
    from bdsgd.devices import select_device
    from bdsgd.outputs.io import write_json
    from bdsgd.plan import bill, bill_device, format_bill, measure
    from bdsgd.plan.preflight import check
    from bdsgd.plan.regime import require_separating

    check_output("--json", args.json, inputs=(args.config,))
    cfg = load_config(args.config)
    check(cfg, data=args.strict)  # the data folders where the runs will read them: --strict
    device = bill_device(cfg, args.device)
    measured, alone = measure(cfg, select_device(device, source="--device")) if args.measure \
        else (None, None)
    plan = bill(cfg, measured, device, alone)
    if args.json:
        write_json(args.json, plan)
    print(format_bill(plan))
    if args.strict or cfg.strict:
        require_separating(str(args.config), plan["cells"])
