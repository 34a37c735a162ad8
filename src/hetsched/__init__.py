"""hetsched: decide where each tool of an agentic AI workflow runs (cpu, gpu_now, gpu_queue).

The public Python API is this package's ``__all__`` (docs/python.md)::

    import hetsched as hs

    wf = hs.Workflow("demo").node("A", hs.function_tool("up", str.upper)).node("B", "doc_merger", after="A")
    with hs.Session(wf, store=False) as session:
        print(session.submit("hello").outputs)

Every name loads lazily on first use (PEP 562), so ``import hetsched`` (and ``hetsched --version``)
imports nothing heavy: numpy, pydantic and networkx come with the first name that needs them.

Layers, imports pointing down: model <- sim <- search; model <- tools <- exec <- profiling;
model <- monitor / deciders <- llm <- policies; everything below <- loop / session <- api <- bench / cli
(docs/architecture.md).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # define or load a workflow and its tool cards
    "Workflow": "hetsched.builder",
    "Scenario": "hetsched.model",
    "ToolCard": "hetsched.model",
    "Machine": "hetsched.model",
    "Mapping": "hetsched.model",
    "Placement": "hetsched.model",
    "Trace": "hetsched.model",
    "Workload": "hetsched.model.workload",
    "LoadMetrics": "hetsched.model.workload",
    "read_arrivals": "hetsched.model.files",
    "load_scenario": "hetsched.model.files",
    "load_tool_library": "hetsched.model.files",
    "parse_mapping_text": "hetsched.model.files",
    # register tools
    "function_tool": "hetsched.tools.functions",
    "ToolSpec": "hetsched.tools.functions",
    "Tool": "hetsched.tools",
    "FunctionTool": "hetsched.tools",
    "Device": "hetsched.tools",
    "register_tool": "hetsched.tools",
    "get_tool": "hetsched.tools",
    "tool_names": "hetsched.tools",
    # serve requests: the online session
    "Session": "hetsched.session",
    "Explore": "hetsched.session",
    "Response": "hetsched.session",
    "ToolError": "hetsched.exec.inproc",
    "InfeasibleMappingError": "hetsched.session",
    # run, resume, compute a reference, profile
    "run": "hetsched.api",
    "resume": "hetsched.api",
    "reference": "hetsched.api",
    "profile": "hetsched.api",
    "RunResult": "hetsched.loop",
    "RunKey": "hetsched.model",
    "LoopConfig": "hetsched.model",
    "RunStore": "hetsched.store",
    # choose an executor and a policy
    "make_policy": "hetsched.policies",
    "policy_names": "hetsched.policies",
    "Policy": "hetsched.policies",
    "make_executor": "hetsched.exec",
    "executor_names": "hetsched.exec",
    "Executor": "hetsched.exec",
    "ExecutorSpec": "hetsched.model",
    # errors
    "HetschedError": "hetsched.model",
    "InputError": "hetsched.model",
    "MappingError": "hetsched.model",
}
"""Public name -> the module that defines it (imported on first use)."""

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'hetsched' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # next time without this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # what the lazy names are, for type checkers and IDEs
    from hetsched.api import profile, reference, resume, run  # noqa: F401
    from hetsched.builder import Workflow  # noqa: F401
    from hetsched.exec import Executor, executor_names, make_executor  # noqa: F401
    from hetsched.exec.inproc import ToolError  # noqa: F401
    from hetsched.loop import RunResult  # noqa: F401
    from hetsched.model import (  # noqa: F401  # noqa: F401
        ExecutorSpec,
        HetschedError,
        InputError,
        LoopConfig,
        Machine,
        Mapping,
        MappingError,
        Placement,
        RunKey,
        Scenario,
        ToolCard,
        Trace,
    )
    from hetsched.model.files import load_scenario, load_tool_library, parse_mapping_text, read_arrivals  # noqa: F401
    from hetsched.model.workload import LoadMetrics, Workload  # noqa: F401
    from hetsched.policies import Policy, make_policy, policy_names  # noqa: F401
    from hetsched.session import Explore, InfeasibleMappingError, Response, Session  # noqa: F401
    from hetsched.store import RunStore  # noqa: F401
    from hetsched.tools import Device, FunctionTool, Tool, get_tool, register_tool, tool_names  # noqa: F401
    from hetsched.tools.functions import ToolSpec, function_tool  # noqa: F401
