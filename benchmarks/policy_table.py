"""The throughput of every policy x rule x trace, relative to the oracle and to bayes.

For each trace (the simulator's scenarios and the two real Alibaba PAI jobs) and seed: train the
run-time model on the first half, warm every learning policy up on it (``--cold``: don't), and
replay every policy under both decision rules on the second half with
``bdsgd.throughput.run_benchmark`` (the harness the CLI uses), and print throughput relative to
the exact hindsight ``oracle`` and, on simulated traces, to ``bayes`` (the better of its two
rules), which draws from the simulator's true dynamics given its true latent state.

Differences of a few hundredths of a point between good policies are within one trace's luck, so
the table ends with bdsgd's margin over each trace's strongest baseline: its mean over seeds (each
seed is a new simulated cluster; on the real jobs, the same trace with a new model training and
new Monte Carlo draws) and a 95 % paired two-level bootstrap interval (``seed_bootstrap``: seeds
resampled, then within each seed blocks of ``BLOCK`` iterations resampled alike for both
policies, as run-times are correlated in time), next to the same margin for ``bayes``: where
even the true dynamics do not beat a baseline, no causal policy can be expected to. The seeds of
a real job replay one test part, so its blocks are resampled alike across the seeds too: their
luck is one trace's, and ten models on it are not ten clusters.

    .venv/bin/python benchmarks/policy_table.py [--workers 32] [--iterations 2000] [--epochs 100]
        [--seeds 0 1 2] [--jobs 2] [--resume]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import yaml
from results_md import add_option, recorded  # a sibling module: benchmarks/ is sys.path[0]

from bdsgd.config import from_dict
from bdsgd.outputs.io import write_json, write_with
from bdsgd.runtime_model.train import train_model, train_prior
from bdsgd.throughput import run_benchmark
from bdsgd.traces.formats import import_trace
from bdsgd.traces.io import write_split
from bdsgd.traces.simulate import simulate

REPO = Path(__file__).resolve().parents[1]
REFERENCE_ITERATIONS = 500  # --epochs is for a training part this long
SCENARIOS = ("calm", "emerging-straggler", "node-contention", "load-shift", "mixed", "iid-heavy",
             "data-dependent", "heterogeneous", "calm-spikes", "intermittent-straggler", "rack-event")
TRACES = (*SCENARIOS, "pai-job1", "pai-job2")
POLICIES = ["sync", "static", "elfving", "ecdf", "bandit", "ewma", "persist", "bdsgd",
            "bdsgd-model", "explore-bdsgd", "oracle-myopic", "async"]
# the causal baselines bdsgd is measured against: the pooled ones and the per-worker ewma and
# persist, which tell workers apart
BASELINES = ("sync", "static", "elfving", "ecdf", "bandit", "ewma", "persist")
BLOCK = 25  # iterations per bootstrap block
RESAMPLES = 2000


def settings(items: list[str]) -> dict:
    """KEY=VALUE flags as a config section (values parsed as YAML)."""
    return {key: yaml.safe_load(value) for key, _, value in (i.partition("=") for i in items)}


def config(args, scenario: str, seed: int):
    return from_dict({
        "experiment": "policy-table", "seed": seed,
        "traces": {"t": {"source": "simulate", "simulate": {
            "scenario": scenario, "workers": args.workers, "iterations": args.iterations}}},
        "model": {"epochs": args.epochs, **settings(args.model)},
        "policies": settings(args.policy),
        "network": settings(args.network),
        "train": {"trace": "t", "tasks": ["digits"]},
    }, "<policy_table>")


def load(args, name: str, seed: int):
    """(trace, the simulator's truth or None, config) of trace ``name`` under ``seed``."""
    if name in SCENARIOS:
        cfg = config(args, name, seed)
        trace, truth = simulate(cfg.traces["t"].simulate, seed=seed)
        return trace, truth, cfg
    csv = REPO / f"tests/data/alibaba_pai_job_{name[-1]}_norm.csv"
    return import_trace(csv, "alibaba-pai"), None, config(args, "mixed", seed)


def measure(args, name: str, seed: int) -> tuple[dict, pd.DataFrame, str]:
    """Train on the first half of trace ``name``, replay the second: (rows, decisions, log line).
    With ``--resume``, a run whose table and decisions are in ``--out`` already is read back, and
    a trained model found there is replayed without training it again."""
    stem = Path(args.out) / f"{name}_seed{seed}"
    table, decisions = Path(f"{stem}_table.json"), Path(f"{stem}_decisions.parquet")
    if args.resume and table.exists() and decisions.exists():
        rows, stored = json.loads(table.read_text()), pd.read_parquet(decisions)
        if args.replay:
            return replay_again(args, name, seed, rows, stored)
        return rows["policies"], stored, f"{name} seed {seed}: read back"
    torch.set_num_threads(1)
    trace, truth, cfg = load(args, name, seed)
    train, test = write_split(trace, 0.5, f"{stem}_train.parquet", f"{stem}_test.parquet", truth)
    policies = args.policies + (["bayes"] if truth is not None else [])
    start = time.perf_counter()
    epochs = None
    if args.epochs is not None:
        # the same training compute (epochs x iterations) and Adam steps for every trace: a
        # short training part (the Alibaba jobs: 150 and 119 iterations) gets more epochs
        epochs = max(args.epochs, round(args.epochs * REFERENCE_ITERATIONS / train.n_iterations))
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, epochs=epochs))
    model = Path(f"{stem}_model.pt")
    with contextlib.redirect_stdout(io.StringIO()):
        if not (args.resume and model.exists()):
            train_model(train, cfg.model, seed=seed, out=model, progress=False, config=cfg,
                        prior=args.prior)
        # the decisions, written last (and atomically), mark a finished run for --resume
        rows = run_benchmark(f"{stem}_test.parquet", policies, model_path=model, rule="both",
                             cfg=cfg, decisions_out=decisions, json_out=table,
                             history_path=None if args.cold else f"{stem}_train.parquet")
    length = f"{epochs} epochs" if epochs else f"{cfg.model.steps} steps"
    log = (f"{name} seed {seed}: n={trace.n_workers}, {test.n_iterations} test iterations, "
           f"{length}{' from the prior' if args.prior else ''}, "
           f"{time.perf_counter() - start:.0f} s")
    return rows["policies"], pd.read_parquet(decisions), log


