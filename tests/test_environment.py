"""environment.yml, the conda environment of clusters, holds what uv.lock holds, and the rules'
`conda:` environment installs bdsgd from the checkout (Snakemake's deployment run against a
stand-in conda: no conda on the machines that run the tests)."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.helpers import REPO, SNAKEMAKE, tiny_config

ENV_FILE = REPO / "environment.yml"
RULES_ENV = "../envs/bdsgd.yaml"  # what every rule's conda: names, relative to workflow/rules/
# conda-forge's names of PyPI packages where they differ (the -base packages leave out optional
# extras: Qt for matplotlib, statsmodels for seaborn). Any other name is the same on both.
CONDA_TO_PYPI = {"matplotlib-base": "matplotlib", "seaborn-base": "seaborn"}
NOT_FROM_LOCK = {"python", "pip"}  # conda's own: the interpreter and the installer of pip:


def pinned(spec: str) -> tuple[str, str]:
    """(PyPI name, version) of an exact pin `name==version`; anything else fails the test."""
    match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^=<>!,\s]+)", spec)
    assert match, f"environment.yml: {spec!r} is not an exact pin name==version"
    name = canonicalize_name(match[1])
    return CONDA_TO_PYPI.get(name, name), match[2]


def test_environment_pins_every_direct_dependency_at_the_locked_version():
    env = yaml.safe_load(ENV_FILE.read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    listed = [s for s in conda if Requirement(s).name not in NOT_FROM_LOCK] + pip
    pins = dict(map(pinned, listed))
    assert len(pins) == len(listed), "a package listed twice"

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    direct = {canonicalize_name(Requirement(r).name) for r in
              project["project"]["dependencies"] + project["dependency-groups"]["dev"]}
    lock = tomllib.loads((REPO / "uv.lock").read_text())
    locked = {p["name"]: p["version"] for p in lock["package"] if "version" in p}
    assert set(pins) == direct, "environment.yml and pyproject.toml list different packages"
    assert {name: pins[name] for name in direct} == {name: locked[name] for name in direct}
    assert f"python{project['project']['requires-python']}" in conda


def test_every_rule_names_the_environment_with_its_post_deploy_script():
    """A rule's conda env is the file Snakemake copies to .snakemake/conda/, where a relative
    path (`-e .`) would install nothing: the post-deploy script beside it installs bdsgd."""
    named = [env for smk in (REPO / "workflow/rules").glob("*.smk")
             for env in re.findall(r"^ +conda:\n +(.+)$", smk.read_text(), re.MULTILINE)]
    assert named and set(named) == {f'"{RULES_ENV}"'}
    env = REPO / "workflow/rules" / RULES_ENV
    assert env.resolve() == ENV_FILE
    assert env.with_name("bdsgd.post-deploy.sh").is_file()  # Snakemake's name for it
    pip = next(d["pip"] for d in yaml.safe_load(ENV_FILE.read_text())["dependencies"]
               if isinstance(d, dict))
    assert not [p for p in pip if p.startswith(("-e", ".", "/", "file:"))], pip


# A stand-in for conda that does what Snakemake asks of it when it deploys an environment: its
# installation's answers, `conda env create --prefix P` makes P with a pip that records how it
# was called, and `source <root>/bin/activate P` puts P/bin first on PATH.
FAKE_CONDA = """#!/usr/bin/env bash
case "$1" in
  info) echo '{"conda_prefix": "ROOT", "platform": "linux-64"}' ;;
  --version) echo "conda 25.1.0" ;;
  config) echo '{"get": {"channel_priority": "strict"}}' ;;
  env)
    while [ "$1" != --prefix ]; do shift; done
    mkdir -p "$2/bin"
    printf '#!/bin/sh\\necho "$@" > "%s/pip-args"\\n' "$2" > "$2/bin/pip"
    chmod +x "$2/bin/pip" ;;
esac
"""


@pytest.mark.slow  # runs snakemake
def test_snakemake_deploys_the_environment_with_bdsgd_installed_from_the_checkout(tmp_path):
    """`snakemake --sdm conda` in another working directory: the environment it creates
    from environment.yml gets `pip install --no-deps --editable <this checkout>`."""
    root = tmp_path / "conda"
    (root / "bin").mkdir(parents=True)
    (root / "bin/conda").write_text(FAKE_CONDA.replace("ROOT", str(root)))
    (root / "bin/conda").chmod(0o755)
    (root / "bin/activate").write_text('export PATH="$1/bin:$PATH"\n')
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_config()))
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, PATH=f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(
        [SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), "--configfile", str(config),
         "--directory", str(work), "--cores", "1", "--sdm", "conda", "--conda-create-envs-only"],
        cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    [created] = [p for p in (work / ".snakemake/conda").iterdir() if p.is_dir()]
    assert Path(f"{created}.yaml").read_text() == ENV_FILE.read_text()
    assert (created / "pip-args").read_text().split() == [
        "install", "--no-deps", "--editable", str(REPO)]
