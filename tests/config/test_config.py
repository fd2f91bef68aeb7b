import dataclasses

import numpy as np
import pytest
import yaml

from bdsgd import config as C
from bdsgd.config import stages as S
from bdsgd.config.validate import SCHEMA_PATH
from bdsgd.errors import UserError
from tests.helpers import REPO, tiny_config

SECTIONS = {
    "model": C.ModelConfig, "policies": C.PoliciesConfig, "throughput": C.ThroughputConfig,
    "train": C.TrainConfig, "wandb": C.WandbConfig, "resources": C.ResourcesConfig,
    "distributed": C.DistributedConfig, "pilot": C.PilotConfig,
}


def test_schema_and_dataclasses_agree():
    """Every schema key has a typed field and every field a schema key (no silent drift)."""
    schema = yaml.safe_load(SCHEMA_PATH.read_text())
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
    import re

    from bdsgd.cluster.schedules import MODES
    from bdsgd.policies import NAMES, VARIANTS, backups_of, spec

    defs = yaml.safe_load(SCHEMA_PATH.read_text())["$defs"]
    (trained_names, sweep, variants), (replayed_names, replayed_sweep) = (
        defs[key]["anyOf"] for key in ("policy", "replayed_policy"))
    trained = set(trained_names["enum"])
    explore = {f"explore-{p}" for p in NAMES if spec(p).predictive}
    assert trained == set(NAMES) | explore | set(MODES)
    assert set(replayed_names["enum"]) == trained - {"cyclic"}
    # static-<p>pct: the schema's pattern takes exactly the names the registry does
    assert sweep == replayed_sweep
    for name in ("static-0pct", "static-5pct", "static-2.5pct", "static-99pct", "static-100pct",
                 "static-5", "static-05pct", "explore-static-5pct"):
        assert bool(re.search(sweep["pattern"], name)) == (backups_of(name) is not None), name
    # <policy>+<variant>: the schema's pattern takes exactly the variants the registry does, of
    # every name the schema takes without one (a training mode takes none)
    for name in [*trained, "static-5pct", "static-2.5pct", "nope"]:
        for suffix in [*VARIANTS, "fast", ""]:
            arm = f"{name}+{suffix}"
            try:
                spec(arm)
                known = name not in MODES
            except ValueError:
                known = False
            assert bool(re.search(variants["pattern"], arm)) == known, arm


def test_workflow_schema_is_the_package_schema():
    assert (REPO / "workflow/schemas/config.schema.yaml").resolve() == SCHEMA_PATH.resolve()


@pytest.mark.parametrize("name", ["smoke.yaml", "paper.yaml"])
def test_shipped_configs_load(name):
    cfg = C.load_config(REPO / "configs" / name)
    assert set(cfg.train_traces()) <= set(cfg.traces)
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
    defaults = C.from_dict({k: v for k, v in tiny_config().items() if k != "policies"})
    assert cfg.policies == defaults.policies


# ----------------------------------------------------------------------------- stage reads
def _read(cfg, key):
    """The value of ``key`` ("seed", "policies", "throughput.comm_s") in ``cfg``, used (a section
    as its fields, a value formatted), so that an undeclared one raises."""
    section, _, sub = key.partition(".")
    value = getattr(cfg, section)
    if sub:
        value = getattr(value, sub)
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else f"{value}"


@pytest.mark.parametrize("stage", sorted(S.STAGE_READS))
def test_a_stage_reads_what_it_declares_and_nothing_else(config_file, stage):
    """On a config loaded as a stage, every key STAGE_READS declares reads as in the whole config;
    every other section, key of a section declared in part, or top-level key raises."""
    whole, cfg = C.load_config(config_file), S.load_stage_config(config_file, stage)
    reads = S.STAGE_READS[stage]
    for key in reads:
        assert _read(cfg, key) == _read(whole, key), key
    for f in dataclasses.fields(C.Config):
        section = f.name
        if section == "source" or section in reads:
            continue
        declared = {k.partition(".")[2] for k in reads if k.startswith(f"{section}.")}
        value = getattr(whole, section)
        keys = [k.name for k in dataclasses.fields(value)] if dataclasses.is_dataclass(value) else []
        for key in [f"{section}.{k}" for k in keys if k not in declared] or [section]:
            with pytest.raises(S.UndeclaredRead, match=f"stage '{stage}' read config '{key}'"):
                _read(cfg, key)
    # the record of the config is all of it (provenance, W&B), and copying it reads nothing
    assert cfg.to_dict() == whole.to_dict() and cfg.hash() == whole.hash()
    assert dataclasses.replace(cfg, model=whole.model).hash() == whole.hash()


def test_undeclared_reads_fail_as_bugs_not_as_user_errors(config_file):
    cfg = S.load_stage_config(config_file, "evaluate_model")
    for use in (lambda: cfg.seed + 1, lambda: int(cfg.seed), lambda: cfg.training().data_dir,
                lambda: "sim" in cfg.wandb, lambda: cfg.throughput.policies):
        with pytest.raises(S.UndeclaredRead):
            use()
    assert not issubclass(S.UndeclaredRead, UserError)  # the CLI's one-line errors are the user's


