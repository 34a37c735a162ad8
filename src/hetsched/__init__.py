"""hetsched: decide where each tool of an agentic AI workflow runs (cpu, gpu_now, gpu_queue).

Layers, imports pointing down: model <- sim / tools <- exec <- profile; model <- monitor / llm <- policies;
everything below <- loop <- bench / cli (docs/architecture.md).
"""

__version__ = "0.1.0"
