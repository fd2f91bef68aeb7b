"""The README's commands work as written, in a user's shell: one whose PATH lacks the project's
environment until the README's own setup line activates it. Each ```bash command is checked
without doing its work: make targets with `make -n`, snakemake with a dry run, bdsgd with the
`--help` of its subcommand (which must know every flag shown), so are the command table's. That
help is the parser's, read in this process (tests/cli/test_cli.py starts each program once); a
command run through a launcher (`uv run`) runs it, for its --help."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from bdsgd.cli import build_parser
from tests.helpers import REPO

README = (REPO / "README.md").read_text()
VENV_BIN = REPO / ".venv/bin"
# Programs the README shows for a cluster or a service: what they do cannot run here. Those the
# project installs must be in its environment; the others are the cluster's or the user's.
NOT_RUN = {
    "sbatch": "submits to SLURM",
    "srun": "starts SLURM job steps",
    "squeue": "queries SLURM",
    "sinfo": "queries SLURM",
    "scancel": "cancels SLURM jobs",
    "salloc": "allocates SLURM nodes",
    "wandb": "talks to the W&B server (installed with the project)",
    "wandb-osh": "syncs W&B runs from a login node",
    "git": "clones or changes a repository",
    "cd": "changes directory (each command here runs from the repository root)",
    "conda": "conda is not installed on the test machines",
    "mamba": "conda is not installed on the test machines",
    "pip": "installs into an environment",
    "export": "sets a variable for the commands after it",
    "tmux": "keeps a terminal open after logout",
    "shopt": "sets a bash option for the commands after it",
}
# Flags of Snakemake 7, shown beside what replaces them: Snakemake 9 knows them no more.
SNAKEMAKE_7 = ("--cluster",)
INSTALLED = {"wandb"}  # of NOT_RUN, the programs the project's environment must provide


def bash_commands() -> list[str]:
    """Each simple command of the README's ```bash blocks (`a && b` is two): continuations
    joined, comments dropped."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", README, re.MULTILINE | re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = shlex.join(shlex.split(line, comments=True))
            commands += [c.strip() for c in re.split(r" (?:'&&'|'\|\|'|';') ", line) if c.strip()]
    return commands


SETUP = [c for c in bash_commands() if c.split()[0] in ("source", ".")]
COMMANDS = [c for c in bash_commands() if c not in SETUP]
TABLE = [cell.replace("\\|", "|") for cell in re.findall(r"^\| `(bdsgd [^`]*)` \|", README,
                                                          re.MULTILINE)]


def user_shell(command: str, setup: bool = True) -> subprocess.CompletedProcess:
    """`command` in bash from the repository root, after the README's setup lines, starting
    from this environment less the project's venv (a new terminal's PATH)."""
    path = [p for p in os.environ["PATH"].split(os.pathsep) if Path(p).resolve() != VENV_BIN]
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(path)
    script = "\n".join(["set -e", *(SETUP if setup else []), command])
    return subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)


def subcommand_help(subcommand: list[str]) -> str:
    """What `bdsgd SUBCOMMAND --help` prints (words past the subcommands are its arguments, as
    argparse reads them); a word that names no subcommand where one is due fails the test."""
    parser = build_parser()
    for word in subcommand:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            break
        assert word in subs[0].choices, f"bdsgd {' '.join(subcommand)}: no subcommand {word}"
        parser = subs[0].choices[word]
    return parser.format_help()


def check_bdsgd(words: list[str], launcher: list[str] = ()) -> None:
    """The subcommand exists, and its --help names every flag the README gives it."""
    subcommand = []
    for word in words[1:]:
        if not re.fullmatch(r"[a-z]+", word):
            break
        subcommand.append(word)
    if launcher:
        proc = user_shell(shlex.join([*launcher, "bdsgd", *subcommand, "--help"]), setup=False)
        assert proc.returncode == 0, proc.stderr
        shown = proc.stdout
    else:
        shown = subcommand_help(subcommand)
    for flag in re.findall(r"--[a-z][a-z-]*", " ".join(words)):
        assert re.search(rf"{flag}\b", shown), f"bdsgd {' '.join(subcommand)}: no {flag}"


def test_the_readme_activates_the_environment_its_commands_need():
    assert SETUP, "no setup line (source .venv/bin/activate) in the README's bash blocks"
    proc = user_shell("command -v bdsgd snakemake")
    assert proc.stdout.split() == [str(VENV_BIN / "bdsgd"), str(VENV_BIN / "snakemake")]


