"""The package's shape: layers that only import downward, and modules small enough to read."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400


def test_import_contracts_hold():
    """pyproject.toml's import-linter contracts: layers, figures from stored results only,
    no Snakemake in library code."""
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_no_module_is_over_the_line_limit():
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "bdsgd").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them by role): {long}"


def test_a_policys_hooks_are_methods_not_probes():
    """Every optional hook is a method of ``bdsgd.policies.base.Policy`` (or ``Predictor``), so
    that no caller asks whether a policy has one."""
    import re

    probe = re.compile(r"(getattr|hasattr)\((self\.)?(policy|inner|predictor|component|chosen)\b")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "bdsgd").rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if probe.search(line)]
    assert found == []


def test_results_paths_come_from_the_layout_only():
    """No results path is formatted outside ``bdsgd.layout`` (and the workflow, which takes its
    paths from it): no 'throughput.json', 'result.json' or 'seed{' in a path literal elsewhere."""
    import re

    literal = re.compile(r"""["'][^"']*(/seed\{|/throughput\.json|runs/|/draw\{)[^"']*["']""")
    found = [f"{p.relative_to(ROOT)}:{i}" for folder in ("bdsgd", "benchmarks")
             for p in (ROOT / folder).rglob("*.py") if p.name != "layout.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if literal.search(line)]
    assert found == []


def test_no_test_module_imports_another():
    """Shared fixtures live in conftest.py and fixture modules (tests/helpers.py and the like),
    never in a test module another imports."""
    tests = ROOT / "tests"
    found = [f"{p.name}:{i}" for p in tests.rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if line.lstrip().startswith(("from tests.test_", "import tests.test_"))]
    assert found == []


# Modules whose text states a scenario's specification ("2.5x slower"), not a measurement.
SPECIFIED = ("bdsgd/traces/simulate.py",)


def text_of(path: Path) -> list[str]:
    """A module's comments and docstrings, a line each."""
    import ast
    import io
    import tokenize

    source = path.read_text()
    comments = [t.string for t in tokenize.generate_tokens(io.StringIO(source).readline)
                if t.type == tokenize.COMMENT]
    nodes = [n for n in ast.walk(ast.parse(source))
             if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]
    docs = [doc for n in nodes if (doc := ast.get_docstring(n))]
    return comments + [line for doc in docs for line in doc.splitlines()]


def test_no_measurement_or_history_in_the_package_text():
    """Measurements live in benchmarks/ and the reasons for a default in docs/decisions.md: no
    comment or docstring in bdsgd/ states a speed-up or a timing, or tells what the code used
    to do."""
    import re

    said = re.compile(r"\b\d+(\.\d+)?x (faster|slower)\b|\b\d+(\.\d+)? ?ms\b|\bno longer\b|"
                      r"\bpreviously\b|\bused to\b|\bformerly\b|\bnot any more\b")
    found = [f"{p.relative_to(ROOT)}: {line.strip()}" for p in (ROOT / "bdsgd").rglob("*.py")
             if str(p.relative_to(ROOT)) not in SPECIFIED
             for line in text_of(p) if said.search(line)]
    assert found == []


def test_the_tests_mirror_the_packages():
    """Each package's tests are in tests/<package>/, the workflow's in tests/workflow/, the
    top-level modules' and the whole program's in tests/ itself."""
    packages = {p.name for p in (ROOT / "bdsgd").iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in (ROOT / "tests").iterdir()
               if p.is_dir() and p.name not in ("data", "__pycache__")}
    assert folders == packages | {"workflow"}, folders ^ (packages | {"workflow"})
    assert all(list((ROOT / "tests" / f).glob("test_*.py")) for f in folders)
    names = [p.name for p in (ROOT / "tests").rglob("test_*.py")]
    assert len(names) == len(set(names))  # pytest imports each by its name alone


def test_a_policy_name_is_parsed_in_one_place():
    """[explore-]<policy>[+<variant>] is split by ``bdsgd.layout.policy_parts`` and
    ``explored`` alone."""
    import re

    parse = re.compile(r"""(partition|split|removeprefix|startswith)\(["'](\+|explore-)["']\)""")
    found = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / "bdsgd").rglob("*.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if parse.search(line)]
    assert found == []
