"""A convergence run's specification: what ``bdsgd train`` (or the pilot, or a benchmark) asks
for, resolved once where the run is asked for and passed down. Below it nothing parses the
policy's name or reshapes the config again."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bdsgd.config import Config, stages
from bdsgd.policies.build import policy_variant


@dataclass(frozen=True)
class RunSpec:
    """One convergence run."""

    cfg: Config  # as the run reads it: its task's recipe and its policy's variant applied
    task: str
    policy: str  # the run's name, [explore-]<policy>[+<variant>]: its folder, rows and marks
    base: str  # what it runs: the cutoff policy or the training mode, the name less its variant
    seed: int
    trace: Path  # the replayed run-times
    out: Path  # the run's folder
    history: Path | None = None  # the trace's iterations before the replayed ones
    model: Path | None = None  # the run-time model a policy reads (--model)
    paper_model: Path | None = None  # the paper's (--paper-model)


def run_spec(cfg: Config | str | Path, task: str, policy: str, seed: int, trace_path, out_dir,
             model_path=None, history_path=None, paper_model_path=None) -> RunSpec:
    """The run of ``task`` under ``policy`` (a name with its variant: a UserError where the
    variant is unknown or changes nothing the policy reads) on ``cfg``, a config or a config
    file (read as the train stage reads it, ``bdsgd.config.stages``), with the train: keys of the task's
    recipe and of the variant set (``Config.for_task``)."""
    base, keys = policy_variant(policy)
    cfg = (cfg.for_task(task, keys) if isinstance(cfg, Config)
           else stages.load_stage_config(cfg, "train", task, keys))
    return RunSpec(cfg, task, policy, base, seed, Path(trace_path), Path(out_dir),
                   *(None if p is None else Path(p)
                     for p in (history_path, model_path, paper_model_path)))
