"""The training tests' shared trace: T_ROWS iterations of N_WORKERS log-normal workers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import N_WORKERS, T_ROWS, write


@pytest.fixture
def trace_path(tmp_path: Path) -> Path:
    return write(tmp_path, np.random.default_rng(3).lognormal(0.0, 0.5, (T_ROWS, N_WORKERS)))
