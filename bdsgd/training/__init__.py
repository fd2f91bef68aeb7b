"""Convergence runs on the virtual cluster: one process, a virtual clock fed by a run-time trace.

``train_run`` (``bdsgd train``) runs one (task, policy, seed), resolved once (``spec.run_spec``:
the config for its task and its policy's variant), through the one trainer loop
(``loop``), whose mode is what differs: a cutoff policy trains synchronous SGD with that cutoff
(``synchronous``); a training mode of ``bdsgd.cluster.schedules.MODES`` runs instead: ``async``
(``asynchronous``: each gradient applied on arrival) or ``cyclic`` (``cyclic``: workers push
their accumulated gradients in turn). Every mode writes the same outputs (``record``) and
resumes from its checkpoint alike (``run``).
"""

from bdsgd.training.loop import train_run
from bdsgd.training.spec import RunSpec, run_spec

__all__ = ["RunSpec", "run_spec", "train_run"]
