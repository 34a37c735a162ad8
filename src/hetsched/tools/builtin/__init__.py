"""The built-in tools: real implementations of the reference library's tools (PAPER.md's Table 1),
each with a ``tiny`` and a ``full`` size preset.

Models are built from their architecture configurations with random weights (transformers
configs; nothing is downloaded): compute and memory do not depend on weight values. Each call
does a fixed amount of work for its preset; what arrives from upstream nodes (text, passages,
embeddings) is consumed where it fits the tool's input and padded or truncated to that fixed
shape, so a tool costs what its card says wherever it sits in a workflow.

Imports the tool API; torch, transformers and faiss are imported inside the tools' steps.
"""
