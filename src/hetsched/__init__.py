"""hetsched: decide where each tool of an agentic AI workflow runs (cpu, gpu_now, gpu_queue).

Layers, imports pointing down: model <- sim / exec / monitor <- policies / llm <- loop <- bench / cli.
"""

__version__ = "0.1.0"
