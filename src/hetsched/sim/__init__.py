"""The simulated executor (discrete-event, DESIGN.md's contention model) and the searches
that use it as the model of the world, for reports: ``bounds`` (vectorized lower bounds),
``oracle`` (exact branch-and-bound), ``local_search`` (best-known search), ``lower_bound``
(bounds on the optimum) and ``reference`` (what reports compare against, and the planner).
Imports only ``hetsched.model`` (and numpy)."""

from hetsched.sim.engine import Simulator, lognormal_factors

__all__ = ["Simulator", "lognormal_factors"]
