"""Placement policies, one file each, resolved by name.

Imports point down: policies use the model, the monitor and the deciders (``hetsched.llm``);
the oracle also uses the noise-free simulator, which defines it. Executors never import policies.
"""

from __future__ import annotations

import importlib
from typing import Any

from hetsched.model import InputError, UnknownNameError
from hetsched.policies.base import Policy, PolicyContext

# name -> "module:Class"; imported lazily so a policy's optional dependencies load only when used
_REGISTRY: dict[str, str] = {
    "all-cpu": "hetsched.policies.all_cpu:AllCpu",
    "all-gpu": "hetsched.policies.all_gpu:AllGpu",
    "oracle": "hetsched.policies.oracle:Oracle",
    "heft-cf": "hetsched.policies.heft:HeftCf",
    "starpu-dmda": "hetsched.policies.starpu_dmda:StarpuDmda",
    "ucb1": "hetsched.policies.ucb1:Ucb1",
    "greedy-mem": "hetsched.policies.greedy_mem:GreedyMem",
    "agentic": "hetsched.policies.agentic:Agentic",
}


def policy_names() -> tuple[str, ...]:
    """Every policy name ``make_policy`` accepts."""
    return tuple(_REGISTRY)


def make_policy(name: str, **options: Any) -> Policy:
    """Build a policy by name (``Unknown policy`` lists the valid names)."""
    key = name.strip().lower().replace("_", "-")
    if key not in _REGISTRY:
        raise UnknownNameError(f"Unknown policy: {name!r}; valid policies: {', '.join(_REGISTRY)}")
    module_name, cls_name = _REGISTRY[key].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    try:
        policy: Policy = cls(**options)
    except TypeError as exc:  # an option the policy does not take
        raise InputError(f"policy {key!r}: bad options {sorted(options)} ({exc})") from None
    return policy


__all__ = ["Policy", "PolicyContext", "make_policy", "policy_names"]
