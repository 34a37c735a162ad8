"""A LangGraph agent whose tools hetsched places while it serves requests.

    bash scripts/quickstart.sh                 # once: installs hetsched with [tools] and [langgraph]
    .venv/bin/python examples/langgraph_agent.py [--requests 12] [--compare 5] [--json]

The agent answers a question over a scanned report. It is an ordinary LangGraph graph: nine
nodes, a parallel fan-out of four branches after chunking (embed -> search, keywords, scan,
figures), fan-ins at the reranker and the answer. Eight nodes run hetsched's built-in real tools
(tiny preset: real PyTorch models with random weights, FAISS, a PDF parser); ``keywords`` runs a
plain Python function turned into a tool with ``hs.function_tool``. Each node says which tool it
runs through its LangGraph metadata (``metadata=hlg.tool("e5_large")``) and calls it through the
``tool`` it receives.

``ScheduledGraph`` reads the compiled graph through LangGraph's graph API into a hetsched
workflow, and serves each ``invoke`` as one request of an online ``hs.Session``: LangGraph drives
the request; each tool runs where the session's current mapping places it (cpu, gpu_now or
gpu_queue; without a GPU, GPU placements run on the stand-in device and the output says so); the
agentic policy (deterministic ``rules`` decider) revises the mapping after every request. The
script prints each request and the placement it converged to, then serves that placement and
all-GPU (GPU-first, what frameworks do by default) request by request, interleaved, and prints
their E2E side by side with what the tool cards predict for both.
"""

from __future__ import annotations

import argparse
import json
import operator
import re
import statistics
import sys
import time
from collections import Counter
from typing import Annotated, Any, TypedDict

import hetsched as hs
from hetsched.integrations import langgraph as hlg
from hetsched.model import Proposal
from hetsched.model.files import data_dir
from hetsched.sim import Simulator

try:
    from langgraph.graph import END, START, StateGraph
except ImportError:  # pragma: no cover - the extra is missing
    sys.exit("this example needs LangGraph: pip install -e '.[langgraph]' (bash scripts/quickstart.sh installs it)")

VRAM_BUDGET_MB = 64.0
"""The stand-in device's budget: every GPU-capable tool fits at once (~54 MB), so all-GPU runs."""
QUESTIONS = [
    "What drove the rise in GPU memory use this quarter?",
    "Which figures show the latency of the CPU pool?",
    "Summarize the findings on queue admission.",
    "How much VRAM did the largest model hold?",
]


class AgentState(TypedDict, total=False):
    question: str
    text: str
    chunks: Any
    vectors: Any
    hits: Any
    keywords: list[str]
    scanned: Any
    figures: Any
    ranked: Any
    answer: Any
    log: Annotated[list[str], operator.add]


# ---------------------------------------------------------------------------- a plain Python function tool
def top_keywords(question: str, chunks: Any) -> list[str]:
    """The question's words that occur most often in the chunks (plain Python, CPU only)."""
    words = re.findall(r"[a-z]{4,}", question.lower())
    text = " ".join(str(c) for c in (chunks if isinstance(chunks, list) else [chunks])).lower()
    counts = Counter({w: text.count(w) for w in words})
    return [w for w, _ in counts.most_common(5)]


KEYWORDS = hs.function_tool("keywords", cpu=top_keywords, description="question keywords ranked by chunk counts",
                            cpu_ms=0.5)


# ---------------------------------------------------------------------------- the nodes
def parse(state: AgentState, tool: hlg.ToolCall) -> dict[str, Any]:
    return {"text": tool(state["question"]), "log": [f"parse on {tool.placement}"]}


def chunk(state: AgentState, tool: hlg.ToolCall) -> dict[str, Any]:
    return {"chunks": tool(state["text"]), "log": [f"chunk on {tool.placement}"]}


def embed(state: AgentState, tool: hlg.ToolCall) -> dict[str, Any]:
    return {"vectors": tool(state["chunks"]), "log": [f"embed on {tool.placement}"]}


def search(state: AgentState, tool: hlg.ToolCall) -> dict[str, Any]:
    return {"hits": tool(state["vectors"]), "log": [f"search on {tool.placement}"]}


def keywords(state: AgentState, tool: hlg.ToolCall) -> dict[str, Any]:
    return {"keywords": tool(state["question"], state["chunks"]), "log": [f"keywords on {tool.placement}"]}


def scan(state: AgentState, tool: hlg.ToolCall) -> dict[str, Any]:
    return {"scanned": tool(), "log": [f"scan on {tool.placement}"]}  # OCR of the report's scanned pages


def figures(state: AgentState, tool: hlg.ToolCall) -> dict[str, Any]:
    return {"figures": tool(), "log": [f"figures on {tool.placement}"]}  # embeds the report's figure crops


def rerank(state: AgentState, tool: hlg.ToolCall) -> dict[str, Any]:
    return {"ranked": tool(state["question"], state["hits"], state["scanned"], " ".join(state["keywords"])),
            "log": [f"rerank on {tool.placement}"]}


def answer(state: AgentState, tool: hlg.ToolCall) -> dict[str, Any]:
    return {"answer": tool(state["question"], state["ranked"], state["figures"]),
            "log": [f"answer on {tool.placement}"]}


