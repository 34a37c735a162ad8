"""Deciders: what chooses the agentic policy's mapping each round, and what they read.

The interface (:mod:`~hetsched.deciders.base`: a :class:`DecisionContext` with the monitor's
typed observation records in, a :class:`Decision` out) and the deterministic deciders:

- ``rules`` (:mod:`~hetsched.deciders.rules`): the paper's reasoning as deterministic rules
  (NOT an LLM; the default), on its own estimate of the contention model
  (:mod:`~hetsched.deciders.estimate`) searched by :mod:`~hetsched.deciders.search`;
- ``argmin`` (:mod:`~hetsched.deciders.argmin`): the lowest measured mapping (ablation baseline).

:mod:`~hetsched.deciders.evidence` reads the observation records by type and field (never by
key); :mod:`~hetsched.deciders.parallel` says which nodes may run at the same time. The LLM
deciders (``openai``, ``local``, ``scripted``) are in :mod:`hetsched.llm`, beside this room
and built on its interface; the registry by name is the policies layer's
(:mod:`hetsched.policies.decider_registry`). Imports only ``hetsched.model``.
"""

from __future__ import annotations

from hetsched.deciders.base import Decider, DeciderConfigError, Decision, DecisionContext, check_mapping

__all__ = ["Decider", "DeciderConfigError", "Decision", "DecisionContext", "check_mapping"]