def test_a_command_that_reads_an_undeclared_section_fails(config_file, tmp_path, monkeypatch):
    """`bdsgd traces simulate` reads the trace's spec: with traces: undeclared for its stage it
    fails loudly (the bug the table prevents: in the DAG its config file would not hold it)."""
    from bdsgd import cli

    out = tmp_path / "t.parquet"
    monkeypatch.setitem(S.STAGE_READS, "simulate_trace", ("experiment", "seed"))
    with pytest.raises(S.UndeclaredRead, match="'traces'"):
        cli.main(["traces", "simulate", "--config", str(config_file), "--out", str(out)])
    monkeypatch.setitem(S.STAGE_READS, "simulate_trace", ("experiment", "traces"))
    with pytest.raises(S.UndeclaredRead, match="'seed'"):
        cli.main(["traces", "simulate", "--config", str(config_file), "--out", str(out)])
    assert not out.exists()


def test_every_command_loads_its_config_as_its_stage(config_file, tmp_path, monkeypatch):
    """Each command that reads a config file loads it as its stage (load_stage_config)."""
    from bdsgd import cli
    from bdsgd.traces.io import write_trace
    from bdsgd.traces.schema import from_arrays

    class Loaded(Exception):
        pass

    def spy(path, stage, task=None, variant=None):
        raise Loaded(stage)

    monkeypatch.setattr(S, "load_stage_config", spy)
    trace, out, c = tmp_path / "t.parquet", str(tmp_path / "out"), str(config_file)
    write_trace(from_arrays(np.ones((4, 2))), trace)
    commands = {
        "simulate_trace": ["traces", "simulate", "--config", c, "--out", out],
        "gather_trace": ["traces", "gather", "--config", c, "--out", out],
        "train_model": ["model", "train", str(trace), "--config", c, "--out", out],
        "evaluate_model": ["model", "evaluate", "m.pt", str(trace), "--config", c],
        "throughput": ["throughput", str(trace), "--policies", "sync", "--config", c, "--json", out],
        "train": ["train", "--config", c, "--task", "digits", "--policy", "sync", "--seed", "0",
                  "--trace", str(trace), "--out", out],
    }
    for stage, argv in commands.items():
        with pytest.raises(Loaded) as loaded:
            cli.main(argv)
        assert loaded.value.args == (stage,), argv


def test_stage_reads_name_real_keys():
    """Every key STAGE_READS declares is a key of the config (a typo would guard nothing)."""
    top = {f.name for f in dataclasses.fields(C.Config)} - {"source"}
    for stage, reads in S.STAGE_READS.items():
        for key in reads:
            section, _, sub = key.partition(".")
            assert section in top, (stage, key)
            if sub:
                assert sub in {f.name for f in dataclasses.fields(SECTIONS[section])}, (stage, key)
        assert set(S.STAGE_FLAGS.get(stage, ())) <= set(reads), stage
        assert set(S.slice_keys(stage)) == set(reads) - set(S.STAGE_FLAGS.get(stage, ()))


def test_a_run_reads_its_tasks_recipe_and_one_trace(tmp_path):
    """train.recipes: a run of a task reads the keys its recipe sets in place of train:'s (the
    rest stay), also through its stage's config file; train.trace: a run replays one trace, a
    list is refused by name; a simulated trace's seed s > 0 is a cluster of its own."""
    cfg = tiny_config()
    cfg["traces"]["pai"] = {"source": "import", "format": "alibaba-pai", "path": "x.csv"}
    cfg["train"] |= {"trace": ["sim", "pai"], "learning_rate": 0.1, "momentum": 0.5,
                     "recipes": {"digits": {"learning_rate": 0.4, "warmup_samples": 64}}}
    whole = C.from_dict(cfg)
    assert whole.train_traces() == ("sim", "pai")
    run = whole.for_task("digits").training()
    assert (run.learning_rate, run.warmup_samples, run.momentum) == (0.4, 64, 0.5)
    assert whole.for_task("mnist") is whole and whole.for_task("digits").for_task("digits") == (
        whole.for_task("digits"))
    with pytest.raises(UserError, match="train.trace: lists 2 traces"):
        whole.run_trace()
    assert [whole.cluster_of(t, s) for t in ("sim", "pai") for s in (0, 3)] == [
        "sim", "sim/draw3", "pai", "pai"]
    cfg["train"]["trace"] = "pai"
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    staged = S.load_stage_config(path, "train", "digits")
    assert staged.run_trace() == "pai" and staged.training().learning_rate == 0.4
    cfg["train"]["recipes"] = {"digits": {"data_dir": "x"}}  # not a recipe's key
    with pytest.raises(UserError, match="train.recipes"):
        C.from_dict(cfg)
    cfg["train"] |= {"recipes": {}, "trace": ["sim", "nope"]}
    with pytest.raises(UserError, match="train.trace: 'nope' is not one of traces"):
        C.from_dict(cfg)
