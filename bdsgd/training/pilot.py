"""The pilot (``bdsgd pilot``): can the recipe reach its target at all, before the grid is paid for?

A convergence grid is hundreds of runs of one recipe per task; a recipe that cannot reach its
target makes every one of them report "never reached", and no policy can then be told apart by
its time to accuracy. The pilot trains the task's recipe with sync (no straggler policy: what
every other run is measured against) on one trace of the grid's cluster size, seed 0, at the
recipe's learning rate times each of ``pilot.lr_factors``. The recipe's own rate (factor 1) must
reach the target within its budget (train.epochs or train.max_iterations); if it does not, the
pilot is the config's error, naming the task, the accuracy reached and the budget, and the
workflow's convergence runs, which wait for it, never start. The other factors say which way to
move the rate when it fails, and whether a neighbouring rate gets there sooner when it does.

Each factor is an ordinary convergence run (``bdsgd.training.loop.train_run``) in its own folder,
lr<factor>/, so a stopped pilot resumes each from its checkpoint; its runs are not logged to W&B
(the runs table holds the grid's); a run that finished with the same config is not trained
again. The verdict is pilot.json.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from bdsgd.config import Config, WandbConfig
from bdsgd.config.stages import unguarded
from bdsgd.errors import UserError
from bdsgd.outputs.io import write_json
from bdsgd.training.loop import train_run
from bdsgd.training.spec import RunSpec, run_spec

logger = logging.getLogger(__name__)

POLICY = "sync"


def at_rate(cfg: Config, task: str, factor: float) -> Config:
    """``cfg`` with ``task``'s learning rate times ``factor``, not logged to W&B."""
    tc = unguarded(cfg.training())  # every key of train: the pilot reads
    lr = tc.learning_rate * factor
    recipes = {**tc.recipes, task: {**tc.recipes.get(task, {}), "learning_rate": lr}}
    return dataclasses.replace(cfg, train=dataclasses.replace(tc, learning_rate=lr, recipes=recipes),
                               wandb=WandbConfig("disabled", "bdsgd", None, None))


def budget(cfg: Config) -> str:
    """The task's budget as its recipe states it."""
    tc = cfg.training()
    return f"{tc.epochs:g} epochs" if tc.epochs is not None else f"{tc.max_iterations} iterations"


def finished(run: RunSpec) -> dict | None:
    """The summary of ``run`` if it finished with its config: a pilot resumed after a stop
    trains only what it had not."""
    path = run.out / "result.json"
    if not path.exists():
        return None
    result = json.loads(path.read_text())
    return result["summary"] if result["config_hash"] == run.cfg.hash() else None


def run_pilot(cfg: Config, task: str, trace_path, history_path, out_dir) -> dict:
    """Train the pilot's runs into ``out_dir`` and write its verdict, ``out_dir``/pilot.json;
    the recipe's rate missing the target is a UserError naming cfg.source. ``cfg``: as a run of
    ``task`` reads it (``Config.for_task``)."""
    out_dir = Path(out_dir)
    factors = sorted({1.0, *cfg.pilot.lr_factors})
    runs = []
    for factor in factors:
        run = run_spec(at_rate(cfg, task, factor), task, POLICY, 0, trace_path,
                       out_dir / f"lr{factor:g}", history_path=history_path)
        summary = finished(run)
        if summary is None:
            train_run(run)
            summary = finished(run)
        runs.append({"lr_factor": factor, "learning_rate": run.cfg.training().learning_rate,
                     "reached": summary["time_to_target_s"] is not None,
                     "time_to_target_s": summary["time_to_target_s"],
                     "final_accuracy": summary["final_accuracy"],
                     "iterations": summary["iterations"]})
    recipe = next(r for r in runs if r["lr_factor"] == 1.0)
    target = cfg.training().target_accuracy[task]
    verdict = {"task": task, "trace": str(trace_path), "policy": POLICY,
               "target_accuracy": target, "budget": budget(cfg),
               "passed": recipe["reached"], "runs": runs}
    for r in runs:
        reached = f"target in {r['time_to_target_s']:.4g} s" if r["reached"] else "never reached"
        logger.info("pilot %s lr x%g (%.4g): %s, final accuracy %.4f after %d iterations", task,
                    r["lr_factor"], r["learning_rate"], reached, r["final_accuracy"],
                    r["iterations"])
    if not recipe["reached"]:
        others = "; ".join(f"lr x{r['lr_factor']:g}: {r['final_accuracy']:.4f}"
                           + (" (reached)" if r["reached"] else "") for r in runs if r is not recipe)
        raise UserError(cfg.source, f"train.recipes.{task}",
                        f"the pilot's sync run at the recipe's learning rate "
                        f"({recipe['learning_rate']:.4g}) reached {recipe['final_accuracy']:.4f} "
                        f"accuracy in its budget of {verdict['budget']}, short of the target "
                        f"{target}" + (f" ({others})" if others else "")
                        + ": fix the recipe (rate, budget) or the target before the grid runs")
    write_json(out_dir / "pilot.json", verdict)
    return verdict
