"""The simulated executor (discrete-event, DESIGN.md's contention model) and the searches
that use it as the model of the world: the exact oracle and the best-known search for
reports. Imports only ``hetsched.model``."""

from hetsched.sim.engine import Simulator, lognormal_factors

__all__ = ["Simulator", "lognormal_factors"]
