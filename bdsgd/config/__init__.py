"""One typed experiment config: loaded from YAML, validated against the JSON schema, hashed.

The schema (``config.schema.yaml`` beside this file, the Snakefile's too) is the one home of every
default: loading fills them in, checks every field (``validate``) and builds frozen dataclasses.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

from bdsgd.config.validate import validate
from bdsgd.errors import UserError
from bdsgd.layout import cluster_draw


@dataclass(frozen=True)
class SimulateConfig:
    scenario: str = "mixed"
    workers: int = 16
    iterations: int = 1000
    workers_per_node: int = 4
    base_runtime_s: float = 1.0
    # Scenario-dependent: None means "the scenario's value" (see bdsgd.traces.simulate.SCENARIOS).
    speed_sigma: float | None = None
    jitter_sigma: float | None = None
    contention_start: float | None = None
    contention_stop: float | None = None
    contention_slowdown: float | None = None
    stall_prob: float | None = None
    stall_alpha: float | None = None
    stall_scale: float | None = None
    stall_max: float | None = None
    stragglers: int | None = None
    straggler_start: float | None = None
    straggler_slowdown: float | None = None
    load_shift_at: float | None = None
    load_shift_factor: float | None = None
    comm_s: float | None = None
    slow_workers: float | None = None
    slow_factor_min: float | None = None
    slow_factor_max: float | None = None
    seq_batch: int | None = None
    seq_alpha: float | None = None
    seq_max: float | None = None
    straggler_on: float | None = None
    straggler_off: float | None = None
    nodes_per_rack: int | None = None
    rack_start: float | None = None
    rack_length: float | None = None
    rack_slowdown: float | None = None


@dataclass(frozen=True)
class GatherConfig:
    workers: int = 4
    iterations: int = 50
    task: str = "digits"
    batch_size: int = 32
    backend: str = "auto"
    background_load: int = 0


@dataclass(frozen=True)
class TraceSpec:
    source: str
    train_fraction: float = 0.5
    path: str | None = None
    format: str | None = None
    simulate: SimulateConfig = field(default_factory=SimulateConfig)
    gather: GatherConfig = field(default_factory=GatherConfig)
    control: bool = False  # a cluster where no policy should gain over sync (bdsgd.plan.regime)


@dataclass(frozen=True)
class ModelConfig:
    emission: str
    latent_dim: int
    worker_dim: int
    hidden_dim: int
    epochs: int | None
    steps: int
    chunk: int
    batch_size: int
    learning_rate: float
    samples: int
    censoring: str
    node_jumps: bool
    checkpoint_every: int
    compile: bool
    prior: bool
    prior_workers: int
    prior_iterations: int
    prior_draws: int
    prior_steps: int
    prior_batch_size: int
    prior_precision: float


@dataclass(frozen=True)
class PoliciesConfig:
    rule: str
    rate_halflife: float
    min_gain: float
    charge_lag: bool | tuple[str, ...]  # every predictive policy, none, or these
    pull: bool | tuple[str, ...]  # every per-worker predictor, none, or these policies'
    calibrate: bool | tuple[str, ...]  # every predictive policy, none, or these
    calibration_weight: float
    probe: bool
    static_backups: float
    window: int
    explore_prob: float
    bandit_discount: float
    bandit_confidence: float
    ewma_halflife: float
    residual_window: int
    averaging: tuple[str, ...]
    forgetting: float
    share_forgetting: float
    score_scale: float
    online_every: int
    online_window: int
    online_learning_rate: float
    bayes_samples: int
    compile: bool | str  # true, false or auto
    decide_every: int


CENSORING = ("likelihood", "impute")  # model.censoring's values, which the ablations compare
EMISSIONS = ("lognormal", "gaussian")  # model.emission's values


@dataclass(frozen=True)
class AblationsConfig:
    """The replay ablations of censoring and of the data a policy buys (throughput.ablations)."""

    traces: tuple[str, ...]
    backups: float
    policy: str


@dataclass(frozen=True)
class ThroughputConfig:
    policies: tuple[str, ...]
    comm_s: float
    comm_ratios: tuple[float, ...]
    decide_every: tuple[int, ...]
    period_policies: tuple[str, ...]
    draws: int  # read by the workflow (one replay a draw), no stage
    ablations: AblationsConfig


@dataclass(frozen=True)
class NetworkConfig:
    topology: str
    shards: int
    fabric: str | None
    bandwidth_gbit_s: float
    latency_s: float
    message_s: float
    aggregate_gbyte_s: float
    update_gbyte_s: float
    late: str
    task: str
    gradient_s: float | None


@dataclass(frozen=True)
class TrainConfig:
    trace: str | tuple[str, ...]  # one trace, or several: ``Config.train_traces``
    tasks: tuple[str, ...]
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    data_dir: str
    batch_size: int
    learning_rate: float
    momentum: float
    weight_decay: float
    lr_schedule: str
    warmup_samples: int
    lr_batch: int | None
    lr_scaling: str
    staleness_lr: str
    objective: str
    max_iterations: int
    epochs: float | None
    eval_every: int
    eval_near_target: float
    stop_at_target: float | None
    loader_workers: int
    chunk_samples: int
    checkpoint_every: int
    target_accuracy: dict[str, float]
    clock: str
    gradient_s: float | None
    charge_decision_time: bool
    device: str
    threads: int
    recipes: dict[str, dict[str, Any]]


@dataclass(frozen=True)
class WandbConfig:
    """Where the W&B runs go (``bdsgd.outputs.tracking``); mode disabled | offline | online."""

    mode: str
    project: str
    entity: str | None
    osh_command_dir: str | None


@dataclass(frozen=True)
class ResourcesConfig:
    simulate_mem_mb: int
    simulate_runtime_min: int
    gather_mem_mb: int
    gather_runtime_min: int
    model_threads: int
    model_mem_mb: int
    model_runtime_min: int
    throughput_threads: int
    throughput_mem_mb: int
    throughput_runtime_min: int
    train_gpus: int
    train_mem_mb: int
    train_runtime_min: int
    distributed_launcher: str
    distributed_gpus_per_task: int
    distributed_mem_mb: int
    distributed_runtime_min: int


@dataclass(frozen=True)
class DistributedJob:
    workers: int
    policy: str
    iterations: int
    task: str
    late: str
    delay_s: float
    heartbeat_s: float
    seed: int
    inject_straggler: str | None = None


@dataclass(frozen=True)
class DistributedConfig:
    jobs: dict[str, DistributedJob]


@dataclass(frozen=True)
class PilotConfig:
    """The pilot the convergence runs wait for (``bdsgd.training.pilot``)."""

    enabled: bool
    lr_factors: tuple[float, ...]


@dataclass(frozen=True)
class Config:
    experiment: str
    seed: int
    traces: dict[str, TraceSpec]
    model: ModelConfig
    policies: PoliciesConfig
    throughput: ThroughputConfig
    network: NetworkConfig
    train: TrainConfig | None  # None in a stage's config that reads nothing of it (see the schema)
    wandb: WandbConfig
    resources: ResourcesConfig
    distributed: DistributedConfig
    pilot: PilotConfig
    figure_note: str | None  # printed over every figure of the experiment's results
    strict: bool  # refuse a cell that cannot separate the policies before any job (bdsgd.plan.regime)
    source: str = ""  # the file it came from, for error messages; not part of the hash

    def to_dict(self) -> dict[str, Any]:
        """The resolved config (defaults filled in), as JSON data; of a stage's config
        (``bdsgd.config.stages``) the whole, the sections it guards included (their ``_value``)."""
        plain = {f.name: getattr(getattr(self, f.name), "_value", getattr(self, f.name))
                 for f in fields(self)}
        data = asdict(replace(self, **plain))
        data.pop("source")
        return json.loads(json.dumps(data))  # tuples -> lists

    def hash(self) -> str:
        """A short content hash of the resolved config (key order does not matter)."""
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def trace(self, name: str) -> TraceSpec:
        if name not in self.traces:
            raise UserError(self.source, f"traces.{name}",
                            f"no trace named {name!r}; have {sorted(self.traces)}")
        return self.traces[name]

    def cluster_of(self, trace: str, seed: int) -> str:
        """The cluster a convergence run of ``seed`` replays on ``trace``: of a simulated trace,
        its draw for the seed (``bdsgd.layout.cluster_draw``); a recorded trace, itself."""
        return cluster_draw(trace, seed) if self.trace(trace).source == "simulate" else trace

    def for_task(self, task: str, variant: dict[str, Any] | None = None) -> Config:
        """This config as a run of ``task`` reads it: train:'s keys that the task's recipe sets
        (train.recipes) replaced by the recipe's, then those that the run's policy variant sets
        (``variant``, ``bdsgd.policies.VARIANTS``: an ablation arm overrides the recipe too);
        itself where they already are."""
        tc = self.training()
        keys = {**tc.recipes.get(task, {}), **(variant or {})}
        if all(getattr(tc, key) == value for key, value in keys.items()):
            return self
        return replace(self, train=replace(tc, **keys))

    def train_traces(self) -> tuple[str, ...]:
        """The traces the convergence runs replay (train.trace: one name or a list)."""
        return trace_names(self.training().trace)

    def run_trace(self) -> str:
        """The one trace a run replays: train.trace's; a list is refused (the workflow names one)."""
        traces = self.train_traces()
        if len(traces) > 1:
            raise UserError(self.source, "train.trace", f"lists {len(traces)} traces; a run "
                            "replays one: name it alone (the workflow writes each run's so)")
        return traces[0]

    def training(self) -> TrainConfig:
        """The train: section, for the commands that read it (a stage's slice may leave it out)."""
        if self.train is None:
            raise UserError(self.source, "train", "this command needs a train: section (traces "
                            "gather: or pass --data-dir)")
        return self.train


