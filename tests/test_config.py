import dataclasses

import pytest
import yaml

from bdsgd import config as C
from bdsgd.errors import UserError
from tests.conftest import REPO, tiny_config

SECTIONS = {
    "model": C.ModelConfig, "policies": C.PoliciesConfig, "throughput": C.ThroughputConfig,
    "train": C.TrainConfig, "wandb": C.WandbConfig, "resources": C.ResourcesConfig,
    "distributed": C.DistributedConfig,
}


def test_schema_and_dataclasses_agree():
    """Every schema key has a typed field and every field a schema key (no silent drift)."""
    schema = yaml.safe_load(C.SCHEMA_PATH.read_text())
    top = {f.name for f in dataclasses.fields(C.Config)} - {"source"}
    assert top == set(schema["properties"])
    pairs = [(cls, schema["properties"][name]) for name, cls in SECTIONS.items()]
    pairs += [(C.TraceSpec, schema["$defs"]["trace"]), (C.SimulateConfig, schema["$defs"]["simulate"]),
              (C.GatherConfig, schema["$defs"]["gather"]),
              (C.DistributedJob, schema["$defs"]["distributed_job"])]
    for cls, section in pairs:
        assert {f.name for f in dataclasses.fields(cls)} == set(section["properties"]), cls.__name__


def test_schema_policy_names_are_the_registrys():
    """Every registry policy, explore-<p> around every predictive one and both training modes
    may be trained; the throughput stage replays all but the training mode cyclic."""
    from bdsgd.policies import MODES, NAMES, spec

    defs = yaml.safe_load(C.SCHEMA_PATH.read_text())["$defs"]
    trained = set(defs["policy"]["enum"])
    explore = {f"explore-{p}" for p in NAMES if spec(p).predictive}
    assert trained == set(NAMES) | explore | set(MODES)
    assert set(defs["replayed_policy"]["enum"]) == trained - {"cyclic"}


def test_workflow_schema_is_the_package_schema():
    assert (REPO / "workflow/schemas/config.schema.yaml").resolve() == C.SCHEMA_PATH.resolve()


@pytest.mark.parametrize("name", ["smoke.yaml", "paper.yaml"])
def test_shipped_configs_load(name):
    cfg = C.load_config(REPO / "configs" / name)
    assert cfg.train.trace in cfg.traces
    assert len(cfg.hash()) == 16


def test_defaults_filled_and_hash_stable():
    a = C.from_dict(tiny_config())
    b = C.from_dict(yaml.safe_load(yaml.safe_dump(tiny_config())))
    assert a.policies.rule in ("rate", "ratio")
    assert a.to_dict() == b.to_dict() and a.hash() == b.hash()
    changed = C.from_dict(tiny_config(seed=1))
    assert changed.hash() != a.hash()
    assert a.to_dict()["train"]["seeds"] == [0]  # JSON-able


@pytest.mark.parametrize(("patch", "field"), [
    ({"train": {"trace": "nope", "tasks": ["digits"]}}, "train.trace"),
    ({"train": {"trace": "sim", "tasks": ["nosuchtask"]}}, "train.tasks.0"),
    ({"model": {"epochs": 0}}, "model.epochs"),
    ({"model": {"emission": "poisson"}}, "model.emission"),
    ({"bogus": 1}, "(top level)"),
    ({"traces": {"x": {"source": "import"}}, "train": {"trace": "x", "tasks": ["digits"]}}, "traces.x"),
])
def test_bad_config_names_field(patch, field):
    with pytest.raises(UserError) as exc:
        C.from_dict(tiny_config(**patch), "cfg.yaml")
    assert exc.value.file == "cfg.yaml"
    assert exc.value.field == field
    assert "\n" not in str(exc.value)


def test_load_config_file_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        C.load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("experiment: [unclosed\n")
    with pytest.raises(UserError, match="not valid YAML"):
        C.load_config(bad)
    bad.write_text("- a list\n")
    with pytest.raises(UserError, match="mapping"):
        C.load_config(bad)


def test_a_stage_config_may_leave_train_out():
    """The config file the workflow writes for a trace's stage holds only what that stage reads
    (no train:); whatever it leaves out takes the schema's defaults."""
    cfg = C.from_dict({"experiment": "tiny", "seed": 3, "model": {"epochs": 2},
                       "traces": {"sim": {"source": "simulate", "simulate": {"workers": 6}}}})
    assert cfg.train is None and cfg.to_dict()["train"] is None
    assert cfg.seed == 3 and cfg.model.epochs == 2 and cfg.trace("sim").simulate.workers == 6
    assert cfg.policies == C.from_dict(tiny_config()).policies
