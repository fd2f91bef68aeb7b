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
