"""Searches over mappings on the contention model (:mod:`hetsched.model.contention`), for reports and
the planner: ``bounds`` (vectorized lower bounds on partial mappings), ``oracle`` (exact
branch-and-bound), ``local_search`` (best-known search), ``lower_bound`` (bounds on the optimum) and
``reference`` (what reports compare against, and the planner the loop hands to policies).
Imports only ``hetsched.model`` and the simulator executor (``hetsched.sim``), and numpy."""
