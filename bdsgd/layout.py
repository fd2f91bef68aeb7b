"""Where an experiment's files live, the one home of their paths.

``Layout.of(experiment)``: results/<experiment>/ (what the stages make), logs/<experiment>/ (a log
per job) and figures/<experiment>/::

    results/<experiment>/config.yaml, config/<stage>/<name>.yaml
    results/<experiment>/traces/<trace>/{trace,train,test}.parquet, <part>.truth.npz, describe.json
    results/<experiment>/models/<trace>/{model.pt,evaluation.json,predictions.parquet}
    results/<experiment>/throughput/<trace>/{throughput.json,decisions.parquet,comm_sweep.csv,
                                             period_sweep.csv}
    results/<experiment>/throughput/<trace>/draw<d>/throughput.json   a further cluster draw
    results/<experiment>/traces/<trace>/draw<s>/...    a simulated trace's cluster for run seed s
    results/<experiment>/models/<trace>/draw<s>/model.pt
    results/<experiment>/runs/<trace>/<task>/<policy>/seed<k>/{result.json,metrics.parquet,model.pt}
    results/<experiment>/distributed/<job>/result{.json,.metrics.parquet,.trace.parquet,
                                                  .replay.parquet}

The workflow's rules declare their inputs, outputs and logs from here, and ``bdsgd figures`` finds
what it draws with it (``Layout(results_dir).find``). Each method takes the parts of its path: left
at their defaults they are Snakemake wildcards ("{trace}"), set to ``ANY`` a glob. Plain strings:
nothing here touches a file but ``find``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

ANY = "*"  # a part that matches every value, for find
DRAW = "/draw"  # a simulated trace's cluster drawn for one run seed: <trace>/draw<s>
TRACE, TASK, POLICY, SEED, JOB = "{trace}", "{task}", "{policy}", "{seed}", "{job}"
STAGE, NAME = "{stage}", "{name}"


# A run's policy name, [explore-]<policy>[+<variant>]: it labels the run's folder, its rows and
# its marks. Its grammar, here only: the registry (bdsgd.policies) says what each part may be.
EXPLORE = "explore-"  # around a causal policy: bdsgd.policies.explore
VARIANT = "+"  # the policy trained with its variant's train: keys (bdsgd.policies.VARIANTS)


def policy_parts(name: str) -> tuple[str, str]:
    """(the policy, its variant) of <policy>[+<variant>]; the variant "" where there is none."""
    policy, _, variant = name.partition(VARIANT)
    return policy, variant


def explored(name: str) -> str | None:
    """The policy explore-<policy> explores around; None for any other name."""
    return name.removeprefix(EXPLORE) if name.startswith(EXPLORE) else None


def cluster_draw(trace: str, seed: int) -> str:
    """The name of the cluster a convergence run of ``seed`` replays on a simulated ``trace``:
    the trace itself for seed 0, else ``<trace>/draw<seed>``, the scenario drawn again with the
    config's seed + ``seed`` (a recorded trace has one cluster: its runs all replay it)."""
    return trace if seed == 0 else f"{trace}{DRAW}{seed}"


def drawn_from(name: str) -> tuple[str, int]:
    """(trace, seed) of a name ``cluster_draw`` made; (name, 0) of a trace's own."""
    trace, _, seed = name.partition(DRAW)
    return trace, int(seed or 0)