@pytest.mark.slow  # snakemake, make and uv in a user's shell
@pytest.mark.parametrize("command", COMMANDS)
def test_command(command):
    words = shlex.split(command)
    launcher = []  # `uv run [flags]`: the environment comes with the command, not the setup
    if Path(words[0]).name == "uv" and words[1] == "run":
        end = next(i for i, word in enumerate(words[2:], 2) if not word.startswith("-"))
        launcher, words = words[:end], words[end:]
    program = words[0]
    if program == "make":
        proc = user_shell(f"{command} -n")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    elif program == "snakemake" and set(SNAKEMAKE_7) & set(words):
        pytest.skip("Snakemake 7's flags, shown beside what replaces them")
    elif program == "snakemake":
        # a job's shell inherits Snakemake's PATH: the bdsgd its rules call must be found there
        run = shlex.join([*launcher, "bash", "-c", "command -v bdsgd > /dev/null"])
        proc = user_shell(f"{run}\n{command} --dry-run", not launcher)
        if "--report" in words and "marked for report but does not exist" in proc.stderr:
            pytest.skip("a report needs the finished run: make smoke first")
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    elif program == "bdsgd":
        check_bdsgd(words, launcher)
    elif Path(program).name == "python" and words[1].startswith("benchmarks/"):
        proc = user_shell(shlex.join([*words[:2], "--help"]), setup=False)  # a benchmark script
        assert proc.returncode == 0, proc.stderr
        for flag in re.findall(r"--[a-z][a-z-]*", " ".join(words[2:])):
            assert re.search(rf"{flag}\b", proc.stdout), f"{words[1]}: no {flag}"
    elif program in NOT_RUN:
        if program in INSTALLED:
            assert user_shell(f"command -v {program}").stdout.startswith(str(VENV_BIN))
        pytest.skip(f"{program} {NOT_RUN[program]}")
    else:
        pytest.fail(f"the README runs {program}: tell tests/test_readme.py how to check it")


@pytest.mark.parametrize("command", TABLE)
def test_command_table(command):
    check_bdsgd(shlex.split(command))


def test_every_image_the_readme_shows_is_in_the_repository():
    images = re.findall(r"!\[[^]]*\]\(([^)]+)\)", README)
    tracked = subprocess.run(["git", "ls-files", *images], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.split()
    assert images and sorted(tracked) == sorted(set(images))


def test_each_decision_is_a_short_entry():
    """docs/decisions.md: each entry (### heading) at most 8 lines: the decision, why, what was
    measured and a link to the numbers; narratives of results live in benchmarks/results.md."""
    text = (REPO / "docs/decisions.md").read_text()
    entries = re.findall(r"^### (.*?)(?=^#{2,3} |\Z)", text, re.MULTILINE | re.DOTALL)
    long = {e.splitlines()[0]: n for e in entries
            if (n := sum(1 for line in e.splitlines()[1:] if line.strip())) > 8}
    assert len(entries) > 50 and long == {}


MEASUREMENTS = {"cutoff_evolution", "decision_overhead", "idle_time", "cutoff_in_training",
                "clock_fidelity", "model_quality"}  # the questions that compare no policies


def test_the_reviewer_table_quotes_the_smoke_answers_verdicts():
    """Each row of the README's reviewer table carries verdicts, quoted from smoke's answer to
    its question (figures/smoke/reviewers.csv): `PLACE: \\`PHRASE\\`` holds where one sentence
    of the answer names the place ("On PLACE," or the literal "PLACE: PHRASE") and states the
    phrase. Only the questions that compare no policies say so instead."""
    import pandas as pd

    answers = pd.read_csv(REPO / "figures/smoke/reviewers.csv").set_index("question")["answer"]
    rows = re.findall(r"^\| `(\w+)`[^|]*\|[^|]*\| (.*) \|$", README, re.MULTILINE)
    assert {q for q, _ in rows} == set(answers.index)
    for question, cell in rows:
        quoted = re.findall(r"(?:^|; )(?:at rho = \S+, )?([\w\-, ]*?): `([^`]+)`", cell)
        if question in MEASUREMENTS:
            assert cell == "a measurement: compares no policies", question
            continue
        assert quoted and all(re.search(r"\b(ahead|behind|level|too few \w+)\b", phrase)
                              for _, phrase in quoted), (question, cell)
        sentences = re.split(r"(?<=\.)\s+(?=[A-Z])", answers[question])
        for place, phrase in quoted:
            assert f"{place}: {phrase}" in answers[question] or any(
                re.search(rf"\bOn {re.escape(place)}[,( ]", s) and phrase in s
                for s in sentences), (question, place, phrase)
