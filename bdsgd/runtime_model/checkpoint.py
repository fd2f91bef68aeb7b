"""A trained model on disk: ``checkpoint`` (what ``bdsgd model train`` writes) and ``load_model``.

A checkpoint holds plain data and tensors only, so it loads with ``weights_only`` (safe). FORMAT
names the model's parameters and meaning: a checkpoint of another format is refused, not
guessed at.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from bdsgd.config import ModelConfig
from bdsgd.errors import UserError
from bdsgd.runtime_model.model import RuntimeModel

FORMAT = "bdsgd-runtime-model/7"


def checkpoint(model: RuntimeModel, **extra) -> dict:
    """What ``load_model`` reads back, with ``extra`` entries (losses, provenance)."""
    return {"format": FORMAT, "state_dict": model.state_dict(),
            "config": dataclasses.asdict(model.config), "n_workers": model.n_workers,
            "node": None if model.node is None else model.node.tolist(),
            "normalisation": {"scale_s": model.scale_s, "time_unit": model.time_unit}, **extra}


def load_model(path: str | Path) -> RuntimeModel:
    """Read a checkpoint written by ``bdsgd model train``; a bad file is a UserError naming it."""
    path = Path(path)
    if not path.is_file():
        raise UserError(str(path), "-", "model file not found")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch.load raises many types on a corrupt file
        why = str(exc).splitlines()[0]
        raise UserError(str(path), "-", f"not a model checkpoint ({why})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise UserError(str(path), "format", f"not a {FORMAT} checkpoint")
    try:
        norm = ckpt["normalisation"]
        model = RuntimeModel(ModelConfig(**ckpt["config"]), int(ckpt["n_workers"]),
                             norm["scale_s"], norm["time_unit"], ckpt["node"])
        model.load_state_dict(ckpt["state_dict"])
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        why = str(exc).splitlines()[0]
        raise UserError(str(path), "config", f"incompatible checkpoint ({why})") from None
    return model.eval()
