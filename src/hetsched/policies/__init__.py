"""Placement policies, one file each, resolved by name.

Imports point down: policies use the model, the monitor and the deciders (``hetsched.deciders``,
``hetsched.llm``, by name through ``decider_registry``);
the oracle also uses the noise-free simulator, which defines it. Executors never import policies.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from hetsched.model import InputError, UnknownNameError
from hetsched.model.errors import did_you_mean
from hetsched.policies.base import Policy, PolicyContext

# name -> "module:Class"; imported lazily so a policy's optional dependencies load only when used
_REGISTRY: dict[str, str] = {
    "all-cpu": "hetsched.policies.all_cpu:AllCpu",
    "all-gpu": "hetsched.policies.all_gpu:AllGpu",
    "oracle": "hetsched.policies.oracle:Oracle",
    "heft-cf": "hetsched.policies.heft:HeftCf",
    "heft-load": "hetsched.policies.heft_load:HeftLoad",
    "starpu-dmda": "hetsched.policies.starpu_dmda:StarpuDmda",
    "ucb1": "hetsched.policies.ucb1:Ucb1",
    "greedy-mem": "hetsched.policies.greedy_mem:GreedyMem",
    "agentic": "hetsched.policies.agentic:Agentic",
}


LOAD_ONLY: frozenset[str] = frozenset({"heft-load"})
"""Policies that differ from another only under load (``heft-load`` is ``heft-cf`` for one request at a
time): the single-request bench suites leave them out, the load suite runs them."""


def policy_names() -> tuple[str, ...]:
    """Every policy name ``make_policy`` accepts."""
    return tuple(_REGISTRY)


def make_policy(name: str, **options: Any) -> Policy:
    """Build a policy by name (``Unknown policy`` lists the valid names)."""
    key = name.strip().lower().replace("_", "-")
    if key not in _REGISTRY:
        raise UnknownNameError(f"Unknown policy: {name!r}; valid policies: {', '.join(_REGISTRY)}"
                               + did_you_mean(key, _REGISTRY))
    module_name, cls_name = _REGISTRY[key].split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    accepted = policy_options(cls)
    open_ended = any(p.kind is p.VAR_KEYWORD for p in inspect.signature(cls).parameters.values())
    unknown = [] if open_ended else [k for k in options if k not in accepted]
    if unknown:
        hint = did_you_mean(unknown[0], accepted)
        takes = f"it takes {', '.join(accepted)}" if accepted else "it takes no options"
        raise InputError(f"policy {key!r} has no option {', '.join(map(repr, unknown))}{hint}; {takes}")
    policy: Policy = cls(**options)  # values are checked by the policy itself
    return policy


def policy_options(cls: type) -> tuple[str, ...]:
    """The keyword options a policy class takes (its constructor's named parameters)."""
    params = inspect.signature(cls).parameters.values()
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


__all__ = ["Policy", "PolicyContext", "make_policy", "policy_names"]
