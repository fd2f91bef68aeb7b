"""Compute on the virtual cluster: how a trace's run-times become seconds, the one time base of
the throughput replay, the convergence runs and the plan.

Row t of a run-time trace gives each worker's gradient time x_t,w in the trace's unit. A trace
in seconds (``time_unit: s``) is read as it was recorded (``recorded``: one unit is one second).
Under ``scaled`` each run-time counts relative to the trace's median m and is multiplied by the
task's gradient time g: one unit is f = g / m seconds. A trace in another unit (Alibaba PAI's
normalised batch times) has no seconds of its own, so it needs g wherever communication is
charged: without it the network's seconds and the trace's units could not be added.

Policies and observations keep the trace's units; the network is converted into them
(``bdsgd.cluster.network.Timing``) and a duration into seconds (times f).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bdsgd.errors import UserError

CLOCKS = ("recorded", "scaled")
SECONDS = "s"


@dataclass(frozen=True)
class Compute:
    """How the trace's run-times become seconds: one unit is ``factor`` seconds."""

    clock: str = "recorded"
    factor: float = 1.0
    gradient_s: float | None = None  # g, under "scaled"
    source: str | None = None  # how g was obtained: "config" or "measured"
    typical: float | None = None  # m, the trace's median run-time

    @classmethod
    def scaled(cls, runtimes: np.ndarray, gradient_s: float, source: str) -> Compute:
        typical = float(np.median(runtimes))
        return cls("scaled", gradient_s / typical, gradient_s, source, typical)

    def record(self) -> dict:
        """What a result says about its clock."""
        return {"clock": self.clock, "seconds_per_trace_unit": self.factor,
                "gradient_s": self.gradient_s, "gradient_s_from": self.source,
                "trace_typical_runtime": self.typical}


def recorded(time_unit: str, charged: bool, where: tuple[str, str], trace_file: str) -> Compute:
    """A trace's own seconds; ``where`` (file, key) names the gradient time a trace in another
    unit needs when communication is ``charged``."""
    if time_unit != SECONDS and charged:
        raise UserError(where[0], where[1], f"the trace {trace_file} is in unit {time_unit!r}, "
                        "not seconds: set the task's gradient time (seconds per worker batch) so "
                        "its run-times and the network's seconds share one time base")
    return Compute()
