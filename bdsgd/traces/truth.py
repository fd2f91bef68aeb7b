"""The simulator's truth sidecar: a simulated trace's latent state (``simulate.Truth``), saved
beside it as ``<stem>.truth.npz`` for the ``bayes`` reference, which draws from the true dynamics.

A sidecar written before a mechanism existed reads with that mechanism switched off
(``simulate.SWITCHED_OFF``): stragglers that stay slow from their onset, no rack event.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from bdsgd.errors import UserError
from bdsgd.outputs.io import write_with
from bdsgd.traces.simulate import SWITCHED_OFF, Truth

_ARRAYS = ("node", "base_s", "contention", "straggler", "straggler_path", "load", "rack_struck",
           "stall_t", "stall_worker", "stall_s")
_INTS = ("straggler_onset", "rack_onset", "rack_end")
# What a sidecar from before these mechanisms lacks: its stragglers stayed slow, no rack event.
_ADDED = ("straggler_path", "rack_struck")


def truth_path(trace_path: str | Path) -> Path:
    """The latent-state sidecar of a simulated trace: ``<stem>.truth.npz`` beside it."""
    path = Path(trace_path)
    return path.with_name(f"{path.stem}.truth.npz")


def write_truth(truth: Truth, path: str | Path) -> Path:
    arrays = {name: getattr(truth, name) for name in _ARRAYS}
    header = json.dumps({"params": truth.params, "seed": truth.seed,
                         **{name: getattr(truth, name) for name in _INTS}})

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a name
            np.savez_compressed(f, header=np.array(header), **arrays)

    return write_with(path, write)


def read_truth(path: str | Path) -> Truth:
    """Load a truth sidecar; a missing or damaged file is a one-line UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(str(path), "-", "simulator truth file not found ('bdsgd traces "
                        "simulate' writes it beside the trace)")
    try:
        with np.load(path, allow_pickle=False) as data:
            header = json.loads(str(data["header"]))
            arrays = {name: data[name] for name in _ARRAYS if name in data or name not in _ADDED}
        ints = {name: header.get(name, 0) for name in _INTS}
        T = len(arrays["load"])
        arrays.setdefault("straggler_path", arrays["straggler"]
                          & (np.arange(T)[:, None] >= ints["straggler_onset"]))
        arrays.setdefault("rack_struck", np.zeros(len(arrays["node"]), dtype=bool))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(str(path), "-", f"not a simulator truth file ({reason})") from None
    return Truth(params={**SWITCHED_OFF, **header["params"]}, seed=header["seed"], **ints,
                 **arrays)