def build_graph() -> Any:
    """The agent as a plain LangGraph graph; hetsched only reads its node metadata."""
    g = StateGraph(AgentState)
    g.add_node("parse", hlg.node(parse), metadata=hlg.tool("pdf_parse"))
    g.add_node("chunk", hlg.node(chunk), metadata=hlg.tool("text_chunker"))
    g.add_node("embed", hlg.node(embed), metadata=hlg.tool("e5_large"))
    g.add_node("search", hlg.node(search), metadata=hlg.tool("vector_search"))
    g.add_node("keywords", hlg.node(keywords), metadata=hlg.tool("keywords"))
    g.add_node("scan", hlg.node(scan), metadata=hlg.tool("ocr"))
    g.add_node("figures", hlg.node(figures), metadata=hlg.tool("clip_vit_b32"))
    g.add_node("rerank", hlg.node(rerank), metadata=hlg.tool("reranker"))
    g.add_node("answer", hlg.node(answer), metadata=hlg.tool("llama_1b"))
    g.add_edge(START, "parse")
    g.add_edge("parse", "chunk")
    g.add_edge("chunk", "embed")      # the parallel fan-out: four branches after chunking
    g.add_edge("chunk", "keywords")
    g.add_edge("chunk", "scan")
    g.add_edge("chunk", "figures")
    g.add_edge("embed", "search")
    g.add_edge(["search", "keywords", "scan"], "rerank")
    g.add_edge(["rerank", "figures"], "answer")
    g.add_edge("answer", END)
    return g.compile()


class Pinned(hs.Policy):
    """Serves one mapping on every request: to measure a placement on its own."""

    name = "pinned"

    def __init__(self, mapping: hs.Mapping) -> None:
        super().__init__()
        self.pinned = mapping

    def propose(self, history: Any, probes: Any = (), observations: Any = None) -> Proposal:
        return Proposal(self.pinned, rationale="pinned by the example")


def serve(policy: str | hs.Policy, graph: Any) -> hlg.ScheduledGraph:
    """The graph served through a session with ``policy`` (tiny tools, measured cards, no store)."""
    return hlg.ScheduledGraph(
        graph, vram_budget_mb=VRAM_BUDGET_MB, tools=[KEYWORDS], name="langgraph_agent", policy=policy,
        library=data_dir() / "tools_tiny.yaml", cpu_cores=1, store=False)


def main(requests: int = 12, compare: int = 5, as_json: bool = False, quiet: bool = False) -> dict[str, Any]:
    """Serve ``requests`` requests with the agentic policy, then ``compare`` requests of its final
    mapping against as many all-GPU ones, interleaved; returns what it printed, as data."""
    graph = build_graph()
    out: dict[str, Any] = {"requests": [], "compare": []}
    say = (lambda *a: None) if as_json or quiet else print
    with serve("agentic", graph) as agent:
        say(f"workflow read from the LangGraph graph: {len(agent.shape.tools)} nodes, edges "
            f"{', '.join(f'{u}->{v}' for u, v in agent.shape.edges)}")
        for i in range(requests):
            state = agent.invoke({"question": QUESTIONS[i % len(QUESTIONS)]})
            r = agent.last
            assert r is not None and state["answer"] is not None
            out["requests"].append({"round": r.round, "mapping": r.mapping.compact(), "e2e_ms": r.trace.e2e_ms})
            say(f"request {r.round:2d}: E2E {r.trace.e2e_ms:7.1f} ms  {r.mapping.compact()}")
        converged = agent.mapping
        scenario = agent.session.scenario
        notes = agent.last.trace.notes if agent.last is not None else ()
    all_gpu = scenario.uniform(hs.Placement.GPU_NOW)
    model = Simulator(scenario, noise=False)  # what the cards predict, for comparison
    out["converged"], out["all_gpu"] = converged.compact(), all_gpu.compact()
    out["predicted_converged_ms"], out["predicted_all_gpu_ms"] = model.e2e(converged), model.e2e(all_gpu)
    say(f"converged placement: {converged.compact()}")
    say(f"all-GPU placement:   {all_gpu.compact()}")
    for note in notes:
        say(f"note: {note}")
    with serve(Pinned(converged), graph) as mine, serve("all-gpu", graph) as gpu_first:
        for i in range(compare):  # interleaved, so both see the same machine load
            q = {"question": QUESTIONS[i % len(QUESTIONS)]}
            t0 = time.perf_counter()
            mine.invoke(q)
            t1 = time.perf_counter()
            gpu_first.invoke(q)
            t2 = time.perf_counter()
            assert mine.last is not None and gpu_first.last is not None
            out["compare"].append({"converged_ms": mine.last.trace.e2e_ms, "all_gpu_ms": gpu_first.last.trace.e2e_ms,
                                   "converged_wall_ms": (t1 - t0) * 1000, "all_gpu_wall_ms": (t2 - t1) * 1000})
    conv = statistics.median(c["converged_ms"] for c in out["compare"])
    allg = statistics.median(c["all_gpu_ms"] for c in out["compare"])
    paired = statistics.median(c["all_gpu_ms"] / c["converged_ms"] for c in out["compare"])
    out["median_converged_ms"], out["median_all_gpu_ms"], out["median_paired_ratio"] = conv, allg, paired
    say(f"E2E per request, median of {compare}: converged {conv:.1f} ms vs all-GPU {allg:.1f} ms "
        f"(all-GPU / converged: {allg / conv:.2f}x; median of the paired requests' ratios {paired:.2f}x)")
    say(f"the cards predict converged {out['predicted_converged_ms']:.1f} ms vs all-GPU "
        f"{out['predicted_all_gpu_ms']:.1f} ms")
    if as_json and not quiet:
        print(json.dumps(out))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=12, help="requests served by the agentic session (default 12)")
    ap.add_argument("--compare", type=int, default=5, help="requests of each placement compared (default 5)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of lines")
    args = ap.parse_args()
    if args.requests < 1 or args.compare < 1:
        ap.error(f"--requests and --compare must be at least 1, got {args.requests} and {args.compare}")
    main(args.requests, args.compare, args.json)