def replay_again(args, name: str, seed: int, rows: dict,
                 stored: pd.DataFrame) -> tuple[dict, pd.DataFrame, str]:
    """A finished run with ``--replay``'s policies replayed anew on its model and test part (the
    code and --policy settings as they are now), every other policy's rows as stored; its table
    and decisions rewritten, the replay's provenance beside the stored one."""
    stem = Path(args.out) / f"{name}_seed{seed}"
    torch.set_num_threads(1)
    _, _, cfg = load(args, name, seed)
    start = time.perf_counter()
    # bayes only where the simulator's truth is (as ``measure`` adds it)
    again = [p for p in args.replay if p != "bayes" or Path(f"{stem}_test.truth.npz").exists()]
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        new = run_benchmark(f"{stem}_test.parquet", again, model_path=f"{stem}_model.pt",
                            rule="both", cfg=cfg, decisions_out=f"{tmp}/decisions.parquet",
                            json_out=f"{tmp}/table.json",
                            history_path=None if args.cold else f"{stem}_train.parquet")
        fresh = pd.read_parquet(f"{tmp}/decisions.parquet")

    def replayed(policy: str) -> bool:
        return policy.split("/")[0] in args.replay

    rows["policies"] = ({k: v for k, v in rows["policies"].items() if not replayed(k)}
                        | new["policies"])
    rows["replayed"] = {"policies": args.replay, "provenance": new["provenance"]}
    decisions = pd.concat([stored[~stored.policy.map(replayed)], fresh], ignore_index=True)
    write_json(f"{stem}_table.json", rows)
    write_with(f"{stem}_decisions.parquet", lambda tmp: decisions.to_parquet(tmp, index=False))
    log = (f"{name} seed {seed}: {', '.join(args.replay)} replayed again, "
           f"{time.perf_counter() - start:.0f} s")
    return rows["policies"], decisions, log


def cells(rows: dict, policy: str) -> list[dict]:
    """The (ratio, rate) rows of ``policy``; the same row twice for a policy without a rule."""
    return [rows.get(f"{policy}/{r}", rows[policy]) for r in ("ratio", "rate")]


