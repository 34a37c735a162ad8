"""The simulator executor: a workflow run under a mapping on the contention model
(:mod:`hetsched.model.contention`), with the machine's noise, returning a ``Trace``. The searches
that use the model as the world (exact branch-and-bound, bounds, local search, lower bound, the
reference and the planner) are in :mod:`hetsched.search`.
Imports only ``hetsched.model``."""

from hetsched.sim.engine import Simulator, lognormal_factors

__all__ = ["Simulator", "lognormal_factors"]
