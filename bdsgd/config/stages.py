"""What each stage's command reads of the config, its one home, and the config as a stage may
read it.

``STAGE_READS``: stage (the workflow's rule that runs the command) -> keys ("seed"), sections
("policies"), keys of a section ("throughput.comm_s"). The workflow writes each stage instance a
config file of these (common.smk: config_slice, from ``slice_keys``) and the command loads it
with ``load_stage_config(path, stage)``, on which reading anything else raises
``UndeclaredRead``: a key cannot take the schema's default in the DAG and the configured value
by hand.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bdsgd.config import Config, TrainConfig, load_config

_RUN = tuple(f"train.{f.name}" for f in dataclasses.fields(TrainConfig)
             if f.name not in ("policies", "seeds"))  # a run gets its policy and seed as flags
STAGE_READS = {
    "simulate_trace": ("experiment", "traces", "seed"),  # bdsgd traces simulate
    "gather_trace": ("experiment", "traces", "seed", "train.data_dir"),  # bdsgd traces gather
    # bdsgd model prior; reads no trace, but a config holds one (the first by name)
    "train_prior": ("experiment", "traces", "seed", "model", "wandb"),
    "train_model": ("experiment", "traces", "seed", "model", "wandb"),  # bdsgd model train
    "evaluate_model": ("experiment", "traces", "policies", "throughput.comm_s",
                       "network"),  # model evaluate
    "throughput": ("experiment", "traces", "seed", "policies", "throughput.comm_s",
                   "throughput.comm_ratios", "throughput.decide_every", "throughput.period_policies",
                   "network", "resources.throughput_threads"),
    "train": ("experiment", "traces", "policies", "throughput.comm_s", "network", "wandb", *_RUN),
    # bdsgd pilot: sync runs, not logged to W&B
    "pilot": ("experiment", "traces", "policies", "throughput.comm_s", "network",
              "pilot.lr_factors", *_RUN),
    "distributed": ("experiment", "traces", "policies", "wandb", *_RUN),  # bdsgd distributed
}
STAGE_FLAGS = {"gather_trace": ("train.data_dir",)}  # read, but given as a flag by its rule


def slice_keys(stage: str) -> tuple[str, ...]:
    """What the config file of stage ``stage`` holds: what it reads less what it gets as flags."""
    return tuple(k for k in STAGE_READS[stage] if k not in STAGE_FLAGS.get(stage, ()))


class UndeclaredRead(RuntimeError):
    """A command read a part of the config its stage does not declare: a bug, not a user error."""


class _Guarded:
    """A part of the config its stage does not declare: using it raises UndeclaredRead (passing
    it on does not). Of a section declared in part, the ``keys`` declared read through."""

    __slots__ = ("_value", "_key", "_stage", "_keys")

    def __init__(self, value, key: str, stage: str, keys: frozenset[str]):
        self._value, self._key, self._stage, self._keys = value, key, stage, keys

    def __getattr__(self, name: str):
        if name.startswith("_"):  # protocols probed (copy, pickle) and slots not yet set: absent
            raise AttributeError(name)
        if name in self._keys:
            return getattr(self._value, name)
        self._fail(f"{self._key}.{name}" if dataclasses.is_dataclass(self._value) else self._key)

    def _fail(self, key: str | None = None, *_) -> None:
        raise UndeclaredRead(f"stage {self._stage!r} read config {key or self._key!r}, which "
                             "bdsgd.config.stages.STAGE_READS does not declare for it: declare it there "
                             "(the workflow then writes it into the stage's config file)")

    __bool__ = __len__ = __iter__ = __contains__ = __getitem__ = __hash__ = __eq__ = __lt__ = \
        __gt__ = __int__ = __index__ = __float__ = __str__ = __format__ = __add__ = __radd__ = \
        __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = lambda self, *_: self._fail()


def unguarded(value):
    """A config section as it is, whether its stage guards it or not (to build a changed copy)."""
    return value._value if isinstance(value, _Guarded) else value


def for_stage(cfg: Config, stage: str) -> Config:
    """``cfg`` as stage ``stage`` may read it: what STAGE_READS does not declare for it guarded
    (a section declared in part stays None where the file has none of it)."""
    reads, changes = STAGE_READS[stage], {}
    for f in dataclasses.fields(Config):
        changes[f.name] = value = unguarded(getattr(cfg, f.name))
        keys = frozenset(k.partition(".")[2] for k in reads if k.startswith(f"{f.name}."))
        if f.name != "source" and f.name not in reads and not (keys and value is None):
            changes[f.name] = _Guarded(value, f.name, stage, keys)
    return dataclasses.replace(cfg, **changes)


def load_stage_config(path: str | Path, stage: str, task: str | None = None,
                      variant: dict | None = None) -> Config:
    """The config file ``path`` as stage ``stage`` (a key of STAGE_READS) may read it: each
    command passes its own; a run of ``task``, with its recipe and its policy's ``variant``
    (``Config.for_task``)."""
    cfg = load_config(path)
    return for_stage(cfg if task is None else cfg.for_task(task, variant), stage)
