"""What a config says that can be checked before any job: each check names the config file and
its key (``bdsgd.plan.preflight``), in ``bdsgd plan`` and when the workflow starts."""

from __future__ import annotations

import pytest
import yaml

from bdsgd.config import from_dict
from bdsgd.errors import UserError
from bdsgd.plan.preflight import check
from tests.helpers import REPO, bdsgd_in_process, snakemake

SIM = {"source": "simulate", "simulate": {"workers": 4, "iterations": 40}}


def config(**sections) -> dict:
    return {"experiment": "pf", "traces": {"t": SIM},
            "train": {"trace": "t", "tasks": ["digits"], "policies": ["sync", "static"],
                      "max_iterations": 5}, **sections}


@pytest.mark.parametrize("changes, key", [
    ({"policies": {"static_backups": 4}}, "policies.static_backups: 4 backup workers leave none"),
    ({"traces": {"t": SIM, "r": {"source": "import", "format": "csv", "path": "no.csv"}}},
     "traces.r.path: no such file"),
    ({"throughput": {"ablations": {"traces": ["t"], "backups": 5}}},
     "throughput.ablations.backups"),
    ({"distributed": {"jobs": {"j": {"workers": 3, "policy": "bdsgd", "iterations": 2}}}},
     "distributed.jobs.j.workers: 3: policy bdsgd reads the run-time model of trace t"),
    ({"train": {"trace": "t", "tasks": ["mnist"], "data_dir": "nowhere"}},
     "train.data_dir: nowhere/MNIST/raw is missing"),
])
def test_each_check_names_the_file_and_key(changes, key):
    with pytest.raises(UserError, match=f"^my.yaml: {key}"):
        check(from_dict(config(**changes), "my.yaml"))


def test_a_good_config_passes_and_a_plan_away_from_the_data_checks_no_folder():
    check(from_dict(config(), "my.yaml"))
    check(from_dict(config(train={"trace": "t", "tasks": ["mnist"], "data_dir": "nowhere"}),
                    "my.yaml"), data=False)


@pytest.mark.slow  # runs snakemake
@pytest.mark.parametrize("changes, key", [
    ({"policies": {"static_backups": 30}}, "policies.static_backups"),
    ({"train": {"trace": "t", "tasks": ["mnist"], "data_dir": "nowhere"}}, "train.data_dir"),
    # the schema's, at parse time; and strict: a straggler cell on a link 1,000 times slower
    # than its compute ties with sync (both: make test-long, which CI runs)
    pytest.param({"network": {"topology": "tree"}}, "network.topology", marks=pytest.mark.long),
    pytest.param({"strict": True, "traces": {"t": {"source": "simulate", "simulate": {
        "workers": 4, "iterations": 40, "scenario": "emerging-straggler"}}},
      "network": {"topology": "ps", "bandwidth_gbit_s": 0.01},
      "train": {"trace": "t", "tasks": ["digits"], "max_iterations": 5, "clock": "scaled",
                "gradient_s": 1e-4}}, "network: cannot separate", marks=pytest.mark.long),
])
def test_the_workflow_stops_before_its_first_job(tmp_path, changes, key):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config(**changes)))
    proc = snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path / "wd"),
                     "--configfile", str(path), "--cores", "1")
    assert proc.returncode != 0
    last = (proc.stdout + proc.stderr).strip().splitlines()[-1]
    assert last.startswith(f"bdsgd: error: {path}: {key}")
    assert not (tmp_path / "wd" / "results").exists()  # no job ran


def test_plan_checks_the_config_first(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config(policies={"static_backups": 30})))
    proc = bdsgd_in_process(capsys, "plan", "--config", path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"bdsgd: error: {path}: policies.static_backups: 30 backup "
                                   "workers leave none of trace t's 4 workers to wait for")