@dataclass(frozen=True)
class Layout:
    """The files of one experiment: ``results``, ``logs`` and ``figures`` are its three folders."""

    results: str
    logs: str = "logs"
    figures: str = "figures"

    @classmethod
    def of(cls, experiment: str) -> Layout:
        return cls(f"results/{experiment}", f"logs/{experiment}", f"figures/{experiment}")

    # ------------------------------------------------------------------------ results
    def config(self) -> str:
        """The whole resolved config, for the record."""
        return f"{self.results}/config.yaml"

    def stage_config(self, stage: str = STAGE, name: str = NAME) -> str:
        """The config file of one stage instance (what ``bdsgd.config.stages.STAGE_READS`` declares)."""
        return f"{self.results}/config/{stage}/{name}.yaml"

    def trace(self, trace: str = TRACE, part: str = "trace") -> str:
        """A trace (part "trace"), or the "train" or "test" part split cuts it into."""
        return f"{self.results}/traces/{trace}/{part}.parquet"

    def truth(self, trace: str = TRACE, part: str = "trace") -> str:
        """The simulator's latent state beside a simulated trace or part."""
        return f"{self.results}/traces/{trace}/{part}.truth.npz"

    def describe(self, trace: str = TRACE) -> str:
        return f"{self.results}/traces/{trace}/describe.json"

    def model(self, trace: str = TRACE, file: str = "model.pt") -> str:
        """The run-time model of a trace, or its "evaluation.json" or "predictions.parquet"."""
        return f"{self.results}/models/{trace}/{file}"

    def prior(self) -> str:
        """The prior over clusters every trace's run-time model starts from (model.prior)."""
        return f"{self.results}/models/prior.pt"

    def throughput(self, trace: str = TRACE, file: str = "throughput.json") -> str:
        """A trace's replay under every policy, or its "decisions.parquet"."""
        return f"{self.results}/throughput/{trace}/{file}"

    def replayed(self, path) -> str:
        """The trace, or <trace>/draw<d>, of a replay's file (one ``throughput`` names)."""
        return Path(path).parent.relative_to(Path(self.results) / "throughput").as_posix()

    def run_dir(self, trace: str = TRACE, task: str = TASK, policy: str = POLICY,
                seed: str | int = SEED) -> str:
        """One convergence run's folder (``bdsgd train --out``)."""
        return f"{self.results}/runs/{trace}/{task}/{policy}/seed{seed}"

    def run(self, file: str, trace: str = TRACE, task: str = TASK, policy: str = POLICY,
            seed: str | int = SEED) -> str:
        """A file of one convergence run: result.json, metrics.parquet or model.pt."""
        return f"{self.run_dir(trace, task, policy, seed)}/{file}"

    def pilot(self, trace: str = TRACE, task: str = TASK, file: str = "pilot.json") -> str:
        """The pilot of ``task`` on ``trace`` (``bdsgd pilot --out``'s folder), or one of its runs'
        files (lr<factor>/result.json)."""
        return f"{self.results}/pilot/{trace}/{task}/{file}"

    def distributed(self, job: str = JOB, file: str = "result.json") -> str:
        """A distributed job's result, or the result.metrics.parquet, result.trace.parquet or
        result.replay.parquet ``bdsgd distributed`` writes beside it."""
        return f"{self.results}/distributed/{job}/{file}"

    def find(self, pattern: str) -> list[Path]:
        """The files a results path with parts set to ANY matches, sorted (the results folder
        itself is no pattern)."""
        root = Path(self.results)
        return sorted(root.glob(str(Path(pattern).relative_to(root))))

    # --------------------------------------------------------------------------- logs
    def log(self, *parts: str) -> str:
        """The log of one job: logs/<experiment>/<parts joined by />.log; the rules name theirs
        after what the job makes (traces/<trace>/simulate, runs/<trace>/<task>/<policy>/seed<k>)."""
        return f"{self.logs}/{'/'.join(parts)}.log"

    def trace_log(self, step: str, trace: str = TRACE) -> str:
        """simulate, import, gather, split or describe."""
        return self.log("traces", trace, step)

    def model_log(self, step: str, trace: str = TRACE) -> str:
        """train or evaluate."""
        return self.log("models", trace, step)

    def throughput_log(self, trace: str = TRACE) -> str:
        return self.log("throughput", trace)

    def run_log(self, trace: str = TRACE, task: str = TASK, policy: str = POLICY,
                seed: str | int = SEED) -> str:
        return self.log("runs", trace, task, policy, f"seed{seed}")

    def pilot_log(self, trace: str = TRACE, task: str = TASK) -> str:
        return self.log("pilot", trace, task)

    def distributed_log(self, job: str = JOB) -> str:
        return self.log("distributed", job)

    def config_log(self, stage: str | None = None, name: str = NAME) -> str:
        """The log of the whole config's record, or of one stage instance's config file."""
        return self.log("config") if stage is None else self.log("config", stage, name)

    def figures_log(self, trace: str | None = None) -> str:
        """The log of every figure, or of one trace's figures."""
        return self.log("figures") if trace is None else self.log("figures", trace)

    # ------------------------------------------------------------------------ figures
    def figure(self, file: str) -> str:
        """A figure or table of bdsgd.figures.FIGURES."""
        return f"{self.figures}/{file}"

    def trace_figure(self, file: str) -> str:
        """A figure of one trace (bdsgd.traces.TRACE_FIGURES, its name filled in)."""
        return f"{self.figures}/traces/{file}"
