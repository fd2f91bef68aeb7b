"""The config's JSON schema (``config.schema.yaml`` beside this file): read, and applied to a
config as data, its defaults filled in; ``bdsgd.config`` builds the typed config from the result.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from bdsgd.errors import UserError

SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")


def _schema() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_PATH.read_text())


# The tasks a config may name, in the schema's one list (``bdsgd.tasks`` loads each), and the
# folders under train.data_dir each task's reader opens (digits ships with scikit-learn): here,
# not beside the readers, so that checking a config (the workflow's start) needs no torch.
TASKS = tuple(_schema()["properties"]["train"]["properties"]["tasks"]["items"]["enum"])
DATA_FOLDERS = {"digits": (), "mnist": ("MNIST/raw",), "cifar10": ("cifar-10-batches-py",),
                "imagenet": ("imagenet/train", "imagenet/val")}


def data_folders(name: str, data_dir: str | Path) -> list[Path]:
    """The folders task ``name`` reads under ``data_dir``."""
    return [Path(data_dir) / folder for folder in DATA_FOLDERS[name]]


def _with_defaults(validator_class):
    """A validator that also fills in ``default:`` values, as Snakemake's validate(set_default=True)."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = json.loads(json.dumps(sub["default"]))
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def validate(data: dict[str, Any], source: str = "<config>") -> dict[str, Any]:
    """Fill in defaults and validate; raise a one-line UserError naming the field on failure."""
    schema = _schema()
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = ".".join(str(p) for p in err.absolute_path) or "(top level)"
        raise UserError(source, where, err.message)
    return data
