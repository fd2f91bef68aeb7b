"""A trained model on disk: ``checkpoint`` (what ``bdsgd model train`` writes) and ``load_model``.

A checkpoint holds plain data and tensors only, so it loads with ``weights_only`` (safe). FORMAT
names the model's parameters and meaning: a checkpoint of another format is refused, not
guessed at. Every torch file bdsgd reads back (a model; the checkpoints of ``bdsgd train``,
``bdsgd model train`` and the distributed server) goes through ``read_state``: a damaged one is
one line naming it and saying what to do, in bdsgd's terms (never PyTorch's advice to load it
unsafely).
"""

from __future__ import annotations

import dataclasses
import pickle
import warnings
import zipfile
from pathlib import Path

import torch

from bdsgd.config import ModelConfig, default_config
from bdsgd.errors import UserError
from bdsgd.runtime_model.model import RuntimeModel

FORMAT = "bdsgd-runtime-model/7"


def checkpoint(model: RuntimeModel, **extra) -> dict:
    """What ``load_model`` reads back, with ``extra`` entries (losses, provenance)."""
    return {"format": FORMAT, "state_dict": model.state_dict(),
            "config": dataclasses.asdict(model.config), "n_workers": model.n_workers,
            "node": None if model.node is None else model.node.tolist(),
            "normalisation": {"scale_s": model.scale_s, "time_unit": model.time_unit}, **extra}


def _damage(exc: Exception) -> str:
    """What is wrong with a file torch.load refused, in bdsgd's terms (torch's own messages
    advise loading it unsafely, which is no advice for a file bdsgd wrote)."""
    if isinstance(exc, EOFError) or not str(exc).strip():
        return "empty or cut short"
    if isinstance(exc, pickle.UnpicklingError) and "weights only" in str(exc).lower():
        return "holds objects other than tensors and plain data: not a file bdsgd wrote"
    if isinstance(exc, (RuntimeError, zipfile.BadZipFile)):
        return "not a complete torch file (damaged or cut short)"
    return f"unreadable ({type(exc).__name__})"


def read_state(path: str | Path, remedy: str) -> dict:
    """The dict a bdsgd torch file holds (tensors and plain data only). A file that does not
    load, or holds no dict, is a UserError naming it: what is wrong, then ``remedy`` (what to
    do, e.g. "delete it to start afresh")."""
    try:
        with warnings.catch_warnings():  # torch's notes on pickle protocols: not the user's
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many types on a damaged file
        raise UserError(str(path), "-", f"{_damage(exc)}; {remedy}") from None
    if not isinstance(state, dict):
        raise UserError(str(path), "-", f"holds a {type(state).__name__}, not what bdsgd writes;"
                        f" {remedy}")
    return state


def load_model(path: str | Path) -> RuntimeModel:
    """Read a checkpoint written by ``bdsgd model train``; a bad file is a UserError naming it.
    A model: key the checkpoint's config lacks (one added after it was written) takes the
    schema's default, which is how that model was trained."""
    path = Path(path)
    if not path.is_file():
        raise UserError(str(path), "-", "model file not found")
    ckpt = read_state(path, "not a model checkpoint: give one that bdsgd model train wrote")
    if ckpt.get("format") != FORMAT:
        raise UserError(str(path), "format", f"not a {FORMAT} checkpoint: train the model "
                        "again with this version's bdsgd model train")
    try:
        norm = ckpt["normalisation"]
        config = ModelConfig(**{**dataclasses.asdict(default_config().model), **ckpt["config"]})
        model = RuntimeModel(config, int(ckpt["n_workers"]),
                             norm["scale_s"], norm["time_unit"], ckpt["node"])
        model.load_state_dict(ckpt["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        why = str(exc).splitlines()[0]
        raise UserError(str(path), "config", f"incompatible checkpoint ({why}): train the "
                        "model again with this version's bdsgd model train") from None
    return model.eval()