def blocks(decisions: pd.DataFrame) -> int:
    """The number of bootstrap blocks of a run's decisions (of any one policy)."""
    return -(-decisions.iteration.nunique() // BLOCK)


def block_bootstrap(decisions: pd.DataFrame, a: str, b: str, oracle_rate: float,
                    rng: np.random.Generator, pick: np.ndarray | None = None) -> np.ndarray:
    """RESAMPLES draws of (throughput of a - throughput of b) / oracle over resampled blocks:
    the blocks ``pick`` (RESAMPLES, blocks) names, None: drawn here."""
    def per_block(policy):
        d = decisions[decisions.policy == policy].sort_values("iteration")
        block = np.arange(len(d)) // BLOCK
        return (np.bincount(block, d.cutoff.to_numpy()),
                np.bincount(block, d.duration_s.to_numpy()))
    (ca, da), (cb, db) = per_block(a), per_block(b)
    if pick is None:
        pick = rng.integers(0, blocks(decisions), size=(RESAMPLES, blocks(decisions)))
    return (ca[pick].sum(1) / da[pick].sum(1) - cb[pick].sum(1) / db[pick].sum(1)) / oracle_rate


def seed_bootstrap(draws: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Resamples of the mean over seeds from per-seed block-bootstrap draws (seeds, RESAMPLES):
    each resample picks seeds with replacement and one block resample within each, so the
    interval holds the spread from one cluster (or model) to the next as well as each trace's
    own luck. One seed leaves its block resamples as they are."""
    seeds, resamples = draws.shape
    pick = rng.integers(0, seeds, size=(resamples, seeds))
    return draws[pick, np.arange(resamples)[:, None]].mean(axis=1)


def margin(runs: list[tuple[dict, pd.DataFrame]], policy: str, baseline: str,
           seed: int, shared: bool = False) -> tuple:
    """``policy`` (its default rule) minus ``baseline`` (its best rule by mean over seeds),
    relative to the oracle: (that rule's name, the mean over seeds, and the bootstrap 2.5 % and
    97.5 % quantiles of that mean). ``shared``: every seed replays the same test part (a real
    job), so each resample picks the same blocks in every seed."""
    rules = [f"{baseline}/{r}" if f"{baseline}/{r}" in runs[0][0] else baseline
             for r in ("ratio", "rate")]
    best = max(rules, key=lambda k: np.mean([rows[k]["relative_to_oracle"] for rows, _ in runs]))
    rng = np.random.default_rng(seed)
    count = blocks(runs[0][1])
    pick = rng.integers(0, count, size=(RESAMPLES, count)) if shared else None
    draws, means = [], []
    for rows, decisions in runs:
        oracle_rate = rows[policy]["gradients_per_s"] / rows[policy]["relative_to_oracle"]
        means.append(rows[policy]["relative_to_oracle"] - rows[best]["relative_to_oracle"])
        default = f"{policy}/{rows[policy]['rule']}"
        draws.append(block_bootstrap(decisions, default, best, oracle_rate, rng, pick))
    low, high = np.quantile(seed_bootstrap(np.array(draws), rng), [0.025, 0.975])
    return best, float(np.mean(means)), float(low), float(high)


def interval(mean: float, low: float, high: float) -> str:
    return f"{100 * mean:+.3f} [{100 * low:+.3f}, {100 * high:+.3f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=32, help="workers of the simulated traces")
    parser.add_argument("--iterations", type=int, default=2000,
                        help="iterations of the simulated traces (half trains the model)")
    parser.add_argument("--epochs", type=int, default=None,
                        help="run-time model training epochs for a 500-iteration training part "
                             "(a shorter one gets proportionally more); default: the model "
                             "config's model.steps Adam steps")
    parser.add_argument("--prior", metavar="PRIOR.pt",
                        help="start every model from this prior over clusters, trained first "
                             "(with --model's settings and the first seed) if it does not exist")
    parser.add_argument("--model", nargs="*", default=[], metavar="KEY=VALUE",
                        help="run-time model settings over the config's defaults, e.g. batch_size=2")
    parser.add_argument("--policy", nargs="*", default=[], metavar="KEY=VALUE",
                        help="policy settings over the config's defaults, e.g. min_gain=0.3 (with "
                             "--resume, into an --out holding only the trained models)")
    parser.add_argument("--network", nargs="*", default=[], metavar="KEY=VALUE",
                        help="virtual cluster settings over the config's defaults, e.g. "
                             "late=abandon (with --resume, into an --out holding only the "
                             "trained models)")
    parser.add_argument("--cold", action="store_true",
                        help="policies start cold on the test part (default: they first see the "
                             "training part, as the server that gathered it would have)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="seeds of simulation, training and policies; each simulated seed is "
                             "a new cluster, each seed of an Alibaba job a new model of the same "
                             "trace")
    parser.add_argument("--jobs", type=int, default=1,
                        help="(trace, seed) runs at once, one core each")
    parser.add_argument("--out", default="benchmarks/out", help="folder for traces and models")
    parser.add_argument("--resume", action="store_true",
                        help="reuse what --out holds from a run with the same flags: finished "
                             "(trace, seed) runs are read back, trained models replayed as they "
                             "are (delete a run's _table.json to replay it with changed policies)")
    parser.add_argument("--replay", nargs="+", default=[], metavar="POLICY",
                        help="with --resume, replay these policies again on every finished run "
                             "and keep every other policy's stored rows: a changed policy "
                             "against the same baselines without replaying them")
    parser.add_argument("--traces", nargs="+", default=list(TRACES), choices=TRACES,
                        help="traces to measure")
    parser.add_argument("--policies", nargs="+", default=POLICIES,
                        help="policies to replay (bayes is added on simulated traces)")
    add_option(parser)
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: at least 1")
    if args.replay and not args.resume:
        parser.error("--replay replays finished runs: it needs --resume")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if args.prior and not Path(args.prior).exists():
        start = time.perf_counter()
        train_prior(config(args, "calm", args.seeds[0]).model, args.seeds[0], args.prior,
                    progress=False)
        print(f"prior over clusters -> {args.prior}, {time.perf_counter() - start:.0f} s",
              flush=True)
    tasks = [(name, seed) for name in args.traces for seed in args.seeds]
    print(f"{len(tasks)} runs, {args.jobs} at a time", flush=True)
    with ProcessPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(measure, args, name, seed) for name, seed in tasks]
        results: dict[str, list] = {}
        for (name, _), future in zip(tasks, futures, strict=True):
            rows, decisions, log = future.result()
            print(log, flush=True)
            results.setdefault(name, []).append((rows, decisions))

    lines = ["| trace | policy | ratio / oracle | rate / oracle | best / bayes |",
             "| --- | --- | ---: | ---: | ---: |"]
    margins = ["| trace | seeds | strongest baseline | bdsgd minus it, pt [95 %] | "
               "bdsgd-model minus it, pt [95 %] | bayes minus it, pt [95 %] | "
               "of that gap, bdsgd wins |",
               "| --- | ---: | --- | --- | --- | --- | ---: |"]
    for name, runs in results.items():
        bayes = [max(rows[f"bayes/{r}"]["gradients_per_s"] for r in ("ratio", "rate"))
                 for rows, _ in runs] if "bayes/rate" in runs[0][0] else None
        for policy in [p for p in runs[0][0] if "/" not in p]:
            pairs = [cells(rows, policy) for rows, _ in runs]
            text = [f"{np.mean([p[i]['relative_to_oracle'] for p in pairs]):.4f}" for i in (0, 1)]
            if pairs[0][0] is pairs[0][1]:
                text[1] = "(no rule)"
            best = [max(c["gradients_per_s"] for c in p) for p in pairs]
            rel = "" if bayes is None else f"{np.mean(np.divide(best, bayes)):.4f}"
            lines.append(f"| {name} | {policy} | {text[0]} | {text[1]} | {rel} |")
        shared = name not in SCENARIOS  # a real job: every seed replays its one test part
        found = [margin(runs, "bdsgd", b, args.seeds[0], shared) for b in BASELINES
                 if b in runs[0][0]]
        best, *ours = min(found, key=lambda m: m[1])
        alone = (interval(*margin(runs, "bdsgd-model", best.split("/")[0], args.seeds[0],
                                  shared)[1:])
                 if "bdsgd-model" in runs[0][0] else "–")
        ceiling, share = "–", "–"
        if bayes is not None:
            gap = margin(runs, "bayes", best.split("/")[0], args.seeds[0])[1:]
            ceiling = interval(*gap)
            # what a learnt joint model can win over the strongest simple predictor: the gap
            # to the true dynamics (none where bayes is not ahead beyond its interval)
            share = f"{ours[0] / gap[0]:.0%}" if gap[1] > 0 else "no gap"
        margins.append(f"| {name} | {len(runs)} | {best} | {interval(*ours)} | {alone} | "
                       f"{ceiling} | {share} |")
    with recorded(args.results, __file__, markdown=True):
        print("\nMean over seeds, relative to oracle (best / bayes: the better rule of each)\n")
        print("\n".join(lines))
        print("\nbdsgd, bdsgd-model and bayes (default rule) against the strongest baseline (its "
              "better rule), in points of the oracle's throughput\n")
        print("\n".join(margins))


if __name__ == "__main__":
    main()
