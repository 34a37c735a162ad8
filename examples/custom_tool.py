"""Register your own tools, profile them into tool cards, and run a workflow with them for real.

    pip install torch==2.13.0 && pip install -e '.[tools]'   # once
    python examples/custom_tool.py [OUT_DIR]

Two tools of your own (a torch embedder with CPU and GPU implementations, and a pure-Python
cleaner without one) plus a built-in one (the Llama-style decoder, tiny preset) form a small
workflow. The script profiles the three into a card file, writes a scenario that uses it, runs
one mapping through the local executor (on CUDA if there is one, else on the stand-in device),
then lets the agentic policy place the tools over three real rounds.
"""

from __future__ import annotations

import re
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hetsched.exec.local import LocalExecutor
from hetsched.loop import LoopConfig, run_rounds
from hetsched.model import Mapping
from hetsched.model.files import load_scenario
from hetsched.policies import make_policy
from hetsched.profiling import ProfileConfig, profile_tools, write_library
from hetsched.tools import Device, DeviceKind, Tool, register_tool


class HashEmbedder(Tool):
    """Embeds texts: hashed bag-of-words features through a two-layer MLP (random weights).

    ``load`` puts the weights on the device (the GPU, or the stand-in device); ``run`` embeds the
    strings it receives from upstream (its own sample texts when it is a source)."""

    name = "hash_embedder"
    description = "Hashed bag-of-words MLP embedder: 64 texts -> 256-d vectors"
    has_gpu = True
    requires = ("torch",)  # imported before the load is timed

    def load(self, device: Device) -> Any:
        import torch

        g = torch.Generator().manual_seed(0)
        dtype = torch.float16 if device.kind is DeviceKind.CUDA else torch.float32
        w1 = (torch.randn(4096, 1024, generator=g) * 0.02).to(device.torch, dtype)
        w2 = (torch.randn(1024, 256, generator=g) * 0.02).to(device.torch, dtype)
        return {"w1": w1, "w2": w2, "device": device.torch, "dtype": dtype}

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        import torch

        texts = [s for x in inputs for s in (x if isinstance(x, list) else [x]) if isinstance(s, str)]
        texts = (texts + [f"sample text number {i}" for i in range(64)])[:64]
        feats = torch.zeros(64, 4096)
        for row, text in enumerate(texts):
            for word in text.split():
                feats[row, zlib.crc32(word.encode()) % 4096] += 1.0
        x = feats.to(handle["device"], handle["dtype"])
        with torch.inference_mode():
            return torch.relu(x @ handle["w1"]) @ handle["w2"]

    def unload(self, handle: Any) -> None:
        handle.clear()  # drop the device tensors


def clean_load(device: Device) -> Any:
    return re.compile(r"[^a-z0-9 ]+")


class Cleaner(Tool):
    """Normalizes documents (CPU only: no GPU implementation, so the card is device-neutral)."""

    name = "cleaner"
    description = "Lower-cases and strips punctuation from 64 short documents"
    has_gpu = False

    def load(self, device: Device) -> Any:
        return clean_load(device)

    def run(self, handle: Any, inputs: Sequence[Any]) -> Any:
        docs = [f"Document #{i}: GPUs, CPUs & queues!" for i in range(64)]
        return [handle.sub(" ", d.lower()).strip() for d in docs]


# registered at import: the worker processes import this script too (under __mp_main__)
register_tool(HashEmbedder, replace=True)
register_tool(Cleaner, replace=True)

SCENARIO = """\
name: my_flow
description: "Clean documents, embed them, and answer with a small LLM"
mode: three_way
tools: cards.yaml
machine: {cpu_cores: 1, vram_budget_mb: 64}
nodes:
  - {id: clean, tool: cleaner}
  - {id: embed, tool: hash_embedder}
  - {id: answer, tool: llama_1b}
edges: [clean -> embed, clean -> answer, embed -> answer]
"""


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # 1. profile the tools (CPU pool with 1 thread; GPU figures on CUDA or the stand-in device)
    # runs=5 for a quick look; `hetsched profile` defaults to the paper's 30
    config = ProfileConfig(size="tiny", runs=5, warmup=1, loads=2, cpu_threads=1)
    cards = []
    for result in profile_tools(["cleaner", "hash_embedder", "llama_1b"], config):
        c = result.card
        print(f"profiled {c.name}: cpu {c.cpu_ms:.2f} ms, gpu {c.gpu_ms} ms, load {c.load_ms:.1f} ms, "
              f"{c.vram_mb:.1f} MB ({c.provenance.device or 'cpu only'})")
        cards.append(c)
    write_library(out / "cards.yaml", cards, header=["my tools, profiled by examples/custom_tool.py"])
    # 2. a scenario that uses the cards
    (out / "my_flow.yaml").write_text(SCENARIO)
    sc = load_scenario(out / "my_flow.yaml")
    # 3. run one mapping for real, then let the agentic policy place the tools
    with LocalExecutor(sc) as ex:
        trace = ex.run(Mapping({"clean": "cpu", "embed": "gpu_now", "answer": "gpu_queue"}))
        print(f"one round: E2E {trace.e2e_ms:.1f} ms, feasible {trace.feasible} {trace.reason}")
        for node, nt in trace.nodes.items():
            print(f"  {node:6s} {nt.placement.value:9s} start {nt.start_ms:7.1f} end {nt.end_ms:7.1f} ms")
        print(f"  answer: {str(ex.last_outputs['answer'])[:60]}...")
        for note in trace.notes:
            print(f"  note: {note}")
        result = run_rounds(sc, make_policy("agentic", decider="rules"), LoopConfig(rounds=3), executor=ex)
    best = result.best_round
    assert best is not None
    print(f"agentic: best round {best.round}, E2E {best.trace.e2e_ms:.1f} ms, mapping {best.mapping.compact()}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "my_tools_out"))