def trace_names(trace: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """train.trace's names: one name, or a list of them."""
    return (trace,) if isinstance(trace, str) else tuple(trace)


def _sub(cls, data: dict[str, Any] | None):
    """A section's dataclass from its mapping (YAML's lists as tuples)."""
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in (data or {}).items()})


def from_dict(data: dict[str, Any], source: str = "<config>") -> Config:
    data = validate(json.loads(json.dumps(data)), source)
    for name, spec in data["traces"].items():
        if spec["source"] == "import" and not (spec.get("path") and spec.get("format")):
            raise UserError(source, f"traces.{name}", "source 'import' needs 'path' and 'format'")
    train = data.get("train")
    for key, names in (("train.trace", () if train is None else trace_names(train["trace"])),
                       ("throughput.ablations.traces", data["throughput"]["ablations"]["traces"])):
        for name in names:
            if name not in data["traces"]:
                raise UserError(source, key, f"{name!r} is not one of traces: {sorted(data['traces'])}")
    traces = {name: TraceSpec(**{**spec, "simulate": _sub(SimulateConfig, spec.get("simulate")),
                                 "gather": _sub(GatherConfig, spec.get("gather"))})
              for name, spec in data["traces"].items()}
    return Config(
        experiment=data["experiment"], seed=data["seed"], traces=traces,
        model=_sub(ModelConfig, data["model"]),
        policies=_sub(PoliciesConfig, data["policies"]),
        throughput=_sub(ThroughputConfig, {**data["throughput"], "ablations": _sub(
            AblationsConfig, data["throughput"]["ablations"])}),
        network=_sub(NetworkConfig, data["network"]),
        train=None if train is None else _sub(TrainConfig, train),
        wandb=_sub(WandbConfig, data["wandb"]), resources=_sub(ResourcesConfig, data["resources"]),
        distributed=DistributedConfig({name: _sub(DistributedJob, job) for name, job
                                       in data["distributed"]["jobs"].items()}),
        pilot=_sub(PilotConfig, data["pilot"]),
        figure_note=data["figure_note"], strict=data["strict"], source=source,
    )


def load_config(path: str | Path) -> Config:
    """Read, default-fill and validate a YAML config file (a command reads it through
    ``bdsgd.config.stages.load_stage_config``, as its stage may)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise UserError(str(path), "-", "config file not found") from None
    except IsADirectoryError:
        raise UserError(str(path), "-", "a directory, not a config file") from None
    except UnicodeDecodeError:
        raise UserError(str(path), "-", "not a text file (YAML is UTF-8)") from None
    except yaml.YAMLError as exc:
        raise UserError(str(path), "-", f"not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UserError(str(path), "-", "config must be a mapping of keys to values")
    return from_dict(data, str(path))


def default_config() -> Config:
    """The schema's defaults (the schema is their one home), for commands run without --config."""
    return from_dict({"experiment": "defaults", "traces": {"t": {"source": "simulate"}},
                      "train": {"trace": "t", "tasks": ["digits"]}}, "<defaults>")
