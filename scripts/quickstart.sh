#!/usr/bin/env bash
# Install hetsched into .venv (core + plotting, the real tools on the CPU build of PyTorch, LangGraph; no
# GPU, no LLM server) and run the main job on the embedded defaults. Usage: bash scripts/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install --quiet --upgrade pip
# the real tools need torch: the CPU build first (a plain `torch` requirement may pull a multi-GB CUDA
# build); [tools] and [langgraph] make examples/langgraph_agent.py run
python -m pip install --quiet torch==2.13.0
python -m pip install --quiet -e '.[bench,tools,langgraph,search]'
# the main job: every policy (agentic with the deterministic rules decider; no LLM needed) on four
# of the paper's scenarios (S2, S5, S11, S13), 2 seeds x 10 rounds, then tables, figures, HTML report
hetsched bench --quick --out out/quick --no-progress
echo "open out/quick/report.html (tables in out/quick/tables, figures in out/quick/figures)"
echo "a LangGraph agent whose tools hetsched places: .venv/bin/python examples/langgraph_agent.py"
