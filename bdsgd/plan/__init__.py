"""The bill before you submit (``bdsgd plan``): every job a config makes, what each asks the
cluster for, how long the convergence runs will take, and first whether each trace x task cell
can separate the policies at all (``bdsgd.plan.regime``).

The jobs are the workflow's rules, counted from the config as the DAG makes them (a test holds
the counts to a Snakemake dry run's): per trace, the rule that makes it (simulate, import or
gather), its split, its description and figures, the run-time model's training and evaluation
and the throughput replay; the prior over clusters the models start from (model.prior); for a
simulated trace of train.trace, the cluster drawn for each run seed but 0 (simulated, split,
modelled); a pilot per task and cluster size (``bdsgd.training.pilot``: a sync run per learning
rate); a convergence run per trace x task x policy x seed;
each distributed job; the figures. Each carries its rule's requests (``resources:`` and
``train.device``).

A convergence run's time is estimated, not limited: per iteration the n workers' union batch,
n b samples, each costing s seconds forward and backward on the run's device (s' for a worker's
batch alone, as async and cyclic compute it) and d of the loader's decoding where a task decodes
(not overlapped with the device), plus E evaluations of the m test samples (a forward pass: s / 3
a sample), every train.eval_every iterations and after every iteration near the target:

    t = I n b (s + d) + E m (s / 3 + d)

with I the run's iterations on its trace's n workers: train.max_iterations, or under train.epochs
as many as the recipe's epochs take at n (``bdsgd.sgd.iterations_at_n``, ``TRAIN_SAMPLES``).

s is measured on this machine's device (``measure``: a few timed passes of each task's network
on a synthetic chunk of train.chunk_samples, ``bdsgd.sgd.time_gradient``) or taken from
``SECONDS_PER_SAMPLE``. Every other job is charged its runtime limit: an upper bound.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from bdsgd.cluster.clock import LATE
from bdsgd.cluster.schedules import MODES
from bdsgd.config import CENSORING, Config
from bdsgd.ladder import TRAINED
from bdsgd.plan.preflight import pilot_traces, trace_workers
from bdsgd.plan.regime import cells, format_cells, record
from bdsgd.policies import model_files
from bdsgd.policies import spec as policy_spec

# s, seconds per sample of forward and backward over the union batch, where nothing is measured.
# On a GPU: MNIST (digits as MNIST), an H100's at 158 workers x 32 samples in chunks of 1,024
# (benchmarks/results.md: bench_trainer.py); CIFAR-10's ResNet-20 that H100 figure times its 4x
# the small VGG's multiply-adds; ImageNet's ResNet-18 ~2,500 images/s. On a CPU, this machine's,
# one thread, chunks of 64 (`bdsgd plan --measure --device cpu`). Assumptions until `--measure`
# runs on the cluster's device (benchmarks/gpu_check.py).
SECONDS_PER_SAMPLE = {
    "cuda": {"digits": 4.5e-6, "mnist": 4.5e-6, "cifar10": 3.7e-5, "imagenet": 4.0e-4},
    "cpu": {"digits": 3.3e-6, "mnist": 1.7e-4, "cifar10": 3.5e-3, "imagenet": 5.3e-2},
}
# Async and cyclic compute each worker's gradient alone, b samples, not the union batch: per
# sample this many times s where not measured (bench_gradients.py, benchmarks/README.md; on a
# CPU, chunks keep parity).
ALONE = {"cuda": 15.0, "cpu": 1.0}
# Seconds one loader process takes to decode a sample (bench_loader.py, benchmarks/README.md):
# the trainer does not overlap decoding with the device, so it adds to s.
DECODE_S = {"imagenet": 1 / 200}
# Near its target a run evaluates after every iteration (train.eval_near_target): billed over
# this share of its iterations.
NEAR_TARGET_SHARE = 0.1
TEST_SAMPLES = {"digits": 360, "mnist": 10_000, "cifar10": 10_000, "imagenet": 50_000}
TRAIN_SAMPLES = {"digits": 1_437, "mnist": 60_000, "cifar10": 50_000, "imagenet": 1_281_167}
LOCAL = ("all", "stage_config", "resolved_config")  # rules that run where Snakemake runs


@dataclass(frozen=True)
class Job:
    """One rule's jobs of one kind: how many, what each asks for, how long each takes."""

    rule: str
    name: str  # the instance (a trace, task/policy, job)
    count: int
    gpus: int
    mem_mb: int | None
    limit_min: int | None  # the requested runtime
    hours: float | None  # each job's estimate (None: unknown, charged its limit)

    @property
    def charged_hours(self) -> float:
        """Each job's hours as the bill counts them: the estimate, else the limit."""
        return self.hours if self.hours is not None else (self.limit_min or 0) / 60


