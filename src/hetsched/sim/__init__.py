"""The simulated executor (discrete-event, DESIGN.md's contention model). Imports only ``hetsched.model``."""

from hetsched.sim.engine import Simulator, lognormal_factors, placement_of

__all__ = ["Simulator", "lognormal_factors", "placement_of"]