def run_seconds(cfg: Config, task: str, n: int, s: float, alone: float) -> dict[str, float]:
    """A run's seconds of ``task`` on n workers: sync (and every cutoff policy: an upper bound,
    a cut computes fewer) with s per sample over the union batch, a mode (async, cyclic) with
    ``alone`` per sample, each worker's gradient alone; both with the loader's decoding and the
    evaluations."""
    from bdsgd.sgd import iterations_at_n  # torch: the workflow's start reads this module

    run = cfg.for_task(task).training()  # its recipe's
    iterations = iterations_at_n(run, n, TRAIN_SAMPLES[task])
    decode = DECODE_S.get(task, 0.0) / max(1, run.loader_workers)
    evals = math.ceil(iterations / run.eval_every) + (
        math.ceil(NEAR_TARGET_SHARE * iterations) if run.eval_near_target > 0 else 0)
    evaluating = evals * TEST_SAMPLES[task] * (s / 3 + decode)
    samples = iterations * n * run.batch_size
    return {"sync": samples * (s + decode) + evaluating,
            "mode": samples * (alone + decode) + evaluating}


def jobs(cfg: Config, seconds_per_sample: dict[str, float], device: str,
         alone: dict[str, float] | None = None) -> list[Job]:
    """Every job ``cfg`` makes (the workflow's rules but the local ones); ``alone``: s of a
    worker's gradient alone per task (async, cyclic), default ALONE x s."""
    res, tc = cfg.resources, cfg.training()
    out = []
    for name, spec in cfg.traces.items():
        make = {"simulate": ("simulate_trace", res.simulate_mem_mb, res.simulate_runtime_min),
                "gather": ("gather_trace", res.gather_mem_mb, res.gather_runtime_min),
                "import": ("import_trace", None, None)}[spec.source]
        split = "split_simulated_trace" if spec.source == "simulate" else "split_trace"
        out += [Job(make[0], name, 1, 0, make[1], make[2], None),
                *(Job(rule, name, 1, 0, None, None, 0.0)
                  for rule in (split, "describe_trace", "trace_figures")),
                *(Job(rule, name, 1, 0, res.model_mem_mb, res.model_runtime_min, None)
                  for rule in ("train_model", "evaluate_model")),
                Job("throughput", name, 1, 0, res.throughput_mem_mb, res.throughput_runtime_min,
                    None)]
    if cfg.model.prior:  # the prior over clusters every model starts from
        out.append(Job("train_prior", cfg.experiment, 1, 0, res.model_mem_mb,
                       res.model_runtime_min, None))
    out += _draws(cfg) + _ablations(cfg)
    gpus = 0 if device == "cpu" else res.train_gpus
    pilots = set(pilot_traces(cfg).values()) if cfg.pilot.enabled else set()
    rates = len({1.0, *cfg.pilot.lr_factors})
    for trace in cfg.train_traces():
        n = trace_workers(cfg, trace)
        for task in tc.tasks:
            s = seconds_per_sample[task]
            seconds = run_seconds(cfg, task, n, s, s * ALONE[device] if alone is None
                                  else alone[task])
            if trace in pilots:  # a sync run per learning rate, one after another
                out.append(Job("pilot", f"{trace}/{task}", 1, gpus, res.train_mem_mb,
                               res.train_runtime_min, rates * seconds["sync"] / 3600))
            for policy in tc.policies:
                if cfg.trace(trace).source != "simulate" and policy not in MODES and policy_spec(
                        policy).needs_truth:
                    continue  # the simulator's truth (bayes): simulated traces only
                out.append(Job("train", f"{trace}/{task}/{policy}", len(tc.seeds), gpus,
                               res.train_mem_mb, res.train_runtime_min,
                               seconds["mode" if policy in MODES else "sync"] / 3600))
    for name, job in cfg.distributed.jobs.items():
        out.append(Job("distributed", name, 1, res.distributed_gpus_per_task * (job.workers + 1),
                       res.distributed_mem_mb, res.distributed_runtime_min, None))
    out.append(Job("figures", cfg.experiment, 1, 0, None, None, 0.0))
    return out


def _ablations(cfg: Config) -> list[Job]:
    """The replay ablations' jobs (throughput.ablations), on each of its traces: the censored
    training part, a model and a replay per way of scoring censored run-times, a replay per late
    mode, the ladder's models and its replay (``bdsgd.ladder``)."""
    res, traces = cfg.resources, cfg.throughput.ablations.traces
    if not traces:
        return []
    model, replay = (res.model_mem_mb, res.model_runtime_min), (res.throughput_mem_mb,
                                                                res.throughput_runtime_min)
    return [Job("censor_trace", "ablations", len(traces), 0, None, None, 0.0),
            Job("train_censored_model", "ablations", len(traces) * len(CENSORING), 0, *model, None),
            Job("censoring_replay", "ablations", len(traces) * len(CENSORING), 0, *replay, None),
            Job("late_replay", "ablations", len(traces) * len(LATE), 0, *replay, None),
            Job("train_ladder_model", "ablations", len(traces) * len(TRAINED), 0, *model, None),
            Job("ladder", "ablations", len(traces), 0, *replay, None)]


def _draws(cfg: Config) -> list[Job]:
    """The clusters drawn for run seeds and for the throughput study's draws
    (``Config.cluster_of``): each simulated and split, and the run-time model (model.pt)
    trained on it where a run's or a draw's replayed policy reads one; the paper's (paper.pt) of
    every trace and cluster whose replay or runs read it; a replay of every further draw of
    every trace (``throughput.draws``), and the study's figures."""
    res, tc, draws = cfg.resources, cfg.training(), cfg.throughput.draws
    runs, replays = model_files(tc.policies), model_files(cfg.throughput.policies)
    out = []
    papers = set(cfg.traces) if "paper.pt" in replays else set(cfg.throughput.ablations.traces)
    for trace in cfg.traces:
        of_runs = ({cfg.cluster_of(trace, seed) for seed in tc.seeds}
                   if trace in cfg.train_traces() else set())
        of_draws = {cfg.cluster_of(trace, d) for d in range(draws)}
        drawn = (of_runs | of_draws) - {trace}
        if drawn:
            out += [Job("simulate_trace", f"{trace} draws", len(drawn), 0, res.simulate_mem_mb,
                        res.simulate_runtime_min, None),
                    Job("split_simulated_trace", f"{trace} draws", len(drawn), 0, None, None,
                        0.0)]
        modelled = (of_runs - {trace} if "model.pt" in runs else set()) | (
            of_draws - {trace} if "model.pt" in replays else set())
        if modelled:
            out.append(Job("train_model", f"{trace} draws", len(modelled), 0, res.model_mem_mb,
                           res.model_runtime_min, None))
        papers |= (of_runs if "paper.pt" in runs else set()) | (
            of_draws if "paper.pt" in replays else set())
    if "paper.pt" in model_files([job.policy for job in cfg.distributed.jobs.values()]):
        papers.add(cfg.train_traces()[0])  # a distributed job's policy reads the first trace's
    if papers:
        out.append(Job("train_paper_model", "paper's models", len(papers), 0, res.model_mem_mb,
                       res.model_runtime_min, None))
    if draws > 1:
        out.append(Job("throughput_draw", "draws", len(cfg.traces) * (draws - 1), 0,
                       res.throughput_mem_mb, res.throughput_runtime_min, None))
    return out + [Job("throughput_study", cfg.experiment, 1, 0, None, None, 0.0)]


def bill_device(cfg: Config, device: str | None) -> str:
    """The device the runs will train on: ``device`` if given, else the config's (auto: cuda
    where the runs ask for a GPU, as on the cluster the config is meant for)."""
    if device is not None:
        return device
    tc = cfg.training()
    if tc.device != "auto":
        return tc.device
    return "cuda" if cfg.resources.train_gpus > 0 else "cpu"


def measure(cfg: Config, device) -> tuple[dict[str, float], dict[str, float]]:
    """s of each task of the config on ``device``, per sample: one chunk of train.chunk_samples
    synthetic samples through the task's network (``bdsgd.sgd.time_gradient``), and one worker's
    batch alone (train.batch_size, as async and cyclic compute it)."""
    import torch

    from bdsgd.devices import torch_settings
    from bdsgd.sgd import time_gradient
    from bdsgd.tasks import CLASSES, INPUT_SHAPES, NETWORKS

    tc, union, alone = cfg.training(), {}, {}
    with torch_settings(tc.threads, device):  # as the runs will train: train.threads
        for task in tc.tasks:
            torch.manual_seed(0)
            model = NETWORKS[task](CLASSES[task]).to(device)
            for out, size in ((union, tc.chunk_samples), (alone, cfg.for_task(task).training().batch_size)):
                x = torch.randn(size, *INPUT_SHAPES[task])
                y = torch.randint(0, CLASSES[task], (size,))
                out[task] = time_gradient(model, x, y, size, device, repeats=3) / size
    return union, alone


def assumptions(cfg: Config, device: str, measured: bool) -> list[str]:
    """What the bill assumed, and what it measured."""
    tc = cfg.training()
    where = (f"measured here on {device} (synthetic samples)" if measured else
             f"assumed (bdsgd.plan.SECONDS_PER_SAMPLE['{device}']): run `bdsgd plan --measure` "
             "on the cluster's device")
    out = [f"s per sample over the union batch in chunks of {tc.chunk_samples}: {where}",
           "async and cyclic compute each worker's batch alone: " + (
               "its s measured here" if measured else f"{ALONE[device]:g} x s assumed (bdsgd.plan.ALONE)"),
           "a cutoff policy's run is billed as sync's: an upper bound (a cut computes fewer gradients)",
           f"evaluations: the test set every train.eval_every iterations and after every iteration "
           f"over the last {NEAR_TARGET_SHARE:.0%} of a run (train.eval_near_target), s / 3 a sample"]
    out += [f"{task}: decoding not overlapped with the device, {DECODE_S[task]:.3g} s a sample per "
            f"loader process over train.loader_workers, added to s" for task in tc.tasks
            if task in DECODE_S]
    return out


def bill(cfg: Config, measured: dict[str, float] | None, device: str,
         alone: dict[str, float] | None = None) -> dict:
    """The plan as JSON data: every job, the totals, and where s came from (``measured``:
    ``measure``'s union batch, ``alone`` its worker's batch alone)."""
    per_sample = measured or {t: SECONDS_PER_SAMPLE[device][t] for t in cfg.training().tasks}
    rows = jobs(cfg, per_sample, device, alone)
    over = [j for j in rows if j.hours is not None and j.limit_min
            and j.hours * 60 > j.limit_min]
    return {
        "experiment": cfg.experiment, "device": device,
        "cells": record(cells(cfg, per_sample)),
        "seconds_per_sample": per_sample,
        "seconds_per_sample_from": "measured here" if measured else "SECONDS_PER_SAMPLE",
        "seconds_per_sample_alone": alone or {t: s * ALONE[device] for t, s in per_sample.items()},
        "assumptions": assumptions(cfg, device, measured is not None),
        "jobs": [{**dataclasses.asdict(j), "charged_hours": j.charged_hours} for j in rows],
        "total_jobs": sum(j.count for j in rows),
        "gpu_hours": sum(j.count * j.gpus * j.charged_hours for j in rows),
        "job_hours": sum(j.count * j.charged_hours for j in rows),
        "runs_over_their_limit": [j.name for j in over],
        "modes": [p for p in cfg.training().policies if p in MODES],
        # under train.stop_at_target a run ends a margin after its target: I is then a bound
        "upper_bound": cfg.training().stop_at_target is not None,
    }


def format_bill(plan: dict) -> str:
    """The bill as text, below the cells' regime."""
    lines = ["the cells' regime: the hindsight optimum against sync and the best fixed cutoff",
             format_cells(plan["cells"]), "",
             f"{plan['experiment']}: {plan['total_jobs']} jobs on {plan['device']} "
             f"(s per sample {plan['seconds_per_sample_from']}: "
             + ", ".join(f"{t} {s:.3g}" for t, s in plan["seconds_per_sample"].items()) + ")",
             f"{'rule':<22}{'instance':<28}{'jobs':>5}{'gpus':>6}{'mem MB':>8}{'limit min':>10}"
             f"{'h each':>9}"]
    for j in plan["jobs"]:
        each = "limit" if j["hours"] is None else f"{j['hours']:.3g}"
        lines.append(f"{j['rule']:<22}{j['name']:<28}{j['count']:>5}{j['gpus']:>6}"
                     f"{j['mem_mb'] or '-':>8}{j['limit_min'] or '-':>10}{each:>9}")
    lines.append(f"total: {plan['gpu_hours']:.1f} GPU-hours, {plan['job_hours']:.1f} job-hours "
                 f"(limits where no estimate"
                 + ("; runs stop after their target, so at most" if plan["upper_bound"] else "")
                 + ")")
    lines += ["assumed and measured:", *(f"  - {a}" for a in plan["assumptions"])]
    if plan["runs_over_their_limit"]:
        lines.append("over resources.train_runtime_min (they need a longer limit or a requeue): "
                     + ", ".join(plan["runs_over_their_limit"]))
    return "\n".join(lines)
